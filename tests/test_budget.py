"""The time budget bounds the wall time: no repetition starts that would end past it
(``predict --budget 1m`` ran two 40 s repetitions of the probe, and a warm run, first)."""

from __future__ import annotations

import numpy as np
import pytest

from shrink.autolevels import AutoPlan, auto_sweep
from shrink.errors import ParameterError
from shrink.target import FakeTarget
from shrink.trace import Trace


def _trace(rate: float = 50.0, duration: float = 400.0) -> Trace:
    t = np.arange(int(rate * duration)) / rate
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/f"] * t.size}, meta={"mode": "open"}
    )


class _Clocked(FakeTarget):
    """A fake target that advances a fake clock by each run's warm-up and window."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(demand={"static": 0.001})
        self.clock = clock

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        self.clock[0] += warmup + duration
        return super().run(trace, rate_factor=rate_factor, warmup=warmup, duration=duration,
                           seed=seed)  # fmt: skip


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("shrink.autolevels._clock.time.monotonic", lambda: now[0])
    return now


@pytest.mark.parametrize("budget", [60.0, 100.0, 200.0])
def test_no_repetition_ends_past_the_budget(clock, budget):
    plan = AutoPlan(warmup=10, duration=30, reps=2, budget_s=budget, loop_window=0, max_levels=8)
    target = _Clocked(clock)
    auto_sweep(target, _trace(), {"mean": 0.005}, plan=plan)
    assert 0 < clock[0] <= budget


def test_a_budget_that_holds_no_repetition_is_refused_before_measuring(clock):
    plan = AutoPlan(warmup=10, duration=30, reps=2, budget_s=30, loop_window=0)
    target = _Clocked(clock)
    with pytest.raises(ParameterError, match="budget of 30 s cannot hold one repetition"):
        auto_sweep(target, _trace(), {"mean": 0.005}, plan=plan)
    assert clock[0] == 0
