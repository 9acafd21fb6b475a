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
from shrink.atomic import make_dirs
from shrink.autolevels import (
    AutoPlan,
    Companion,
    Pairing,
    SweepInterrupted,
    SweepScaling,
    auto_sweep,
    check_budget,
    companion_curve,
    least_scaled_time,
    sample_ratio,
    sweep_scaling,
)
from shrink.checks import check_alpha
from shrink.defaults import THRESHOLDS
from shrink.errors import ParameterError, ShrinkError, WriteError
from shrink.loadcurve import Level, LoadCurve
from shrink.machine import Machine
from shrink.mapping import ALL_MAPPINGS, mappings_here
from shrink.mat import MATResult, mat
from shrink.measure import default_loop_window, default_skip
from shrink.measure.keep import KeepLevels, KeptCurve
from shrink.prediction import MappingPrediction, Prediction, StatPrediction
from shrink.recommend import recommend
from shrink.report.assumptions import (
    ONE_SOCKET_ASSUMPTION,
    PAIRED_FULL_RUN_NOTE,
    confidence,
    cross_socket_assumption,
)
from shrink.report.assumptions import assumptions as assumptions_of
from shrink.report.recommendation import reason_text
from shrink.run_inputs import RunInputs, record_inputs
from shrink.scaling import (
    CALIBRATION_BUSY,
    CALIBRATION_S,
    Beside,
    ModelError,
    calibrate_beside,
    dynamic_share,
    latency_scale,
    model_error,
    shrink_scaled_curve,
)
from shrink.scaling import constants as share_model_constants
from shrink.selfchecks import full_checks, self_checks
from shrink.share import Share, ShareSpeed
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

# The measured curve's finished levels, kept as each ends and when the run stops.
_PARTIAL = "measured-curve.partial.json"

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
    mappings: Sequence[str] = ALL_MAPPINGS  # the built-in ones the server's CPUs can give
    share_kind: str = "auto"  # auto | cores | cpu_time
    seed: int = 0
    knob: str = "rate_factor"
    calibration: str = "published"
    plan: AutoPlan = field(default_factory=AutoPlan)
    # Also measure the full target with the whole trace, rep by rep alongside the
    # scaled runs, for validation on a machine whose speed drifts (see autolevels); its
    # runs never reach the prediction nor choose the share's levels. After the sweep the
    # full target's own search brackets its crossings, for at most
    # ``validation_budget_s`` more seconds (None: the plan's level budget only).
    paired_full_run: bool = False
    validation_budget_s: float | None = None
    # SHRiNK's time scaling: on a CPU-time share (latencies 1/s longer, s its speed) the
    # share runs in slow motion, its warm-up, windows and users' think times 1/s times
    # the plan's and the trace's, so that it reaches the same queueing state and counts
    # as many requests as the full target would (shrink.measure.slow_motion).
    time_scaling: bool = True
    # Trace seconds left out at the start of every run; None: a tenth of the trace's
    # span, at most a minute (``shrink.measure.default_skip``).
    skip: float | None = None
    # A CPU-time share at its nominal fraction, corrected by the model error fitted for
    # it (nothing runs on the full target); True: calibrate its speed with light runs on
    # the full target (shrink.scaling.calibrate: at most 10% busy, 20 s). On the corpus
    # the nominal share with its content term erred less than the calibrated one
    # (bench/RESULTS.md, "The share's content term").
    calibrate: bool = False
    # Log-scale sd of the share model's error in the MAT intervals (shrink.uncertainty);
    # None: the corpus-fitted one (shrink.scaling.model_error; 0 on the simulator).
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
    thresholds: Mapping[str, float],
    model: ModelError,
) -> tuple[LoadCurve, dict[str, MATResult], dict[str, ErrorBudget]]:
    """The full target's curve scaled from the share's ``measured`` one (its share's
    speed set, its throughputs times the model error's correction), its MATs, and
    each MAT's error budget for a full-scale run at another time (shrink.uncertainty).
    A function of the share's runs alone."""
    predicted = shrink_scaled_curve(measured, model.correction)
    mats = {s: mat(predicted, s, t) for s, t in thresholds.items()}
    drift = drift_sigma([measured])
    speed = measured.share.speed
    sd = speed.sigma if speed is not None else 0.0
    budgets = {
        s: error_budget(predicted, r, drift, model.sigma, sd, model.dof) for s, r in mats.items()
    }
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


def _recommend(mappings: dict[str, MappingPrediction], stat: str) -> tuple[str | None, str]:
    rec = recommend(mappings, [stat])  # the one rule (shrink.recommend): never on bounds
    return rec.mapping, reason_text(rec)


def _keep_partial(
    out: Path, curve: LoadCurve, companion: Companion | None, config: PredictConfig
) -> list[KeptCurve]:
    """Write the levels an interrupted sweep finished, so that no measurement is lost."""
    kept = []
    if curve.levels:
        kept.append(KeptCurve(curve.write_json(out / _PARTIAL), len(curve.levels)))
    if companion is not None and companion.levels:
        full = companion_curve(companion, knob=config.knob, plan=config.plan)
        full.meta["interrupted"] = True
        path = full.write_json(out / "full-curve.partial.json")
        kept.append(KeptCurve(path, len(full.levels)))
    return kept


def _sweep_plan(trace: Trace, share: Share, config: PredictConfig) -> AutoPlan:
    """The sweep's plan: ``config.plan`` with its skip and loop window."""
    plan = replace(config.plan, skip=default_skip(trace) if config.skip is None else config.skip)
    if plan.loop_window is None:
        # One window for the share and the full target, chosen on the whole trace.
        plan = replace(plan, loop_window=default_loop_window(trace, plan.skip))
    return plan


def _sample(trace: Trace, alpha: float, config: PredictConfig) -> Trace:
    """The share's sample of ``trace``; one that keeps no request is refused by its alpha
    (else the first run on the share found an empty trace, and said only that)."""
    sample = samplers.sample(trace, alpha, seed=config.seed, level=config.level)
    if len(sample) == 0 and len(trace) > 0:
        raise ParameterError(
            f"alpha {alpha:g} kept none of the trace's {len(trace):,} "
            f"request{'' if len(trace) == 1 else 's'} "
            f"({config.level} sampling, seed {config.seed}); raise alpha or record a longer trace"
        )
    return sample


def predict(
    trace: Trace,
    provider: TargetProvider,
    config: PredictConfig,
    out_dir: str | Path | None = None,
    *,
    extrapolator: Callable[..., dict[str, MappingPrediction]] | None = None,
    progress: Progress | None = None,
    inputs: RunInputs | None = None,
) -> PredictionResult:
    """Sample, measure on the share, scale to the full target and extrapolate each mapping.

    ``extrapolator(predicted_curve, machine=..., mappings=..., thresholds=...,
    calibration=...)`` returns ``{mapping: MappingPrediction}``; without one (or on a
    one-socket machine, where mappings cannot differ by socket) every mapping gets the
    SHRiNK-scaled prediction. ``inputs``: recorded in it (:mod:`shrink.run_inputs`).
    """
    alpha = check_alpha(config.alpha)
    machine, cpus = provider.machine(), provider.server_cpus()
    mappings, left_out = mappings_here(config.mappings, machine, cpus)  # before any run
    config = replace(config, mappings=mappings)
    share = Share.plan(cpus, machine, alpha, config.share_kind)
    slow = least_scaled_time(share.kind == "cpu_time", share.cpu_fraction, config.time_scaling)
    check_budget(config.plan, config.paired_full_run, slow)  # before a sample or a server
    sample = _sample(trace, alpha, config)
    plan = _sweep_plan(trace, share, config)
    if plan.probe_level is None and hasattr(provider, "probe_level"):
        # The simulator finds its capacity first: the search then starts near the knee.
        plan = replace(plan, probe_level=provider.probe_level(sample, share, config.knob))
    full_curve: LoadCurve | None = None
    calibrating = share.kind == "cpu_time" and config.calibrate
    with ExitStack() as stack:
        target = stack.enter_context(provider.open(share, "1-replica"))
        full_target = None
        if config.paired_full_run or calibrating:
            full_target = stack.enter_context(provider.open(Share.whole(cpus), "1-replica"))
        scaling, beside = SweepScaling(), None
        if share.kind == "cpu_time":
            share, scaling, beside = _speed(target, full_target if calibrating else None, trace,
                                            sample, share, plan, config, progress)  # fmt: skip
        companion = None
        if config.paired_full_run and full_target is not None:
            companion = Companion(full_target, trace, dict(config.thresholds))
        # On a CPU-time share latencies are 1/s longer: search the knee at scaled thresholds.
        share_thresholds = {s: t / share.speed_factor for s, t in config.thresholds.items()}
        between = _beside(beside, share_thresholds, config.thresholds)
        keep = None if out_dir is None else KeepLevels(Path(out_dir) / _PARTIAL)
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
                pairing=Pairing(companion=companion, between=between, keep=keep),
                scaling=scaling,
            )
            if beside is not None:  # the speed as read beside the sweep (Beside.now)
                share = share.with_speed(beside.finish())
            if companion is not None and full_target is not None:
                full_curve = _validation_search(full_target, trace, companion, config, plan,
                                                progress)  # fmt: skip
        except (SweepInterrupted, ShrinkError) as stop:
            # Stopped by a signal or an error (a dead server): the finished levels stay.
            if out_dir is not None and stop.curve is not None:
                kept = _keep_partial(Path(out_dir), stop.curve, companion, config)
                stop.kept = [*stop.kept, *kept]
            raise
    measured.share = replace(measured.share, speed=share.speed)
    out = None if out_dir is None else Path(out_dir)
    _write_curves(out, measured, full_curve, config.thresholds)
    merr = _model_error(config, provider.name, share, measured)
    predicted, full_mats, budgets = scaled_mats(measured, config.thresholds, merr)
    base = MappingPrediction(
        {s: _stat(r, budgets[s]) for s, r in full_mats.items()}, predicted.summary()
    )
    assumptions = assumptions_of(alpha, config, share, measured, left_out)
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
        confidence_summary=confidence(base, config, budgets, merr.sigma, merr.correction),
        self_checks=self_checks(
            measured, {s: t / latency_scale(measured) for s, t in config.thresholds.items()}
        ),
        trace=_trace_summary(trace, sample),
        provenance=_provenance(machine, cpus, share, alpha, config, measured),
    )
    _record_share_model(prediction, share, merr)
    prediction.extra["mappings_left_out"] = list(left_out)  # by 'all': the CPUs cannot give
    record_inputs(prediction, inputs, provider, measured, config.plan, scaling)
    if full_curve is not None:
        prediction.full_run = _full_run_summary()
    result = PredictionResult(prediction, measured, predicted, sample, full=full_curve)
    if out is not None:
        _write_files(result, out)
    return result


def _beside(
    beside: Beside | None, share_thresholds: dict[str, float], thresholds: Mapping[str, float]
) -> Callable[[Level], None] | None:
    """After each of the share's levels: the calibration's run beside it, then the share's
    thresholds at the speed the runs so far read (the sweep brackets the crossings the
    prediction will read, not those of the speed it started from)."""
    if beside is None:
        return None

    def between(level: Level) -> None:
        beside.slice(level)
        speed = beside.now().effective
        if speed > 0:
            share_thresholds.update({s: t / speed for s, t in thresholds.items()})

    return between


def _model_error(
    config: PredictConfig, target: str, share: Share, measured: LoadCurve
) -> ModelError:
    """The share model's error: the corpus-fitted one for the way the share's speed was
    read (calibrated, or its nominal fraction) and for what the share served (its
    dynamic work's part, shrink.scaling.dynamic_share), or the config's spread (no bias)."""
    if config.model_error is not None:
        return ModelError(config.model_error, {"source": "PredictConfig.model_error"})
    calibrated = share.speed is not None and share.speed.method == "calibrated"
    return model_error(
        target, share.kind, calibrated=calibrated, alpha=measured.alpha,
        dynamic=dynamic_share(measured),
    )  # fmt: skip


def _record_share_model(prediction: Prediction, share: Share, merr: ModelError) -> None:
    """The share model in prediction.json: its speed, constants and fitted error, and what
    the prediction asked of the full target (only the calibration's light runs)."""
    if share.speed is not None:
        prediction.extra["speed"] = share.speed.to_dict()
    prediction.extra["model_error"] = merr.to_dict()
    prediction.extra["share_model"] = share_model_constants()
    prediction.extra["full_target_use"] = _full_target_use(share)


def _speed(
    target: Target,
    full_target: Target | None,
    trace: Trace,
    sample: Trace,
    share: Share,
    plan: AutoPlan,
    config: PredictConfig,
    progress: Progress | None,
) -> tuple[Share, SweepScaling, Beside | None]:
    """A CPU-time share's speed (calibrated on ``full_target`` where there is one, else its
    nominal fraction), the swept side's scaling derived from it, and the calibration's
    runs left for beside the sweep."""
    beside = None
    if full_target is None:
        speed = ShareSpeed.assumed(share.cpu_fraction)
    else:
        if progress is not None:
            progress("calibration (light runs on the full target)", 0, 1)
        beside = calibrate_beside(target, full_target, sample, nominal=share.cpu_fraction,
                                  seed=config.seed)  # fmt: skip
        speed = beside.speed
    share = share.with_speed(speed)
    ratio = sample_ratio(trace, sample, plan, share.cpu_fraction)
    scaling = sweep_scaling(share.speed_factor, share.cpu_fraction, ratio, config.time_scaling)
    return share, scaling, beside


def _validation_search(
    full_target: Target,
    trace: Trace,
    companion: Companion,
    config: PredictConfig,
    plan: AutoPlan,
    progress: Progress | None,
) -> LoadCurve:
    """The full-scale curve for validation: the companion's levels, then the full
    target's own search until its crossings are bracketed (its time is its own budget)."""
    vplan = replace(
        config.plan, skip=plan.skip, loop_window=plan.loop_window,
        budget_s=config.validation_budget_s,
        max_levels=max(0, config.plan.max_levels - len(companion.levels)) + len(companion.levels),
    )  # fmt: skip
    if progress is not None:
        progress("validation: the full target's own search", 0, 1)
    curve = auto_sweep(
        full_target, trace, dict(config.thresholds), knob=config.knob, plan=vplan,
        seed=config.seed + 7919, alpha=1.0, progress=progress,
        pairing=Pairing(start=companion.levels),
    )  # fmt: skip
    curve.sweep = curve.sweep.with_(paired=True)
    return curve


def _full_target_use(share: Share) -> dict[str, Any]:
    """What the prediction ran on the full target (the calibration's runs only)."""
    sp = share.speed
    if sp is None:
        return {"runs": [], "seconds": 0.0, "max_utilization": None}
    busy = sp.full_target_busy
    return {
        "runs": list(sp.full_target_runs),
        "seconds": sp.full_target_seconds,
        "max_utilization": busy,
        # The bounds are the calibration's aim, set before each run: a host that slows
        # within one can take a run past them, and this says so.
        "bounds": {"seconds": CALIBRATION_S, "utilization": CALIBRATION_BUSY},
        "within_bounds": sp.full_target_seconds <= CALIBRATION_S
        and (busy is None or busy <= CALIBRATION_BUSY),
    }


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
        assumptions.append(cross_socket_assumption(config.calibration))
    else:
        for name in config.mappings:
            mappings_out[name] = base
        if len(sockets) <= 1:
            assumptions.append(ONE_SOCKET_ASSUMPTION)
    return mappings_out


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
        "share": json.dumps(share.to_dict(), sort_keys=True),
        "alpha": alpha,
        "seed": config.seed,
        "target": json.dumps(measured.sweep.target.get("versions", {})),
    }


def _full_run_summary() -> dict[str, Any]:
    """Where the validation's paired full-scale curve is (its checks live with it)."""
    return {
        "paired": True,
        "curve": "full-curve.json",
        "note": PAIRED_FULL_RUN_NOTE,
    }


def _write_curves(
    out: Path | None, measured: LoadCurve, full: LoadCurve | None, limits: Mapping[str, float]
) -> None:
    """The measured curves into ``out`` (None: nothing is written), each once and whole.

    What was measured is kept before anything is read from it: a curve with no usable
    level (a generator behind at every level) stops the prediction after this. The
    full curve is written with its self-checks, so that no later rewrite can fail
    and leave the first copy without them.
    """
    if out is not None:
        make_dirs(out)
        try:
            measured.write_json(out / "measured-curve.json")
        except WriteError as exc:
            # The error carries the measured levels, so that the CLI can keep a summary.
            exc.curve = measured
            raise
    if full is not None:
        full.meta["self_checks"] = full_checks(full, limits)
        if out is not None:
            try:
                full.write_json(out / "full-curve.json")
            except WriteError as exc:
                exc.curve = full  # the paired full run's levels: the CLI keeps a summary
                raise


def _write_files(result: PredictionResult, out: Path) -> None:
    """The predicted curve and prediction.json into ``out``, beside the measured curves
    (:func:`_write_curves`); every path into ``result.files``."""
    make_dirs(out)
    result.files["measured"] = out / "measured-curve.json"
    result.files["predicted"] = result.predicted.write_json(out / "predicted-curve.json")
    if result.full is not None:
        result.files["full"] = out / "full-curve.json"
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
