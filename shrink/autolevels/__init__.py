"""Choosing load levels automatically around the knee.

A quick probe at a light load measures throughput and utilization of the share,
which estimates the capacity (throughput / utilization). Levels are then placed
densely where the thresholds are crossed (60-105% of that capacity), a coarse
pass confirms where each statistic crosses its threshold, and a refinement pass
adds levels inside each crossing's bracket until the MAT interval is narrow or the
level budget is spent. Without a utilization reading, a geometric pass finds the
knee instead.

A *companion* (the full target with the full trace) can be measured alongside:
every repetition of every level then runs on both, back to back, in alternating
order (scaled first, then full first, ...). Two runs minutes apart on a machine
whose speed drifts (a VM whose CPU speed moves by 1.8x within a minute) differ by
that drift; two runs seconds apart, in counterbalanced order, see nearly the same
machine. Refinement then splits the brackets of both curves' crossings.
"""

from __future__ import annotations

from collections.abc import Mapping

from shrink.autolevels._curve import companion_curve
from shrink.autolevels._level import run_level, surely_over
from shrink.autolevels._plan import AutoPlan, Companion
from shrink.autolevels._sweep import Progress, auto_sweep, last_level
from shrink.knee import above
from shrink.loadcurve import Level, LoadCurve
from shrink.measure import SweepInterrupted

__all__ = [
    "AutoPlan",
    "Companion",
    "Progress",
    "SweepInterrupted",
    "auto_sweep",
    "companion_curve",
    "last_level",
]

# Steps that tests and benchmarks reach for by their private names.
_run_level = run_level
_surely_over = surely_over


def _above(
    levels: dict[float, Level], curve: LoadCurve, thresholds: Mapping[str, float]
) -> float | None:
    """:func:`shrink.knee.above` (``levels`` are ``curve``'s, by knob value)."""
    return above(curve, thresholds)
