"""The papers' core-scaling experiment on the simulator.

For each core count (2 and 4 cores from one socket, then whole sockets; the
papers' choice) the MAT under a mean and a p99.9 threshold is found with
:func:`shrink.measure.sweep` and :func:`shrink.mat.mat`, searching the load
levels automatically:

1. a pilot run at light load measures utilization per unit of rate factor,
   which locates the saturation point;
2. a coarse pass at fixed fractions of saturation brackets each threshold's
   crossing;
3. a refining pass adds levels inside each bracket.

The levels are the knee search's (:mod:`shrink.knee`), in batches.

The scaling factor of n cores is MAT(n) / MAT(1). Thresholds default to the
papers': 0.5 ms mean / 4 ms p99.9 for tcp, 5 ms / 500 ms for support.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shrink.errors import ParameterError, TopologyError
from shrink.knee import bracket_levels, coarse_levels
from shrink.loadcurve import Level, LoadCurve
from shrink.machine import Machine
from shrink.mat import MATResult, mat
from shrink.measure import level_stats, sweep
from shrink.measure.search import level_search
from shrink.schemas import CurveMeta
from shrink.share import Share, select_compact
from shrink.sim.params import SimParams
from shrink.sim.target import SimTarget
from shrink.trace import Trace

__all__ = ["THRESHOLDS", "MatSearch", "compact_cpus", "compare_mappings", "find_mats", "scaling"]

THRESHOLDS: dict[str, dict[str, float]] = {
    "tcp": {"mean": 0.0005, "p999": 0.004},
    "support": {"mean": 0.005, "p999": 0.5},
}
COARSE = (0.3, 0.5, 0.65, 0.75, 0.82, 0.88, 0.93, 0.97)
# Where the coarse pass left a threshold uncrossed: further levels, as fractions of the
# pilot's saturation estimate. Past saturation the queue grows through the window, so
# every statistic crosses eventually; 4 times saturation bounds the search.
UPWARD = (1.03, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)
# And below the coarse pass, where even its lightest level was over a threshold.
DOWNWARD = (0.15, 0.05, 0.015)


def compact_cpus(machine: Machine, n: int) -> tuple[int, ...]:
    """The first ``n`` CPUs filling sockets one after the other (2 and 4 from one socket)."""
    if not 1 <= n <= machine.n_cpus:
        raise TopologyError(f"cores == {n}, must be in [1, {machine.n_cpus}] on {machine.name!r}")
    return select_compact(machine, n / machine.n_cores)


@dataclass
class MatSearch:
    """How hard to look: requests per level window, repetitions, refinement."""

    requests_per_level: int = 100_000
    reps: int = 1
    refine: int = 3
    coarse: Sequence[float] = COARSE
    warmup_fraction: float = 0.1
    fill_sessions: float = 3.0  # warm-up in mean session lengths, for session traces


@dataclass
class MatOutcome:
    curve: LoadCurve
    mats: dict[str, MATResult]
    capacity_factor: float
    runs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _session_length(trace: Trace) -> float:
    if str(trace.meta.get("mode") or "session") == "open":
        return 0.0
    sess = trace.table.column("session").to_numpy()
    think = trace.table.column("think").to_numpy()
    burst = trace.table.column("burst").to_numpy()
    start = np.r_[True, (sess[1:] != sess[:-1]) | (burst[1:] != burst[:-1])]
    n_sess = max(1, int(np.unique(sess).size))
    return float(think[start].sum()) / n_sess


def find_mats(
    target: SimTarget,
    trace: Trace,
    thresholds: dict[str, float],
    *,
    seed: int = 0,
    search: MatSearch | None = None,
    progress: Callable[[str], None] | None = None,
) -> MatOutcome:
    """MAT of ``target`` on ``trace`` for each ``{stat: threshold}``, levels found automatically."""
    s = search or MatSearch()
    base_rate = trace.info().request_rate
    if not np.isfinite(base_rate) or base_rate <= 0:
        raise ParameterError("the trace needs a duration (two distinct times) to set load levels")
    fill = s.fill_sessions * _session_length(trace)

    def window(f: float) -> tuple[float, float]:
        duration = s.requests_per_level / (f * base_rate)
        return max(s.warmup_fraction * duration, fill), duration

    # pilot: utilization per unit of rate factor, at a light load
    f0 = 1.0
    for _ in range(6):
        w, d = window(f0)
        res = target.run(trace, rate_factor=f0, warmup=w, duration=min(d, 5.0), seed=seed + 7)
        u = res.utilization or 0.0
        if 0.05 <= u <= 0.6:
            break
        f0 = f0 * (0.3 / u) if u > 0 else f0 * 10
    cap = f0 / max(u, 1e-9)
    levels: list[Level] = []
    runs = 0

    def run_levels(factors: Sequence[float], pass_seed: int) -> None:
        nonlocal runs
        for j, f in enumerate(factors):
            w, d = window(f)
            c = sweep(
                target, trace, [f], reps=s.reps, warmup=w, duration=d, seed=pass_seed + 1000 * j
            )
            levels.extend(c.levels)
            runs += s.reps
            if progress is not None:
                progress(f"rate factor {f:.4g}: {c.levels[0].throughput:,.0f} req/s")

    def curve() -> LoadCurve:
        desc = target.describe()
        return LoadCurve(
            levels=list(levels),
            knob="rate_factor",
            alpha=float(trace.meta.get("alpha", 1.0)),
            share=desc["share"],
            mapping=desc["mapping"]["name"],
            machine=desc["machine"],
            sweep=CurveMeta(target=desc),
            meta={
                "seed": seed,
                "search": s.__dict__ | {"coarse": list(s.coarse)},
                "trace": {  # what a sweep's curve records of it (validate compares them)
                    **{k: trace.meta.get(k) for k in ("source", "workload", "users", "sampler")},
                    "fingerprint": trace.fingerprint(),
                },
            },
        )

    run_levels(coarse_levels(cap, s.coarse), seed)
    for i, (stat, thr) in enumerate(thresholds.items()):
        _search_on(curve, run_levels, stat, thr, cap, seed + 50_000 * (1 + i))
    mats: dict[str, MATResult] = {}
    for stat, thr in thresholds.items():
        res = mat(curve(), stat, thr)
        extra = bracket_levels(res, cap, s.refine)
        if extra:
            run_levels(extra, seed + 100_000 * (1 + len(mats)))
    final = curve()
    for stat, thr in thresholds.items():
        mats[stat] = mat(final, stat, thr)
    return MatOutcome(final, mats, cap, runs)


def _search_on(
    curve: Callable[[], LoadCurve],
    run_levels: Callable[[Sequence[float], int], None],
    stat: str,
    thr: float,
    cap: float,
    seed: int,
) -> None:
    """Add levels beyond the measured range until ``stat`` crosses ``thr`` there: a
    simulator can always search further, so a MAT is a bound only past these limits."""
    res = mat(curve(), stat, thr)
    if res.status == "not_reached":
        steps = [cap * x for x in UPWARD]
    elif res.status == "below_range":
        steps = [cap * x for x in DOWNWARD]
    else:
        return
    measured = [lv.level for lv in curve().levels]
    # Each step's seed is by its place in the list, the steps left out too.
    ahead = iter(enumerate(steps))

    def choose() -> tuple[int, float] | None:
        for k, f in ahead:
            if res.status == "not_reached" and f <= max(measured):
                continue
            if res.status == "below_range" and f >= min(measured):
                continue
            return k, f
        return None

    def measure(step: tuple[int, float]) -> bool:
        k, f = step
        run_levels([f], seed + 1000 * k)
        return mat(curve(), stat, thr).status != "ok"

    level_search(choose, measure)


def scaling(
    machine: Machine,
    trace: Trace,
    cores: Sequence[int] = (1, 2, 4, 8),
    *,
    thresholds: dict[str, float] | None = None,
    params: SimParams | None = None,
    mapping: str = "1-replica",
    seed: int = 0,
    search: MatSearch | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """MAT at each core count and scaling factors relative to the smallest (normally 1 core).

    Returns ``{"schema": "shrink.sim-scaling/1", "mat": {stat: {n: {...}}},
    "scaling": {stat: {n: factor}}, ...}`` with core counts as strings.
    """
    workload = str(trace.meta.get("workload") or "")
    if thresholds is None:
        if workload not in THRESHOLDS:
            raise ParameterError(
                f"workload == {workload!r} has no published thresholds; pass thresholds "
                "(e.g. mean=5ms,p999=500ms)."
            )
        thresholds = THRESHOLDS[workload]
    if not cores:
        raise ParameterError("cores is empty, must name at least one core count.")
    cores = sorted(set(int(c) for c in cores))
    mats: dict[str, dict[str, Any]] = {stat: {} for stat in thresholds}
    utils: dict[str, float] = {}
    for n in cores:
        cpus = compact_cpus(machine, n)
        name = mapping if n >= replicas_of(mapping) else "1-replica"
        target = SimTarget(machine, name, Share.cores_of(machine, cpus), params)
        if progress is not None:
            progress(f"{n} core(s), {name}")
        out = find_mats(
            target, trace, thresholds, seed=seed + 17 * n, search=search, progress=progress
        )
        for stat, res in out.mats.items():
            mats[stat][str(n)] = res.to_dict() | {"mapping": name}
        utils[str(n)] = float(out.capacity_factor)
    base = str(cores[0])
    # None where the smallest count's MAT is 0 (over the threshold at every load):
    # nothing to scale against.
    factors = {
        stat: {
            k: (v["mat"] / per[base]["mat"] if per[base]["mat"] else None) for k, v in per.items()
        }
        for stat, per in mats.items()
    }
    return {
        "schema": "shrink.sim-scaling/1",
        "workload": workload,
        "workload_mix": workload_mix(trace, params),
        "machine": machine.to_dict(),
        "mapping": mapping,
        "thresholds": thresholds,
        "cores": cores,
        "seed": seed,
        "params": (params or SimParams()).to_dict(),
        "mat": mats,
        "scaling": factors,
        "capacity_rate_factor": utils,
    }


def replicas_of(mapping: str) -> int:
    """The replicas a mapping's name asks for (``4-replica``: 4)."""
    head = mapping.split("-", 1)[0]
    return int(head) if head.isdigit() else 1


def workload_mix(trace: Trace, params: SimParams | None = None) -> dict[str, Any]:
    """What sets a simulated MAT besides the machine: the trace's mix, sizes and the CPU
    work of its dynamic pages. Two answers for "Support" differ when these do: the
    papers' Support (whatif, ``--workload support``) has PHP pages of
    ``dynamic_php_us`` (3.25 ms), a synthesized trace's pages name their own work
    (``work=W`` in the path, W us: 6-12 ms in ``shrink synth support``)."""
    from shrink.sim.target import _work_units

    p = params or SimParams()
    cls = trace.column("cls")
    nbytes = trace.column("bytes")
    dyn = cls == "dynamic"
    out: dict[str, Any] = {
        "requests": len(trace),
        "dynamic_fraction": float(np.mean(dyn)) if len(trace) else 0.0,
    }
    for c in ("static", "dynamic"):
        sel = (cls == c) & (nbytes >= 0)
        out[f"{c}_mean_bytes"] = float(nbytes[sel].mean()) if sel.any() else None
    work = _work_units(trace.table.column("path"))[dyn]
    named = np.isfinite(work)
    if dyn.any():
        demand = np.where(named, work, p.dynamic_php_us)
        out["dynamic_work_us"] = float(demand.mean())
        out["dynamic_work_source"] = (
            "the trace's work= parameters" if named.all() else
            "the simulator's dynamic_php_us" if not named.any() else
            "the trace's work= parameters and dynamic_php_us"
        )  # fmt: skip
    return out


def quick_level(target: SimTarget, trace: Trace, factor: float, **kw: Any) -> Any:
    """One run's statistics (for scripts and tests)."""
    return level_stats(target.run(trace, rate_factor=factor, **kw))


def compare_mappings(
    machine: Machine,
    trace: Trace,
    mappings: Sequence[str] = ("1-replica", "2-replica-direct", "2-replica-indirect"),
    *,
    thresholds: dict[str, float] | None = None,
    params: SimParams | None = None,
    seed: int = 0,
    search: MatSearch | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """MATs of each mapping on the whole machine; changes relative to the first mapping."""
    workload = str(trace.meta.get("workload") or "")
    thresholds = thresholds or THRESHOLDS.get(workload)
    if not thresholds:
        raise ParameterError(f"workload == {workload!r} has no published thresholds; pass some.")
    out: dict[str, Any] = {}
    for i, name in enumerate(mappings):
        target = SimTarget(machine, name, None, params)
        if progress is not None:
            progress(f"mapping {i + 1}/{len(mappings)}: {name}")
        res = find_mats(target, trace, thresholds, seed=seed, search=search, progress=progress)
        out[name] = {stat: r.to_dict() for stat, r in res.mats.items()}
    first = out[mappings[0]]
    for r in out.values():
        for stat in thresholds:
            r[f"{stat}_change"] = r[stat]["mat"] / first[stat]["mat"] - 1.0
    return {
        "schema": "shrink.sim-mappings/1",
        "workload": workload,
        "workload_mix": workload_mix(trace, params),
        "machine": machine.to_dict(),
        "thresholds": thresholds,
        "seed": seed,
        "mappings": out,
    }
