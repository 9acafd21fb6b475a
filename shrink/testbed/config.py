"""Render one replica's lighttpd.conf, with its php-cgi FastCGI pool.

As the papers tuned it: one lighttpd worker per core of the replica
(``server.max-worker``), the epoll event handler, keep-alive on, and a php-cgi
pool with a fixed number of children per core. lighttpd has no per-worker CPU
affinity option, so :mod:`shrink.testbed.lifecycle` pins each worker to its own
core after the fork. ``PHP_FCGI_MAX_REQUESTS=0`` keeps php-cgi children alive for
the whole run: a respawned child would lose its pinning.

A small probe directory is aliased at ``/__shrink/`` so the health check can
fetch both a static file and a PHP page without touching the document root.

lighttpd is started as the server user (:mod:`shrink.testbed.private`), so it and
the php-cgi it spawns never hold root; its error log lies in the server user's
own folder. ``server.follow-symlink = "disable"``: a symlink in the document root
(to ``/``, say) is not followed. Every path written into the config is checked
by :func:`shrink.testbed.private.config_value` and quoted.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shrink.atomic import make_dirs, write_text
from shrink.errors import ParameterError
from shrink.mapping import Replica
from shrink.testbed.private import config_value, readable

__all__ = [
    "HEALTH_PHP",
    "HEALTH_STATIC",
    "HIDDEN_PATH_RE",
    "PHP_CHILDREN_PER_CORE",
    "PhpLimits",
    "ReplicaConfig",
    "render_lighttpd_conf",
    "write_probe",
    "write_probe_pages",
]

# One php-cgi child per core. This project's pages are CPU-bound (no I/O to wait
# on), so a second child per core only time-slices with the first once both are
# busy, and their working sets (2 MiB heaps on the demo's pages) evict each other
# from the cache. Measured on the demo's workload on one core (the whole core,
# levels 2.4 / 3.0 / 3.6, two runs each): with 4 children a request's PHP CPU time
# rose from 250 us to 370-540 us once the core was busy and the server collapsed
# to 1,520 req/s at 100% busy; with 1 child it stayed at 224-247 us and the core
# served 2,760 req/s at 85-89% busy. That cliff, set off at random near the
# knee, was what moved the demo's measured MAT by up to 1.9x between runs.
PHP_CHILDREN_PER_CORE = 1

HEALTH_STATIC = "/__shrink/health.txt"
HEALTH_PHP = "/__shrink/health.php"
HEALTH_BODY = "shrink-ok"

# A path with a segment that starts with a dot (``/.git/config``, ``/.env``,
# ``/up/.htpasswd``) is refused (403) by both stacks: a document root copied from a
# site carries such files, and the testbed, started by root, must not hand them to
# whoever reaches its port. ``/.well-known/`` is a real site's public folder and
# stays served. Both servers match it against the decoded, normalised path.
HIDDEN_PATH_RE = r"/\.(?!well-known(/|$))"

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
# PHP's own default: a trace with larger request bodies raises it (PhpLimits.for_bodies).
PHP_POST_MAX_MIB = 8


@dataclass(frozen=True)
class PhpLimits:
    """The PHP limits a testbed runs with, explicit and printed (``testbed up``'s notes).

    ``max_execution_s``: a request the client gave up on (the engine's timeout,
    10 s by default) must stop, not keep a child busy into the next load level.
    ``memory_limit``: PHP's per-request memory. ``post_max_mib``: the largest
    request body PHP accepts (``post_max_size`` and ``upload_max_filesize``);
    PHP's default, 8 MiB, unless the trace holds larger bodies (a body PHP refuses
    would be measured as a different, cheaper request).
    """

    max_execution_s: int = PHP_MAX_EXECUTION_S
    memory_limit: str = PHP_MEMORY_LIMIT
    post_max_mib: int = PHP_POST_MAX_MIB
    largest_body: int | None = None  # bytes, when read from a trace

    def for_bodies(self, largest_body: int) -> PhpLimits:
        """These limits, with a ``post_max_size`` that holds a trace's largest body (bytes),
        with room."""
        need = math.ceil(2 * max(largest_body, 0) / 2**20)  # twice: multipart overhead
        return replace(self, post_max_mib=max(self.post_max_mib, need), largest_body=largest_body)

    def __post_init__(self) -> None:
        if not 1 <= self.max_execution_s <= 86_400:
            raise ParameterError(
                f"--php-max-execution == {self.max_execution_s} s, must be in [1 s, 1 d]."
            )
        if not re.fullmatch(r"-1|[1-9][0-9]{0,5}[KMG]?", self.memory_limit):
            raise ParameterError(
                f"--php-memory-limit == {self.memory_limit!r}, must be PHP's size such as "
                "256M, 1G or -1 (no limit)."
            )

    def for_trace(self, trace: Any) -> PhpLimits:
        """:meth:`for_bodies` with a :class:`~shrink.trace.Trace`'s largest body."""
        from shrink.bodies import largest_body

        # From the column's offsets: every body as Python bytes took the trace's
        # bodies' size again (1.4 GB for one 300 MB body).
        return self.for_bodies(largest_body(trace.table))

    def describe(self, children_per_core: int) -> str:
        body = (
            f" (the trace's largest body: {self.largest_body:,} bytes)"
            if self.largest_body is not None
            else ""
        )
        return (
            f"PHP: {children_per_core} children per core (--php-children-per-core), "
            f"max_execution_time {self.max_execution_s} s (--php-max-execution), "
            f"memory_limit {self.memory_limit} (--php-memory-limit), "
            f"post_max_size {self.post_max_mib}M{body}"
        )


@dataclass(frozen=True)
class ServerSettings:
    """How the testbed runs its server: the ``recipe`` (a recipe, a built-in recipe's name,
    ``lighttpd-php-cgi`` or ``nginx-php-fpm``, or a ``RECIPE.toml``; None: lighttpd-php-cgi),
    the PHP pool's ``php_children_per_core`` (the built-in recipes), PHP's ``php`` limits,
    and ``enforce``, the mechanism of a CPU-time share (:mod:`shrink.enforce`; None: its
    default)."""

    recipe: Any = None  # str | shrink.testbed.recipe.ServerRecipe | None
    php_children_per_core: int = PHP_CHILDREN_PER_CORE
    php: PhpLimits = field(default_factory=PhpLimits)
    enforce: str | None = None


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
    php_post_max_mib: int = PHP_POST_MAX_MIB
    own_dir: Path | None = None  # the server user's folder (its log); else run_dir

    @property
    def conf_path(self) -> Path:
        return self.run_dir / "lighttpd.conf"

    @property
    def errorlog(self) -> Path:
        return (self.own_dir or self.run_dir) / "error.log"

    @property
    def probe_dir(self) -> Path:
        return self.run_dir / "probe"

    @property
    def php_ini_dir(self) -> Path:
        """php-cgi's extra ini folder (``PHP_INI_SCAN_DIR``, after the system's)."""
        return self.run_dir / "php.d"


def _q(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _path(value: str | Path, what: str) -> str:
    """A path for the config: refused if it could break out of its quotes, then quoted."""
    return _q(config_value(value, what))


def _php_bin(c: ReplicaConfig) -> str:
    """php-cgi with its time and memory limits (``-d`` overrides php.ini), reading no
    ``.user.ini`` in the document root (one planted there could run any file as PHP).
    A page could raise ``-d``'s limits (ini_set, set_time_limit): the document root's
    own pages get them from :func:`render_php_limits` too, where it cannot."""
    return (
        f"{c.php_cgi} -d user_ini.filename= -d max_execution_time={int(c.php_max_execution_s)} "
        f"-d memory_limit={c.php_memory_limit} -d post_max_size={c.php_post_max_mib}M "
        f"-d upload_max_filesize={c.php_post_max_mib}M"
    )


def render_php_limits(c: ReplicaConfig) -> str:
    """php-cgi's limits for the document root's pages, as php.ini ``[PATH=]`` sections
    (of the root as named and as resolved, as PHP sees a script's path): set there, a
    page cannot change them at run time (``ini_set``, ``set_time_limit(0)``), as it can
    ``-d``'s (php-fpm's pool has ``php_admin_value`` for this)."""
    limits = (
        f"max_execution_time = {int(c.php_max_execution_s)}\n"
        f"memory_limit = {c.php_memory_limit}\n"
        f"post_max_size = {c.php_post_max_mib}M\n"
        f"upload_max_filesize = {c.php_post_max_mib}M\n"
    )
    roots = dict.fromkeys([str(c.docroot), os.path.realpath(c.docroot)])
    # OPcache's lock file is made in /tmp by default: with /tmp read-only or full every
    # php-cgi child exited 254 and `up` waited 15 s for "0 of 1 children"
    lock = f"opcache.lockfile_path = {_path(c.own_dir or c.run_dir, 'server folder')}\n"
    return (
        "; shrink testbed: the PHP limits\n"
        + lock
        + "".join(f"[PATH={_path(root, 'document root')}]\n{limits}" for root in roots)
    )


def render_lighttpd_conf(c: ReplicaConfig) -> str:
    """The lighttpd.conf text for one replica."""
    r = c.replica
    mimes = ",\n".join(f"    {_q(ext)} => {_q(t)}" for ext, t in MIME_TYPES.items())
    config_value(c.php_cgi, "php-cgi")
    return f"""# shrink testbed replica {r.name}: CPUs {list(r.cpus)}, NIC socket {r.nic_socket}
server.modules = ("mod_access", "mod_alias", "mod_fastcgi")
server.document-root = {_path(c.docroot, "document root")}
server.follow-symlink = "disable"
server.bind = {_q(r.address)}
server.port = {r.port}
server.errorlog = {_path(c.errorlog, "error log")}
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
$HTTP["url"] =~ "{HIDDEN_PATH_RE}" {{
    url.access-deny = ("")
}}
static-file.exclude-extensions = (".php")
alias.url = ("/__shrink/" => {_path(str(c.probe_dir) + "/", "probe folder")})
mimetype.assign = (
{mimes}
)
fastcgi.server = (".php" => ((
    "bin-path" => {_q(_php_bin(c))},
    "socket" => {_path(c.socket_path, "socket")},
    "max-procs" => 1,
    "bin-environment" => (
        "PHP_FCGI_CHILDREN" => "{c.php_children}",
        "PHP_INI_SCAN_DIR" => {_q(":" + config_value(c.php_ini_dir, "PHP ini folder"))},
        "PHP_FCGI_MAX_REQUESTS" => "0"
    ),
    "bin-copy-environment" => ("PATH", "LANG", "USE_ZEND_ALLOC", "USE_ZEND_ALLOC_HUGE_PAGES"),
    "broken-scriptfilename" => "enable"
)))
"""


def write_probe_pages(probe_dir: Path) -> None:
    """The health check's static file and PHP page, readable by the server user."""
    make_dirs(probe_dir)
    write_text(probe_dir / "health.txt", HEALTH_BODY)
    write_text(probe_dir / "health.php", f'<?php echo "{HEALTH_BODY}";\n')
    readable(probe_dir, probe_dir / "health.txt", probe_dir / "health.php")


def write_probe(c: ReplicaConfig) -> None:
    """Write the config and the health-check probe files into the replica's run dir."""
    write_probe_pages(c.probe_dir)
    make_dirs(c.php_ini_dir)
    limits = write_text(c.php_ini_dir / "zz-shrink-limits.ini", render_php_limits(c))
    readable(c.php_ini_dir, limits)
    readable(write_text(c.conf_path, render_lighttpd_conf(c)))
