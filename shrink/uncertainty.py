"""The MAT interval: what moves a measured MAT from one run to the next.

A prediction is checked against a full-scale run taken at another time, so its
interval must be a *prediction interval* for that run, not only a confidence
interval for the mean of the scaled runs. On the log scale (MATs are positive and
their errors relative), the terms are independent and add in variance:

* ``repetition``: the spread of the scaled runs' repetitions carried to the MAT
  (:func:`repetition_sigma`), and as much again for the full run it is checked
  against (which has repetitions of its own);
* ``drift``: how much the machine's speed moves between runs: the spread of the
  CPU seconds a request cost across the scaled runs' repetitions of one level
  (pooled over the levels), counted once for each of the two runs;
* ``speed``: the share's measured speed's own sampling error (the probe's
  ``ShareSpeed.sigma``), counted once: every scaled MAT is divided by that one speed;
* ``emulation``: the share model's error: how far the share is from the slower
  (or smaller) server SHRiNK assumes. 0 on the simulator, whose share is exact; on
  the live testbed fitted on a corpus of configurations leaving one out
  (:func:`shrink.scaling.model_error`).

The interval is ``mat * exp(+-q * sqrt(sum of variances))``, where ``q`` is Student's
t quantile for the total's effective degrees of freedom (Welch-Satterthwaite, as the
GUM combines variances of different dof): the repetitions' and drift's spread was
pooled over a few repetitions, the model error over the corpus's runs, and the
speed's sampling error counts thousands of requests and is taken as known. A term
estimated from few runs widens the interval only as much as it weighs in the total:
a t quantile of the repetitions' dof applied to a total the speed dominates would
widen the speed's term by its dof too (2.78 instead of 1.96 with 4 dof).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from shrink.loadcurve import LoadCurve
from shrink.mat import MATResult
from shrink.validate import cpu_seconds_per_request

__all__ = [
    "ErrorBudget",
    "drift_sigma",
    "error_budget",
    "interval",
    "interval_dict",
    "repetition_sigma",
]

Z95 = 1.959964


@dataclass(frozen=True)
class ErrorBudget:
    """Log-scale standard deviations of the terms (see the module docstring)."""

    repetition: float
    drift: float
    emulation: float
    speed: float = 0.0
    dof: int | None = None  # of the pooled repetition spread; None: taken as known
    emulation_dof: int | None = None  # of the model error's fit; None: taken as known

    @property
    def total(self) -> float:
        """The prediction's log-scale standard deviation against a new full-scale run."""
        return math.sqrt(
            2 * self.repetition**2 + 2 * self.drift**2 + self.emulation**2 + self.speed**2
        )

    @property
    def effective_dof(self) -> float | None:
        """The total variance's degrees of freedom by Welch-Satterthwaite: its square
        over the sum of each estimated term's square over its dof (None: every term
        weighing in it is taken as known)."""
        terms = (
            (2 * self.repetition**2 + 2 * self.drift**2, self.dof),
            (self.emulation**2, self.emulation_dof),
        )
        denom = sum(v * v / d for v, d in terms if d and v > 0)
        return self.total**4 / denom if denom > 0 else None

    @property
    def quantile(self) -> float:
        """The two-sided 95% multiplier: Student's t for :attr:`effective_dof`, else the
        normal's."""
        dof = self.effective_dof
        return float(student_t.ppf(0.975, dof)) if dof else Z95

    def to_dict(self) -> dict[str, float]:
        """The terms, the dofs (0: taken as known), the effective dof and ``total``."""
        return asdict(self) | {
            "dof": float(self.dof or 0),
            "emulation_dof": float(self.emulation_dof or 0),
            "effective_dof": float(self.effective_dof or 0),
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
    ss, dof, reps = _pooled(curve, res)
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


def _pooled(curve: LoadCurve, res: MATResult) -> tuple[float, int, list[int]]:
    """Sum of squares of the log statistic about each level's mean, its dof, the reps."""
    ss, dof, reps = 0.0, 0, []
    for lv in curve.usable():
        x = lv.values(res.stat, res.cls)
        x = np.log(x[np.isfinite(x) & (x > 0)])
        if x.size >= 2:
            ss += float(np.sum((x - x.mean()) ** 2))
            dof += x.size - 1
            reps.append(x.size)
    return ss, dof, reps


def repetition_dof(curve: LoadCurve, res: MATResult) -> int:
    """Degrees of freedom of :func:`repetition_sigma`'s pooled spread."""
    return _pooled(curve, res)[1]


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
    curve: LoadCurve, res: MATResult, drift: float, emulation: float, speed: float = 0.0,
    emulation_dof: int | None = None,
) -> ErrorBudget:  # fmt: skip
    """The terms for ``res``, a MAT of ``curve``."""
    dof = repetition_dof(curve, res)
    return ErrorBudget(
        repetition_sigma(curve, res), drift, emulation, speed, dof or None, emulation_dof
    )


def interval(mat: float, budget: ErrorBudget, z: float | None = None) -> tuple[float, float]:
    """The 95% prediction interval around ``mat`` (``z`` overrides the quantile)."""
    w = math.exp((budget.quantile if z is None else z) * budget.total)
    return mat / w, mat * w


def interval_dict(res: MATResult, budget: ErrorBudget) -> dict[str, Any]:
    """The MAT's interval fields for prediction.json: ``ci`` is the prediction interval."""
    lo, hi = interval(res.mat, budget)
    return {
        "ci": [lo, hi],
        "ci_repetitions": list(res.ci),
        "error_budget": budget.to_dict(),
    }
