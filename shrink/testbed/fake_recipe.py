"""A fake server recipe for unit tests of the lifecycle: needs no web server installed.

It starts one small Python process per replica (through ``ctx.spawn``, so it is
pinned and in the cgroup like any server) that answers every GET with 200
``shrink-ok``, and counts the calls the lifecycle made. ``fail`` makes it break
the way real recipes break: ``"exit"`` (the process dies at start-up),
``"silent"`` (it runs but never answers) or ``"start"`` (start raises)::

    recipe = FakeRecipe()
    up(docroot, machine, share, state_path=..., server=recipe)
    assert recipe.calls["start"] == 1
"""

from __future__ import annotations

import signal
import sys
from collections import Counter

from shrink.errors import TestbedError
from shrink.testbed.health import probe
from shrink.testbed.recipe import ReplicaContext, Started, replica_pids, stop_replica
from shrink.testbed.state import ReplicaState

__all__ = ["FakeRecipe"]

_SERVE = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "9"); self.end_headers()
        self.wfile.write(b"shrink-ok")
    def log_message(self, *a): pass
cls = http.server.HTTPServer
if ":" in sys.argv[1]:
    import socket
    class V6(http.server.HTTPServer): address_family = socket.AF_INET6
    cls = V6
cls((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""
_SILENT = "import time; time.sleep(60)"
_EXIT = "import sys; print('fake: cannot start'); sys.exit(3)"


class FakeRecipe:
    """A recipe whose server is a few lines of Python; ``calls`` counts each method."""

    name = "fake"
    source = "fake"
    stop_signal = signal.SIGTERM

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.calls: Counter[str] = Counter()

    def versions(self) -> dict[str, str]:
        self.calls["versions"] += 1
        return {"fake": "fake/1.0"}

    def start(self, ctx: ReplicaContext) -> Started:
        self.calls["start"] += 1
        if self.fail == "start":
            raise TestbedError("fake: refused to start")
        r = ctx.replica
        code = {"exit": _EXIT, "silent": _SILENT}.get(self.fail or "", _SERVE)
        p = ctx.spawn([sys.executable, "-c", code, r.address, str(r.port)], "fake.log")
        return Started(
            masters=[p.pid],
            processes={"server": [p.pid]},
            pinned={p.pid: list(r.cpus)},
            errorlog=str(ctx.run_dir / "fake.log"),
        )

    def health(self, address: str, port: int) -> str | None:
        self.calls["health"] += 1
        return probe(f"http://{address}:{port}/")

    def pids(self, replica: ReplicaState) -> list[int]:
        self.calls["pids"] += 1
        return replica_pids(replica)

    def stop(self, replica: ReplicaState) -> list[int]:
        self.calls["stop"] += 1
        return stop_replica(replica, self.stop_signal)
