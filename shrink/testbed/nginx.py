"""The ``nginx-php-fpm`` recipe: Debian's nginx with one PHP-FPM pool per replica.

Per replica, two masters start pinned to the replica's CPUs and in its cgroup:

* ``php-fpm -F`` with its own config: one pool, ``pm = static`` with
  ``children_per_core`` children per core (a fixed pool, like php-cgi's, so no
  child is forked mid-run and loses its pinning), listening on the replica's own
  Unix socket. The children are pinned evenly over the cores after the fork.
* ``nginx`` in the foreground (``daemon off``): ``worker_processes`` one per core,
  and ``worker_cpu_affinity`` pins each worker to its own core (nginx does it
  itself). The probe directory is aliased at ``/__shrink/`` as for lighttpd.

Debian installs php-fpm as ``php-fpmX.Y``; the binary is looked up at run time.
As root, both masters start as the unprivileged server user (``ctx.spawn``,
:mod:`shrink.testbed.private`), so no nginx or PHP process ever holds root; their
pid files, temp files, logs and socket live in the server user's own folder.
``disable_symlinks on``: a symlink in the document root is not followed. Every
path written into either config is checked and quoted (``fastcgi_pass`` too).
"""

from __future__ import annotations

import glob
from pathlib import Path

from shrink import processes as process
from shrink.atomic import write_text
from shrink.errors import TestbedError
from shrink.testbed import recipe
from shrink.testbed.config import HIDDEN_PATH_RE, MIME_TYPES, write_probe_pages
from shrink.testbed.private import config_value, readable
from shrink.testbed.recipe import BuiltinRecipe, ReplicaContext, Started

__all__ = ["INSTALL_HINT", "NginxPhpFpm", "cpu_affinity_masks", "php_fpm_names"]

INSTALL_HINT = (
    "install them with `apt-get install nginx php-fpm` as root "
    "(the README's set-up, `make setup`, does this)"
)


def php_fpm_names() -> list[str]:
    """``php-fpm`` and every versioned Debian binary (``php-fpm8.2``), newest first."""
    found = {
        Path(p).name
        for d in ("/usr/sbin", "/usr/local/sbin", "/usr/bin")
        for p in glob.glob(f"{d}/php-fpm*")
    }
    versioned = sorted((n for n in found if n != "php-fpm"), reverse=True)
    return ["php-fpm", *versioned]


def cpu_affinity_masks(cpus: tuple[int, ...]) -> str:
    """nginx's ``worker_cpu_affinity`` value: one binary mask per worker, CPU 0 rightmost.

    >>> cpu_affinity_masks((0, 1))
    '01 10'
    """
    width = max(cpus) + 1
    return " ".join(("1" + "0" * c).rjust(width, "0") for c in cpus)


def _q(value: str | Path, what: str = "path") -> str:
    """A path, refused if it could break out of its quotes (:func:`config_value`), quoted."""
    return '"' + config_value(value, what) + '"'


def render_nginx_conf(ctx: ReplicaContext, socket_path: Path, probe_dir: Path) -> str:
    """The nginx.conf text for one replica."""
    r = ctx.replica
    run = ctx.sock_dir  # the server user's own folder: pid, logs, temp files
    listen = f"[{r.address}]:{r.port}" if ":" in r.address else f"{r.address}:{r.port}"
    types = "\n".join(f"        {t} {ext.lstrip('.')};" for ext, t in MIME_TYPES.items() if ext)
    fastcgi = f"""            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $request_filename;
            fastcgi_pass {_q("unix:" + str(socket_path), "socket")};"""
    return f"""# shrink testbed replica {r.name}: CPUs {list(r.cpus)}, NIC socket {r.nic_socket}
daemon off;
master_process on;
worker_processes {ctx.workers};
worker_cpu_affinity {cpu_affinity_masks(r.cpus)};
worker_rlimit_nofile 16384;
pid {_q(run / "nginx.pid")};
error_log {_q(run / "error.log")} warn;
events {{
    worker_connections 4096;
    use epoll;
}}
http {{
    access_log off;
    client_body_temp_path {_q(run / "tmp-body")};
    # as large a body as PHP is given (post_max_size, up to the trace's largest): nginx's
    # own 1 MiB default answered 413 to a larger one, which lighttpd passed to PHP
    client_max_body_size {ctx.php.post_max_mib}M;
    proxy_temp_path {_q(run / "tmp-proxy")};
    fastcgi_temp_path {_q(run / "tmp-fastcgi")};
    uwsgi_temp_path {_q(run / "tmp-uwsgi")};
    scgi_temp_path {_q(run / "tmp-scgi")};
    types {{
{types}
    }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    keepalive_timeout 30s;
    server_tokens off;
    disable_symlinks on;
    server {{
        listen {listen} backlog=4096;
        root {_q(ctx.docroot, "document root")};
        index index.html index.php;
        location ^~ /__shrink/ {{
            alias {_q(str(probe_dir) + "/", "probe folder")};
            location ~ \\.php$ {{
{fastcgi}
            }}
        }}
        location ~ {HIDDEN_PATH_RE} {{
            deny all;
        }}
        location ~ \\.php$ {{
            try_files $uri =404;
{fastcgi}
        }}
    }}
}}
"""


def render_fpm_conf(ctx: ReplicaContext, socket_path: Path, children: int) -> str:
    """The php-fpm config for one replica: its own pool on its own socket, with the
    testbed's PHP limits (``testbed up`` says them; php.ini's are not these)."""
    run = ctx.sock_dir
    php = ctx.php
    return f"""; shrink testbed replica {ctx.replica.name}
[global]
pid = {_q(run / "php-fpm.pid")}
error_log = {_q(run / "php-fpm.log")}
daemonize = no
process_control_timeout = 2

[{ctx.replica.name}]
listen = {_q(socket_path, "socket")}
listen.backlog = 4096
pm = static
pm.max_children = {children}
pm.max_requests = 0
catch_workers_output = yes
clear_env = no
; no .user.ini from the document root: one planted there could run any file as PHP
php_admin_value[user_ini.filename] =
; admin values: a page cannot raise them (ini_set, set_time_limit) as it can php_value's
php_admin_value[max_execution_time] = {int(php.max_execution_s)}
php_admin_value[memory_limit] = {php.memory_limit}
php_admin_value[post_max_size] = {php.post_max_mib}M
php_admin_value[upload_max_filesize] = {php.post_max_mib}M
"""


class NginxPhpFpm(BuiltinRecipe):
    """nginx, one worker per core pinned by ``worker_cpu_affinity``, and a PHP-FPM pool."""

    name = "nginx-php-fpm"

    def _tools(self) -> tuple[str, str]:
        return (
            recipe.find_tool(self.name, "nginx", hint=INSTALL_HINT),
            recipe.find_tool(self.name, *php_fpm_names(), hint=INSTALL_HINT),
        )

    def versions(self) -> dict[str, str]:
        nginx, fpm = self._tools()
        return {
            "nginx": recipe.first_line([nginx, "-v"], self.name).removeprefix("nginx version: "),
            "php-fpm": recipe.first_line([fpm, "-v"], self.name),
        }

    def _write(self, ctx: ReplicaContext, nginx: str) -> tuple[Path, Path, Path, int]:
        run = ctx.run_dir
        probe = run / "probe"
        write_probe_pages(probe)
        sock = ctx.sock_dir / "php-fpm.sock"
        children = ctx.children_per_core * len(ctx.replica.cpus)
        nginx_conf, fpm_conf = run / "nginx.conf", run / "php-fpm.conf"
        write_text(nginx_conf, render_nginx_conf(ctx, sock, probe))
        write_text(fpm_conf, render_fpm_conf(ctx, sock, children))
        readable(nginx_conf, fpm_conf)
        recipe.check_config([*_nginx_argv(nginx, ctx), "-t", "-q", "-c", str(nginx_conf)],
                            "nginx", nginx_conf, ctx.user)  # fmt: skip
        return nginx_conf, fpm_conf, sock, children

    def start(self, ctx: ReplicaContext) -> Started:
        nginx, fpm = self._tools()
        nginx_conf, fpm_conf, sock, children = self._write(ctx, nginx)
        r = ctx.replica
        # OPcache's lock file in the server's own folder, not /tmp (read-only or full: exit 254)
        lock = f"opcache.lockfile_path={ctx.sock_dir}"
        fpm_master = ctx.spawn([fpm, "-F", "-O", "-d", lock, "-y", str(fpm_conf)], "php-fpm.out")
        found: dict[str, list[int]] = {}

        def pool_ready() -> str | None:
            kids = sorted(process.children_map().get(fpm_master.pid, []))
            found["php-fpm"] = kids
            if len(kids) >= children and sock.exists():
                return None
            return f"php-fpm started {len(kids)} of {children} children"

        try:
            recipe.wait_until(pool_ready, [fpm_master], ctx.timeout_s)
        except TestbedError as exc:
            tail = recipe.tail_log(ctx.sock_dir / "php-fpm.log")
            raise TestbedError(f"{exc}; php-fpm's log: {tail}" if tail else str(exc)) from None
        nginx_master = ctx.spawn([*_nginx_argv(nginx, ctx), "-c", str(nginx_conf)], "nginx.out")

        def workers_ready() -> str | None:
            kids = sorted(process.children_map().get(nginx_master.pid, []))
            found["nginx"] = kids
            # A worker sets its worker_cpu_affinity just after the fork: wait for it.
            pinned = sum(1 for k in kids if len(_allowed(k)) == 1)
            if len(kids) >= ctx.workers and pinned == len(kids):
                return None
            return f"nginx started {len(kids)} of {ctx.workers} workers ({pinned} pinned)"

        try:
            recipe.wait_until(workers_ready, [fpm_master, nginx_master], ctx.timeout_s)
        except TestbedError as exc:
            tail = recipe.tail_log(ctx.sock_dir / "error.log")
            raise TestbedError(f"{exc}; error log: {tail}" if tail else str(exc)) from None
        # nginx pins its workers itself (worker_cpu_affinity); record what they got.
        pinned = {w: list(process.allowed_cpus(w)) for w in found["nginx"]}
        pinned.update(recipe.pin_evenly(found["php-fpm"], r.cpus))
        return Started(
            masters=[nginx_master.pid, fpm_master.pid],
            processes={
                "nginx": [nginx_master.pid, *found["nginx"]],
                "php-fpm": [fpm_master.pid, *found["php-fpm"]],
            },
            pinned=pinned,
            config=str(nginx_conf),
            errorlog=str(ctx.sock_dir / "error.log"),
            logs=[str(ctx.sock_dir / "php-fpm.log")],  # (was not capped, nor quoted)
        )


def _nginx_argv(nginx: str, ctx: ReplicaContext) -> list[str]:
    """nginx with its prefix and first error log in the server user's own folder."""
    return [nginx, "-p", str(ctx.sock_dir), "-e", str(ctx.sock_dir / "error.log")]


def _allowed(pid: int) -> tuple[int, ...]:
    try:
        return process.allowed_cpus(pid)
    except OSError:  # exited meanwhile
        return ()
