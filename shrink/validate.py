"""Validation: a predicted load curve against a full-scale measurement.

For each statistic the MAT error is ``(predicted - measured) / measured``. The
latency distributions are compared at matched normalized loads: for every
usable level of the measured curve, the predicted latency quantile function at
the same throughput (interpolated between the two nearest predicted levels) is
compared by the Wasserstein-1 distance, the area between the two quantile
functions, W1 = integral over p of |F^-1(p) - G^-1(p)| dp.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NotRequired

import numpy as np
from pydantic import Field, computed_field, model_serializer

# pydantic reads typing.TypedDict only from Python 3.12 on
from typing_extensions import TypedDict

from shrink import files
from shrink.atomic import make_dirs, write_text
from shrink.errors import MeasurementError
from shrink.jsonout import dumps
from shrink.loadcurve import QGRID, LoadCurve
from shrink.mat import MATResult, mat
from shrink.schemas import MAX_LIST, Count, Loose, Name, NonNeg, Positive
from shrink.selfchecks import QUIET_OTHER_CPU
from shrink.share import Share

__all__ = [
    "Validation",
    "cost_adjusted_errors",
    "cost_ratio",
    "cpu_seconds_per_request",
    "quantiles_at",
    "validate",
    "wasserstein1",
]

_P = np.asarray(QGRID)


def wasserstein1(q_a: np.ndarray, q_b: np.ndarray) -> float:
    """W1 between two distributions given by their quantiles at :data:`QGRID`."""
    diff = np.abs(np.asarray(q_a, float) - np.asarray(q_b, float))
    return float(np.trapezoid(diff, _P))


def quantiles_at(curve: LoadCurve, throughput: float, cls: str | None = None) -> np.ndarray | None:
    """The curve's latency quantile function at ``throughput``, interpolated between levels.

    None when ``throughput`` lies outside the curve's usable levels.
    """
    pts = []
    for lv in curve.usable():
        d = lv.quantile_function(cls)
        if d is not None:
            pts.append((lv.throughput, d))
    pts.sort(key=lambda p: p[0])
    if not pts or throughput < pts[0][0] * 0.98 or throughput > pts[-1][0] * 1.02:
        return None
    xs = np.array([p[0] for p in pts])
    j = int(np.searchsorted(xs, throughput))
    if j <= 0:
        return pts[0][1]
    if j >= len(pts):
        return pts[-1][1]
    (x0, d0), (x1, d1) = pts[j - 1], pts[j]
    f = 0.0 if x1 == x0 else (throughput - x0) / (x1 - x0)
    return (1 - f) * d0 + f * d1


def cpu_seconds_per_request(rep: Any, share: Share) -> float | None:
    """CPU seconds the server spent per completed request in one repetition."""
    if rep.utilization is None or not share.cpus or rep.throughput <= 0:
        return None
    # Utilization is normalized to the share (a 25% share busy all its quota is 1.0).
    return float(rep.utilization) * share.cpu_fraction * len(share.cpus) / float(rep.throughput)


def cost_ratio(
    scaled: LoadCurve, full: LoadCurve, near: list[float], *, within: float = 0.25
) -> dict[str, Any] | None:
    """How much more CPU a request cost on the full target than on the share, paired.

    For paired runs (the same levels, repetition i of each taken back to back), the
    ratio of the two sides' CPU seconds per request, over the repetitions at levels
    whose full-scale throughput lies within ``within`` of a throughput in ``near``
    (the measured MATs). A server that spends x% more per request has a MAT about x%
    lower: on a VM whose speed changes within seconds, this is how much of a
    validation error the machine's speed explains (or a real difference between a
    share and the whole target, e.g. caches another tenant of the share evicts).
    None without paired levels or utilization readings.
    """
    if not near:
        return None
    twins = {lv.level: lv for lv in scaled.usable()}
    ratios, levels = [], []
    for lv in full.usable():
        tw = twins.get(lv.level)
        if tw is None or not any(abs(lv.throughput / x - 1) <= within for x in near if x > 0):
            continue
        for a, b in zip(tw.reps, lv.reps, strict=False):
            if a.generator_behind or b.generator_behind:
                continue
            ca, cb = (
                cpu_seconds_per_request(a, scaled.share),
                cpu_seconds_per_request(b, full.share),
            )
            if ca and cb:
                ratios.append(cb / ca)
                levels.append(lv.level)
    if not ratios:
        return None
    return {
        "median": float(np.median(ratios)),
        "min": float(np.min(ratios)),
        "max": float(np.max(ratios)),
        "pairs": len(ratios),
        "levels": sorted(set(levels)),
    }


def cost_adjusted_errors(mats: Mapping[str, Mapping[str, Any]], ratio: float) -> dict[str, float]:
    """The MAT errors had the full target cost per request what the share did.

    Each measured MAT is multiplied by ``ratio`` (full / share CPU per request, from
    :func:`cost_ratio`). A rough figure: near the knee latency grows with the cost as
    well, so a slower machine loses more MAT than its cost ratio.
    """
    return {
        s: float(m["predicted"]) / (float(m["measured"]) * ratio) - 1
        for s, m in mats.items()
        if m.get("measured") and m.get("predicted") is not None
    }


class MatCheck(TypedDict):
    """A statistic's MAT, predicted and measured (:func:`validate`)."""

    threshold: Positive
    predicted: Loose | None
    predicted_ci: list[Loose | None]
    predicted_status: Name
    predicted_bound: Name | None
    measured: Loose | None
    measured_ci: list[Loose | None]
    measured_status: Name
    measured_bound: Name | None
    # (predicted - measured) / measured; NaN (null) without a measured MAT
    error: Loose | None
    # The predicted interval held the measured MAT; None where either is a bound.
    covered: bool | None
    # Hints where a MAT was left open over stalled levels (never a MAT themselves).
    predicted_stalled_ceiling: NotRequired[NonNeg]
    measured_stalled_ceiling: NotRequired[NonNeg]


class Distance(TypedDict):
    """The latency distributions compared at one measured level (:func:`validate`)."""

    throughput: Loose | None
    utilization: Loose | None
    w1: Loose | None
    w1_relative_to_mean: Loose | None
    measured_mean: Loose | None
    predicted_mean: Loose | None


class CostRatio(TypedDict):
    """Full-scale over scaled CPU per request (:func:`cost_ratio`)."""

    median: Loose
    min: Loose
    max: Loose
    pairs: Count
    levels: Annotated[list[Loose], Field(max_length=MAX_LIST)]
    # The MAT errors had the full target cost per request what the share did.
    adjusted_error: NotRequired[dict[Name, Loose | None]]


@dataclass
class Validation(files.VersionedFile):
    """A prediction checked against a full-scale run: ``validation.json``.

    Written beside the fields: ``mat_error_<stat>`` (each statistic's error), and
    ``conclusive``, ``covered`` and ``wasserstein_median`` (computed from them).
    """

    mats: Annotated[dict[Name, MatCheck], Field(max_length=1_000)]
    wasserstein: Annotated[list[Distance], Field(max_length=MAX_LIST)] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # Full-scale over scaled CPU per request, paired runs only (see cost_ratio).
    cost_ratio: Annotated[CostRatio | None, Field(exclude_if=files.is_none)] = None
    # The most CPU anything but the server took on the full target's CPUs in a kept
    # repetition of a usable level, steal included (None: not measured).
    full_other_cpu: Annotated[NonNeg | None, Field(exclude_if=files.is_none)] = None

    SCHEMA = "shrink.checks/1"
    WHAT = "validation"

    @property
    def mat_error(self) -> dict[str, float]:
        return {s: v["error"] for s, v in self.mats.items()}  # type: ignore[misc]

    # An error between two crossings that were both found; a MAT that is only a
    # bound ("not reached", "below range") makes the error a bound or meaningless.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def full_quiet(self) -> bool:
        """Whether the full-scale run measured the server alone: other work and steal on
        its CPUs stayed within the share's own self-check (QUIET_OTHER_CPU)."""
        return self.full_other_cpu is None or self.full_other_cpu <= QUIET_OTHER_CPU

    @computed_field  # type: ignore[prop-decorator]
    @property
    def conclusive(self) -> dict[str, bool]:
        """Per statistic: both MATs are crossings found (status ok), not bounds, and the
        full-scale run was quiet (a MAT measured beside other work is not the server's)."""
        return {
            s: v.get("predicted_status") == "ok"
            and v.get("measured_status") == "ok"
            and self.full_quiet
            for s, v in self.mats.items()
        }

    @computed_field  # type: ignore[prop-decorator]
    @property
    def covered(self) -> dict[str, bool | None]:
        """Per statistic: the predicted MAT's interval held the measured MAT (None: a bound)."""
        return {s: v.get("covered") for s, v in self.mats.items()}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def wasserstein_median(self) -> float | None:
        """The median W1 over the levels compared; None without one."""
        # (a file read back holds a NaN as null)
        w = [x["w1"] for x in self.wasserstein if x["w1"] is not None]
        return float(np.median(w)) if w else None

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        errors = {f"mat_error_{stat}": err for stat, err in self.mat_error.items()}
        return {**handler(self), **errors}

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        make_dirs(path.parent)
        write_text(path, dumps(self.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return path

    @classmethod
    def read_json(cls, path: str | Path) -> Validation:
        """Read a ``validation.json``, checked against its type."""
        return cls.from_dict(files.read_json(path, what=cls.WHAT), source=path)


def validate(
    predicted: LoadCurve,
    measured: LoadCurve,
    thresholds: Mapping[str, float],
    *,
    predicted_mats: Mapping[str, MATResult] | None = None,
) -> Validation:
    """Compare ``predicted`` (a full-machine curve) with ``measured`` (a full-scale run)."""
    if not measured.usable():
        raise MeasurementError("the full-scale run has no usable level to validate against")
    mats: dict[str, Any] = {}
    for stat, limit in thresholds.items():
        p = predicted_mats[stat] if predicted_mats and stat in predicted_mats else None
        p = p or mat(predicted, stat, limit)
        m = mat(measured, stat, limit)
        mats[stat] = {
            "threshold": limit,
            "predicted": p.mat,
            "predicted_ci": list(p.ci),
            "predicted_status": p.status,
            "predicted_bound": p.bound,
            "measured": m.mat,
            "measured_ci": list(m.ci),
            "measured_status": m.status,
            "measured_bound": m.bound,
            "error": (p.mat - m.mat) / m.mat if m.mat else float("nan"),
        }
        # Did the prediction's interval cover the measured MAT? Only where both MATs are
        # crossings: a bound is not a measurement to cover; nor is [x, x] an interval
        # (one repetition a level: no spread, as mat says 'CI none'; it was "missed").
        conclusive = p.status == "ok" and m.status == "ok" and p.ci[0] != p.ci[1]
        mats[stat]["covered"] = bool(p.ci[0] <= m.mat <= p.ci[1]) if conclusive else None
        # Hints where a MAT was left open over stalled levels (never a MAT themselves).
        for side, res in (("predicted", p), ("measured", m)):
            if res.stalled_ceiling is not None:
                mats[stat][f"{side}_stalled_ceiling"] = res.stalled_ceiling
    rows = []
    for lv in measured.usable():
        q_meas = lv.quantile_function()
        q_pred = quantiles_at(predicted, lv.throughput)
        if q_meas is None or q_pred is None:
            continue
        w1 = wasserstein1(q_pred, q_meas)
        mean = float(lv.stat("mean")[0])
        rows.append(
            {
                "throughput": lv.throughput,
                "utilization": lv.utilization if lv.utilization is not None else float("nan"),
                "w1": w1,
                "w1_relative_to_mean": w1 / mean if mean > 0 else float("nan"),
                "measured_mean": mean,
                "predicted_mean": float(np.trapezoid(q_pred, _P)),
            }
        )
    return Validation(mats=mats, wasserstein=rows, full_other_cpu=_other_cpu(measured))


def _other_cpu(curve: LoadCurve) -> float | None:
    """The most CPU other work and steal took on the curve's CPUs in a kept repetition of
    a usable level (None where neither was measured). A generator placed on those CPUs
    (``--allow-overlap``) is the run's own: its CPU is not other work."""
    from shrink.topology import recorded_cpus

    gen = set(recorded_cpus(curve.sweep.target.get("generator_cpus")))
    overlap = bool(gen & set(curve.share.cpus))
    seen = [
        max(0.0, (r.other_cpu or 0.0) - (r.generator_cpu or 0.0 if overlap else 0.0))
        + (r.steal or 0.0)
        for lv in curve.usable()
        for r in lv.kept
        if r.other_cpu is not None or r.steal is not None
    ]
    return max(seen) if seen else None
