"""A run stopped by a signal is measured up to its stop: its window ends there (not at
the planned end, which spread its requests over time it never ran), and the requests
the stop cut off (in flight, or never sent) are neither failures nor samples; they
stay in the RunLog, marked ``cut`` and ``unsent``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shrink.measure import level_stats
from shrink.replay.answers import stopped_window
from shrink.replay.contract import EngineStats
from shrink.replay.engine_parts import EngineRun
from shrink.runlog import RunLog
from shrink.target import GeneratorCheck, RunResult

ROOT = Path(__file__).resolve().parents[1]


def _stopped_log() -> RunLog:
    """100 requests 10 ms apart answered in 1 ms; the stop at 1.0 s cut the last in
    flight (sent, no answer) and left one due in a pool unsent."""
    n = 100
    t = np.arange(n) * 0.01
    done = t + 1e-3
    error = [""] * n
    done[-2:] = np.nan
    error[-2:] = ["cut", "unsent"]
    sent = t.copy()
    sent[-1] = np.nan
    status = np.where(np.isfinite(done), 200, 0)
    cols = {"intended": t, "sent": sent, "done": done, "status": status, "error": error}
    return RunLog.from_columns(cols)


def _result(log: RunLog, window: tuple[float, float], interrupted: bool) -> RunResult:
    check = GeneratorCheck(0.0, 0.0, 0.0, 0.0, 0.0)
    desc = {"engine": {"interrupted": interrupted}}
    return RunResult(log, window, check, describe=desc)


@pytest.mark.compute
def test_requests_the_stop_cut_off_are_not_failures_of_a_stopped_run():
    st = level_stats(_result(_stopped_log(), (0.0, 1.0), interrupted=True))
    assert st.failures == {"transport": 0, "http_4xx": 0, "http_5xx": 0}
    assert st.errors == 0 and st.requests == 98 and not st.failed
    assert st.overall.n == 98  # every answered one is a sample, and only those
    assert st.offered == pytest.approx(99.0)  # the cut one was sent; the unsent one not


@pytest.mark.compute
def test_a_run_not_stopped_counts_them_as_before():
    """The same rows in a run that was not stopped: its end (the drain's) cut them,
    which is the server's doing, and they stay transport failures."""
    st = level_stats(_result(_stopped_log(), (0.0, 1.0), interrupted=False))
    assert st.failures == {"transport": 2, "http_4xx": 0, "http_5xx": 0}
    assert st.errors == 2 and st.requests == 100 and st.failed
    assert st.offered == pytest.approx(100.0)


@pytest.mark.compute
def test_a_stopped_window_ends_at_the_stop_or_the_last_send():
    log = _stopped_log()
    assert stopped_window((0.0, 60.0), 1.25, log) == (0.0, 1.25)
    # the stop is not recorded: just after the last send
    end = stopped_window((0.0, 60.0), None, log)[1]
    assert end == pytest.approx(0.98) and end > 0.98
    # after the planned end (a stop in the drain), or before the window: as planned
    assert stopped_window((0.0, 0.5), 1.25, log) == (0.0, 0.5)
    assert stopped_window((2.0, 60.0), 1.25, log) == (2.0, 60.0)
    empty = RunLog.from_columns({"intended": np.zeros(0)})
    assert stopped_window((0.0, 60.0), None, empty) == (0.0, 60.0)


@pytest.mark.compute
def test_a_run_of_processes_stopped_at_its_first_stop():
    def stats(**extra: float) -> EngineStats:
        return EngineStats(0.0, 0.0, 1.0, 0.0, 0, interrupted=bool(extra), extra=dict(extra))

    assert EngineRun([stats(stopped_at=2.0), stats(stopped_at=1.5)], 0.0, None).stopped_at == 1.5
    assert EngineRun([stats(), stats()], 0.0, None).stopped_at is None


def _server():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def server():
    proc = _server()
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline().split()[2])}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("engine", ["python", "auto"])
def test_a_replay_stopped_after_a_second_says_its_rate_and_no_failures(tmp_path, server, engine):
    """``--rate 100 --duration 60s`` stopped by SIGTERM after about a second said
    "intended 1.6/s" (its requests over the planned 60 s) and counted the requests in
    flight at the stop (50 ms answers: about five) as failed: "FAILED REQUESTS"."""
    out = tmp_path / "r.parquet"
    replay = subprocess.Popen(
        [sys.executable, "-m", "shrink", "replay", "--rate", "100", "--duration", "60s",
         "--path", "/x?bytes=10&delay_us=50000", "--target", server, "-o", str(out),
         "--engine", engine, "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".r.parquet.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)
        replay.send_signal(signal.SIGTERM)
        so, se = replay.communicate(timeout=30)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.wait()
    assert replay.returncode == 143, se
    s = json.loads(so)
    assert s["interrupted"] is True
    start, end = s["window"]
    assert start == 0.0 and 0.5 < end < 10.0
    assert 80.0 < s["intended_rate"] < 120.0 and 80.0 < s["achieved_rate"] < 120.0
    assert s["failures"] == {"transport": 0, "http_4xx": 0, "http_5xx": 0}
    assert not s["failed"] and s["errors"] == 0
    # the ones the stop cut off stay in the RunLog, marked so
    errors = RunLog.read_parquet(out).column("error")
    assert set(errors) <= {"", "cut", "unsent"} and "cut" in set(errors)


@pytest.mark.compute
def test_a_sweep_level_stopped_part_way_is_not_kept():
    """A sweep's level whose run was stopped is dropped, with the repetitions it had
    finished (a level is its whole set of repetitions): the finished levels are kept."""
    from dataclasses import replace

    from shrink.measure import SweepInterrupted, sweep
    from shrink.target import FakeTarget
    from shrink.trace import Trace

    class StoppedAt(FakeTarget):
        runs = 0

        def run(self, trace, **kw):
            res = super().run(trace, **kw)
            StoppedAt.runs += 1
            if StoppedAt.runs == 4:  # level 2's second repetition: stopped
                return replace(res, describe={**res.describe, "engine": {"interrupted": True}})
            return res

    t = np.arange(400) / 40.0
    trace = Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/x"] * t.size}, meta={"mode": "open"}
    )
    target = StoppedAt(servers=1, demand={"static": 0.001, "dynamic": 0.001})
    with pytest.raises(SweepInterrupted) as stop:
        sweep(target, trace, [1, 2, 3], reps=2, warmup=0.5, duration=2.0)
    assert [lv.level for lv in stop.value.curve.levels] == [1.0]
    assert stop.value.curve.meta["interrupted"] is True


def test_a_stopped_run_on_a_share_has_its_cpu_up_to_the_stop():
    """A run on a testbed's share stopped inside its window had no utilization,
    ``server_cpu`` nor ``share_other_cpu``: the window's CPU sampler returned at the
    stop without its second snapshot. They now cover the window up to the stop."""
    from helpers.fake_targets import steady_trace
    from test_testbed_watch import _state

    from shrink.replay.engine import EngineStats
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        t0 = on_ready()
        time.sleep(0.8)  # 0.6 s into the 30 s window, then stopped
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=0.8, cpu=0.0, requests=0,
                           interrupted=True, extra={"stopped_at": 0.8})  # fmt: skip

    cpus = sorted(os.sched_getaffinity(0))
    srv = subprocess.Popen(  # a server busy on the share's CPU the whole time
        ["taskset", "-c", str(cpus[-1]), sys.executable, "-c", "while True: pass"]
    )
    try:
        target = LiveTarget(
            [("127.0.0.1", 9)], state=_state(srv.pid, pids=[srv.pid]), share_cpus=cpus[-1:],
            generator=GeneratorPlacement(tuple(cpus[:1]), True, engine=engine), idle_bound=0.1,
        )  # fmt: skip
        start = time.monotonic()
        res = target.run(steady_trace(), rate_factor=1.0, warmup=0.2, duration=30.0)
    finally:
        srv.kill()
        srv.wait()
    assert time.monotonic() - start < 5.0 and res.describe["engine"]["interrupted"]
    assert res.window == (0.2, 0.8)
    assert res.utilization is not None and 0.0 <= res.utilization <= 1.0
    assert set(res.per_cpu_utilization) == set(cpus[-1:])
    # the busy server's CPU over the 0.6 s it ran, not spread over the planned 30 s
    # (which would read under 0.05 CPUs)
    assert 0.2 < res.describe["server_cpu"] < 1.5
    assert "share_other_cpu" in res.describe
