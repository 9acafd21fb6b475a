"""What-if for a mapping decision: MATs and curves for each mapping, and a recommendation.

Given a machine spec, a workload and a calibration, :func:`whatif` builds each
mapping's per-core processor-sharing network (:mod:`extrapolate.crosssocket`),
solves the MAT under the workload's mean and p99.9 thresholds, attaches
intervals from the calibration's parameter uncertainty, and recommends the
mapping with the highest mean-threshold MAT (p99.9 breaks near-ties).

Baseline demands. The published calibration has no 1-core demand measured
directly; the fit derives them from the published MATs: e.g. Support's 23,000
req/s at 8 cores with 7.8x scaling gives a 1-core MAT near 2,950 req/s, and
under PS with the 5 ms mean threshold a mean 1-core demand near 0.32 ms;
tcp's 146,000 req/s with 6.3x gives a static (1 KB) request near 38 us.
Support's static requests are assumed to cost what tcp's 1 KB file costs, so
the dynamic demand is what is left (about 5.6 ms per PHP page).

Trace workloads. A trace's own dynamic fraction sets the class mix; its static
requests get Support's memory behaviour (1/3.6 of a dynamic request's memory
share) unless the trace has a single static object (then tcp's: none). Because
the demands are per class, this *is* the interpolation between the tcp and
Support calibrations by the dynamic fraction. Thresholds default to Support's.

The sweep over the dynamic fraction (the papers' "Modified Support" RF sweep)
answers the open question of which mapping suits which mix: the mapping with
the best mean MAT at each fraction, and where the best one changes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from extrapolate.calibration import CrossSocketModel
from extrapolate.crosssocket import Physics, Workload, build_network, demand_factors
from shrink.errors import ExtrapolationError
from shrink.machine import Machine
from shrink.mapping import build_mapping
from shrink.prediction import MappingPrediction, Prediction, StatPrediction
from shrink.recommend import recommend
from shrink.report.assumptions import MODEL_ASSUMPTIONS
from shrink.report.recommendation import whatif_reason

__all__ = ["SWEEP_FRACTIONS", "dynamic_sweep", "machine_mappings", "resolve_workload", "whatif"]

SWEEP_FRACTIONS = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)


def machine_mappings(machine: Machine) -> list[str]:
    """The mappings worth comparing on ``machine``: one replica, and one per socket."""
    names = ["1-replica"]
    if machine.sockets >= 2:
        k = machine.sockets
        names += [f"{k}-replica-direct", f"{k}-replica-indirect"]
    return names


def resolve_workload(
    spec: str, model: CrossSocketModel, *, max_body: int | None = None
) -> Workload:
    """A workload of the calibration, ``tcp``/``support`` (the papers'), or a trace (Parquet)
    whose request bodies are at most ``max_body`` bytes (default: shrink's bound)."""
    from extrapolate.observations import published_workloads

    # The calibration's own workloads first, then the papers' tcp and support.
    workloads = {**published_workloads(), **(getattr(model, "workloads_", None) or {})}
    if spec in workloads:
        return workloads[spec]
    path = Path(spec)
    if not path.exists():
        raise ExtrapolationError(
            f"workload == {spec!r}, must be one of {', '.join(sorted(workloads))} or a trace file"
        )
    from shrink.defaults import MAX_BODY
    from shrink.trace import Trace

    trace = Trace.read_parquet(path, max_body=MAX_BODY if max_body is None else max_body)
    return workload_from_trace(trace, name=path.stem, thresholds=_support_thresholds(workloads))


def _support_thresholds(workloads: dict[str, Workload]) -> dict[str, float]:
    if "support" in workloads:
        return dict(workloads["support"].thresholds)
    return {"mean": 5e-3, "p999": 0.5}


def workload_from_trace(
    trace: Any, *, name: str = "trace", thresholds: dict[str, float] | None = None
) -> Workload:
    """A Workload from a Trace: its dynamic fraction and static-object variety."""
    info = trace.info()
    if info.requests == 0:
        raise ExtrapolationError(f"trace {name!r} has no requests")
    cls = trace.column("cls")
    paths = trace.column("path")
    static_paths = {p for p, c in zip(paths, cls, strict=True) if c == "static"}
    nbytes = trace.column("bytes")
    sizes = {}
    for c in ("static", "dynamic"):
        sel = (cls == c) & (nbytes >= 0)
        sizes[c] = float(nbytes[sel].mean()) if sel.any() else float("nan")
    ratio = 0.0 if len(static_paths) <= 1 else 1.0 / 3.6
    return Workload(
        name,
        float(info.dynamic_fraction),
        ratio,
        dict(thresholds or {"mean": 5e-3, "p999": 0.5}),
        f"from trace: {info.requests} requests, mean reply static {sizes['static']:.0f} B, "
        f"dynamic {sizes['dynamic']:.0f} B, {len(static_paths)} static objects",
    )


def _mat_fn(workload: Workload, machine: Machine, mapping_name: str, stat: str):
    mapping = build_mapping(mapping_name, machine)
    threshold = workload.thresholds[stat]

    def fn(physics: Physics) -> float:
        return build_network(physics, workload, machine, mapping).mat(stat, threshold)

    return fn


def _effects(physics: Physics, workload: Workload, machine: Machine, name: str) -> dict[str, Any]:
    """How a mapping changes each class's demand relative to a one-socket share."""
    factors = demand_factors(physics, workload, machine, build_mapping(name, machine))
    base = {"static": physics.demand_static, "dynamic": physics.demand_dynamic}
    f = factors[0]
    usl = {"static": f["usl"], "dynamic": f["usl_dynamic"]}
    rel = {c: f["demands"][c] / (usl[c] * base[c]) - 1.0 for c in base}
    share = {c: workload.mix[c] * base[c] for c in base}
    tot = sum(share.values())
    return {
        "static_demand_change": rel["static"],
        "dynamic_demand_change": rel["dynamic"],
        "dynamic_demand_share": share["dynamic"] / tot if tot > 0 else 0.0,
        "p_remote_nic": f["p_remote_nic"],
        "llc_seen_mib": f["llc_seen"] * physics.llc_ref_mib,
        "replicas": [
            {"replica": x["replica"], "cores": x["cores"], "demands": x["demands"]} for x in factors
        ],
    }


def usl_range(physics: Physics, machine: Machine) -> dict[str, Any]:
    """Where the machine sits on the calibration's Universal Scalability Law.

    The law's throughput n / (1 + sigma (n-1) + kappa n (n-1)) peaks at
    n* = sqrt((1 - sigma) / kappa) cores a socket. Past n*, the model gives less
    throughput with more cores, and the network inflates every request's demand
    as if all the socket's cores were busy, even at light load: far past it the
    MATs fall to 0. Those MATs are the law's retrograde region, not a measurement.

    The law's n counts CPUs, each hardware thread one (:func:`demand_factors` counts
    a socket's active CPUs): ``cpus_per_socket`` and ``peak_cpus_per_socket`` are in
    those, ``cores_per_socket`` and ``threads_per_core`` say what they are made of.
    """
    n = machine.cores_per_socket * machine.threads_per_core
    peaks: dict[str, float | None] = {}
    for cls, (sigma, kappa) in (
        ("static", (physics.usl_sigma, physics.usl_kappa)),
        ("dynamic", physics.usl_dynamic),
    ):
        peaks[cls] = math.sqrt(max(0.0, 1.0 - sigma) / kappa) if kappa > 0 else None
    finite = [x for x in peaks.values() if x is not None]
    return {
        "cores_per_socket": machine.cores_per_socket,
        "threads_per_core": machine.threads_per_core,
        "cpus_per_socket": n,
        "peak_cpus_per_socket": peaks,
        "past_peak": bool(finite) and n > min(finite),
    }


def whatif(
    machine: Machine,
    workload: Workload,
    model: CrossSocketModel,
    *,
    mappings: Sequence[str] | None = None,
    sweep: bool = True,
    curve_points: int = 16,
) -> Prediction:
    """Predict every mapping of ``machine`` for ``workload`` and recommend one."""
    names = list(mappings or machine_mappings(machine))
    physics = model.physics_
    out: dict[str, MappingPrediction] = {}
    for name in names:
        net = build_network(physics, workload, machine, build_mapping(name, machine))
        stats = {}
        for stat in [x for x in ("mean", "p999", "p99", "p90", "p50") if x in workload.thresholds]:
            mat, ci = model.interval(_mat_fn(workload, machine, name, stat))
            stats[stat] = StatPrediction(mat, ci, workload.thresholds[stat])
        out[name] = MappingPrediction(
            stats, net.curve(curve_points), _effects(physics, workload, machine, name)
        )
    order = list(out[names[0]].stats)
    if not order:
        raise ExtrapolationError(f"workload {workload.name!r} has no SLA thresholds")
    rec = recommend(out, order, decimals=-1)  # the one rule (shrink.recommend)
    reason = whatif_reason(rec, names, out, workload.dynamic_fraction)
    extra: dict[str, Any] = {"workload": workload.to_dict(), "usl": usl_range(physics, machine)}
    if sweep:
        extra["sweep"] = dynamic_sweep(machine, workload, physics, names)
    return Prediction(
        machine=machine.to_dict(),
        mappings=out,
        recommended=rec.mapping,
        reason=reason,
        calibration=calibration_summary(model),
        assumptions=list(MODEL_ASSUMPTIONS),
        extra=extra,
    )


def dynamic_sweep(
    machine: Machine,
    workload: Workload,
    physics: Physics,
    names: Sequence[str],
    fractions: Sequence[float] = SWEEP_FRACTIONS,
) -> dict[str, Any]:
    """Mean-threshold MAT of each mapping as the dynamic fraction varies; the best per point
    (None where no mapping meets the threshold at any load: a MAT of 0 is none to deploy,
    as :func:`shrink.recommend.recommend` rules)."""
    rows = []
    for f in fractions:
        wl = workload.with_dynamic_fraction(float(f))
        mats = {
            n: build_network(physics, wl, machine, build_mapping(n, machine)).mat(
                "mean", wl.thresholds["mean"]
            )
            for n in names
        }
        best = max(mats, key=mats.get)
        rows.append(
            {"dynamic_fraction": float(f), "mat": mats, "best": best if mats[best] > 0 else None}
        )
    crossovers = []
    for a, b in itertools.pairwise(rows):
        if None not in (a["best"], b["best"]) and a["best"] != b["best"]:
            crossovers.append(_crossover(machine, workload, physics, names, a, b))
    threshold = float(workload.thresholds["mean"])
    return {"stat": "mean", "threshold": threshold, "rows": rows, "crossovers": crossovers}


def _crossover(machine, workload, physics, names, a, b) -> dict[str, Any]:
    """Bisect the dynamic fraction where the best mapping changes from a's to b's."""
    lo, hi = a["dynamic_fraction"], b["dynamic_fraction"]
    pa, pb = a["best"], b["best"]

    def gap(f: float) -> float:
        wl = workload.with_dynamic_fraction(f)
        t = wl.thresholds["mean"]
        ma = build_network(physics, wl, machine, build_mapping(pa, machine)).mat("mean", t)
        mb = build_network(physics, wl, machine, build_mapping(pb, machine)).mat("mean", t)
        return ma - mb

    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if gap(mid) > 0:
            lo = mid
        else:
            hi = mid
    return {"from": pa, "to": pb, "dynamic_fraction": 0.5 * (lo + hi)}


def calibration_summary(model: CrossSocketModel) -> dict[str, Any]:
    """Parameters with intervals, and each figure the calibration was fitted to vs the model."""
    fitted = []
    for o in getattr(model, "observations_", []):
        mv = model.predicted_.get(o.name, float("nan"))
        fitted.append(
            {
                "figure": o.name,
                "published": o.value,
                "model": mv,
                "precision": o.precision,
                "within_precision": bool(abs(mv - o.value) <= o.precision * (1 + 1e-9)),
            }
        )
    return {
        "name": getattr(model, "name_", "custom"),
        "checks": list(getattr(model, "checks_", [])),
        "parameters": model.parameter_intervals(),
        "model_error": model.model_error_,
        "figures": fitted,
    }


def best_mapping_by_fraction(sweep: dict[str, Any]) -> list[tuple[float, str | None]]:
    """(dynamic fraction, best mapping) pairs from a sweep."""
    return [(r["dynamic_fraction"], r["best"]) for r in sweep["rows"]]
