"""From a measured share's LoadCurve to the full machine under a mapping: data-shaped.

The tail comes from data. The measured curve, SHRiNK-scaled
(:func:`extrapolate.shrink_scaling.scale_to_full`), gives mean and p99.9 against
normalized throughput for cores that see one socket. Processor sharing makes
every response R = D f(rho): the shape f(rho) is the server's, the demand D the
configuration's. So for the full machine under a mapping we keep the measured
shape and re-map:

* utilization axis: the full machine's per-core demand is k = D_full / D_share
  times the share's (k from the calibrated cross-socket model, with the class
  mix and the dynamic/static demand ratio taken from the measured per-class
  curves), so the same per-core utilization is reached at throughput
  X_full = X_norm (N_full / N_share) / k;
* latency axis: the mean scales by k (exact for PS: R = D/(1-rho)); per class by
  its own ratio; quantiles by the model's ratio of the full machine's to the
  share's p99.9 at that utilization (fixed latency and NIC-queue tail left out,
  so the shape of the measured tail is kept).

The share's fixed (load-independent) latency L0 and per-class demands are
fitted to the measured per-class means, R_c = L0 + D_c/(1-rho)
(:func:`estimate_demands`); L0 is kept as it is and only the rest is scaled,
and D_dynamic/D_static comes from the per-class means extrapolated to zero load
(:func:`light_load_ratio`), which holds for any work-conserving discipline; where
the light levels cannot show it, from the fitted demands; and where a class was
not measured, from the calibration.
MAT intervals combine the measured repetitions' interval (from
:func:`shrink.mat.mat`) with the calibration's uncertainty of k, in quadrature
on the log scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from extrapolate.calibration import CrossSocketModel
from extrapolate.crosssocket import Physics, Workload, build_network
from extrapolate.measured_share import share_of
from extrapolate.shrink_scaling import CfsCorrection, scale_to_full
from extrapolate.whatif import calibration_summary, machine_mappings
from shrink.errors import ExtrapolationError
from shrink.loadcurve import STATS, LoadCurve
from shrink.machine import Machine
from shrink.mapping import Mapping, build_mapping
from shrink.mat import mat
from shrink.prediction import MappingPrediction, Prediction, StatPrediction
from shrink.recommend import recommend
from shrink.report.assumptions import MODEL_ASSUMPTIONS, REMAPPED_SHAPE_ASSUMPTION
from shrink.report.recommendation import remap_reason

__all__ = ["extrapolate_curve", "share_cores"]

# Where the model's D_dynamic / D_static came from (:func:`_dynamic_static_ratio`).
RatioFrom = Literal["light-load means", "fitted demands", "calibration"]


def share_cores(curve: LoadCurve, machine: Machine) -> int:
    """How many cores the measured share had (its CPU list, else alpha x the machine)."""
    return len(share_of(curve, machine)[1])


def _class_mix(curve: LoadCurve, workload: Workload | None) -> dict[str, float]:
    """The static and dynamic shares of the measured requests.

    The model knows two kinds of request. One of a class the trace names otherwise
    (neither ``static`` nor ``dynamic``) counts as static, as the simulator serves it:
    only a request labelled dynamic pays a dynamic request's demand. Those requests
    are in the overall throughput but in no per-class one, so the shares are of the
    overall throughput, not of the two classes' sum.
    """
    thr = {}
    for c in ("static", "dynamic"):
        s = curve.series("throughput", c) if _has_class(curve, c) else None
        thr[c] = float(np.nansum(s["value"])) if s is not None else 0.0
    tot = max(float(np.nansum(curve.series("throughput")["value"])), sum(thr.values()))
    if sum(thr.values()) > 0:
        dynamic = thr["dynamic"] / tot
        return {"static": 1.0 - dynamic, "dynamic": dynamic}
    if workload is not None:
        return workload.mix
    return {"static": 1.0, "dynamic": 0.0}


def _has_class(curve: LoadCurve, cls: str) -> bool:
    return any(cls in r.per_class for lv in curve.usable() for r in lv.reps)


def estimate_demands(
    scaled: LoadCurve, n_equiv: float, mix: dict[str, float]
) -> tuple[float, dict[str, float]]:
    """Fixed latency L0 and per-class per-core demands D_c from a scaled curve's means.

    Fits R_c(X) = L0 + D_c / (1 - rho(X)), rho = X / n_equiv * sum_c f_c D_c, on
    every usable level below the knee (relative residuals, scipy least_squares).
    Classes without per-class statistics are fitted through the overall mean.
    """
    from scipy.optimize import least_squares

    measured = [c for c in ("static", "dynamic") if mix.get(c, 0) > 0 and _has_class(scaled, c)]
    classes = [c for c in ("static", "dynamic") if mix.get(c, 0) > 0] if measured else ["all"]
    series = {c: scaled.series("mean", c) for c in measured}
    if len(measured) < len(classes) or not measured:
        # A class in the mix without means of its own (requests of the trace's other
        # classes, counted as static, beside dynamic ones) is seen in the overall mean.
        series["all"] = scaled.series("mean")
    x = scaled.series("mean")["throughput"]
    if not np.isfinite(x).any() or not all(np.isfinite(s["value"]).any() for s in series.values()):
        # Every repetition without a throughput or a mean (a hand-edited or empty curve):
        # the fit's start was NaN and scipy refused it (exit 70).
        raise ExtrapolationError(
            "no level of the curve has a finite throughput and mean latency: nothing to fit"
        )
    f = {c: (mix[c] if c != "all" else 1.0) for c in classes}
    fsum = sum(f.values())
    r0 = {c: float(np.nanmin(series[c if c in series else "all"]["value"])) for c in classes}
    x_max = float(np.nanmax(x))
    if not x_max > 0:
        # Every level with a throughput of zero (nothing answered in the window): the
        # fit's start divided by it (exit 70).
        raise ExtrapolationError(
            "no level of the curve has a throughput above zero: nothing to fit"
        )

    def unpack(p: np.ndarray) -> tuple[float, dict[str, float]]:
        return float(np.exp(p[0])), {
            c: float(np.exp(v)) for c, v in zip(classes, p[1:], strict=True)
        }

    def res(p: np.ndarray) -> np.ndarray:
        l0, d = unpack(p)
        dbar = sum(f[c] * d[c] for c in classes) / fsum
        rho = np.minimum(x / n_equiv * dbar, 0.999)
        out = [np.log((l0 + d.get(c, dbar) / (1 - rho)) / s["value"]) for c, s in series.items()]
        r = np.concatenate(out)
        return np.where(np.isfinite(r), r, 0.0)

    # Start: saturation just beyond the highest measured load, L0 a tenth of the lightest mean.
    dbar0 = 0.9 * n_equiv / x_max
    scale0 = dbar0 / (sum(f[c] * r0[c] for c in classes) / fsum)
    p0 = np.log([0.1 * min(r0.values())] + [max(r0[c] * scale0, 1e-9) for c in classes])
    sol = least_squares(res, p0, method="trf")
    l0, d = unpack(sol.x)
    if "all" in d:
        d = {"static": d["all"], "dynamic": d["all"]}
    return l0, d


def light_load_ratio(scaled: LoadCurve, l0: float) -> float | None:
    """D_dynamic / D_static from the per-class means extrapolated to zero load.

    As the load goes to 0 every work-conserving discipline gives R_c -> L0 + D_c,
    so the ratio does not depend on the PS assumption (a FIFO server would bias a
    PS fit over all levels). A line through the lighter half of the levels (at
    least two) gives each class's intercept; under PS the intercepts minus L0 are
    D_c times one common factor, so the ratio is exact there too. None where a
    class's light-load mean is not above L0: its demand is lost in the fixed
    latency's noise (a static request of a few microseconds beside a fixed latency
    of tens), and no ratio can be read at light load.
    """
    s = scaled.series("mean", "static")
    d = scaled.series("mean", "dynamic")
    x = s["throughput"]
    ok = np.isfinite(x) & np.isfinite(s["value"]) & np.isfinite(d["value"])
    x, rs, rd = x[ok], s["value"][ok], d["value"][ok]
    if x.size < 2:
        raise ExtrapolationError("need two load levels with both classes measured")
    light = x <= 0.5 * x.max()
    if light.sum() < 2:
        light = np.argsort(x)[:2]
    if np.unique(x[light]).size < 2:  # one throughput twice: no line (numpy warned)
        a_s = a_d = 0.0
    else:
        a_s = np.polyfit(x[light], rs[light], 1)[1] - l0
        a_d = np.polyfit(x[light], rd[light], 1)[1] - l0
    if a_s <= 0 or a_d <= 0:  # too few or too noisy light levels: fall back to the lightest
        i = int(np.argmin(x))
        a_s, a_d = rs[i] - l0, rd[i] - l0
    return float(a_d / a_s) if a_s > 0 and a_d > 0 else None


def _dynamic_static_ratio(
    scaled: LoadCurve, mix: dict[str, float], l0: float, d_meas: dict[str, float], ph: Physics
) -> tuple[float, RatioFrom]:
    """D_dynamic / D_static for the model, and what it was read from."""
    if mix["dynamic"] > 0 and _has_class(scaled, "static") and _has_class(scaled, "dynamic"):
        ratio = light_load_ratio(scaled, l0)
        if ratio is not None:
            return ratio, "light-load means"
        # The PS fit over every level: positive by construction, where the light levels
        # gave a negative ratio (and a negative demand the model refused).
        return d_meas["dynamic"] / d_meas["static"], "fitted demands"
    return ph.demand_dynamic / ph.demand_static, "calibration"


def _per_core_demands(physics: Physics, wl: Workload, machine: Machine, mp: Mapping) -> dict:
    net = build_network(physics, wl, machine, mp)
    w = np.array([s.cores for s in net.stations], dtype=np.float64)
    w /= w.sum()
    return {
        c: float(sum(wi * s.demands[c] for wi, s in zip(w, net.stations, strict=True)))
        for c in ("static", "dynamic")
    }


def _ratios(
    physics: Physics, wl: Workload, machine: Machine, share: Mapping, full: Mapping
) -> dict[str, float]:
    ds = _per_core_demands(physics, wl, machine, share)
    df = _per_core_demands(physics, wl, machine, full)
    mean_s = sum(wl.mix[c] * ds[c] for c in ds)
    mean_f = sum(wl.mix[c] * df[c] for c in df)
    return {"all": mean_f / mean_s, **{c: df[c] / ds[c] for c in ds}}


def _tail_ratio(
    physics: Physics, wl: Workload, machine: Machine, share: Mapping, full: Mapping, rho: float
) -> float:
    bare = physics.with_(fixed_latency=0.0, queue_tail=0.0)
    ns = build_network(bare, wl, machine, share)
    nf = build_network(bare, wl, machine, full)
    rho = min(max(rho, 1e-6), 0.995)
    xs = rho * ns.saturation()
    xf = rho * nf.saturation()
    return nf.quantile_response(xf) / ns.quantile_response(xs)


def _refuse_past_bounds(scaled: LoadCurve, alpha: float) -> None:
    """Refuse a curve whose alpha scales a throughput past what a curve may hold.

    A hand-edited alpha of 1e-300 made the full machine's curve one that cannot be
    read back: its validation error named no file and no alpha.
    """
    values = [v for lv in scaled.levels for r in lv.reps for v in (r.throughput, r.offered)]
    top = max((v for v in values if v is not None and math.isfinite(v)), default=0.0)
    if top > 1e15:
        raise ExtrapolationError(
            f"the curve's alpha {alpha:g} scales its throughput to {top:.3g} req/s, "
            "past 1e15: check the curve's alpha"
        )


def extrapolate_curve(
    curve: LoadCurve,
    model: CrossSocketModel,
    machine: Machine,
    *,
    mappings: Sequence[str] | None = None,
    workload: Workload | None = None,
    thresholds: dict[str, float] | None = None,
    correction: CfsCorrection | None = None,
) -> tuple[Prediction, dict[str, LoadCurve]]:
    """Predict the full ``machine`` under each mapping from one measured share curve.

    Returns the Prediction and, per mapping, the predicted full-machine LoadCurve.
    """
    if thresholds is None:
        if workload is None:
            raise ExtrapolationError("extrapolate needs thresholds or a workload that has them")
        thresholds = workload.thresholds
    share, cpus, alpha = share_of(curve, machine)
    kind = share.kind
    if curve.share.predicted_from is not None:
        if correction is not None:
            raise ExtrapolationError("the curve is already scaled: apply the CFS correction first")
        scaled = LoadCurve.from_dict(curve.to_dict())
    else:
        scaled = scale_to_full(curve, correction)
    _refuse_past_bounds(scaled, alpha)
    scaled.require_levels(2, thresholds)
    physics0 = model.physics_
    mix = _class_mix(scaled, workload)
    wl = Workload(
        (workload.name if workload else curve.sweep.workload),
        mix["dynamic"],
        workload.static_memory_ratio if workload else (0.0 if mix["dynamic"] == 0 else 1 / 3.6),
        dict(thresholds),
    )
    n_share = len(cpus)
    # The normalized curve is n_equiv full-speed cores at the share's per-core load:
    # n CPUs at speed c carrying alpha of the load match n c / alpha full-speed ones
    # (a cores share: n / alpha; a cpu_time share over all CPUs at c = alpha: n).
    speed = share.cpu_fraction if kind == "cpu_time" else 1.0
    n_equiv = n_share * speed / alpha
    # The share as it ran, so effects it already contains (a share over two sockets)
    # are not added twice.
    share_mp = build_mapping("1-replica", machine, cpus)
    l0, d_meas = estimate_demands(scaled, n_equiv, mix)
    ratio, ratio_from = _dynamic_static_ratio(scaled, mix, l0, d_meas, physics0)

    def physics_for(ph: Physics) -> Physics:
        return ph.with_(demand_dynamic=ph.demand_static * ratio)

    names = list(mappings or machine_mappings(machine))
    out: dict[str, MappingPrediction] = {}
    curves: dict[str, LoadCurve] = {}
    for name in names:
        full_mp = build_mapping(name, machine)
        ph = physics_for(physics0)
        k = _ratios(ph, wl, machine, share_mp, full_mp)
        d_share = sum(
            wl.mix[c] * v for c, v in _per_core_demands(ph, wl, machine, share_mp).items()
        )

        def kt_of(rho: float, ph: Physics = ph, full_mp: Mapping = full_mp) -> float:
            return _tail_ratio(ph, wl, machine, share_mp, full_mp, rho)

        pred = _remapped(scaled, k, kt_of, n_equiv, d_share, machine.n_cores, l0)
        pred.mapping = name
        pred.machine = machine.to_dict()
        pred.meta = {
            **pred.meta,
            "extrapolated_from": curve.share.to_dict(),
            "demand_ratio": k,
            "fixed_latency": l0,
            "measured_demands": d_meas,
            "dynamic_static_ratio": ratio,
            "dynamic_static_ratio_from": ratio_from,
        }
        curves[name] = pred

        def k_of(p: Physics, full_mp: Mapping = full_mp) -> float:
            return _ratios(physics_for(p), wl, machine, share_mp, full_mp)["all"]

        _, (klo, khi) = model.interval(k_of)
        k_half = 0.5 * (math.log(khi) - math.log(klo)) if klo > 0 else 0.0
        out[name] = _mapping_prediction(pred, k, k_half, thresholds)
    key = "mean" if "mean" in thresholds else next(iter(thresholds))
    rec = recommend(out, [key])  # the one rule (shrink.recommend): never on bounds
    best_mat = out[rec.mapping].stats[key].mat if rec.mapping is not None else math.nan
    reason = remap_reason(
        rec, best_mat, (n_share, kind), wl.dynamic_fraction, (ratio, ratio_from), l0
    )
    prediction = Prediction(
        machine=machine.to_dict(),
        mappings=out,
        recommended=rec.mapping,
        reason=reason,
        calibration=calibration_summary(model),
        assumptions=[*MODEL_ASSUMPTIONS, REMAPPED_SHAPE_ASSUMPTION],
        extra={
            "source_curve": {
                "alpha": curve.alpha,
                "share": curve.share.to_dict(),
                "mapping": curve.mapping,
            }
        },
    )
    return prediction, curves


def _remapped(
    scaled: LoadCurve,
    k: dict[str, float],
    kt_of: Callable[[float], float],
    n_equiv: float,
    d_share: float,
    n_cores: int,
    l0: float,
) -> LoadCurve:
    """The scaled share curve re-mapped to the full machine by the demand ratios ``k``.

    ``kt_of(rho)`` is the tail's ratio at utilization rho.
    """
    pred = LoadCurve.from_dict(scaled.to_dict())
    for lv in pred.levels:
        for rep in lv.reps:
            x_norm = rep.throughput
            rho = x_norm / n_equiv * d_share
            # A repetition whose throughput was not measured (null in the file) stays
            # unmeasured: the tail's root search cannot start from a NaN load.
            kt = kt_of(rho) if math.isfinite(rho) else math.nan
            f = n_cores / n_equiv / k["all"]
            rep.throughput = x_norm * f
            rep.offered = rep.offered * f
            _remap_stats(rep.overall, k["all"], kt, f, l0)
            for c, cs in rep.per_class.items():
                _remap_stats(cs, k.get(c, k["all"]), kt, f, l0)
            if rep.utilization is not None:
                rep.utilization = min(1.0, rho)
    return pred


def _mapping_prediction(
    pred: LoadCurve, k: dict[str, float], k_half: float, thresholds: dict[str, float]
) -> MappingPrediction:
    """MATs of a re-mapped curve, their intervals widened by the model's (``k_half``)."""
    stats = {}
    for stat, thr in thresholds.items():
        r = mat(pred, stat, thr)
        m_half = 0.5 * (math.log(r.ci[1]) - math.log(r.ci[0])) if r.ci[0] > 0 and r.mat > 0 else 0.0
        half = math.hypot(m_half, k_half)
        ci = (r.mat * math.exp(-half), r.mat * math.exp(half))
        # a re-mapped curve that does not cross gives a bound, written as one (">= X")
        stats[stat] = StatPrediction(r.mat, ci, thr, status=r.status, measured=False)
    s_mean = pred.series("mean")
    s_p999 = pred.series("p999")
    return MappingPrediction(
        stats,
        {
            "throughput": s_mean["throughput"].tolist(),
            "mean": s_mean["value"].tolist(),
            "p999": s_p999["value"].tolist(),
        },
        {
            "demand_ratio": k,
            "mat_status": {s: mat(pred, s, t).status for s, t in thresholds.items()},
        },
    )


def _remap_stats(cs: Any, k_mean: float, k_tail: float, f: float, l0: float) -> None:
    """Scale the load-dependent part of each latency; keep the fixed latency l0."""
    cs.throughput = cs.throughput * f
    cs.mean = l0 + (cs.mean - l0) * k_mean
    for s in STATS:
        if s != "mean":
            setattr(cs, s, l0 + (getattr(cs, s) - l0) * k_tail)
    if cs.dist is not None:
        cs.dist = [l0 + (v - l0) * k_tail for v in cs.dist]
