"""Render one replica's lighttpd.conf, with its php-cgi FastCGI pool.

As the papers tuned it: one lighttpd worker per core of the replica
(``server.max-worker``), the epoll event handler, keep-alive on, and a php-cgi
pool with a fixed number of children per core. lighttpd has no per-worker CPU
affinity option, so :mod:`shrink.testbed.lifecycle` pins each worker to its own
core after the fork. ``PHP_FCGI_MAX_REQUESTS=0`` keeps php-cgi children alive for
the whole run: a respawned child would lose its pinning.

A small probe directory is aliased at ``/__shrink/`` so the health check can
fetch both a static file and a PHP page without touching the document root.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shrink.mapping import Replica

__all__ = ["HEALTH_PHP", "HEALTH_STATIC", "ReplicaConfig", "render_lighttpd_conf", "write_probe"]

HEALTH_STATIC = "/__shrink/health.txt"
HEALTH_PHP = "/__shrink/health.php"
HEALTH_BODY = "shrink-ok"

# Enough types for the synthetic and recorded workloads; the rest is served as bytes.
MIME_TYPES = {
    ".html": "text/html",
    ".htm": "text/html",
    ".txt": "text/plain",
    ".css": "text/css",
    ".js": "application/javascript",
    ".json": "application/json",
    ".xml": "application/xml",
    ".gif": "image/gif",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".svg": "image/svg+xml",
    ".pdf": "application/pdf",
    ".zip": "application/zip",
    ".gz": "application/gzip",
    ".bin": "application/octet-stream",
    "": "application/octet-stream",
}


# The replay engine's default per-request timeout; a trace whose largest request
# needs longer is replayed with --php-max-execution (and a longer --timeout).
PHP_MAX_EXECUTION_S = 10
PHP_MEMORY_LIMIT = "256M"


@dataclass(frozen=True)
class ReplicaConfig:
    """Everything one replica's config depends on."""

    replica: Replica
    docroot: Path
    run_dir: Path
    socket_path: Path
    php_cgi: str
    php_children: int
    workers: int
    # PHP's own limits: a request the client gave up on (its timeout, 10 s by
    # default) must not keep a php-cgi child busy into the next load level.
    php_max_execution_s: int = PHP_MAX_EXECUTION_S
    php_memory_limit: str = PHP_MEMORY_LIMIT

    @property
    def conf_path(self) -> Path:
        return self.run_dir / "lighttpd.conf"

    @property
    def errorlog(self) -> Path:
        return self.run_dir / "error.log"

    @property
    def probe_dir(self) -> Path:
        return self.run_dir / "probe"


def _q(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _php_bin(c: ReplicaConfig) -> str:
    """php-cgi with its time and memory limits (``-d`` overrides php.ini)."""
    return (
        f"{c.php_cgi} -d max_execution_time={int(c.php_max_execution_s)} "
        f"-d memory_limit={c.php_memory_limit}"
    )


def render_lighttpd_conf(c: ReplicaConfig) -> str:
    """The lighttpd.conf text for one replica."""
    r = c.replica
    mimes = ",\n".join(f"    {_q(ext)} => {_q(t)}" for ext, t in MIME_TYPES.items())
    return f"""# shrink testbed replica {r.name}: CPUs {list(r.cpus)}, NIC socket {r.nic_socket}
server.modules = ("mod_access", "mod_alias", "mod_fastcgi")
server.document-root = {_q(c.docroot)}
server.bind = {_q(r.address)}
server.port = {r.port}
server.errorlog = {_q(c.errorlog)}
server.tag = "lighttpd (shrink testbed)"
server.max-worker = {c.workers}
server.event-handler = "linux-sysepoll"
server.network-backend = "sendfile"
server.max-fds = 16384
server.max-connections = 4096
server.listen-backlog = 4096
server.max-keep-alive-requests = 10000
server.max-keep-alive-idle = 30
server.max-read-idle = 60
server.max-write-idle = 120
index-file.names = ("index.html", "index.php")
url.access-deny = ("~", ".inc")
static-file.exclude-extensions = (".php")
alias.url = ("/__shrink/" => {_q(str(c.probe_dir) + "/")})
mimetype.assign = (
{mimes}
)
fastcgi.server = (".php" => ((
    "bin-path" => {_q(_php_bin(c))},
    "socket" => {_q(c.socket_path)},
    "max-procs" => 1,
    "bin-environment" => (
        "PHP_FCGI_CHILDREN" => "{c.php_children}",
        "PHP_FCGI_MAX_REQUESTS" => "0"
    ),
    "bin-copy-environment" => ("PATH", "LANG", "USE_ZEND_ALLOC", "USE_ZEND_ALLOC_HUGE_PAGES"),
    "broken-scriptfilename" => "enable"
)))
"""


def write_probe(c: ReplicaConfig) -> None:
    """Write the config and the health-check probe files into the replica's run dir."""
    c.probe_dir.mkdir(parents=True, exist_ok=True)
    (c.probe_dir / "health.txt").write_text(HEALTH_BODY)
    (c.probe_dir / "health.php").write_text(f'<?php echo "{HEALTH_BODY}";\n')
    c.conf_path.write_text(render_lighttpd_conf(c))
