"""The SHRiNK transform (a curve measured on a share to the full target's) and the share
model's error, as :mod:`shrink.scaling` describes them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

from shrink.errors import ExtrapolationError
from shrink.loadcurve import ClassStats, LoadCurve
from shrink.scaling.calibration import CALIBRATION
from shrink.share import Share


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


def _scale_class(c: ClassStats, thr: float, lat: float) -> None:
    c.throughput *= thr
    for name in ("mean", "p50", "p90", "p99", "p999"):
        setattr(c, name, getattr(c, name) * lat)
    if c.dist:
        c.dist = [v * lat for v in c.dist]


def shrink_scaled_curve(curve: LoadCurve, correction: float = 1.0) -> LoadCurve:
    """The full target's predicted curve from a scaled one (see the module docstring);
    its throughputs times ``correction``, the model error's (:class:`ModelError`)."""
    alpha = share_fraction(curve)
    thr = throughput_scale(curve) * correction
    lat = latency_scale(curve)
    share = curve.share
    out = LoadCurve.from_dict(curve.to_dict())
    for lv in out.levels:
        for r in lv.reps:
            r.throughput *= thr
            r.offered *= thr
            _scale_class(r.overall, thr, lat)
            for name, c in r.per_class.items():
                _scale_class(c, thr, share.class_speed(name))
            # The generator's lags bound latencies (Level.stall_bound): they move with them.
            if r.send_lag_p99 is not None:
                r.send_lag_p99 *= lat
            if r.send_lag_max is not None:
                r.send_lag_max *= lat
    out.alpha = 1.0
    out.share = Share("all", (), 1.0, predicted_from=share)
    out.meta = {
        **curve.meta,
        "shrink_scaled": {
            "alpha": alpha,
            "latency_scale": lat,
            "throughput_scale": thr,
            "correction": correction,
            "speed": share.speed.to_dict() if share.speed is not None else None,
        },
    }
    return out


# ---------------------------------------------------------------- the model error


@dataclass(frozen=True)
class ModelError:
    """The share model's error against full-scale runs, for one share kind.

    ``bias``: the mean log error (predicted / measured MAT) over a corpus of
    configurations run to the end; the prediction's throughputs are divided by
    ``exp(bias)`` (:attr:`correction`). ``sigma``: the log-scale sd of the errors left,
    beyond what the scaled runs' own repetitions and drift show. Both are fitted by
    ``bench/bench_fidelity.py --fit``, and judged leaving one configuration out.
    ``provenance``: where they were measured (machine kind, runs, configurations, date).
    """

    sigma: float
    provenance: dict[str, Any]
    bias: float = 0.0

    @property
    def correction(self) -> float:
        return math.exp(-self.bias)

    @property
    def dof(self) -> int | None:
        """The degrees of freedom of ``sigma``: the fit's own ``dof`` (its conclusive
        runs, less one for a fitted bias), else its (statistic, run) pairs less one;
        None (taken as known) for a sigma that was not fitted."""
        prov = self.provenance
        dof = prov.get("dof", int(prov.get("pairs", 0)) - 1)
        return int(dof) if self.sigma > 0 and dof and int(dof) > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sigma": self.sigma,
            "bias": self.bias,
            "correction": self.correction,
            "dof": self.dof or 0,
            "provenance": dict(self.provenance),
        }


# The model-error entry of a CPU-time share taken at its nominal fraction (no
# calibration): its errors are not a calibrated share's, so neither is its fit.
NOMINAL_ENTRY = "cpu_time_nominal"
NOMINAL = "none: the share taken at its nominal fraction"


def dynamic_share(curve: LoadCurve) -> float | None:
    """The share of the server's work that is not static pages: at the curve's lightest
    level, the non-static classes' throughput times mean response time over all the
    classes' (pooled over its kept repetitions). At light load a request's response
    time stands for its demand (the utilization law's D = U / X, split by class); the
    lightest level is the one least moved by queueing, which in a time-sliced share
    falls on the long requests first. None without per-class statistics."""
    levels = [lv for lv in curve.levels if lv.reps]
    if not levels:
        return None
    lightest = min(levels, key=lambda lv: lv.level)
    busy = dynamic = 0.0
    for rep in lightest.kept:
        for name, c in rep.per_class.items():
            w = float(c.throughput) * float(c.mean)
            if not math.isfinite(w) or w < 0:
                continue
            busy += w
            if name != "static":
                dynamic += w
    return dynamic / busy if busy > 0 else None


def content_term(alpha: float, dynamic: float | None) -> float:
    """The share model's content term, ``dynamic * ln(1 / alpha)``: 0 for a share with
    no dynamic work or no share at all (alpha 1), and growing as the quota's slices
    shrink. A CPU-time share's fitted ``slope`` times it is how far in log its MAT
    reads low: as if its speed were ``alpha ** (1 + slope * dynamic)``."""
    if dynamic is None or not 0 < alpha <= 1:
        return 0.0
    return float(dynamic) * math.log(1.0 / alpha)


CONTENT_TERM = "dynamic_share * ln(1 / alpha)"


def model_error(
    target: str,
    share_kind: str,
    *,
    calibrated: bool = False,
    alpha: float = 1.0,
    dynamic: float | None = None,
) -> ModelError:
    """The model error of ``share_kind`` shares on ``target`` (``testbed`` or ``sim``),
    for a share of ``alpha`` whose work is ``dynamic`` (:func:`dynamic_share`) not
    static pages.

    The simulator's share is exactly a slower (or smaller) server: 0. A live share's
    comes from ``shrink/data/model_error.json``, which ``bench/bench_fidelity.py
    --fit`` writes from its corpus: a bias ``bias - slope * content_term(alpha,
    dynamic)`` (:func:`content_term`) and a spread. A CPU-time share taken at its
    nominal fraction (``calibrated=False``) takes the entry fitted on runs read that
    way; a calibrated one (``calibrated=True``) the calibration's own. An entry fitted
    on another calibration lends its spread, not its bias, and the provenance says so.
    """
    if target != "testbed":
        return ModelError(0.0, {"why": "the simulated share is exactly the model's server"})
    data = json.loads(
        resources.files("shrink").joinpath("data/model_error.json").read_text(encoding="utf-8")
    )
    kinds = data["share_kinds"]
    nominal = share_kind == "cpu_time" and not calibrated
    entry = (kinds.get(NOMINAL_ENTRY) if nominal else None) or kinds.get(share_kind)
    entry = entry or kinds["cpu_time"]
    prov = {**data.get("provenance", {}), **entry.get("provenance", {})}
    slope = float(entry.get("slope", 0.0))
    x = content_term(alpha, dynamic)
    bias = float(entry.get("bias", 0.0)) - slope * x
    prov.update(
        {"slope": slope, "content_term": CONTENT_TERM, "dynamic_share": dynamic, "alpha": alpha}
    )
    fitted_on = prov.get("calibration")
    expected = NOMINAL if nominal else CALIBRATION
    if share_kind == "cpu_time" and fitted_on is not None and fitted_on != expected:
        # A bias belongs to the calibration it was fitted on: another one's is not applied.
        prov["bias_not_applied"] = f"fitted on another calibration ({fitted_on}): {bias:g}"
        bias = 0.0
    return ModelError(float(entry["sigma"]), prov, bias)
