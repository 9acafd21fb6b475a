"""The MAT interval: what moves a measured MAT from one run to the next.

A prediction is checked against a full-scale run taken at another time, so its
interval must be a *prediction interval* for that run, not only a confidence
interval for the mean of the scaled runs. On the log scale (MATs are positive and
their errors relative), the terms are independent and add in variance:

* ``repetition``: the spread of the scaled runs' repetitions carried to the MAT
  (:func:`repetition_sigma`), and as much again for the full run it is checked
  against (which has repetitions of its own);
* ``drift``: how much the machine's speed moves between runs: the spread of the
  CPU seconds a request cost across repetitions of one level (pooled over the
  levels, both sides of paired runs), counted once for each of the two runs;
* ``emulation``: the share's emulation error: how far the share is from the slower
  (or smaller) server SHRiNK assumes. A calibrated model error: 0 on the simulator,
  whose share is exact; on the live testbed :data:`EMULATION_ERROR`.

The interval is ``mat * exp(+-z * sqrt(sum of variances))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shrink.loadcurve import LoadCurve
from shrink.mat import MATResult
from shrink.validate import cpu_seconds_per_request

__all__ = [
    "EMULATION_ERROR",
    "ErrorBudget",
    "drift_sigma",
    "error_budget",
    "interval",
    "interval_dict",
    "repetition_sigma",
]

Z95 = 1.959964
# Relative (log-scale) standard deviation of the live share's emulation error: the
# root mean square of the ten conclusive demo runs' mean-threshold errors recorded in
# bench/RESULTS.md before this design (7.7%; the p99.9 ones were smaller). To be
# recalibrated from this design's runs: ``bench/bench_demo.py --summarize`` prints it.
EMULATION_ERROR = 0.08


@dataclass(frozen=True)
class ErrorBudget:
    """Log-scale standard deviations of the terms (see the module docstring)."""

    repetition: float
    drift: float
    emulation: float

    @property
    def total(self) -> float:
        """The prediction's log-scale standard deviation against a new full-scale run."""
        return math.sqrt(2 * self.repetition**2 + 2 * self.drift**2 + self.emulation**2)

    def to_dict(self) -> dict[str, float]:
        return {
            "repetition": self.repetition,
            "drift": self.drift,
            "emulation": self.emulation,
            "total": self.total,
        }


def repetition_sigma(curve: LoadCurve, res: MATResult) -> float:
    """Log-scale sd of the MAT from the spread of the curve's repetitions.

    The statistic's run-to-run spread (log-scale sd across the kept repetitions of a
    level, pooled over the usable levels) moves the crossing by that much divided by
    the curve's elasticity there (d log statistic / d log throughput between the two
    levels that bracket it; at least 0.5, where the curve is flat and the MAT loose),
    and the MAT rests on the mean of R repetitions. A 95% t-interval from two
    repetitions would be +/-12.7 standard errors: pooling keeps the interval honest.
    """
    ss, dof, reps = 0.0, 0, []
    for lv in curve.usable():
        x = lv.values(res.stat, res.cls)
        x = np.log(x[np.isfinite(x) & (x > 0)])
        if x.size >= 2:
            ss += float(np.sum((x - x.mean()) ** 2))
            dof += x.size - 1
            reps.append(x.size)
    if not dof:
        return 0.0
    by_knob = {lv.level: lv for lv in curve.usable()}
    elasticity = 1.0
    if res.bracket is not None and all(k in by_knob for k in res.bracket):
        a, b = (by_knob[k] for k in res.bracket)
        va, vb = a.stat(res.stat, res.cls)[0], b.stat(res.stat, res.cls)[0]
        if min(va, vb, a.throughput, b.throughput) > 0 and a.throughput != b.throughput:
            elasticity = abs(math.log(vb / va) / math.log(b.throughput / a.throughput))
    return math.sqrt(ss / dof) / max(elasticity, 0.5) / math.sqrt(float(np.median(reps)))


def drift_sigma(curves: Sequence[LoadCurve]) -> float:
    """Pooled spread (log-scale sd) of CPU seconds per request across repetitions of a level.

    A run's speed moves with the machine (a VM's CPU speed drifts within a minute):
    the same level run twice costs a different amount per request. 0 without
    utilization readings or repeated levels.
    """
    ss, dof = 0.0, 0
    for curve in curves:
        for lv in curve.usable():
            costs = [cpu_seconds_per_request(r, curve.share) for r in lv.kept]
            x = np.log([c for c in costs if c])
            if x.size >= 2:
                ss += float(np.sum((x - x.mean()) ** 2))
                dof += x.size - 1
    return math.sqrt(ss / dof) if dof else 0.0


def error_budget(
    curve: LoadCurve, res: MATResult, drift: float, emulation: float
) -> ErrorBudget:
    """The terms for ``res``, a MAT of ``curve``."""
    return ErrorBudget(repetition_sigma(curve, res), drift, emulation)


def interval(mat: float, budget: ErrorBudget, z: float = Z95) -> tuple[float, float]:
    """The prediction interval around ``mat`` (95% for the default ``z``)."""
    w = math.exp(z * budget.total)
    return mat / w, mat * w


def interval_dict(res: MATResult, budget: ErrorBudget) -> dict[str, Any]:
    """The MAT's interval fields for prediction.json: ``ci`` is the prediction interval."""
    lo, hi = interval(res.mat, budget)
    return {
        "ci": [lo, hi],
        "ci_repetitions": list(res.ci),
        "error_budget": budget.to_dict(),
    }
