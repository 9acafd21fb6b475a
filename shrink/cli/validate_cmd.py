"""``shrink validate``: a prediction compared with the full target, measured now or given."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.cli._cluster import ClusterOpt, GeneratorsOpt, cluster_spec
from shrink.cli._common import (
    MaxBodyOpt,
    cli_errors,
    echo_json,
    exit_if_bound,
    output_path,
    stat_label,
)
from shrink.cli._sweep_keep import _keep_smaller
from shrink.cli.predict_cmd import _claim, _progress
from shrink.defaults import MAX_BODY
from shrink.errors import OptionError, WriteError, printable

# The files a prediction names besides its trace, given at another path than it records.
_SAME = " (moved or copied): used when its fingerprint is the one predict recorded, else refused."
_Spec = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="sim:SPEC.toml, the simulator's spec the prediction read" + _SAME,
    ),
]
_Machine = Annotated[
    Path | None,
    typer.Option("--machine", help="The machine file (TOML) the prediction read" + _SAME),
]
_Docroot = Annotated[
    Path | None,
    typer.Option("--docroot", help="The document root the prediction read" + _SAME),
]


def validate(
    prediction: Annotated[Path, typer.Argument(help="prediction.json from shrink predict.")],
    full_run: Annotated[
        str,
        typer.Option(
            "--full-run",
            help="'run' to measure the full target now, 'paired' for the full-scale runs "
            "taken alongside the prediction (predict --paired-full-run), or a LoadCurve JSON.",
        ),
    ] = "run",
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Full trace (default: the predicted one).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", readable=False, help="Output directory (default: beside)."),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Server recipe of the full-scale run (default: the prediction's): "
            "lighttpd-php-cgi, nginx-php-fpm, or a RECIPE.toml file.",
        ),
    ] = None,
    target: _Spec = None,
    machine: _Machine = None,
    docroot: _Docroot = None,
    cluster: ClusterOpt = None,
    generators: GeneratorsOpt = None,
    max_body: MaxBodyOpt = MAX_BODY,
    as_json: Annotated[bool, typer.Option("--json", help="Print validation.json.")] = False,
) -> None:
    """Compare a prediction with the full-scale measurement (run now, or given).

    Writes DIR/validation.json (mat_error_mean, mat_error_p999: relative errors;
    Wasserstein-1 distances at matched loads) and refreshes the report.

    Before a run, the files the prediction read (the trace, the simulator's spec, the
    machine file, the document root, a recipe file) are checked against the fingerprints
    it recorded, and a changed or missing one is refused. A document root counts by each
    entry's name (a link by its target, not followed; a FIFO or device by its kind) and
    each file's size and first and last 64 KiB. Not seen: a change in the middle of a
    file over 128 KiB that keeps its size (the modification time is not counted, so a
    copy with new times is the same), a change of owner, mode or time alone, anything
    past the walk's first 200,000 entries or 60 s, and, once 1 GiB is read, a later
    file's content (its name and size count). A refusal names what differs among the
    first 1,000 entries only, shallowest first.
    """
    from shrink.pipeline import run_validate
    from shrink.report.sections.validation import differences_text

    with cli_errors(), _claim(output_path(out, kind="dir"), prediction):
        from shrink.cli._derived import inside, refuse_long_derived

        refuse_long_derived(out, inside(out, "validate"))
        if target is not None and not target.startswith("sim:"):
            raise OptionError("--target", f"{target!r}: validate takes sim:SPEC.toml only")
        given = {
            "target": target[4:] if target else None,
            "machine": None if machine is None else str(machine),
            "docroot": None if docroot is None else str(docroot),
        }
        if full_run == "run":
            try:
                with _progress("full-scale run") as progress:
                    v = run_validate(
                        prediction,
                        full_run=full_run,
                        trace=trace,
                        out_dir=out,
                        progress=progress,
                        server=server,
                        cluster=cluster_spec(cluster, generators),
                        max_body=max_body,
                        given=given,
                    )
            except WriteError as exc:
                if exc.curve is not None and not exc.kept:
                    # No room for the full-scale curve: its summary is kept, as sweep's.
                    exc.kept = _keep_smaller(exc.curve, Path(exc.path), exc)
                raise
        else:  # nothing to run: no progress bar
            bound = {"max-body": None if max_body == MAX_BODY else max_body}
            _refuse_run_options(
                full_run, trace=trace, cluster=cluster, generators=generators, **bound,
                target=target, machine=machine, docroot=docroot,
            )  # fmt: skip
            v = run_validate(prediction, full_run=full_run, trace=trace, out_dir=out, server=server)
    d = v.to_dict()
    # a predicted or measured MAT that is only a bound: the error is not a figure
    bound = {
        s: m.get("predicted_status") != "ok" or m.get("measured_status") != "ok"
        for s, m in d["mats"].items()
    }
    bounds = [stat_label(s) for s, b in bound.items() if b]
    if not d.get("full_quiet", True):
        typer.echo(
            f"warning: other work took up to {100 * d['full_other_cpu']:.0f}% of the full "
            "target's CPUs during its runs: its MATs are not the server's alone, and the "
            "validation is inconclusive",
            err=True,
        )
    if differs := differences_text(d["meta"].get("differs") or {}):
        typer.echo(f"warning: {printable(differs)}", err=True)
    if as_json:
        echo_json(d)
        exit_if_bound(bounds)
        return
    for line in validation_lines(d, bound):
        typer.echo(line)
    typer.echo(f"wrote {printable((out or prediction.parent) / 'validation.json')}")
    exit_if_bound(bounds)


def validation_lines(d: dict[str, Any], bound: dict[str, bool]) -> list[str]:
    """Each statistic's predicted and measured MAT and the error, one line each."""
    from shrink.mat import mat_text
    from shrink.report.sections.validation import error_text

    out = []
    for stat, m in d["mats"].items():
        # No error without both MATs (a prediction whose MAT is NaN: JSON null); against
        # a bound, the side the error lies on, in the report's words ("at most +364.1%").
        err = "n/a" if m["error"] is None else error_text(m)
        out.append(
            f"{stat_label(stat)}: predicted {mat_text(m['predicted'], m.get('predicted_status'))} "
            f"req/s, measured {mat_text(m['measured'], m.get('measured_status'))} req/s, "
            f"error {err}"
            + (" (a MAT is only a bound)" if bound[stat] and "bound" not in err else "")
        )
    return out


def _refuse_run_options(full_run: str, **given: object) -> None:
    """An option of the full-scale run made now, given where none is made: it was
    ignored, and the validation read as if it had used it."""
    for name, value in given.items():
        if value is not None:
            raise OptionError(
                f"--{name}",
                f"{value} would set up a full-scale run made now, but --full-run {full_run} "
                "runs nothing (use --full-run run)",
            )


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
