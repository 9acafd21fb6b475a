"""SHRiNK scaling for the models: the one transform, plus a measured CFS correction.

The transform itself, with the alpha/share check, is :mod:`shrink.scaling`
(``cores``: R_full(X) = R_share(alpha X); ``cpu_time``: R_full(X) = s R_share(s X)
with s the share's measured, else nominal, speed). This module gives it the
estimator conventions of :mod:`extrapolate` and adds a correction.

CFS bandwidth control is not an ideal slower server: with a quota period of a
few ms a 50 % share measured 1.82 ms where the ideal is 1.45 ms (20-25 % more).
:class:`CfsCorrection` is a *measured* correction, not a law: fitted from one
pair of runs (the same sample on a cpu_time share and on the whole of those
cores), it is the median ratio of the ideal-scaled share latency to the full
latency at matched normalized throughput; applying it divides the scaled
latencies by that factor. It is only valid for the quota and period it was
measured with; the fitted object records them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from extrapolate._estimator import check_is_fitted
from shrink.errors import ExtrapolationError
from shrink.loadcurve import STATS, LoadCurve
from shrink.mat import MATResult, mat
from shrink.scaling import share_fraction, shrink_scaled_curve

__all__ = ["CfsCorrection", "mat_full", "scale_to_full", "share_fraction"]

_LAT_FIELDS = STATS  # mean, p50, p90, p99, p999


def _scale_latencies(curve: LoadCurve, factor: float) -> None:
    for lv in curve.levels:
        for rep in lv.reps:
            for cs in [rep.overall, *rep.per_class.values()]:
                for f in _LAT_FIELDS:
                    setattr(cs, f, getattr(cs, f) * factor)
                if cs.dist is not None:
                    cs.dist = [v * factor for v in cs.dist]


def scale_to_full(curve: LoadCurve, correction: CfsCorrection | None = None) -> LoadCurve:
    """The whole machine's curve predicted from ``curve`` by SHRiNK scaling.

    The transform is :func:`shrink.scaling.shrink_scaled_curve` (which checks alpha
    against the share); for a ``cpu_time`` share this adds the measured CFS
    correction (latencies divided by ``correction.factor_``).
    """
    if correction is not None and curve.share.kind != "cpu_time":
        raise ExtrapolationError("a CFS correction applies only to a cpu_time share")
    out = shrink_scaled_curve(curve)
    if correction is not None:
        check_is_fitted(correction, "factor_")
        _scale_latencies(out, 1.0 / correction.factor_)
    return out


def mat_full(
    curve: LoadCurve,
    stat: str,
    threshold: float,
    *,
    cls: str | None = None,
    correction: CfsCorrection | None = None,
) -> MATResult:
    """The whole machine's MAT for ``stat`` under ``threshold`` seconds.

    ``cores``: MAT_share(T) / alpha. ``cpu_time``: MAT_share(T / s) / s (computed
    as the MAT of the scaled curve, which is the same thing).
    """
    return mat(scale_to_full(curve, correction), stat, threshold, cls=cls)


class CfsCorrection(BaseEstimator):
    """Measured CFS-quota overhead: how much slower a quota share is than an ideal slower server.

    Parameters
    ----------
    stat : the latency statistic the factor is fitted on (mean by default).
    """

    def __init__(self, stat: str = "mean") -> None:
        self.stat = stat

    def fit(self, share_curve: LoadCurve, full_curve: LoadCurve) -> CfsCorrection:
        """``share_curve``: a cpu_time share; ``full_curve``: the same cores unrestricted."""
        if share_curve.share.kind != "cpu_time":
            raise ExtrapolationError("CfsCorrection.fit needs a cpu_time share curve first")
        ideal = scale_to_full(share_curve)
        a = ideal.series(self.stat)
        b = full_curve.normalized().series(self.stat)
        if a["throughput"].size < 1 or b["throughput"].size < 2:
            raise ExtrapolationError("CfsCorrection.fit needs >= 1 share and >= 2 full levels")
        order = np.argsort(b["throughput"])
        bx, by = b["throughput"][order], b["value"][order]
        inside = (a["throughput"] >= bx[0]) & (a["throughput"] <= bx[-1])
        if not inside.any():
            raise ExtrapolationError(
                "the share and full runs have no normalized throughput in common"
            )
        full_at = np.interp(a["throughput"][inside], bx, by)
        ratios = a["value"][inside] / full_at
        self.factor_ = float(np.median(ratios))
        self.ratios_ = ratios
        self.share_ = share_curve.share.to_dict()
        return self

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self, "factor_")
        return {"stat": self.stat, "factor": self.factor_, "share": self.share_}
