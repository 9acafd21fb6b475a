"""The ``lighttpd-php-cgi`` recipe (the default): lighttpd with a php-cgi FastCGI pool.

``lighttpd -D`` starts already pinned to the replica's CPUs; it forks one worker
per core and spawns php-cgi, which forks its children. lighttpd has no per-worker
CPU affinity option, so each worker is pinned to its own core after the fork,
and the php-cgi children evenly over the cores. The config is rendered by
:mod:`shrink.testbed.config`. As root, lighttpd starts as the server user
(``ctx.spawn``), so neither it nor php-cgi ever holds root.
"""

from __future__ import annotations

from shrink import processes as process
from shrink.errors import TestbedError
from shrink.testbed import recipe
from shrink.testbed.config import ReplicaConfig, write_probe
from shrink.testbed.recipe import BuiltinRecipe, ReplicaContext, Started

__all__ = ["INSTALL_HINT", "LighttpdPhpCgi"]

INSTALL_HINT = (
    "install it with `apt-get install lighttpd php-cgi` as root "
    "(the README's set-up, `make setup`, does this)"
)


class LighttpdPhpCgi(BuiltinRecipe):
    """lighttpd, one worker per core, and a php-cgi pool of ``children_per_core`` per core."""

    name = "lighttpd-php-cgi"

    def _tools(self) -> tuple[str, str]:
        return (
            recipe.find_tool(self.name, "lighttpd", hint=INSTALL_HINT),
            recipe.find_tool(self.name, "php-cgi", hint=INSTALL_HINT),
        )

    def versions(self) -> dict[str, str]:
        lighttpd, php_cgi = self._tools()
        return {
            "lighttpd": recipe.first_line([lighttpd, "-v"], self.name),
            "php": recipe.first_line([php_cgi, "-v"], self.name),
        }

    def start(self, ctx: ReplicaContext) -> Started:
        lighttpd, php_cgi = self._tools()
        r = ctx.replica
        cfg = ReplicaConfig(
            replica=r,
            docroot=ctx.docroot,
            run_dir=ctx.run_dir,
            socket_path=ctx.sock_dir / "php.sock",
            php_cgi=php_cgi,
            php_children=ctx.children_per_core * len(r.cpus),
            workers=ctx.workers,
            php_max_execution_s=ctx.php.max_execution_s,
            php_memory_limit=ctx.php.memory_limit,
            php_post_max_mib=ctx.php.post_max_mib,
            own_dir=ctx.sock_dir,
        )
        write_probe(cfg)
        recipe.check_config(
            [lighttpd, "-tt", "-f", str(cfg.conf_path)], "lighttpd", cfg.conf_path, ctx.user
        )
        master = ctx.spawn([lighttpd, "-D", "-f", str(cfg.conf_path)], "stdout.log")
        tree: dict[str, list[int]] = {}
        want_workers = ctx.workers if ctx.workers > 1 else 0

        def ready() -> str | None:
            kids = [process.proc_info(p) for p in process.children_map().get(master.pid, [])]
            lt = [k.pid for k in kids if k is not None and k.comm.startswith("lighttpd")]
            php = [k.pid for k in kids if k is not None and k.comm.startswith("php")]
            php_kids = sorted(process.children_map().get(php[0], [])) if php else []
            tree.update(workers=sorted(lt), php=php[:1], php_kids=php_kids)
            if len(lt) >= want_workers and php and len(php_kids) >= cfg.php_children:
                return None
            return (
                f"lighttpd started {len(lt)} of {want_workers} workers and php-cgi "
                f"{len(php_kids)} of {cfg.php_children} children"
            )

        try:
            recipe.wait_until(ready, [master], ctx.timeout_s)
        except TestbedError as exc:
            tail = recipe.tail_log(cfg.errorlog, 5)
            raise TestbedError(f"{exc}; error log: {tail}" if tail else str(exc)) from None
        workers = tree["workers"]
        # One process serves alone when lighttpd runs a single worker: pin the master.
        pinned = recipe.pin_evenly(workers or [master.pid], r.cpus)
        pinned.update(recipe.pin_evenly(tree["php_kids"], r.cpus))
        return Started(
            masters=[master.pid],
            processes={
                "lighttpd": [master.pid, *workers],
                "php-cgi": [*tree["php"], *tree["php_kids"]],
            },
            pinned=pinned,
            config=str(cfg.conf_path),
            errorlog=str(cfg.errorlog),
        )
