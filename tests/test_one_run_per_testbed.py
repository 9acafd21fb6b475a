"""One run at a time against a testbed: a second run is refused at its start, naming the
first, which keeps its level (two at once were told apart only after a level, and both
lost it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.fake_targets import steady_trace
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import TestbedError
from shrink.procfs import proc_info
from shrink.replay import testbed_lock
from shrink.replay.live import LiveTarget
from shrink.target import GeneratorPlacement
from shrink.testbed.state import ReplicaState, TestbedState

ROOT = Path(__file__).resolve().parents[1]
CPUS = sorted(os.sched_getaffinity(0))
# The share on the last CPU, the generator on the first (beside it, on one CPU).
KW = f"share_cpus=[{CPUS[-1]}], generator=GeneratorPlacement(({CPUS[0]},), True)"


def _testbed(tmp_path: Path) -> Path:
    """A testbed's state (its server: this process) and the run root ``up`` made for it."""
    run = tmp_path / "run" / "up-tb-abc123" / "r0"
    run.mkdir(parents=True)
    me = os.getpid()
    replica = ReplicaState(
        name="r0", address="127.0.0.1", port=9, cpus=CPUS[-1:], masters=[me],
        processes={"lighttpd": [me]}, starttimes={me: proc_info(me).starttime}, pinned={},
        config="c", errorlog="", run_dir=str(run), nic_socket=0, cgroup=None,
    )  # fmt: skip
    share = {"kind": "cores", "cpus": CPUS[-1:]}
    st = TestbedState([replica], share, {"name": "1-replica"}, {}, "doc", {}, "t")
    path = st.write(tmp_path / "tb.json")
    return path


def _kw() -> dict:
    return {"share_cpus": CPUS[-1:], "generator": GeneratorPlacement((CPUS[0],), True)}


def _first_run(path: Path) -> subprocess.Popen[str]:
    """Another process with a target over ``path``'s testbed, as a running sweep has."""
    code = (
        "import sys, time; from shrink.replay.live import LiveTarget; "
        "from shrink.target import GeneratorPlacement; "
        f"t = LiveTarget.from_state(sys.argv[1], {KW}); "
        "print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_run_on_a_testbed_is_refused_at_its_start_naming_the_first(tmp_path):
    """Two sweeps against one testbed state both ran their first level, each loading the
    server the other measured; each lost it at the level's end ("loaded by another client
    too"). Now the second is refused before anything runs, naming the first's PID and
    command; the first holds on."""
    path = _testbed(tmp_path)
    first = _first_run(path)
    try:
        with pytest.raises(TestbedError) as info:
            LiveTarget.from_state(path, **_kw())
        said = str(info.value)
        assert said.startswith(f"{path}: another run is measuring this testbed: ")
        assert f"PID {first.pid} (" in said and " -c " in said, said
        # Through the CLI: refused at its start, nothing written.
        trace, out = tmp_path / "t.parquet", tmp_path / "c.json"
        steady_trace().write_parquet(trace)
        r = CliRunner().invoke(
            app, ["sweep", str(trace), "--target", str(path), "--levels", "1", "-o", str(out),
                  "--runlogs", str(tmp_path / "logs"), "--allow-overlap"],
        )  # fmt: skip
        assert r.exit_code == 1, r.output
        assert f"another run is measuring this testbed: PID {first.pid}" in r.output
        assert not out.exists() and not (tmp_path / "logs").exists()
        assert first.poll() is None  # the first run goes on
    finally:
        first.kill()
        first.wait()
    # The first gone (a kill -9 too), its lock went with it.
    target = LiveTarget.from_state(path, **_kw())
    target.close()


def test_runs_of_one_process_share_the_hold_and_the_last_lets_go(tmp_path):
    """A predict's targets (and tests) in one process are one run: not refused by each
    other. The hold goes with the last target, when closed or dropped."""
    path = _testbed(tmp_path)
    a = LiveTarget.from_state(path, **_kw())
    b = LiveTarget.from_state(path, **_kw())
    a.close()
    a.close()  # (once only)
    assert len(testbed_lock._HELD) == 1
    del b  # dropped: let go as the command ends
    assert testbed_lock._HELD == {}
    first = _first_run(path)  # another process may hold it now
    first.kill()
    first.wait()


def test_a_state_naming_no_run_root_of_ups_is_not_locked(tmp_path):
    """A state file is not trusted: a run folder that is not in an ``up-...`` run root (an
    older state, or one naming any folder) locks nothing; the run goes on as before."""
    path = _testbed(tmp_path)
    state = json.loads(path.read_text())
    assert testbed_lock.run_root(state) == str(tmp_path / "run" / "up-tb-abc123")
    state["replicas"][0]["run_dir"] = str(tmp_path / "elsewhere" / "r0")
    assert testbed_lock.run_root(state) is None
    del state["replicas"][0]["run_dir"]
    assert testbed_lock.run_root(state) is None
