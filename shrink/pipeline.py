"""File-level entry points of the main job (what the CLI, the demo and examples call).

``run_predict`` reads a trace, makes the provider, predicts, writes the
prediction and its report. ``run_validate`` runs (or reads) the full-scale curve
for a prediction, compares, writes validation.json and refreshes the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from shrink.atomic import write_text
from shrink.autolevels import AutoPlan, auto_sweep
from shrink.errors import ParameterError, TraceFormatError
from shrink.loadcurve import LoadCurve
from shrink.mapping import BUILTIN_MAPPINGS
from shrink.mat import MATResult
from shrink.predict import PredictConfig, predict
from shrink.providers import make_provider
from shrink.report.build import write_report
from shrink.trace import Trace
from shrink.validate import Validation, cost_adjusted_errors, cost_ratio, validate

__all__ = ["run_predict", "run_validate"]

Progress = Callable[[str, int, int], None]


def _extrapolator() -> Callable[..., dict[str, dict[str, Any]]] | None:
    """The cross-socket extrapolation of :mod:`extrapolate`, when installed."""
    try:
        from extrapolate.pipeline import extrapolate_mappings
    except ImportError:
        return None
    return extrapolate_mappings


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
) -> dict[str, Any]:
    """Predict from ``trace_path`` and write DIR/prediction.json + report; return the dict.

    ``paired_full_run`` also measures the full target with the whole trace, each
    repetition next to its scaled twin, into DIR/full-curve.json (for
    ``run_validate(..., full_run="paired")``).
    """
    out = Path(out_dir)
    trace = Trace.read_parquet(trace_path)
    provider = make_provider(
        target, machine=machine, docroot=docroot, run_dir=out / "runs", server_cpus=server_cpus
    )
    cfg = PredictConfig(
        alpha=alpha,
        level=level,
        thresholds=dict(thresholds or {"mean": 0.005, "p999": 0.5}),
        mappings=tuple(mappings),
        share_kind=share_kind,
        seed=seed,
        calibration=calibration,
        plan=plan or AutoPlan(),
        paired_full_run=paired_full_run,
        time_scaling=time_scaling,
        skip=skip,
    )
    res = predict(trace, provider, cfg, out, extrapolator=_extrapolator(), progress=progress)
    pred = res.prediction
    pred["inputs"] = {
        "trace": str(Path(trace_path)),
        "target": target,
        "machine": machine,
        "docroot": None if docroot is None else str(docroot),
        "server_cpus": list(provider.server_cpus()),
        "plan": plan.__dict__ if plan else AutoPlan().__dict__,
        # how many times longer the share's runs were than the plan's (SHRiNK time scaling)
        "scaled_time": res.measured.meta.get("scaled_time", 1.0),
        "skip": res.measured.meta.get("skip", 0.0),
    }
    if whatif is not None:
        pred["whatif"] = whatif
    write_text(out / "prediction.json", json.dumps(pred, indent=2, sort_keys=True) + "\n")
    write_report(out, pred, measured=res.measured, predicted_curve=res.predicted, whatif=whatif)
    return pred


def _read_prediction(path: Path) -> dict[str, Any]:
    try:
        pred = json.loads(path.read_text())
    except FileNotFoundError:
        raise TraceFormatError("no such prediction file", path=path) from None
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from exc
    if pred.get("schema") != "shrink.prediction/1":
        raise TraceFormatError("not a shrink prediction (schema shrink.prediction/1)", path=path)
    return pred


def run_validate(
    prediction_path: str | Path,
    *,
    full_run: str = "run",
    trace: str | Path | None = None,
    out_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> Validation:
    """Validate a prediction against a full-scale curve.

    ``full_run``: ``run`` measures it now; ``paired`` takes the one measured
    alongside the scaled runs (``run_predict(..., paired_full_run=True)``); any
    other value is the path of a full-scale curve JSON.
    """
    ppath = Path(prediction_path)
    pred = _read_prediction(ppath)
    base = ppath.parent
    out = Path(out_dir) if out_dir else base
    thresholds = {k: float(v) for k, v in pred["thresholds"].items()}
    predicted = LoadCurve.read_json(base / "predicted-curve.json")
    measured = LoadCurve.read_json(base / "measured-curve.json")
    if full_run == "run":
        inputs = pred.get("inputs") or {}
        trace_path = Path(trace) if trace else Path(inputs["trace"])
        full_trace = Trace.read_parquet(trace_path)
        provider = make_provider(
            inputs.get("target", "testbed"),
            machine=inputs.get("machine", "this"),
            docroot=inputs.get("docroot"),
            run_dir=out / "runs-full",
            server_cpus=tuple(inputs.get("server_cpus") or ()) or None,
        )
        plan = AutoPlan(**{**AutoPlan().__dict__, **(inputs.get("plan") or {})})
        # The same part of the trace as the prediction's runs (its skip), at the plan's
        # own time scale: the full target is the unscaled one.
        plan = replace(plan, skip=float(inputs.get("skip", 0.0)), scaled_time=1.0)
        cpus = list(provider.server_cpus())
        share = {"kind": "all", "cpus": cpus, "fraction": 1.0}
        with provider.open(share, pred.get("validated_mapping", "1-replica")) as target:
            full = auto_sweep(
                target,
                full_trace,
                thresholds,
                plan=plan,
                seed=int(pred["seed"]) + 7919,
                alpha=1.0,
                progress=progress,
            )
        full.write_json(out / "full-curve.json")
    elif full_run == "paired":
        if not (pred.get("full_run") or {}).get("paired"):
            raise ParameterError(
                f"{ppath} was predicted without a paired full-scale run: predict with "
                "--paired-full-run, or validate with --full-run run"
            )
        full = LoadCurve.read_json(base / str(pred["full_run"].get("curve", "full-curve.json")))
    else:
        full = LoadCurve.read_json(full_run)
    if full.alpha != 1.0:
        raise ParameterError(f"the full-scale curve has alpha == {full.alpha:g}, must be 1.")
    # Compare the MATs predicted for the mapping that was run (cross-socket corrections
    # included), not the SHRiNK-scaled curve alone; distributions come from that curve.
    mapping = pred.get("validated_mapping", "1-replica")
    per_mapping = (pred.get("mappings") or {}).get(mapping, {})
    predicted_mats = {
        s: MATResult(
            float(per_mapping[s]["mat"]),
            (float(per_mapping[s]["ci"][0]), float(per_mapping[s]["ci"][1])),
            s,
            float(thresholds[s]),
            str(per_mapping[s].get("status", "ok")),
        )
        for s in thresholds
        if s in per_mapping and per_mapping[s].get("mat") is not None
    }
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
    }
    v.write_json(out / "validation.json")
    write_report(
        out,
        pred,
        measured=measured,
        full_run=full,
        predicted_curve=predicted,
        validation=v,
        whatif=pred.get("whatif"),
    )
    return v
