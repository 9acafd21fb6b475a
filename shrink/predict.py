"""The main job: from a trace to a capacity prediction of the full machine.

    sample(alpha) -> bring up the share -> sweep around the knee -> MATs
        -> SHRiNK scaling to the full target -> per-mapping extrapolation
        -> prediction.json + report

The server side is a :class:`TargetProvider`: the live lighttpd testbed
(:mod:`shrink.providers`), the simulator, or a fake in tests. A provider knows
the machine, which CPUs the full target has, and how to open a target on a share
under a mapping (and to close it again, whatever happens).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import samplers
from shrink._version import __version__
from shrink.autolevels import (
    AutoPlan,
    Companion,
    SweepInterrupted,
    auto_sweep,
    companion_curve,
)
from shrink.busyspeed import host_drift
from shrink.checks import check_alpha
from shrink.defaults import THRESHOLDS
from shrink.loadcurve import FAILURE_LIMIT, LoadCurve
from shrink.machine import Machine
from shrink.mapping import BUILTIN_MAPPINGS, check_mappings
from shrink.mat import MATResult, mat
from shrink.measure import default_loop_window, default_skip, offered_check
from shrink.prediction import MappingPrediction, Prediction, StatPrediction
from shrink.recommend import reason_text, recommend
from shrink.scaling import latency_scale, shrink_scaled_curve
from shrink.share import Share
from shrink.speed import speed_assumptions
from shrink.speedsteps import SpeedSettings, speed_after, speed_before
from shrink.target import Target
from shrink.trace import Trace
from shrink.uncertainty import ErrorBudget, drift_sigma, error_budget, interval

__all__ = [
    "PredictConfig",
    "PredictionResult",
    "TargetProvider",
    "predict",
    "scaled_mats",
]

Progress = Callable[[str, int, int], None]


class TargetProvider(Protocol):
    """Where a prediction's measurements run."""

    name: str

    def machine(self) -> Machine:
        """The machine the full target lives on."""
        ...

    def server_cpus(self) -> tuple[int, ...]:
        """The CPUs of the full target (the machine less the load generator's)."""
        ...

    def open(self, share: Share, mapping: str) -> AbstractContextManager[Target]:
        """A target on ``share`` under ``mapping``; closing it stops what it started."""
        ...


@dataclass(frozen=True)
class PredictConfig:
    alpha: float = 0.25
    level: str = "session"
    thresholds: Mapping[str, float] = field(default_factory=lambda: dict(THRESHOLDS))
    mappings: Sequence[str] = BUILTIN_MAPPINGS
    share_kind: str = "auto"  # auto | cores | cpu_time
    seed: int = 0
    knob: str = "rate_factor"
    calibration: str = "published"
    plan: AutoPlan = field(default_factory=AutoPlan)
    # Also measure the full target with the whole trace, rep by rep alongside the
    # scaled runs, for validation on a machine whose speed drifts (see autolevels).
    paired_full_run: bool = False
    # SHRiNK's time scaling: on a CPU-time share (latencies 1/s longer, s its speed) the
    # share runs in slow motion, its warm-up, windows and users' think times 1/s times
    # the plan's and the trace's, so that it reaches the same queueing state and counts
    # as many requests as the full target would (shrink.measure.slow_motion).
    time_scaling: bool = True
    # Trace seconds left out at the start of every run; None: a tenth of the trace's
    # span, at most a minute (``shrink.measure.default_skip``).
    skip: float | None = None
    # Seconds the share's speed probe (shrink.speed.measure_speed) may spend on runs.
    speed_budget: float = 20.0
    # Measure the share's speed again with it loaded (shrink.busyspeed.loaded_speed): one
    # more run on the share alone, since a quota's cost per request rises with load.
    loaded_speed: bool = True
    # Log-scale sd of the share's emulation error in the MAT intervals
    # (shrink.uncertainty); None: the provider's ``model_error`` (0 on the simulator).
    model_error: float | None = None


def _stat(res: MATResult, budget: ErrorBudget | None = None) -> StatPrediction:
    """The MAT; with a ``budget``, its interval is the prediction interval for a full-scale
    run at another time (shrink.uncertainty), the repetitions' own CI kept beside it."""
    if budget is None:
        return StatPrediction(res.mat, res.ci, res.threshold, res.status, res.stalled_ceiling)
    return StatPrediction(
        res.mat,
        interval(res.mat, budget),
        res.threshold,
        res.status,
        res.stalled_ceiling,
        ci_repetitions=res.ci,
        error_budget=budget.to_dict(),
    )


def scaled_mats(
    measured: LoadCurve,
    full_curve: LoadCurve | None,
    thresholds: Mapping[str, float],
    emulation: float,
) -> tuple[LoadCurve, dict[str, MATResult], dict[str, ErrorBudget]]:
    """The full target's curve scaled from the share's ``measured`` one (its share's
    speed set), its MATs, and each MAT's error budget for a full-scale run at another
    time (shrink.uncertainty; ``full_curve``, a paired full-scale run, adds to the
    drift it pools). ``bench/bench_demo.py --revalidate`` calls it on saved runs."""
    predicted = shrink_scaled_curve(measured)
    mats = {s: mat(predicted, s, t) for s, t in thresholds.items()}
    drift = drift_sigma([measured] + ([full_curve] if full_curve is not None else []))
    speed = measured.share.speed
    speed_sd = speed.sigma if speed is not None else 0.0
    budgets = {s: error_budget(predicted, r, drift, emulation, speed_sd) for s, r in mats.items()}
    return predicted, mats, budgets


@dataclass
class PredictionResult:
    """Everything a prediction produced (also written to disk by :func:`predict`)."""

    prediction: Prediction
    measured: LoadCurve
    predicted: LoadCurve
    sample: Trace
    files: dict[str, Path] = field(default_factory=dict)
    full: LoadCurve | None = None  # the paired full-scale curve, when measured


def _self_checks(curve: LoadCurve, limits: Mapping[str, float]) -> dict[str, Any]:
    """What the curve says about its own measurement; ``limits`` in the curve's own seconds."""
    behind = [lv.level for lv in curve.levels if lv.generator_behind]
    stalled = {
        stat: [lv.level for lv in curve.stalled_over(stat, limit)] for stat, limit in limits.items()
    }
    reps_out = sum(lv.reps_behind for lv in curve.levels if not lv.generator_behind)
    utils = [min(1.0, lv.utilization) for lv in curve.usable() if lv.utilization is not None]
    umax = max(utils) if utils else None
    others = [r.other_cpu for lv in curve.usable() for r in lv.kept if r.other_cpu is not None]
    steal = [r.steal for lv in curve.usable() for r in lv.kept if r.steal is not None]
    # Over every repetition, kept or not: steal there is what makes one fall behind.
    gen_steal = [r.generator_steal for lv in curve.levels for r in lv.reps]
    gen_steal = [x for x in gen_steal if x is not None]
    # which replay engine measured the curve (native core or Python; live runs only)
    engine = (curve.meta.get("target") or {}).get("engine")
    cluster = (curve.meta.get("target") or {}).get("cluster")
    return {
        **({"generator_engine": engine} if engine else {}),
        **({"generator_cluster": cluster} if cluster else {}),
        "max_other_cpu": max(others) if others else None,
        "max_steal": max(steal) if steal else None,
        "max_generator_steal": max(gen_steal) if gen_steal else None,
        "generator_kept_up": not behind,
        "levels_behind": behind,
        # Of those, the ones still over a threshold by their stall bound (never a MAT: a hint).
        "levels_stalled_over": {k: v for k, v in stalled.items() if v},
        "repetitions_excluded": reps_out,
        "max_utilization": umax,
        "utilization_reached": bool(umax is not None and umax >= 0.85),
        "usable_levels": len(curve.usable()),
        # Levels where requests failed (over FAILURE_LIMIT): never used for a MAT.
        "levels_failed": [lv.level for lv in curve.failed_levels()],
        "failures": _failure_totals(curve),
        "failure_limit": FAILURE_LIMIT,
        # A controlled load: offered load rises with the level, ~linearly.
        **{k: v for k, v in offered_check(curve).items() if k != "offered"},
        # How far the host's speed moved over the sweep (the full target's busy checks).
        **host_drift(curve.share.speed),
    }


def _failure_totals(curve: LoadCurve) -> dict[str, int]:
    """Failures by class over every repetition of the curve."""
    out: dict[str, int] = {}
    for lv in curve.levels:
        for k, v in lv.failure_counts().items():
            out[k] = out.get(k, 0) + v
    return out


def _recommend(mappings: dict[str, MappingPrediction], stat: str) -> tuple[str | None, str]:
    rec = recommend(mappings, [stat])  # the one rule (shrink.recommend): never on bounds
    return rec.mapping, reason_text(rec)


def _keep_partial(
    out: Path, curve: LoadCurve, companion: Companion | None, config: PredictConfig
) -> list[Path]:
    """Write the levels an interrupted sweep finished, so that no measurement is lost."""
    kept = []
    if curve.levels:
        kept.append(curve.write_json(out / "measured-curve.partial.json"))
    if companion is not None and companion.levels:
        full = companion_curve(companion, knob=config.knob, plan=config.plan)
        full.meta["interrupted"] = True
        kept.append(full.write_json(out / "full-curve.partial.json"))
    return kept


def _sweep_plan(trace: Trace, share: Share, config: PredictConfig) -> AutoPlan:
    """The sweep's plan: ``config.plan`` with its skip, loop window and time scaling."""
    plan = replace(config.plan, skip=default_skip(trace) if config.skip is None else config.skip)
    if plan.loop_window is None:
        # One window for the share and the full target, chosen on the whole trace.
        plan = replace(plan, loop_window=default_loop_window(trace, plan.skip))
    if config.time_scaling and share.kind == "cpu_time":
        # Time scaling by the nominal alpha; speed_before rescales it by the measured speed.
        plan = replace(plan, scaled_time=1.0 / share.cpu_fraction)
    return plan


def predict(
    trace: Trace,
    provider: TargetProvider,
    config: PredictConfig,
    out_dir: str | Path | None = None,
    *,
    extrapolator: Callable[..., dict[str, MappingPrediction]] | None = None,
    progress: Progress | None = None,
) -> PredictionResult:
    """Sample, measure on the share, scale to the full target and extrapolate each mapping.

    ``extrapolator(predicted_curve, machine=..., mappings=..., thresholds=...,
    calibration=...)`` returns ``{mapping: MappingPrediction}``;
    without one (or on a one-socket machine, where mappings cannot differ by
    socket) every mapping gets the SHRiNK-scaled prediction.
    """
    alpha = check_alpha(config.alpha)
    machine = provider.machine()
    cpus = provider.server_cpus()
    check_mappings(config.mappings, machine, cpus)  # before anything is measured
    share = Share.plan(cpus, machine, alpha, config.share_kind)
    sample = samplers.sample(trace, alpha, seed=config.seed, level=config.level)
    plan = _sweep_plan(trace, share, config)
    if plan.probe_level is None and hasattr(provider, "probe_level"):
        # The simulator finds its capacity first: the search then starts near the knee.
        plan = replace(plan, probe_level=provider.probe_level(sample, share, config.knob))
    full_curve: LoadCurve | None = None
    with ExitStack() as stack:
        target = stack.enter_context(provider.open(share, "1-replica"))
        companion = None
        full_target = None
        if config.paired_full_run:
            full_target = stack.enter_context(provider.open(Share.whole(cpus), "1-replica"))
            companion = Companion(full_target, trace, dict(config.thresholds))
        checks, speeds = None, SpeedSettings(config.seed, config.speed_budget, config.loaded_speed)
        if share.kind == "cpu_time":
            share, plan, checks = speed_before(
                target, full_target, trace, sample, share, speeds, plan, progress
            )
        # On a CPU-time share latencies are 1/s longer: search the knee at scaled thresholds.
        share_thresholds = {s: t / share.speed_factor for s, t in config.thresholds.items()}
        try:
            measured = auto_sweep(
                target,
                sample,
                share_thresholds,
                knob=config.knob,
                plan=plan,
                seed=config.seed,
                alpha=alpha,
                progress=progress,
                companion=companion,
                between=None if checks is None else checks.after_level,
            )
        except SweepInterrupted as stop:
            if out_dir is not None:
                stop.kept.extend(_keep_partial(Path(out_dir), stop.curve, companion, config))
            raise
        if companion is not None:
            full_curve = companion_curve(companion, knob=config.knob, plan=config.plan)
        share = speed_after(share, measured, speeds, checks)
    # The share as planned and probed (the target's description lacks the speed).
    measured.share = replace(measured.share, speed=share.speed)
    emulation = (
        config.model_error
        if config.model_error is not None
        else float(getattr(provider, "model_error", 0.0))
    )
    predicted, full_mats, budgets = scaled_mats(measured, full_curve, config.thresholds, emulation)
    base = MappingPrediction(
        {s: _stat(r, budgets[s]) for s, r in full_mats.items()}, predicted.summary()
    )
    assumptions = _assumptions(alpha, config, share, measured)
    mappings_out = _per_mapping(
        predicted, base, machine, cpus, config, extrapolator, assumptions, budgets
    )
    stat = "mean" if "mean" in config.thresholds else next(iter(config.thresholds))
    recommended, reason = _recommend(mappings_out, stat)
    prediction = Prediction(
        machine=machine.to_dict(),
        mappings=mappings_out,
        recommended=recommended,
        reason=reason,
        calibration={"name": config.calibration},
        assumptions=assumptions,
        target=provider.name,
        target_description=f"{len(cpus)} CPU(s) {list(cpus)} of {machine.name}",
        alpha=alpha,
        level=config.level,
        seed=config.seed,
        share=share,
        thresholds=dict(config.thresholds),
        # The share's own MATs, at its own thresholds (1/alpha longer on a CPU-time share).
        measured_mats={
            s: _stat(mat(measured, s, t / latency_scale(measured)))
            for s, t in config.thresholds.items()
        },
        confidence_summary=_confidence(base, config, budgets, emulation),
        self_checks=_self_checks(
            measured, {s: t / latency_scale(measured) for s, t in config.thresholds.items()}
        ),
        trace=_trace_summary(trace, sample),
        provenance=_provenance(machine, cpus, share, alpha, config, measured),
    )
    if share.speed is not None:
        prediction.extra["speed"] = share.speed.to_dict()
    if full_curve is not None:
        prediction.full_run = _full_run_summary(full_curve, config)
    result = PredictionResult(prediction, measured, predicted, sample, full=full_curve)
    if out_dir is not None:
        _write_files(result, Path(out_dir))
    return result


def _assumptions(
    alpha: float, config: PredictConfig, share: Share, measured: LoadCurve
) -> list[str]:
    """What the prediction assumes, in words for the report."""
    assumptions = [
        f"SHRiNK: {alpha:g} of the sessions ({config.level} level, seed {config.seed}) on "
        f"{alpha:g} of the server ({share.kind} share of CPUs {list(share.cpus)}) behaves like "
        "the whole trace on the whole server at normalized load.",
    ]
    if share.kind == "cpu_time":
        assumptions.extend(speed_assumptions(share))
    if measured.meta.get("skip"):
        assumptions.append(
            f"Every run starts {measured.meta['skip']:.3g} s into the trace: a trace's first "
            "seconds (sessions starting together, or cut by the start of a log) are not "
            "its steady mix."
        )
    k = measured.meta.get("scaled_time", 1.0)
    if k != 1.0:
        assumptions.append(
            f"Time scaling: the share's warm-up and measurement windows, and its users' "
            f"think times, were {k:.3g} times the full-scale ones (1 over the speed the "
            "sweep assumed): the share ran the whole server in slow motion. A server at s "
            "of the speed moves through its queueing states 1/s slower and sees s of the "
            "requests a second: with shorter windows the share would be caught nearer its "
            "empty start, with fewer requests in its tail; with the users' own think times "
            "its response time above the knee would stay the whole server's, not 1/s of it."
        )
    load = measured.meta.get("share_load", 1.0)
    if load != 1.0:
        assumptions.append(
            f"Matched load: at every level the share replayed the sample at {load:.3g} "
            "times the level's rate factor (its measured speed over alpha, and over the "
            "sample's share of the loop window's requests relative to alpha), so that it "
            "was as loaded as the full target at the same level; the scaling reads "
            "throughputs, not levels, so this only chooses where the share is measured."
        )
    return assumptions


def _per_mapping(
    predicted: LoadCurve,
    base: MappingPrediction,
    machine: Machine,
    cpus: Sequence[int],
    config: PredictConfig,
    extrapolator: Callable[..., dict[str, MappingPrediction]] | None,
    assumptions: list[str],
    budgets: Mapping[str, ErrorBudget],
) -> dict[str, MappingPrediction]:
    """Each mapping's prediction: extrapolated across sockets, or the SHRiNK-scaled one.

    Appends to ``assumptions`` what the choice assumes.
    """
    sockets = {machine.socket_of(c) for c in cpus}
    mappings_out: dict[str, MappingPrediction] = {}
    if extrapolator is not None and len(sockets) > 1:
        extrapolated = extrapolator(
            predicted,
            machine=machine,
            mappings=list(config.mappings),
            thresholds=dict(config.thresholds),
            calibration=config.calibration,
        )
        mappings_out = {k: _widen(v, budgets) for k, v in extrapolated.items()}
        assumptions.append(
            "Cross-socket effects (remote NIC processing, sharing between workers on two "
            "sockets, the LLC a replica sees) are modelled with the "
            f"'{config.calibration}' calibration; they cannot be measured on a share inside "
            "one socket."
        )
    else:
        for name in config.mappings:
            mappings_out[name] = base
        if len(sockets) <= 1:
            assumptions.append(
                "The full target lies on one socket: no traffic crosses sockets, so the "
                "mappings differ only in how the cores are split; on loopback each replica's "
                "'NIC' is an address and its socket is nominal."
            )
    return mappings_out


def _confidence(
    base: MappingPrediction,
    config: PredictConfig,
    budgets: Mapping[str, ErrorBudget],
    emulation: float,
) -> str:
    # One drift for every statistic: the pooled cost spread of the runs.
    drift = max((b.drift for b in budgets.values()), default=0.0)
    widths = [
        (v.ci[1] - v.ci[0]) / v.mat / 2 for v in (base.stats[s] for s in config.thresholds) if v.mat
    ]
    conf = (
        f"The MAT intervals are +/-{100 * max(widths):.0f}% at most: 95% prediction "
        f"intervals for a full-scale run at another time, from the spread of "
        f"{config.plan.reps} repetitions per level, the machine's drift between runs "
        f"({100 * drift:.1f}%) and the share's emulation error ({100 * emulation:.0f}%)."
        if widths
        else ""
    )
    return conf


def _trace_summary(trace: Trace, sample: Trace) -> dict[str, Any]:
    return {
        "source": trace.meta.get("source"),
        "requests": len(trace),
        "sessions": trace.n_sessions,
        "fingerprint": trace.fingerprint(),
        "sample_requests": len(sample),
    }


def _provenance(
    machine: Machine,
    cpus: Sequence[int],
    share: Share,
    alpha: float,
    config: PredictConfig,
    measured: LoadCurve,
) -> dict[str, Any]:
    return {
        "shrink": __version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "kernel": platform.release(),
        "machine": machine.name,
        "server_cpus": list(cpus),
        "share": json.dumps(share.to_dict()),
        "alpha": alpha,
        "seed": config.seed,
        "target": json.dumps(measured.meta.get("target", {}).get("versions", {})),
    }


def _full_run_summary(full_curve: LoadCurve, config: PredictConfig) -> dict[str, Any]:
    return {
        "paired": True,
        "self_checks": _self_checks(full_curve, config.thresholds),
        "curve": "full-curve.json",
        "note": (
            "The whole trace was also run on the full target, each repetition right "
            "before or after the scaled one (alternating), so that the validation "
            "compares runs taken seconds apart. The prediction uses the scaled runs only."
        ),
    }


def _write_files(result: PredictionResult, out: Path) -> None:
    """The curves and prediction.json into ``out`` (their paths into ``result.files``)."""
    out.mkdir(parents=True, exist_ok=True)
    result.files["measured"] = result.measured.write_json(out / "measured-curve.json")
    result.files["predicted"] = result.predicted.write_json(out / "predicted-curve.json")
    if result.full is not None:
        result.files["full"] = result.full.write_json(out / "full-curve.json")
    result.files["prediction"] = result.prediction.write_json(out / "prediction.json", indent=2)


def _widen(mp: MappingPrediction, budgets: Mapping[str, ErrorBudget]) -> MappingPrediction:
    """An extrapolated mapping's MATs with intervals widened by what moves between runs."""
    stats = dict(mp.stats)
    for stat, budget in budgets.items():
        v = stats.get(stat)
        if v is not None and v.mat:
            stats[stat] = replace(
                v,
                ci=interval(v.mat, budget),
                ci_repetitions=v.ci,
                error_budget=budget.to_dict(),
            )
    return replace(mp, stats=stats)
