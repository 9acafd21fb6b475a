"""The stop watcher counts a gap up to the engine's own end, not past it.

After the engine, the native core waits for its spinners to end with the GIL held
(starved at nice 19 under load: 17 s), and the watcher's next wake-up read that wait as a
stop: the level was flagged 'the generator did not run', or, with a SIGCONT meanwhile
(``fg`` of a running job), 'shrink itself was stopped'. A stop that spans the planned
horizon, and so the engine's end, still counts (its sends due meanwhile never went:
tests/test_stop_signals.py::test_a_generator_stopped_past_its_horizon_flags_the_level).
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest
from helpers.fake_engines import HeldAfterItsEnd, watched
from helpers.fake_targets import steady_trace

from shrink.replay.stopwatch import STOPPED_GAP, note_stop


@pytest.mark.compute
def test_a_gap_counts_up_to_the_engines_end(monkeypatch) -> None:
    # a wake-up at 100.05, then none until 102.5 (a stop that spans the horizon, 101.0,
    # and ends the engine at 102.6), then none until 120 (the wait for the spinners)
    watch = watched(monkeypatch, [100.0, 100.05, 102.5, 120.0])
    assert watch.ended(102.6).gap == pytest.approx(2.45)  # the stop, whole
    assert watch.missed == pytest.approx(2.45 - 0.05 + 0.1 - 0.05)
    assert watch.ended(None).gap == pytest.approx(17.5)  # (an engine that does not say)
    # a gap that began after the engine's end is none of the run's
    assert watch.ended(102.5).gap == pytest.approx(2.45)
    assert watch.missed == pytest.approx(2.4)


@pytest.mark.compute
def test_an_engine_process_counts_no_stop_past_its_engines_end(monkeypatch) -> None:
    """An engine process of its own (--processes N) said the wait for its spinners
    after its engine's end as a stop of it, with a SIGCONT meanwhile."""
    from shrink.replay.contract import EngineStats

    stats = EngineStats(t0=0.0, t0_unix=0.0, wall=0.1, cpu=0.0, requests=1, ended=0.12)
    watch = watched(monkeypatch, [0.0, 0.05, 0.1, 19.0])
    assert note_stop(stats, [watch], 1) is stats
    # stopped from 0.1 to 2.0 in the run, which ended at 2.01: said
    watch = watched(monkeypatch, [0.0, 0.05, 0.1, 2.0, 19.0])
    said = note_stop(replace(stats, ended=2.01), [watch], 1)
    assert said.extra["loop"]["stopped_us"] == pytest.approx(1.85e6)


@pytest.mark.parametrize("then", [(), (signal.SIGCONT,)], ids=["no-signal", "sigcont"])
def test_the_wait_after_the_engines_end_is_no_stop(then) -> None:
    """The engine held the GIL for 1.5 s after its end (a slow join of its spinners), with
    a SIGCONT and no stop before it, or none: no stop is said, the level is not flagged."""
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement

    cpu = min(os.sched_getaffinity(0))
    engine = HeldAfterItsEnd(1.5, then)
    placement = GeneratorPlacement(cpus=(cpu,), engine=engine, realtime=0, awake=False)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    res = target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=5.0)
    assert not res.generator.behind, res.generator.reason
    assert res.generator.stopped is None
    assert STOPPED_GAP < 1.5  # (the hold alone would have flagged it)


@pytest.mark.parametrize("then", [(), (signal.SIGCONT,)], ids=["no-signal", "sigcont"])
def test_an_engine_process_says_no_stop_for_the_wait_after_its_end(then) -> None:
    from shrink.replay import scaleout
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace
    from shrink.target import GeneratorPlacement

    placement = GeneratorPlacement(processes=2, engine=HeldAfterItsEnd(1.5, then), realtime=0)
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 5.0), EngineConfig(targets=[("127.0.0.1", 9)]),
        rate_factor=1.0, horizon=5.0, generator=placement,
    )  # fmt: skip
    assert len(run.stats) == 2
    assert [st.extra.get("loop", {}).get("stopped_us") for st in run.stats] == [None, None]


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_sigcont_with_no_stop_before_it_during_a_run_is_no_stop(engine) -> None:
    """A SIGCONT with no stop before it (``fg``, ``kill -CONT`` of a running shrink) in the
    middle of a run: Python's handler writes it to the native core's signal pipe too, and
    it is none of the stop signals there; the run goes to its end, and no stop is said."""
    import socket
    import threading
    import time

    from shrink.replay import EngineConfig, build_schedule, native, run_schedule
    from shrink.replay.stopwatch import Continued, StopWatch, stopped_for
    from shrink.replay.writer import RunLogWriter
    from shrink.schedule import open_loop_trace

    if engine == "native" and not native.available():
        pytest.skip("the native replay core is not built")
    run = native.run_native if engine == "native" else run_schedule
    watch = StopWatch()
    kick = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGCONT))

    def ready() -> float:
        watch.start()
        kick.start()
        return time.monotonic() + 0.05

    with socket.socket() as closed, Continued() as continued:  # (refused: nothing listens)
        closed.bind(("127.0.0.1", 0))
        sched = build_schedule(open_loop_trace("/x", 100.0, 1.0), 1.0, 1.0)
        try:
            stats = run(sched, EngineConfig(targets=[closed.getsockname()]), RunLogWriter(None),
                        on_ready=ready)  # fmt: skip
        finally:
            kick.cancel()
            watch.stop.set()
    assert continued.count == 1
    assert not stats.interrupted and stats.wall >= 0.9
    watch.ended(stats.ended)
    assert watch.gap < STOPPED_GAP
    assert stopped_for([stats], watch.missed, continued.count) == 0.0
