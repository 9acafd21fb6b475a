"""A dead or stopped server is a testbed error: the sweep stops, names the process,
keeps the finished levels and exits 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.fake_targets import FailsAt, live_target, partial_sweep_exit, steady_trace

from shrink import processes as process
from shrink.errors import TestbedError
from shrink.measure import SweepInterrupted, sweep
from shrink.replay.engine import EngineStats
from shrink.replay.writer import RunLogRow
from shrink.target import FakeTarget

ROOT = Path(__file__).resolve().parents[1]


_DOWN = "the server under test is down: crashed or killed: lighttpd PID 7"


def test_a_dead_server_stops_the_sweep_and_the_finished_levels_are_kept(tmp_path, capsys):
    target = FailsAt(3, TestbedError(_DOWN))
    with pytest.raises(TestbedError) as info:
        sweep(target, steady_trace(), [1, 2, 3, 4], reps=1, warmup=0.5, duration=2)
    assert target.runs == 3  # no level is run after the server died
    exc = info.value
    assert [lv.level for lv in exc.curve.levels] == [1, 2] and "lighttpd PID 7" in exc.curve.meta[
        "stopped"
    ]
    assert partial_sweep_exit(exc, tmp_path / "curve.json") == ([1, 2], 1)
    err = capsys.readouterr().err
    assert "lighttpd PID 7" in err and "kept" in err and "curve.partial.json" in err
    assert len(err.strip().splitlines()) == 1


def _refusing_engine(error: str):
    """A replay engine whose every request is refused (nothing listens)."""

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        t0 = on_ready()
        for i in range(200):
            tc = writer.targets.code("127.0.0.1:9")
            error_code = writer.errors.code(error)
            writer.add(RunLogRow(i / 100, i / 100, np.nan, np.nan, 0, 0, 0, i, tc, error_code))
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=2.0, cpu=0.0, requests=200)

    return engine


def _state(pids: list[int], starttimes: dict[int, int], **more) -> dict:
    # The replica's CPUs are those its processes (this one) may run on: others are a
    # server moved off its CPUs (tests/test_testbed_watch.py).
    cpus = sorted(os.sched_getaffinity(0))
    starts = {str(k): v for k, v in starttimes.items()}
    return {
        "replicas": [
            {"name": "r0", "address": "127.0.0.1", "port": 9, "cpus": cpus, "masters": pids[:1],
             "processes": {"lighttpd": pids}, "starttimes": starts,
             "pinned": {}, "config": "", "errorlog": ""}
        ],
        **more,
    }  # fmt: skip


def test_a_testbed_whose_server_died_is_refused_before_measuring():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    ran = []

    def engine(*a, **kw):
        ran.append(1)
        return _refusing_engine("refused")(*a, **kw)

    target = live_target(_state([gone.pid], {}), engine)
    with pytest.raises(TestbedError, match=f"crashed or killed: lighttpd PID {gone.pid}"):
        target.run(steady_trace(), rate_factor=1.0, warmup=0.5, duration=1.0)
    assert not ran


def test_a_stopped_testbed_is_refused_before_measuring():
    me = os.getpid()
    state = _state([me], {}, stopped="2026-01-01T00:00:00+00:00")
    with pytest.raises(TestbedError, match="brought down"):
        live_target(state, _refusing_engine("refused")).run(
            steady_trace(), rate_factor=1.0, warmup=0.5, duration=1.0
        )


def test_a_run_whose_requests_all_found_no_server_is_a_testbed_error():
    target = live_target(_state([os.getpid()], {}), _refusing_engine("refused"))
    want = r"200 of 200 requests found no server at 127\.0\.0\.1:9"
    with pytest.raises(TestbedError, match=want):
        target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)


def test_timeouts_of_an_overloaded_server_are_not_a_dead_server():
    target = live_target(_state([os.getpid()], {}), _refusing_engine("timeout"))
    res = target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)
    assert len(res.runlog) == 200


@pytest.mark.live
def test_lighttpd_killed_during_a_sweep_stops_it_with_exit_1(tmp_path):
    from conftest import require_lighttpd

    from shrink.share import Share
    from shrink.testbed import down, up
    from shrink.topology import discover

    require_lighttpd()
    doc = tmp_path / "doc"
    (doc / "static").mkdir(parents=True)
    (doc / "static" / "file1k.bin").write_bytes(bytes(1024))
    machine = discover()
    cpus = sorted(os.sched_getaffinity(0))
    state = tmp_path / "tb.json"
    st = up(doc, machine, Share.parse(str(cpus[-1]), machine), state_path=state, port=0,
            cgroups="no")  # fmt: skip
    trace = tmp_path / "t.parquet"
    steady_trace("/static/file1k.bin").write_parquet(trace)
    logs, curve = tmp_path / "logs", tmp_path / "curve.json"
    lighttpd = st.replicas[0].processes["lighttpd"][0]
    try:

        def kill_after_first_level() -> None:
            deadline = time.monotonic() + 60
            # the second level's run log is begun once the first level is finished
            while not list(logs.glob(".run001*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(lighttpd, signal.SIGKILL)

        killer = threading.Thread(target=kill_after_first_level, daemon=True)
        killer.start()
        out = subprocess.run(
            [sys.executable, "-m", "shrink", "sweep", str(trace), "--target", str(state),
             "--levels", "0.5,1,1.5,2", "--reps", "1", "--warmup", "0.5s", "--duration", "1s",
             "-o", str(curve), "--runlogs", str(logs), "--allow-overlap"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        killer.join()
        assert out.returncode == 1, out.stderr
        assert f"lighttpd PID {lighttpd}" in out.stderr and "kept" in out.stderr
        assert (tmp_path / "curve.partial.json").exists(), out.stderr
        partial = json.loads((tmp_path / "curve.partial.json").read_text())
        assert 0 < len(partial["levels"]) < 4 and not curve.exists()
        assert not list(tmp_path.rglob("*.tmp"))
        # And a sweep against the testbed once brought down fails before measuring.
        down(state)
        again = subprocess.run(
            [sys.executable, "-m", "shrink", "sweep", str(trace), "--target", str(state),
             "--levels", "1", "--reps", "1", "--warmup", "0.5s", "--duration", "1s",
             "-o", str(tmp_path / "c2.json"), "--allow-overlap"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert again.returncode == 1 and "brought down" in again.stderr, again.stderr
    finally:
        down(state)
        for p in st.replicas[0].pids:
            if process.is_alive(p):
                os.kill(p, signal.SIGKILL)


class _StopsAt(FakeTarget):
    """A one-server fake whose ``n``-th run raises ``error`` (a signal, a dead server)."""

    def __init__(self, n: int, error: BaseException) -> None:
        super().__init__(servers=1, demand={"static": 0.001})
        self.n, self.error, self.runs = n, error, 0

    def run(self, trace, **kw):
        self.runs += 1
        if self.runs == self.n:
            raise self.error
        return super().run(trace, **kw)


@pytest.mark.parametrize("error", [KeyboardInterrupt(), TestbedError(_DOWN)])
def test_mat_adaptive_stopped_keeps_the_levels_it_added(tmp_path, error, capsys):
    # `mat --adaptive` stopped by SIGTERM (or a dead server) after it had measured a
    # level: "nothing measured was written", the added level lost.
    from shrink.replay.adaptive import refine

    trace = steady_trace()
    curve = sweep(FakeTarget(servers=1, demand={"static": 0.001}), trace, [3, 9.5], reps=2,
                  warmup=0.5, duration=2, seed=1)  # fmt: skip
    target = _StopsAt(3, error)
    with pytest.raises((SweepInterrupted, TestbedError)) as info:
        refine(target, trace, curve, "mean", 0.005, rel_width=0.001, max_levels=4)
    assert target.runs == 3
    levels, status = partial_sweep_exit(info.value, tmp_path / "c.json")
    assert len(levels) == 3 and {3, 9.5} < set(levels)
    assert status == (1 if isinstance(error, TestbedError) else 130)
    assert "c.partial.json" in capsys.readouterr().err


def test_a_dead_co_runner_is_a_testbed_error(tmp_path):
    """kill -9 of the co-runner's spinner (``--enforce corunner``): the server ran on
    the share's CPUs whole, ``status`` said ok and a sweep measured it as the share,
    exit 0. Now the sweep stops naming it (``status`` reads it the same way)."""
    from shrink.procfs import proc_info
    from shrink.replay.live import server_problem
    from shrink.testbed.state import ReplicaState

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    me = os.getpid()
    enforce = {"mechanism": "corunner", "cpu_fraction": 0.5, "period_us": 1000, "spin_us": 500,
               "helper": "c", "cpus": [0], "spinners": {str(gone.pid): 1}}  # fmt: skip
    mine = proc_info(me).starttime
    state = _state([me], {me: mine})
    state["replicas"][0]["enforce"] = enforce
    assert ReplicaState.from_dict(state["replicas"][0]).spinners == {gone.pid: 1}
    problem = server_problem(state)
    assert problem is not None and "co-runner" in problem and f"PID {gone.pid}" in problem
    enforce["spinners"] = {str(me): mine}  # running: no problem
    assert server_problem(state) is None
