"""The send thread's scheduling by default: SCHED_FIFO as root on a CPU the server does not use.

At normal scheduling the engine's wake-ups wait behind the other work on its CPU
(a send lag of milliseconds on a shared machine); the default keeps the schedule
by running the send thread SCHED_FIFO where that cannot take the server's
cycles, and ``--realtime 0`` opts out.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from helpers.realtime import realtime_allowed

from shrink.replay import scaleout
from shrink.replay.fake import FakeEngine
from shrink.replay.live import LiveTarget
from shrink.replay.scaleout import AUTO_REALTIME, default_realtime
from shrink.schedule import open_loop_trace
from shrink.target import GeneratorPlacement


@pytest.mark.parametrize(
    ("requested", "gen", "server", "overlap", "expected"),
    [
        (None, (0,), (1,), False, AUTO_REALTIME),  # pinned, apart from the server
        (None, (0,), (), False, AUTO_REALTIME),  # a URL target: the user pinned it
        (None, (0, 1), (1,), False, 0),  # shares a CPU with the server
        (None, (0,), (1,), True, 0),  # --allow-overlap
        (None, None, (1,), False, 0),  # unpinned: it could run on the server's CPU
        (0, (0,), (1,), False, 0),  # --realtime 0 opts out
        (5, None, (), False, 5),  # --realtime 5 is kept as given
    ],
)
def test_the_default_priority(
    monkeypatch: pytest.MonkeyPatch,
    requested: int | None,
    gen: tuple[int, ...] | None,
    server: tuple[int, ...],
    overlap: bool,
    expected: int,
) -> None:
    monkeypatch.setattr(scaleout, "may_realtime", lambda: True)
    assert default_realtime(requested, gen, server, allow_overlap=overlap) == expected


def test_without_the_right_it_is_normal_scheduling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scaleout, "may_realtime", lambda: False)
    assert default_realtime(None, (0,), (1,)) == 0


class _PolicySeen(FakeEngine):
    """A fake engine that notes the scheduling policy it ran under."""

    def __init__(self) -> None:
        super().__init__()
        self.policies: list[int] = []

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.policies.append(os.sched_getscheduler(0))
        return super().__call__(*args, **kw)


def _run(realtime: int | None) -> tuple[LiveTarget, list[int]]:
    engine = _PolicySeen()
    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), realtime=realtime, engine=engine)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    target.run(open_loop_trace("/x", 100.0, 0.2), rate_factor=1.0, warmup=0.0, duration=0.2)
    return target, engine.policies


@pytest.mark.skipif(not realtime_allowed(), reason="needs SCHED_FIFO (root)")
def test_a_pinned_generator_runs_sched_fifo_by_default() -> None:
    before = os.sched_getscheduler(0)
    target, policies = _run(None)
    assert policies == [os.SCHED_FIFO]
    assert (target.realtime, target.realtime_by_default) == (AUTO_REALTIME, True)
    assert target.describe()["realtime_by_default"] is True
    assert os.sched_getscheduler(0) == before  # given back after the run


@pytest.mark.skipif(not realtime_allowed(), reason="needs SCHED_FIFO (root)")
def test_realtime_0_opts_out() -> None:
    target, policies = _run(0)
    assert policies == [os.SCHED_OTHER]
    assert (target.realtime, target.realtime_by_default) == (0, False)


def test_the_cli_says_in_one_line_that_the_default_chose_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from types import SimpleNamespace

    from shrink.cli._replay_opts import note_realtime

    note_realtime(SimpleNamespace(realtime_by_default=False, realtime=0, generator_cpus=[0]))
    assert capsys.readouterr().err == ""
    note_realtime(SimpleNamespace(realtime_by_default=True, realtime=10, generator_cpus=[0]))
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "SCHED_FIFO 10 on CPU 0" in err and "--realtime 0" in err


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [({}, None), ({"realtime": None}, None), ({"realtime": 0}, 0), ({"realtime": 10}, 10)],
)
def test_a_predictions_recorded_priority_is_run_again_as_it_was(
    recorded: dict[str, Any], expected: int | None
) -> None:
    from shrink.run_inputs import target_settings

    assert target_settings(recorded).generator.realtime == expected


class _StartsTheRun(FakeEngine):
    """A fake engine that fixes its zero as the real ones do (``on_ready``), noting the
    policy it ran under."""

    def __init__(self) -> None:
        super().__init__()
        self.policies: list[int] = []

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.policies.append(os.sched_getscheduler(0))
        if kw.get("on_ready") is not None:
            kw["t0"] = kw.pop("on_ready")()
        return super().__call__(*args, **kw)


@pytest.mark.skipif(not realtime_allowed(), reason="needs SCHED_FIFO (root)")
def test_the_threads_started_with_the_run_are_not_realtime() -> None:
    # A live run's window sampler and stop watch start in on_start: made under the
    # engine's SCHED_FIFO they held the send thread's CPU at its own priority.
    from shrink.replay import EngineConfig
    from shrink.replay.scaleout import run_engines

    seen: list[int] = []

    def on_start(t0: float) -> None:
        t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        t.start()
        t.join()

    engine = _StartsTheRun()
    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), realtime=10, engine=engine)
    trace = open_loop_trace("/x", 100.0, 0.2)
    cfg = EngineConfig(targets=[("127.0.0.1", 9)])
    run_engines(trace, cfg, rate_factor=1.0, horizon=0.2, generator=placement, on_start=on_start)
    assert engine.policies == [os.SCHED_FIFO]  # the engine itself still is
    assert seen == [os.SCHED_OTHER]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # (and this thread is given back)
