"""The time budget of an automatic sweep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from shrink.autolevels._plan import AutoPlan
from shrink.errors import OptionError

_T = TypeVar("_T")


class Clock:
    """What a sweep has spent of ``plan.budget_s``, and whether the next runs fit.

    Each repetition is charged the larger of its wall time and its planned seconds
    (warm-up and window, on both sides of a pair), so the budget holds on a slow
    machine and is deterministic against targets that take no time (fakes, tests).
    A level is started only if its repetitions, at the mean cost of a repetition so
    far (start-up and teardown included), end within the budget.
    """

    def __init__(self, plan: AutoPlan, paired: bool, scaled_time: float = 1.0) -> None:
        self.budget = plan.budget_s
        self.planned = least_budget(plan, paired, scaled_time)
        self.spent = 0.0
        self.reps = 0
        self.per_rep = self.planned

    def fits(self, reps: int) -> bool:
        return self.budget is None or self.spent + reps * self.per_rep <= self.budget

    def levels_that_fit(self, reps: int) -> float:
        """How many more levels of ``reps`` repetitions end within the budget (inf
        without one)."""
        if self.budget is None:
            return float("inf")
        return max(0, (self.budget - self.spent) // (reps * self.per_rep))

    def reps_that_fit(self, reps: int) -> int:
        """How many of ``reps`` repetitions end within the budget (0 to ``reps``)."""
        while reps > 0 and not self.fits(reps):
            reps -= 1
        return reps

    def timed(self, reps: int, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        t0 = time.monotonic()
        out = fn(*args, **kwargs)
        took = time.monotonic() - t0
        self.spent += took
        if out is not None:  # None: the trace was too short, nothing ran
            self.spent += max(0.0, reps * self.planned - took)
            self.reps += reps
            self.per_rep = max(self.planned, self.spent / self.reps)
        return out


def least_budget(plan: AutoPlan, paired: bool, scaled_time: float = 1.0) -> float:
    """The seconds one repetition of one level is charged at least: its warm-up and
    window, ``scaled_time`` times as long on a share in slow motion, and once more
    for its paired full-scale twin."""
    side = plan.warmup + plan.duration
    return side * scaled_time + (side if paired else 0.0)


def check_budget(plan: AutoPlan, paired: bool, scaled_time: float = 1.0) -> None:
    """Refuse, before anything starts, a time budget that cannot hold one repetition of
    one level (the sweep found it only after the servers were up and the sample drawn)."""
    least = least_budget(plan, paired, scaled_time)
    if plan.budget_s is None or plan.budget_s >= least:
        return
    why = f"{plan.warmup:g} s warm-up + {plan.duration:g} s window"
    if scaled_time != 1.0:
        why = f"({why}) x {scaled_time:g} in slow motion on the CPU-time share"
    if paired:
        why += f", + {plan.warmup + plan.duration:g} s for its paired full-scale run"
    raise OptionError(
        "--budget",
        f"{plan.budget_s:g} s cannot hold one repetition of one level: the least that could "
        f"is {least:g} s ({why}); allow that much or shorten --warmup and --duration",
    )
