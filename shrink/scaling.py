"""The SHRiNK transform: from a curve measured on a share to the full target.

A curve measured with a sample fraction alpha of the sessions on a share of
fraction alpha of the full target (:class:`shrink.share.Share`; SHRiNK needs the
two equal, and :func:`share_fraction` checks it) predicts the full target:

* share of the **cores** (fewer servers, SHRiNK's scaling by servers): the same
  response times at normalized throughput, R_full(X) = R_share(alpha X), so
  MAT_full(T) = MAT_share(T) / alpha;
* share of the **CPU time** (a slower server): a processor-sharing server at
  speed s with the load scaled to match has the same utilization and response
  times 1/s longer, so R_full(X) = s R_share(s X) and
  MAT_full(T) = MAT_share(T / s) / s (../shared/DESIGN.md, "Measured on this
  machine"). s is the share's *measured* effective speed
  (:attr:`shrink.share.Share.speed_factor`) where it was measured, else its
  nominal CPU-time fraction: a time-sliced core costs more CPU per request than a
  whole one, by an amount that depends on the request class, so the nominal
  alpha over-states the share's speed. Per-class latencies are scaled by their
  class's measured speed where there is one.

Latency quantile functions (``dist``) and the generator's send lags are scaled
the same way, so CDFs and Wasserstein distances of the prediction can be compared
with a full run.

**Each repetition at its own speed.** Where the full target's capacity was measured
busy (:mod:`shrink.busyspeed`), each repetition of a CPU-time share is scaled by
the speed it delivered itself, s_r = (X_r / U_r) / C_full: its throughput over its
utilization, over the full target's capacity C_full, within REP_SPEED_RANGE of s and
at most 1. Not by the sweep's one s: a 25% CFS quota on this project's VM is bistable
near its knee (two repetitions of one level served 528 and 391 req/s, both
saturated). Scaled by one s, the faster repetition moved the share's MAT 17% above
its median capacity; scaled by its own, each lands where the full target would be at
the same utilization.

C_full is the median of every busy check of the full target over the sweep, not the
one check right after the repetition's level. A check is 3 s of the full target at
about 60% busy, and one such window is noisier than the drift it was meant to
follow. Four fresh demo runs (2026-11-25) make the case. There, the check after a
level read -32% to +97% (RMS 24%) of the capacity the full target's own repetitions
of that level showed, and the median RMS 21%. Against the median, the predicted
MATs' root-mean-square error fell from 19% to 16% (mean) and from 24% to 18%
(p99.9). The checks still count: they make the median, and their spread is the
report's host-steadiness self-check (shrink.busyspeed.host_drift).
"""

from __future__ import annotations

from shrink.errors import ExtrapolationError
from shrink.loadcurve import ClassStats, LevelStats, LoadCurve
from shrink.share import Share

__all__ = [
    "latency_scale",
    "rep_speed",
    "share_fraction",
    "shrink_scaled_curve",
    "throughput_scale",
]

# How far a repetition's own speed may stray from the sweep's (a factor either way):
# the demo's share ran at 0.84-1.78 times its knee median, light levels the fastest;
# a reading outside this is a broken utilization, not a speed.
REP_SPEED_RANGE = 2.0


def share_fraction(curve: LoadCurve) -> float:
    """The curve's alpha, checked against its share's fraction (within 1 %).

    SHRiNK needs the sampled fraction of the load on the same fraction of the
    full target; a share of ``all`` (the full target itself) takes any alpha.
    """
    alpha = curve.alpha
    if not 0 < alpha <= 1:
        raise ExtrapolationError(f"curve alpha == {alpha}, must be in (0, 1]")
    share = curve.share
    if share.kind != "all" and abs(share.fraction - alpha) > 0.01 * alpha:
        raise ExtrapolationError(
            f"sample alpha == {alpha:g} but the share's fraction is {share.fraction:g}: SHRiNK "
            "scaling needs the sampled fraction of the load on the same fraction of the "
            "full target"
        )
    return alpha


def latency_scale(curve: LoadCurve) -> float:
    """Factor from the share's latencies to the full target's: s for a CPU-time share, else 1."""
    return curve.share.speed_factor


def throughput_scale(curve: LoadCurve) -> float:
    """Factor from the share's throughputs to the full target's: 1/s (CPU time) or 1/alpha."""
    if curve.share.kind == "cpu_time":
        return 1.0 / curve.share.speed_factor
    return 1.0 / curve.alpha


def rep_speed(r: LevelStats, share: Share) -> float:
    """The speed repetition ``r`` of a CPU-time share delivered (see the module
    docstring): against the full target's capacity measured busy (the checks'
    median); the share's speed factor where it cannot be told."""
    s = share.speed_factor
    sp = share.speed
    if (
        share.kind != "cpu_time"
        or sp is None
        or not sp.measured_busy
        or r.utilization is None
        or r.utilization <= 0
        or r.throughput <= 0
    ):
        return s
    own = r.throughput / r.utilization / (sp.full_capacity or 1.0)
    return min(1.0, s * REP_SPEED_RANGE, max(s / REP_SPEED_RANGE, own))


def _scale_class(c: ClassStats, thr: float, lat: float) -> None:
    c.throughput *= thr
    for name in ("mean", "p50", "p90", "p99", "p999"):
        setattr(c, name, getattr(c, name) * lat)
    if c.dist:
        c.dist = [v * lat for v in c.dist]


def shrink_scaled_curve(curve: LoadCurve) -> LoadCurve:
    """The full target's predicted curve from a scaled one (see the module docstring)."""
    alpha = share_fraction(curve)
    thr = throughput_scale(curve)
    lat = latency_scale(curve)
    share = curve.share
    out = LoadCurve.from_dict(curve.to_dict())
    speeds = []
    for lv in out.levels:
        for r in lv.reps:
            # rep_speed is the share's speed factor (lat) unless a CPU-time repetition's
            # own can be told: 1/own and own on a CPU-time share, thr and 1 on a core one.
            own = rep_speed(r, share)
            speeds.append(own)
            r_thr, r_lat = thr * lat / own, own
            r.throughput *= r_thr
            r.offered *= r_thr
            _scale_class(r.overall, r_thr, r_lat)
            for name, c in r.per_class.items():
                _scale_class(c, r_thr, share.class_speed(name) * own / lat)
            # The generator's lags bound latencies (Level.stall_bound): they move with them.
            if r.send_lag_p99 is not None:
                r.send_lag_p99 *= r_lat
            if r.send_lag_max is not None:
                r.send_lag_max *= r_lat
    out.alpha = 1.0
    out.share = Share("all", (), 1.0, predicted_from=share)
    out.meta = {
        **curve.meta,
        "shrink_scaled": {
            "alpha": alpha,
            "latency_scale": lat,
            "throughput_scale": thr,
            # Each repetition's own speed (rep_speed): the range, when they differ.
            "rep_speeds": [min(speeds), max(speeds)] if speeds else None,
            "speed": share.speed.to_dict() if share.speed is not None else None,
        },
    }
    return out
