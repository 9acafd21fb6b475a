"""``shrink synth support|tcp``: write a synthetic trace and the document root it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.checks import parse_duration
from shrink.cli._common import cli_errors, echo_json, options_named, output_path, plural
from shrink.cli._typed_paths import file_out
from shrink.errors import printable

synth_app = typer.Typer(help="Synthetic workloads (Support-like sessions, 1 KiB tcp).",
                        no_args_is_help=True)  # fmt: skip

_Users = Annotated[int, typer.Option("--users", help="Concurrent users (session slots).")]
_Duration = Annotated[str, typer.Option("--duration", help="Trace length: seconds or 30s, 2m, 1h.")]
_Seed = Annotated[int, typer.Option("--seed", help="Random seed: same seed, same bytes.")]
_Out = Annotated[
    Path,
    file_out("Trace Parquet file to write."),
]
_Docroot = Annotated[
    Path | None,
    typer.Option("--docroot", readable=False, help="Also write the document root here."),
]
_Json = Annotated[bool, typer.Option("--json", help="Print a JSON summary.")]
# The generators' names of the values the options give.
_SUPPORT_OPTIONS = {
    "users": "--users",
    "duration": "--duration",
    "seed": "--seed",
    "dynamic_fraction": "--dynamic-fraction",
    "rf": "--rf",
    "dynamic work_us": "--dynamic-work-us",
    "dynamic mem_kib": "--dynamic-mem-kib",
    "think_mean_s": "--think-mean",
    "think_max_s": "--think-mean",
    "exit_probability": "--exit-probability",
    "not_modified_fraction": "--not-modified-fraction",
    "dirscaling": "--dirscaling",
    "stagger_s": "--stagger",
    "max_download_bytes": "--max-download-bytes",
}
_TCP_OPTIONS = {
    "rate": "--rate",
    "duration": "--duration",
    "seed": "--seed",
    "arrival": "--arrival",
}


def _report(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        echo_json(summary)
        return
    typer.echo(
        f"wrote {printable(summary['trace'])}: {plural(summary['requests'], 'request')}, "
        f"{plural(summary['sessions'], 'session')}, "
        f"dynamic {100 * summary['dynamic_fraction']:.2f} %"
    )
    if "docroot" in summary:
        d = summary["docroot"]
        typer.echo(
            f"docroot {printable(d['root'])}: {d['static_files']} static files "
            f"({d['written']} written, {d['unchanged']} unchanged, "
            f"{d['bytes_on_disk'] / 2**20:,.1f} MiB, {d['capped']} capped)"
        )


@synth_app.command("support")
def support(
    users: _Users,
    duration: _Duration,
    output: _Out,
    seed: _Seed = 0,
    docroot: _Docroot = None,
    dynamic_fraction: Annotated[
        float, typer.Option(help="Share of requests that are dynamic (the papers: 0.05).")
    ] = 0.05,
    rf: Annotated[
        float,
        typer.Option(help="Modified Support: share of dynamic requests made static, same size."),
    ] = 0.0,
    dynamic_work_us: Annotated[
        float | None,
        typer.Option(help="Mean CPU work of a dynamic request, microseconds (rescales pages)."),
    ] = None,
    dynamic_mem_kib: Annotated[
        float | None,
        typer.Option(help="Mean working set of a dynamic request, KiB (rescales pages)."),
    ] = None,
    think_mean: Annotated[
        float, typer.Option(help="Mean think time, seconds (exponential, truncated).")
    ] = 10.0,
    exit_probability: Annotated[
        float, typer.Option(help="Chance a session ends after each page.")
    ] = 0.15,
    not_modified_fraction: Annotated[
        float, typer.Option(help="Share of image requests answered 304 (If-Modified-Since).")
    ] = 0.0,
    dirscaling: Annotated[
        float, typer.Option(help="Download directories per user (the papers: 0.00625).")
    ] = 0.00625,
    stagger: Annotated[
        float | None,
        typer.Option(
            help="Spread the users' first sessions over this many seconds "
            "(default: one mean think time)."
        ),
    ] = None,
    max_download_bytes: Annotated[
        int | None,
        typer.Option(help="Cap download files (and their trace sizes) at this many bytes."),
    ] = None,
    as_json: _Json = False,
) -> None:
    """Support-like sessions (SPECweb2009 Support): dynamic PHP pages, images, downloads."""
    from shrink.synth import SupportParams, build_site, support_docroot, synth_support

    with cli_errors(measures=False):
        output_path(output)
        output_path(docroot, kind="dir", what="--docroot")
        with options_named(_SUPPORT_OPTIONS):
            seconds = parse_duration(duration)
            params = SupportParams(
                dynamic_fraction=dynamic_fraction,
                rf=rf,
                think_mean_s=think_mean,
                think_max_s=6.0 * think_mean,
                exit_probability=exit_probability,
                not_modified_fraction=not_modified_fraction,
                dirscaling=dirscaling,
                max_download_bytes=max_download_bytes,
            )
            if dynamic_work_us is not None or dynamic_mem_kib is not None:
                params = params.scaled(work_us=dynamic_work_us, mem_kib=dynamic_mem_kib)
            site = build_site(params, users)
            trace = synth_support(
                users, seconds, seed=seed, params=params, site=site, stagger_s=stagger
            )
        _refuse_empty(trace, "lengthen the duration, or shorten --stagger or --think-mean")
        trace.write_parquet(output)
        summary = _summary(trace, output)
        if docroot is not None:
            summary["docroot"] = support_docroot(docroot, site).to_dict()
            _check_paths(trace, docroot)
    _report(summary, as_json)


@synth_app.command("tcp")
def tcp(
    rate: Annotated[float, typer.Option("--rate", help="Requests per second.")],
    duration: _Duration,
    output: _Out,
    seed: _Seed = 0,
    docroot: _Docroot = None,
    arrival: Annotated[
        str, typer.Option(help="constant (even spacing) or poisson (exponential gaps).")
    ] = "poisson",
    as_json: _Json = False,
) -> None:
    """Open-loop requests for one static 1 KiB file (1,024 bytes), /static/file1k.bin."""
    from shrink.synth import synth_tcp, tcp_docroot

    with cli_errors(measures=False):
        output_path(output)
        output_path(docroot, kind="dir", what="--docroot")
        with options_named(_TCP_OPTIONS):
            seconds = parse_duration(duration)
            trace = synth_tcp(rate, seconds, seed=seed, arrival=arrival)  # type: ignore[arg-type]
        _refuse_empty(trace, "raise the rate or the duration")
        trace.write_parquet(output)
        summary = _summary(trace, output)
        if docroot is not None:
            summary["docroot"] = tcp_docroot(docroot).to_dict()
            _check_paths(trace, docroot)
    _report(summary, as_json)


def _refuse_empty(trace: Any, advice: str) -> None:
    """An empty draw is the library's answer to too short a trace, but a file of it
    was useless (exit 0, and every later step refused it): the command says so."""
    from shrink.errors import ParameterError

    if len(trace) == 0:
        meta = trace.meta
        raise ParameterError(
            f"the parameters drew no request ({meta.get('duration', 0):g} s, seed "
            f"{meta.get('seed')}); {advice}."
        )


def _check_paths(trace: Any, docroot: Path) -> None:
    """Every path of the trace must be a file of the docroot (cheap: distinct paths only)."""
    import pyarrow.compute as pc

    from shrink.errors import ShrinkError
    from shrink.synth import missing_paths

    missing = missing_paths(docroot, pc.unique(trace.table.column("path")).to_pylist())
    if missing:
        raise ShrinkError(f"{docroot}: {len(missing)} trace paths have no file, e.g. {missing[0]}")


def _summary(trace: Any, output: Path) -> dict[str, Any]:
    info = trace.info()
    out = {
        "schema": "shrink.synth/1",
        "trace": str(output),
        "requests": info.requests,
        "sessions": info.sessions,
        "duration": info.duration,
        "request_rate": info.request_rate,
        "dynamic_fraction": info.dynamic_fraction,
    }
    for key in ("workload", "mode", "users", "seed", "expected_dynamic_fraction", "rate"):
        if key in trace.meta:
            out[key] = trace.meta[key]
    return out


def register(app: typer.Typer) -> None:
    """Add ``shrink synth`` to ``app``."""
    app.add_typer(synth_app, name="synth")
