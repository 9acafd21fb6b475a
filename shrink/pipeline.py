"""File-level entry points of the main job (what the CLI, the demo and examples call).

``run_predict`` reads a trace, makes the provider, predicts, writes the
prediction and its report. ``run_validate`` runs (or reads) the full-scale curve
for a prediction, compares, writes validation.json and refreshes the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from extrapolate.mappings import extrapolate_mappings
from shrink._version import __version__
from shrink.atomic import make_dirs
from shrink.autolevels import AutoPlan, Pairing, auto_sweep
from shrink.defaults import MAX_BODY
from shrink.errors import OptionError, ParameterError, ShrinkError, TraceFormatError, WriteError
from shrink.loadcurve import LoadCurve
from shrink.mat import MATResult
from shrink.measure import SweepInterrupted
from shrink.measure.keep import KeepLevels, KeptCurve
from shrink.predict import PredictConfig, predict
from shrink.prediction import Prediction
from shrink.providers import TargetSettings, make_provider
from shrink.replay.cluster import ClusterSpec
from shrink.report.build import write_report
from shrink.run_inputs import RunInputs, check_recorded_files, docroot_at_start, target_settings
from shrink.share import Share
from shrink.target import GeneratorPlacement
from shrink.trace import Trace
from shrink.validate import Validation, cost_adjusted_errors, cost_ratio, validate

__all__ = ["GeneratorPlacement", "TargetSettings", "run_predict", "run_validate"]

Progress = Callable[[str, int, int], None]
PLAN_FIELDS = frozenset(f.name for f in fields(AutoPlan))


def run_predict(
    trace_path: str | Path,
    out_dir: str | Path,
    config: PredictConfig | None = None,
    *,
    target: TargetSettings | None = None,
    whatif: dict[str, Any] | None = None,
    progress: Progress | None = None,
    max_body: int = MAX_BODY,
) -> Prediction:
    """Predict from ``trace_path`` and write DIR/prediction.json + report; return the prediction.

    ``config``: the method's settings (alpha, thresholds, mappings, the sweep's plan;
    ``paired_full_run`` also measures the full target with the whole trace, each
    repetition next to its scaled twin, into DIR/full-curve.json, for
    ``run_validate(..., full_run="paired")``). ``target``: where the runs happen
    (:class:`~shrink.providers.TargetSettings`: the testbed with its server recipe,
    which is recorded with its versions in the result, or the simulator; the load
    generator's placement here, or a Ray cluster). ``whatif``: a what-if prediction
    the report shows beside this one. ``max_body``: the longest request body the trace
    may hold, in bytes.
    """
    config = config or PredictConfig()
    target = target or TargetSettings()
    out = Path(out_dir)
    trace = Trace.read_parquet(trace_path, max_body=max_body)
    provider = make_provider(target, run_dir=out / "runs", trace=trace)
    inputs = RunInputs(trace_path, target, whatif, docroot_start=docroot_at_start(target))
    res = predict(
        trace, provider, config, out,
        extrapolator=extrapolate_mappings, progress=progress, inputs=inputs,
    )  # fmt: skip
    pred = res.prediction
    write_report(out, pred, measured=res.measured, predicted_curve=res.predicted, whatif=whatif)
    return pred


def run_validate(
    prediction_path: str | Path,
    *,
    full_run: str = "run",
    trace: str | Path | None = None,
    out_dir: str | Path | None = None,
    progress: Progress | None = None,
    server: str | None = None,
    cluster: ClusterSpec | None = None,
    max_body: int = MAX_BODY,
    given: dict[str, str | None] | None = None,
) -> Validation:
    """Validate a prediction against a full-scale curve.

    ``full_run``: ``run`` measures it now; ``paired`` takes the one measured
    alongside the scaled runs (``run_predict(..., paired_full_run=True)``); any
    other value is the path of a full-scale curve JSON. ``server`` (default: the
    prediction's recipe) runs the full target on another recipe, e.g. to check a
    prediction made on one stack against the other. ``given``: the simulator's spec
    (``target``), the ``machine`` file or the ``docroot`` at another path than the
    prediction records (moved or copied), accepted when it is the one predict read.
    """
    named = {"--server": server, **{f"--{k}": v for k, v in (given or {}).items()}}
    for option, value in named.items():
        if value is not None and full_run != "run":
            raise ParameterError(
                f"{option} {value} sets up a full-scale run made now; "
                f"--full-run {full_run} runs nothing (use --full-run run)"
            )
    ppath = Path(prediction_path)
    pred = Prediction.read_json(ppath)
    base = ppath.parent
    out = Path(out_dir) if out_dir else base
    thresholds = {k: float(v) for k, v in (pred.thresholds or {}).items()}
    if not thresholds:
        # Nothing to compare: a validation of no MAT was written and exited 0.
        raise TraceFormatError("prediction has no thresholds: no MAT to validate", path=ppath)
    predicted = LoadCurve.read_json(base / "predicted-curve.json")
    measured = LoadCurve.read_json(base / "measured-curve.json")
    if full_run == "run":
        full = _measure_full(
            pred, out, trace, thresholds, progress,
            server=server, cluster=cluster, max_body=max_body, given=given,
        )  # fmt: skip
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
    differs = curve_differences(pred, full, _validated_mapping(pred))
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
    if full.sweep.paired:
        near = [m["measured"] for m in v.mats.values() if m.get("measured_status") == "ok"]
        v.cost_ratio = cost_ratio(measured, full, near)
        if v.cost_ratio is not None:
            # What the errors would be had the full target cost per request what the share
            # did: a rough figure (near the knee latency grows with the cost too).
            v.cost_ratio["adjusted_error"] = cost_adjusted_errors(v.mats, v.cost_ratio["median"])
    v.meta = {
        "shrink_version": __version__,
        "prediction": str(ppath),
        "full_run": full_run,
        "mapping": mapping,
        "paired": full.sweep.paired,
        "server": full.sweep.target.get("server") or pred.server,
        "server_versions": full.sweep.target.get("versions"),
        # What the curve given records otherwise than the prediction (said on stderr and
        # in the report): a validation of another trace, mapping, machine or version.
        **({"differs": differs} if differs else {}),
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
        measured_file=base / "measured-curve.json",
    )
    return v


def _measure_full(
    pred: Prediction,
    out: Path,
    trace: str | Path | None,
    thresholds: dict[str, float],
    progress: Progress | None,
    *,
    server: str | None,
    cluster: ClusterSpec | None,
    max_body: int = MAX_BODY,
    given: dict[str, str | None] | None = None,
) -> LoadCurve:
    """Measure the full target now and write ``out/full-curve.json``.

    Stopped part-way (a signal, a dead server), the finished levels are kept in
    ``full-curve.partial.json``; a full-curve.json that cannot be written (a full disk)
    leaves its levels on the error, for the CLI to keep a summary of them."""
    inputs = pred.inputs or {}
    trace_path = Path(trace) if trace else Path(inputs["trace"])
    full_trace = _named_trace(pred, trace_path, max_body, given=bool(trace))
    inputs = check_recorded_files(inputs, server=server, given=given)
    settings = target_settings(inputs, server=server, cluster=cluster)
    provider = make_provider(settings, run_dir=out / "runs-full", trace=full_trace)
    plan = full_run_plan(inputs)
    cpus = list(provider.server_cpus())
    if plan.probe_level is None and hasattr(provider, "probe_level"):
        # As predict's: the simulator finds the full target's capacity first. Its search
        # started at a tenth of the trace's rate, where a sparse log (10,000 requests in
        # 3.5 days) has no request in a window, after predict had measured it.
        plan = replace(
            plan, probe_level=provider.probe_level(full_trace, Share.whole(cpus), "rate_factor")
        )
    try:
        with provider.open(Share.whole(cpus), _validated_mapping(pred)) as target:
            full = auto_sweep(
                target,
                full_trace,
                thresholds,
                plan=plan,
                seed=int(pred.seed or 0) + 7919,
                alpha=1.0,
                progress=progress,
                pairing=Pairing(keep=KeepLevels(out / "full-curve.partial.json")),
            )
    except (SweepInterrupted, ShrinkError) as stop:
        if stop.curve is not None and stop.curve.levels:
            make_dirs(out)
            path = stop.curve.write_json(out / "full-curve.partial.json")
            stop.kept = [*stop.kept, KeptCurve(path, len(stop.curve.levels))]
        raise
    try:
        full.write_json(out / "full-curve.json")
    except WriteError as exc:
        exc.curve = full
        raise
    return full


def _named_trace(pred: Prediction, path: Path, max_body: int, *, given: bool = False) -> Trace:
    """The trace ``prediction.json`` names (or the one ``given`` with --trace), read, and
    the one predict measured: a copied prediction folder (another machine, a moved
    project) names a path that may be gone, or hold another file, which validate measured
    at full scale for the minutes that takes and only then said its trace differs; so
    did a --trace naming another trace."""
    if given:
        full_trace = Trace.read_parquet(path, max_body=max_body)
        recorded = (pred.trace or {}).get("fingerprint")
        if recorded and full_trace.fingerprint() != recorded:
            raise OptionError(
                "--trace",
                f"{path}: not the trace this prediction measured (its rows' fingerprint is "
                f"{full_trace.fingerprint()}, the prediction's {recorded}): a validation "
                "measures the workload predict measured; give that trace (a copy or a move "
                "of it is the same)",
            )
        return full_trace
    if not path.exists():
        # an older prediction.json names the trace as it was typed, relative to the
        # folder predict ran in: "t.parquet: no such file" named a file never given here
        where = "" if path.is_absolute() else ", relative to the folder predict ran in"
        raise ParameterError(
            f"{path}: no such file (the trace prediction.json names{where}): give the "
            "trace with --trace"
        )
    full_trace = Trace.read_parquet(path, max_body=max_body)
    recorded = (pred.trace or {}).get("fingerprint")
    if recorded and full_trace.fingerprint() != recorded:
        raise ParameterError(
            f"{path}: not the trace this prediction measured (its rows' fingerprint is "
            f"{full_trace.fingerprint()}, the prediction's {recorded}): it changed since "
            "predict, or the prediction was copied from another folder or machine; give "
            "the trace with --trace"
        )
    return full_trace


def full_run_plan(inputs: dict[str, Any]) -> AutoPlan:
    """The plan of a validation's full run, from a prediction's ``inputs``: the user's
    plan over the same part of the trace as the prediction's runs (its skip and loop
    window). The full target runs unscaled: keys of ``inputs.plan`` that are no
    AutoPlan setting (the swept side's ``scaled_time`` and ``share_load``, which some
    prediction.json files list there) are left out."""
    recorded = {k: v for k, v in (inputs.get("plan") or {}).items() if k in PLAN_FIELDS}
    plan = AutoPlan(**{**AutoPlan().__dict__, **recorded})
    plan = replace(plan, skip=float(inputs.get("skip", 0.0)))
    if inputs.get("loop_window") is not None:
        plan = replace(plan, loop_window=float(inputs["loop_window"]))
    return plan


def _trace_pair(predicted: dict[str, Any], measured: dict[str, Any]) -> tuple[Any, Any]:
    """The two traces as told apart: by their rows' fingerprint where both curves record
    one (two traces of ``shrink synth`` have one source, whatever their seed or rate),
    else by their source."""
    a, b = predicted.get("fingerprint"), measured.get("fingerprint")
    if a and b:
        return f"{predicted.get('source')} ({a})", f"{measured.get('source')} ({b})"
    return predicted.get("source"), measured.get("source")


def curve_differences(pred: Prediction, full: LoadCurve, mapping: str) -> dict[str, list[str]]:
    """What a full-scale curve records otherwise than the prediction it validates, each as
    [the prediction's, the curve's]: the shrink version, the mapping, the machine and the
    trace's source, where both record one. `validate --full-run CURVE` took a curve of
    another trace, machine and version without a word."""
    # (free-form notes: what is not an object, an edited or damaged file, records nothing)
    trace = full.meta.get("trace") if isinstance(full.meta.get("trace"), dict) else {}
    last_run = full.meta.get("last_run") if isinstance(full.meta.get("last_run"), dict) else {}
    pairs = {
        "shrink_version": (
            (pred.provenance or {}).get("shrink"),
            full.sweep.target.get("shrink_version") or last_run.get("shrink_version"),
        ),
        "mapping": (mapping, full.mapping),
        "machine": ((pred.machine or {}).get("name"), (full.machine or {}).get("name")),
        "trace": _trace_pair(pred.trace or {}, trace or {}),
    }
    return {k: [str(a), str(b)] for k, (a, b) in pairs.items() if a and b and a != b}


def _validated_mapping(pred: Prediction) -> str:
    """The mapping a validation runs: the one the prediction names, else 1-replica."""
    return str(pred.extra.get("validated_mapping", "1-replica"))
