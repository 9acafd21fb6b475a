"""A fake server recipe for unit tests of the lifecycle: needs no web server installed.

It starts one small Python process per replica (through ``ctx.spawn``, so it is
pinned and in the cgroup like any server): the replay tests' fake server,
:mod:`shrink.replay.fakeserver`, run as a script (it needs only the standard
library, so it starts without importing shrink), which answers every GET with a
200. It counts the calls the lifecycle made. ``fail`` makes it break
the way real recipes break: ``"exit"`` (the process dies at start-up),
``"silent"`` (it runs but never answers) or ``"start"`` (start raises)::

    recipe = FakeRecipe()
    up(docroot, machine, share, state_path=..., server=ServerSettings(recipe))
    assert recipe.calls["start"] == 1
"""

from __future__ import annotations

import signal
import sys
from collections import Counter

from shrink.errors import TestbedError
from shrink.replay import fakeserver
from shrink.testbed.health import probe
from shrink.testbed.recipe import ReplicaContext, Started, replica_pids, stop_replica
from shrink.testbed.state import ReplicaState

__all__ = ["FakeRecipe"]

_SILENT = "import time; time.sleep(60)"
_EXIT = "import sys; print('fake: cannot start'); sys.exit(3)"


class FakeRecipe:
    """A recipe whose server is a few lines of Python; ``calls`` counts each method."""

    name = "fake"
    source = "fake"
    stop_signal = signal.SIGTERM
    # A test double run by the test's own interpreter, which the unprivileged server
    # user may not be able to reach: it runs as the test does.
    drops_root = False

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
        code = {"exit": _EXIT, "silent": _SILENT}.get(self.fail or "")
        if code is None:
            argv = [sys.executable, fakeserver.__file__, "--host", r.address, "--port", str(r.port)]
        else:
            argv = [sys.executable, "-c", code]
        p = ctx.spawn(argv, "fake.log")
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
