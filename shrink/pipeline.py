"""File-level entry points of the main job (what the CLI, the demo and examples call).

``run_predict`` reads a trace, makes the provider, predicts, writes the
prediction and its report. ``run_validate`` runs (or reads) the full-scale curve
for a prediction, compares, writes validation.json and refreshes the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from extrapolate.mappings import extrapolate_mappings
from shrink.autolevels import AutoPlan, auto_sweep
from shrink.defaults import THRESHOLDS
from shrink.errors import ParameterError
from shrink.loadcurve import LoadCurve
from shrink.mapping import BUILTIN_MAPPINGS
from shrink.mat import MATResult
from shrink.predict import PredictConfig, predict
from shrink.prediction import Prediction
from shrink.providers import make_provider
from shrink.replay.cluster import ClusterSpec
from shrink.report.build import write_report
from shrink.share import Share
from shrink.trace import Trace
from shrink.validate import Validation, cost_adjusted_errors, cost_ratio, validate

__all__ = ["GeneratorPlacement", "run_predict", "run_validate"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class GeneratorPlacement:
    """Where the load generator runs on this machine: its CPUs (None: the lowest CPU),
    whether it may share the server's CPUs (a core subset on a small machine), and its
    SCHED_FIFO priority (0: normal)."""

    cpus: tuple[int, ...] | None = None
    allow_overlap: bool = False
    realtime: int = 0


def run_predict(
    trace_path: str | Path,
    out_dir: str | Path,
    *,
    machine: str = "this",
    target: str = "testbed",
    docroot: str | Path | None = None,
    alpha: float = 0.25,
    level: str = "session",
    mappings: Sequence[str] = BUILTIN_MAPPINGS,
    thresholds: Mapping[str, float] | None = None,
    share_kind: str = "auto",
    server_cpus: tuple[int, ...] | None = None,
    calibration: str = "published",
    seed: int = 0,
    plan: AutoPlan | None = None,
    progress: Progress | None = None,
    whatif: dict[str, Any] | None = None,
    paired_full_run: bool = False,
    time_scaling: bool = True,
    skip: float | None = None,
    server: str | None = None,
    cluster: ClusterSpec | None = None,
    generator: GeneratorPlacement | None = None,
    calibrate: bool = True,
    validation_budget_s: float | None = None,
) -> Prediction:
    """Predict from ``trace_path`` and write DIR/prediction.json + report; return the prediction.

    ``server``: the testbed's server recipe (``lighttpd-php-cgi``, the default,
    ``nginx-php-fpm`` or ``RECIPE.toml``); recorded, with its versions, in the result.

    ``paired_full_run`` also measures the full target with the whole trace, each
    repetition next to its scaled twin, into DIR/full-curve.json (for
    ``run_validate(..., full_run="paired")``). ``cluster``: the load generators run
    as Ray actors there (:mod:`shrink.replay.cluster`) instead of on this machine.
    ``generator``: where the load generator runs on this machine (its CPUs, whether it
    may share the server's, its SCHED_FIFO priority). ``calibrate``: a CPU-time
    share's speed from light runs on the full target (False: its nominal fraction).
    """
    gen = generator or GeneratorPlacement()
    out = Path(out_dir)
    trace = Trace.read_parquet(trace_path)
    provider = make_provider(
        target,
        machine=machine,
        docroot=docroot,
        run_dir=out / "runs",
        server_cpus=server_cpus,
        server=server,
        cluster=cluster,
        trace=trace,
        generator_cpus=gen.cpus,
        allow_overlap=gen.allow_overlap,
        realtime=gen.realtime,
    )
    cfg = PredictConfig(
        alpha=alpha,
        level=level,
        thresholds=dict(thresholds or THRESHOLDS),
        mappings=tuple(mappings),
        share_kind=share_kind,
        seed=seed,
        calibration=calibration,
        plan=plan or AutoPlan(),
        paired_full_run=paired_full_run,
        time_scaling=time_scaling,
        skip=skip,
        calibrate=calibrate,
        validation_budget_s=validation_budget_s,
    )
    res = predict(trace, provider, cfg, out, extrapolator=extrapolate_mappings, progress=progress)
    pred = res.prediction
    pred.inputs = {
        "trace": str(Path(trace_path)),
        "target": target,
        "machine": machine,
        "docroot": None if docroot is None else str(docroot),
        "server_cpus": list(provider.server_cpus()),
        "generator_cpus": None if gen.cpus is None else list(gen.cpus),
        "allow_overlap": gen.allow_overlap,
        "realtime": gen.realtime,
        "plan": plan.__dict__ if plan else AutoPlan().__dict__,
        # how many times longer the share's runs were than the plan's (SHRiNK time scaling)
        "scaled_time": res.measured.meta.get("scaled_time", 1.0),
        "skip": res.measured.meta.get("skip", 0.0),
        "server": server,
        # the trace seconds every level looped (a controlled load), for the full run
        "loop_window": res.measured.meta.get("loop_window"),
    }
    _record_server(pred, provider, res.measured)
    pred.whatif = whatif
    pred.write_json(out / "prediction.json", indent=2)
    write_report(out, pred, measured=res.measured, predicted_curve=res.predicted, whatif=whatif)
    return pred


def _record_server(pred: Prediction, provider: Any, measured: LoadCurve) -> None:
    """Name the server recipe and its versions in the prediction and its report."""
    record = getattr(provider, "server_record", None)
    if record is None:
        return  # the simulator: no server recipe
    versions = dict(measured.meta.get("target", {}).get("versions", {}))
    server = {**record(), "versions": versions}
    pred.server = server
    pred.target_description = f"{pred.target_description or ''}, server {server['name']}"
    pred.provenance = {
        **(pred.provenance or {}),
        "server": f"{server['name']} ({server['source']}): "
        + ", ".join(v for k, v in versions.items() if k != "recipe"),
    }


def run_validate(
    prediction_path: str | Path,
    *,
    full_run: str = "run",
    trace: str | Path | None = None,
    out_dir: str | Path | None = None,
    progress: Progress | None = None,
    server: str | None = None,
    cluster: ClusterSpec | None = None,
) -> Validation:
    """Validate a prediction against a full-scale curve.

    ``full_run``: ``run`` measures it now; ``paired`` takes the one measured
    alongside the scaled runs (``run_predict(..., paired_full_run=True)``); any
    other value is the path of a full-scale curve JSON. ``server`` (default: the
    prediction's recipe) runs the full target on another recipe, e.g. to check a
    prediction made on one stack against the other.
    """
    if server is not None and full_run != "run":
        raise ParameterError(
            f"--server {server} chooses the server of a full-scale run made now; "
            f"--full-run {full_run} runs nothing (use --full-run run)"
        )
    ppath = Path(prediction_path)
    pred = Prediction.read_json(ppath)
    base = ppath.parent
    out = Path(out_dir) if out_dir else base
    thresholds = {k: float(v) for k, v in (pred.thresholds or {}).items()}
    predicted = LoadCurve.read_json(base / "predicted-curve.json")
    measured = LoadCurve.read_json(base / "measured-curve.json")
    if full_run == "run":
        inputs = pred.inputs or {}
        trace_path = Path(trace) if trace else Path(inputs["trace"])
        full_trace = Trace.read_parquet(trace_path)
        provider = make_provider(
            inputs.get("target", "testbed"),
            machine=inputs.get("machine", "this"),
            docroot=inputs.get("docroot"),
            run_dir=out / "runs-full",
            server_cpus=tuple(inputs.get("server_cpus") or ()) or None,
            server=server or inputs.get("server"),
            cluster=cluster,
            trace=full_trace,
            generator_cpus=tuple(inputs.get("generator_cpus") or ()) or None,
            allow_overlap=bool(inputs.get("allow_overlap", False)),
            realtime=int(inputs.get("realtime", 0)),
        )
        plan = AutoPlan(**{**AutoPlan().__dict__, **(inputs.get("plan") or {})})
        # The same part of the trace as the prediction's runs (its skip), at the plan's
        # own time scale: the full target is the unscaled one.
        plan = replace(
            plan, skip=float(inputs.get("skip", 0.0)), scaled_time=1.0, share_load=1.0
        )
        if inputs.get("loop_window") is not None:
            plan = replace(plan, loop_window=float(inputs["loop_window"]))
        cpus = list(provider.server_cpus())
        with provider.open(Share.whole(cpus), _validated_mapping(pred)) as target:
            full = auto_sweep(
                target,
                full_trace,
                thresholds,
                plan=plan,
                seed=int(pred.seed or 0) + 7919,
                alpha=1.0,
                progress=progress,
            )
        full.write_json(out / "full-curve.json")
    elif full_run == "paired":
        if not (pred.full_run or {}).get("paired"):
            raise ParameterError(
                f"{ppath} was predicted without a paired full-scale run: predict with "
                "--paired-full-run, or validate with --full-run run"
            )
        curve_file = str((pred.full_run or {}).get("curve", "full-curve.json"))
        full = LoadCurve.read_json(base / curve_file)
    else:
        full = LoadCurve.read_json(full_run)
    if full.alpha != 1.0:
        raise ParameterError(f"the full-scale curve has alpha == {full.alpha:g}, must be 1.")
    # Compare the MATs predicted for the mapping that was run (cross-socket corrections
    # included), not the SHRiNK-scaled curve alone; distributions come from that curve.
    mapping = _validated_mapping(pred)
    predicted_mats = {}
    for s in thresholds:
        sp = pred.mapping_stat(mapping, s)
        if sp is not None and sp.mat is not None:
            ci = (float(sp.ci[0]), float(sp.ci[1]))  # type: ignore[arg-type]
            status = sp.status or "ok"
            predicted_mats[s] = MATResult(sp.mat, ci, s, thresholds[s], status)
    v = validate(predicted, full, thresholds, predicted_mats=predicted_mats)
    if full.meta.get("paired"):
        near = [m["measured"] for m in v.mats.values() if m.get("measured_status") == "ok"]
        v.cost_ratio = cost_ratio(measured, full, near)
        if v.cost_ratio is not None:
            # What the errors would be had the full target cost per request what the share
            # did: a rough figure (near the knee latency grows with the cost too).
            v.cost_ratio["adjusted_error"] = cost_adjusted_errors(v.mats, v.cost_ratio["median"])
    v.meta = {
        "prediction": str(ppath),
        "full_run": full_run,
        "mapping": mapping,
        "paired": bool(full.meta.get("paired")),
        "server": full.meta.get("target", {}).get("server") or pred.server,
        "server_versions": full.meta.get("target", {}).get("versions"),
    }
    v.write_json(out / "validation.json")
    write_report(
        out,
        pred,
        measured=measured,
        full_run=full,
        predicted_curve=predicted,
        validation=v,
        whatif=pred.whatif,
    )
    return v


def _validated_mapping(pred: Prediction) -> str:
    """The mapping a validation runs: the one the prediction names, else 1-replica."""
    return str(pred.extra.get("validated_mapping", "1-replica"))
