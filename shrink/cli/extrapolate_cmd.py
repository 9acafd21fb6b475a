"""The extrapolation commands: ``shrink calibrate``, ``whatif`` and ``extrapolate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    bounded_mats,
    cli_errors,
    echo_json,
    exit_if_bound,
    fmt_number,
    note_if_partial,
    output_path,
    threshold_text,
)
from shrink.cli._typed_paths import file_out
from shrink.defaults import MAX_BODY, THRESHOLDS_TEXT
from shrink.errors import printable
from shrink.jsonout import dumps

_CAL_HELP = "'published' (fit the papers' figures) or a calibration JSON from 'shrink calibrate'."


def _fmt_ci(stat: dict[str, Any]) -> str:
    from shrink.mat import mat_text

    return f"{mat_text(stat.get('mat'), stat.get('status'), stat.get('ci')):>10}"


def _workload_text(d: dict[str, Any]) -> str | None:
    """The workload and thresholds a what-if is for, and the demands it calibrated: the
    simulator and ``predict`` on a synthesized trace may run another workload."""
    wl = d.get("workload")
    if not wl:
        return None
    thr = ", ".join(threshold_text(s, t) for s, t in (wl.get("thresholds") or {}).items())
    par = (d.get("calibration") or {}).get("parameters") or {}
    ds, dd = (par.get(k, {}).get("value") for k in ("demand_static", "demand_dynamic"))
    demands = (
        ""
        if ds is None or dd is None
        else f" (calibrated: {ds * 1e6:,.3g} us a static request, {dd * 1e3:,.3g} ms a "
        "PHP page, one core)"
    )
    return (
        f"workload {printable(wl.get('name'))}: {100 * wl.get('dynamic_fraction', 0):.1f}% dynamic"
        f"{demands}; thresholds {thr}"
    )


def _print_prediction(d: dict[str, Any], title: str) -> None:
    typer.echo(f"== {printable(title)} ==")
    first = next(iter(d["mappings"].values()))
    stats = [k for k, v in first.items() if isinstance(v, dict) and "mat" in v]
    head = "".join(f"{'MAT ' + threshold_text(s, first[s]['threshold']):<34} " for s in stats)
    typer.echo(f"{'mapping':<22} {head}")
    for name, m in d["mappings"].items():
        mark = "  <- recommended" if name == d["recommended"] else ""
        cols = "".join(f"{_fmt_ci(m[s]):<34} " for s in stats)
        typer.echo(f"{name:<22} {cols}{mark}")
    typer.echo(f"reason: {d['reason']}")
    from shrink.report.recommendation import usl_note

    note = usl_note(d.get("usl"))
    if note:
        typer.echo(note)
    line = _workload_text(d)
    if line:
        typer.echo(line)
    sweep = d.get("sweep")
    if sweep:
        from shrink.report.recommendation import sweep_best_text

        typer.echo(sweep_best_text(sweep))
        for c in sweep["crossovers"]:
            typer.echo(
                f"  crossover {c['from']} -> {c['to']} at dynamic fraction "
                f"{c['dynamic_fraction']:.4f}"
            )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g}ms"


def _with_interval(value: float, lo: float, hi: float) -> str:
    return f"{fmt_number(value)}  [{fmt_number(lo)}, {fmt_number(hi)}]"


def _print_calibration(cal: dict[str, Any]) -> None:
    typer.echo(f"calibration: {printable(cal.get('name', ''))}")
    for name, p in cal["parameters"].items():
        typer.echo(f"  {name:<20} {_with_interval(p['value'], p['lo'], p['hi'])}")
    if cal.get("figures"):
        typer.echo("  figure                           printed      model  within precision")
        for f in cal["figures"]:
            typer.echo(
                f"  {f['figure']:<30} {fmt_number(f['published']):>9} "
                f"{fmt_number(f['model']):>10}  {'yes' if f['within_precision'] else 'NO'}"
            )
    for c in cal.get("checks", []):
        typer.echo(
            f"  check (not fitted) {c['figure']}: printed {fmt_number(c['published'])}, "
            f"model {fmt_number(c['model'])}"
        )


def calibrate(
    curves: Annotated[
        list[Path] | None, typer.Argument(help="LoadCurve JSON files (none: the published fit).")
    ] = None,
    thresholds: Annotated[
        str, typer.Option(help="SLA thresholds for the MATs, e.g. mean=10ms,p99.9=500ms.")
    ] = THRESHOLDS_TEXT,
    machine: Annotated[
        Path | None, typer.Option(help="Machine spec TOML the curves were measured on.")
    ] = None,
    output: Annotated[
        Path | None,
        file_out("Write JSON here."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fit the model's physical parameters: to your own paired runs, or to the papers' figures."""
    from extrapolate.calibration import fit_curves, fit_published
    from extrapolate.whatif import calibration_summary
    from shrink.checks import parse_thresholds
    from shrink.loadcurve import LoadCurve
    from shrink.machine import Machine

    with cli_errors():
        output_path(output, inputs=(*(curves or ()), machine))
        # Checked with or without curves: mean=5min went unnoticed with none.
        with as_option("--thresholds"):
            thr = parse_thresholds(thresholds)
        if curves:
            loaded = [LoadCurve.read_json(p) for p in curves]
            for lc, p in zip(loaded, curves, strict=True):
                note_if_partial(lc, p)
            m = Machine.read_toml(machine) if machine else None
            model = fit_curves(loaded, thr, machine=m)
        else:
            model = fit_published()
        if output:
            model.write_json(output)
        if json_out:
            echo_json(model.to_dict())
        else:
            _print_calibration(calibration_summary(model))
            for wl, u in getattr(model, "usl_", {}).items():
                if "sigma" in u:
                    typer.echo(
                        f"  USL ({wl}, one-socket shares {u['core_counts']}): "
                        f"sigma {_with_interval(u['sigma'], *u['sigma_ci'])}, "
                        f"kappa {_with_interval(u['kappa'], *u['kappa_ci'])}"
                    )
            if output:
                typer.echo(f"wrote {printable(output)}")


def whatif(
    machine: Annotated[Path, typer.Option(help="Machine spec TOML to predict.")],
    workload: Annotated[
        list[str], typer.Option(help="tcp, support or a trace (Parquet); repeat for several.")
    ],
    calibration: Annotated[str, typer.Option(help=_CAL_HELP)] = "published",
    sweep: Annotated[bool, typer.Option(help="Sweep the dynamic fraction.")] = True,
    output: Annotated[
        Path | None,
        file_out("Write JSON here."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Predict MATs (mean and p99.9) and latency curves for each mapping, and recommend one."""
    from extrapolate.calibration import load_calibration
    from extrapolate.whatif import resolve_workload
    from extrapolate.whatif import whatif as run_whatif
    from shrink.machine import Machine

    with cli_errors():
        output_path(output, inputs=(machine,))
        mach = Machine.read_toml(machine)
        model = load_calibration(calibration)
        # every workload named before the first is predicted
        resolved = [resolve_workload(w, model, max_body=max_body) for w in workload]
        preds = {}
        for wl in resolved:
            preds[wl.name] = run_whatif(mach, wl, model, sweep=sweep).to_dict()
        doc: dict[str, Any] = (
            next(iter(preds.values()))
            if len(preds) == 1
            else {"schema": "shrink.whatif/1", "predictions": preds}
        )
        if output:
            from shrink.atomic import write_text

            write_text(output, dumps(doc, indent=1, sort_keys=True, default=float) + "\n")
        if json_out:
            echo_json(doc)
            return
        _print_calibration(next(iter(preds.values()))["calibration"])
        for name, d in preds.items():
            _print_prediction(d, f"{name} on {mach.name}")


def extrapolate(
    curve: Annotated[Path, typer.Argument(help="LoadCurve JSON measured on a share.")],
    machine: Annotated[Path, typer.Option(help="Machine spec TOML of the full machine.")],
    mapping: Annotated[
        list[str] | None, typer.Option(help="Mapping(s) to predict (default: all).")
    ] = None,
    calibration: Annotated[str, typer.Option(help=_CAL_HELP)] = "published",
    thresholds: Annotated[
        str, typer.Option(help="SLA thresholds, e.g. mean=10ms,p99.9=500ms (p95: any percentile).")
    ] = THRESHOLDS_TEXT,
    output: Annotated[
        Path | None,
        file_out("Write JSON here."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Predict the full machine from one measured share curve (SHRiNK + cross-socket)."""
    from extrapolate.calibration import load_calibration
    from extrapolate.remap import extrapolate_curve
    from shrink.checks import parse_thresholds
    from shrink.errors import ExtrapolationError
    from shrink.loadcurve import LoadCurve
    from shrink.machine import Machine
    from shrink.mapping import check_mapping_names, check_mappings
    from shrink.scaling import share_fraction

    with cli_errors():
        output_path(output, inputs=(curve, machine))
        with as_option("--thresholds"):
            th = parse_thresholds(thresholds)
        check_mapping_names(mapping or [], "--mapping")
        mach = Machine.read_toml(machine)
        check_mappings(mapping or [], mach, mach.all_cpus, "--mapping")
        lc = LoadCurve.read_json(curve)
        note_if_partial(lc, curve)
        try:  # a curve SHRiNK cannot scale, named by its file
            share_fraction(lc)
        except ExtrapolationError as exc:
            raise ExtrapolationError(f"{printable(curve)}: {exc}") from None
        model = load_calibration(calibration)
        pred, _ = extrapolate_curve(lc, model, mach, mappings=mapping or None, thresholds=th)
        if output:
            pred.write_json(output)
        if json_out:
            echo_json(pred.to_dict())
            exit_if_bound(bounded_mats(pred.mappings))
            return
        d = pred.to_dict()
        for name, m in d["mappings"].items():
            parts = [
                f"{s} {_fmt_ci(v)}" for s, v in m.items() if isinstance(v, dict) and "mat" in v
            ]
            typer.echo(f"{name:<22} " + "  ".join(parts))
        if d["recommended"]:
            typer.echo(f"recommended: {d['recommended']}: {d['reason']}")
        else:
            typer.echo(d["reason"])
        if output:
            typer.echo(f"wrote {printable(output)}")
    exit_if_bound(bounded_mats(pred.mappings))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("calibrate")(calibrate)
    app.command("whatif")(whatif)
    app.command("extrapolate")(extrapolate)
