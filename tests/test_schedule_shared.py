"""One schedule builder: the simulator, the live engine and the fakes replay the same plan."""

from __future__ import annotations

import numpy as np
import pytest

import shrink.sim.target as sim_target
from shrink.machine import Machine
from shrink.replay import EngineConfig, run_engines
from shrink.replay.engine import EngineStats
from shrink.schedule import Schedule, build_schedule, schedule_arrays, trace_extent
from shrink.share import Share
from shrink.sim import SimTarget, support_trace
from shrink.target import FakeTarget, GeneratorPlacement
from shrink.trace import Trace

pytestmark = pytest.mark.compute

MACHINE = Machine(name="m", sockets=1, cores_per_socket=2, llc_mib=8.0, ghz=2.0)


def _same(a: Schedule, b: Schedule) -> None:
    assert a.mode == b.mode and a.period == b.period and a.end == b.end
    np.testing.assert_array_equal(a.session_start, b.session_start)
    assert a.session_ids == b.session_ids and a.session_bursts == b.session_bursts
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_array_equal(a.rows, b.rows)


@pytest.mark.parametrize("seed", [0, 3])
def test_the_simulator_and_the_engine_build_the_same_schedule(monkeypatch, seed):
    trace = support_trace(users=30, duration=20.0, seed=seed)
    built: list[Schedule] = []
    real = sim_target.build_schedule

    def spy(*args, **kw):
        built.append(real(*args, **kw))
        return built[-1]

    monkeypatch.setattr(sim_target, "build_schedule", spy)
    sim = SimTarget(MACHINE, "1-replica", Share.cores_of(MACHINE, (0,)), warm_start=True)
    res = sim.run(trace, rate_factor=2.0, warmup=3.0, duration=5.0, seed=seed)

    engine_got: list[Schedule] = []

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        engine_got.append(schedule)
        writer.close()
        return EngineStats(t0=0.0, t0_unix=0.0, wall=0.0, cpu=0.0, requests=0)

    run_engines(
        trace, EngineConfig(targets=[("127.0.0.1", 9)]), rate_factor=2.0, horizon=8.0,
        generator=GeneratorPlacement(engine=engine),
    )  # fmt: skip
    _same(built[0], engine_got[0])
    # and the simulator sent what that schedule holds, each request in its session
    arr = schedule_arrays(built[0])
    sent = set(zip(res.runlog.column("session").tolist(), strict=True))
    assert sent <= {(int(i),) for i in arr.sess_ids}
    assert built[0].copies >= 1 and len(built[0]) == arr.rows.size


def test_the_fake_target_plans_open_mode_with_the_same_builder():
    t = np.sort(np.random.default_rng(1).uniform(0, 30, 500))
    trace = Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/f"] * t.size}, meta={"mode": "open"}
    )
    res = FakeTarget().run(trace, rate_factor=2.0, warmup=1.0, duration=5.0, seed=0)
    sched = build_schedule(trace, 2.0, 6.0, mode="open", loop=False)
    np.testing.assert_array_equal(res.runlog.column("intended"), sched.times[sched.times < 6.0])


def test_one_pass_sends_the_last_request_and_runs_sessions_out():
    # the issue's case: session 4's last request is due 1.5 s after its first, past the
    # last session start; a pass as long as the trace must still send it
    rows = {"session": [], "burst": [], "t": [], "think": [], "path": []}
    for s in range(4):
        for b in range(2):
            rows["session"].append(s)
            rows["burst"].append(b)
            rows["t"].append(s + 1.5 * b)
            rows["think"].append(1.5 if b == 0 else 0.0)
            rows["path"].append("/x")
    trace = Trace.from_columns(rows, meta={"mode": "session"})
    sched = build_schedule(trace, 1.0, 4.5, loop=False)
    assert len(sched) == 8 and sched.end == float("inf")
    assert sched.session_start.tolist() == [0.0, 1.0, 2.0, 3.0]
    # looping: copies follow at the arrivals' pace (4 sessions, 1 s apart: 4 s), as httperf
    assert trace_extent(trace)[1] == pytest.approx(4.0)
    looped = build_schedule(trace, 1.0, 8.0, warm_start=False)
    assert looped.end == 8.0 and looped.session_start.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
