"""SHRiNK scaling of a measured load curve to the full target.

A curve measured with a sample fraction alpha of the sessions on a share alpha of
the server predicts the full server:

* share of the **cores** (fewer servers, SHRiNK's scaling by servers): the same
  response times at normalized throughput X / alpha;
* share of the **CPU time** (a slower server): a processor-sharing server at
  alpha of the speed with alpha of the load has the same utilization and
  response times 1/alpha longer, so R_full(X) = alpha * R_share(alpha * X)
  (../shared/DESIGN.md, "Measured on this machine").

Latency quantile functions (``dist``) are scaled the same way, so CDFs and
Wasserstein distances of the prediction can be compared with a full run.
"""

from __future__ import annotations

from shrink.errors import ExtrapolationError
from shrink.loadcurve import ClassStats, LoadCurve

__all__ = ["latency_scale", "shrink_scaled_curve"]


def latency_scale(curve: LoadCurve) -> float:
    """Factor from the share's latencies to the full target's (alpha for a CPU-time share)."""
    share = curve.share or {}
    if share.get("kind") == "cpu_time":
        # The speed of each CPU: ``cpu_fraction`` (testbed shares), else ``fraction``.
        return float(share.get("cpu_fraction", share.get("fraction", curve.alpha)))
    return 1.0


def _scale_class(c: ClassStats, thr: float, lat: float) -> None:
    c.throughput *= thr
    for name in ("mean", "p50", "p90", "p99", "p999"):
        setattr(c, name, getattr(c, name) * lat)
    if c.dist:
        c.dist = [v * lat for v in c.dist]


def shrink_scaled_curve(curve: LoadCurve) -> LoadCurve:
    """The full target's predicted curve from a scaled one (see the module docstring)."""
    alpha = curve.alpha
    if not 0 < alpha <= 1:
        raise ExtrapolationError(f"curve alpha == {alpha}, must be in (0, 1]")
    thr = 1.0 / alpha
    lat = latency_scale(curve)
    out = LoadCurve.from_dict(curve.to_dict())
    for lv in out.levels:
        for r in lv.reps:
            r.throughput *= thr
            r.offered *= thr
            _scale_class(r.overall, thr, lat)
            for c in r.per_class.values():
                _scale_class(c, thr, lat)
            # The generator's lags bound latencies (Level.stall_bound): they move with them.
            if r.send_lag_p99 is not None:
                r.send_lag_p99 *= lat
            if r.send_lag_max is not None:
                r.send_lag_max *= lat
    out.alpha = 1.0
    out.share = {"kind": "all", "fraction": 1.0, "predicted_from": curve.share}
    out.meta = {**curve.meta, "shrink_scaled": {"alpha": alpha, "latency_scale": lat}}
    return out
