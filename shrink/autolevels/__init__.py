"""Choosing load levels automatically around the knee.

A quick probe at a light load measures throughput and utilization of the share,
which estimates the capacity (throughput / utilization). Levels are then placed
densely where the thresholds are crossed (60-105% of that capacity), a coarse
pass confirms where each statistic crosses its threshold, and a refinement pass
adds levels inside each crossing's bracket until the MAT interval is narrow or the
level budget is spent. Without a utilization reading, a geometric pass finds the
knee instead.

A *companion* (the full target with the full trace, for a validation) can be
measured alongside: every repetition of every level then runs on both, back to
back, in alternating order (scaled first, then full first, ...). Two runs minutes
apart on a machine whose speed drifts differ by that drift; two runs seconds apart,
in counterbalanced order, see nearly the same machine. The companion only follows:
it chooses no level of the scaled sweep. Its own search (``auto_sweep(...,
pairing=Pairing(start=companion.levels))``) then brackets its crossings.

Which level comes next is the knee search's decision (:mod:`shrink.knee`); this
package measures. Its parts: ``_plan`` (:class:`AutoPlan`, :class:`SweepScaling`,
:class:`Companion`, the loop window), ``_clock`` (the time budget), ``_level`` (one
level's repetitions, paired, and whether one more is worth it), ``_sweep`` (the
steps) and ``_curve`` (the curves handed back).
"""

from __future__ import annotations

import typing as _typing

from shrink.autolevels import _level
from shrink.autolevels._clock import check_budget
from shrink.autolevels._curve import companion_curve
from shrink.autolevels._plan import (
    AutoPlan,
    Companion,
    Pairing,
    SweepScaling,
    least_scaled_time,
    sample_ratio,
    sweep_scaling,
)
from shrink.autolevels._sweep import Progress, auto_sweep, last_level
from shrink.knee import above as _knee_above
from shrink.measure import SweepInterrupted

if _typing.TYPE_CHECKING:
    from collections.abc import Mapping

    from shrink.loadcurve import Level, LoadCurve

__all__ = [
    "AutoPlan",
    "Companion",
    "Pairing",
    "Progress",
    "SweepInterrupted",
    "SweepScaling",
    "auto_sweep",
    "check_budget",
    "companion_curve",
    "last_level",
    "least_scaled_time",
    "sample_ratio",
    "sweep_scaling",
]


# One level's steps, by the private names the tests and benchmarks know.
_run_level = _level.run_level
_surely_over = _level.surely_over


def _above(
    levels: dict[float, Level], curve: LoadCurve, thresholds: Mapping[str, float]
) -> float | None:
    """:func:`shrink.knee.above` (``levels`` are ``curve``'s, by knob value)."""
    return _knee_above(curve, thresholds)
