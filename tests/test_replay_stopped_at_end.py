"""A stop that comes as a replay's run ends (held while its result is made) stops the
command: the run is whole, and the command says so and exits with the stop's status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_STOPPED_AS_IT_ENDS = """
import os, signal, sys
from shrink import interrupts
from shrink.cli import app
from shrink.cli._replay_opts import EngineOptions
from shrink.target import FakeTarget

class EndsStopped(FakeTarget):
    # (as a LiveTarget has them)
    state, realtime, lag_limit = None, None, 1e-3
    generator_cpus, processes, cluster = (0,), None, None

    def run(self, trace, out=None, **kw):
        res = super().run(trace, seed=0, **kw)
        res.describe = {**res.describe, "engine": {"engine": "fake"}}
        with interrupts.deferred():  # as LiveTarget.run makes its result
            os.kill(os.getpid(), signal.SIGTERM)
        return res

EngineOptions.target = lambda *a, **kw: EndsStopped()
interrupts.install()
sys.argv = ["shrink", "replay", "--target", "http://127.0.0.1:9", "--rate", "100",
            "--duration", "1s", "-o", sys.argv[1]]
app()
"""


@pytest.mark.compute
def test_a_stop_as_the_run_ends_stops_the_replay(tmp_path: Path) -> None:
    """It was held and never raised: replay printed its summary and exited 0, as if no
    stop had come (and, a stop being under way, every later one was ignored)."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "r.parquet"
    r = subprocess.run([sys.executable, "-c", _STOPPED_AS_IT_ENDS, str(out)], cwd=root,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 143, r.stdout + r.stderr
    assert f"stopped by SIGTERM: the whole run is kept in {out}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
