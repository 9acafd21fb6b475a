"""``shrink sweep``: measure a live server at each load level; write a LoadCurve."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shrink.checks import MIN_WINDOW_S
from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    cli_errors,
    console,
    echo_json,
    exit_nothing_served,
    output_path,
    parse_duration_option,
    parse_lag_limit,
    plural,
    printing,
)
from shrink.cli._derived import refuse_long_derived, sweep_twins
from shrink.cli._replay_opts import (
    AWAKE_NONE_RAN,
    AWAKE_NOT_RAN,
    ENGINE_DEFAULTS,
    EngineOptions,
    _Export,
    _Json,
    _limit_text,
    _ms,
    _progress_sweep,
    _Targets,
    _warn_docroot,
    alpha_mismatch,
    engine_options,
    generator_hint,
    naming_trace,
)
from shrink.cli._runlogs import claim_runlogs, refuse_curve_among_runlogs
from shrink.cli._sweep_keep import (
    OUTPUT_FOLDER,
    RUNLOGS_FOLDER,
    _curve_summary,
    _export_summary,
    _keep_partial_exports,
    _keep_partial_sweep,
    _write_curve,
    keep_levels,
)
from shrink.cli._typed_paths import file_out
from shrink.defaults import DURATION, MAX_BODY, MAX_REPS, REPS, WARMUP
from shrink.errors import OptionError, ParameterError, ShrinkError, printable

if TYPE_CHECKING:  # pydantic is heavy: the CLI's start-up must not load it
    from shrink.measure.keep import FolderGuard
    from shrink.schemas import GeneratorMeta


def _levels(text: str, knob: str = "rate_factor") -> list[float]:
    """The levels of ``--levels``: numbers > 0, each once; whole numbers with ``--knob users``.
    ``knob`` is checked first: an unknown one was refused as "knob == ..." (exit 1), once
    the trace was read and the target set up, naming no option."""
    from shrink.checks import parse_number
    from shrink.cli._locale import note_split_decimal
    from shrink.measure import KNOBS

    if knob not in KNOBS:
        raise OptionError("--knob", f"{knob!r}; accepted: {', '.join(KNOBS)}")

    try:
        out = [parse_number(x) for x in text.split(",") if x.strip()]
    except ParameterError:
        raise OptionError("--levels", f"{text!r}: must be numbers separated by commas") from None
    note_split_decimal("--levels", text)
    if not out or not all(math.isfinite(x) and x > 0 for x in out):
        raise OptionError("--levels", f"{text!r}: must name at least one level, each > 0")
    part = next((x for x in out if knob == "users" and not x.is_integer()), None)
    if part is not None:
        # Taken, 10.5 users ran as a rate factor of 10.5 / the trace's users, and the curve
        # named a level of users no one can have.
        raise OptionError(
            "--levels",
            f"{text!r}: with --knob users a level is a number of users, a whole number "
            f"({part:g} is not); use --knob rate_factor for a fraction of the trace's load",
        )
    shown = [f"{x:g}" for x in out]
    twice = sorted({x for x, t in zip(out, shown, strict=True) if shown.count(t) > 1})
    if twice:
        # The curve held two levels of one value, each with its own repetitions; two that
        # print alike (1 and 1.0000000001) wrote one export file (level-1.hlog) twice,
        # the first level's lost, and no output could tell them apart.
        raise OptionError(
            "--levels", f"{text!r} names level {twice[0]:g} twice; use --reps to repeat a level"
        )
    return out


def _guard(output: Path, runlogs: Path | None) -> FolderGuard:
    """The sweep's output folders as they are now (:class:`FolderGuard`)."""
    import os

    from shrink.measure.keep import FolderGuard

    return FolderGuard(
        {
            OUTPUT_FOLDER: Path(os.path.abspath(output)).parent,
            RUNLOGS_FOLDER: None if runlogs is None else Path(os.path.abspath(runlogs)),
        }
    )


def _guarded(progress: Any, guard: FolderGuard) -> Any:
    """``progress``, the folders checked before each run (whose RunLog a folder
    unmounted under the sweep would lose)."""

    def tell(what: str, done: int, total: int) -> None:
        if done < total:
            guard.check()
        progress(what, done, total)

    return tell


_MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve the sweep's progress as OpenMetrics (Prometheus) on "
        "127.0.0.1:PORT/metrics while it runs (0: any free port).",
    ),
]


@engine_options
def sweep_cmd(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file.")],
    target: _Targets = ...,  # type: ignore[assignment]
    levels: Annotated[
        str,
        typer.Option("--levels", help="Load levels: 0.5,1,1.5 (a point, in any locale)."),
    ] = ...,  # type: ignore[assignment]
    output: Annotated[
        Path,
        file_out("LoadCurve JSON to write."),
    ] = ...,  # type: ignore[assignment]
    knob: Annotated[
        str, typer.Option("--knob", help="What levels are: rate_factor | users | rate.")
    ] = "rate_factor",
    warmup: Annotated[str, typer.Option("--warmup", help="Warm-up per run (0s: none).")] = WARMUP,
    duration: Annotated[
        str, typer.Option("--duration", help="Measurement window per level.")
    ] = DURATION,
    reps: Annotated[
        int, typer.Option("--reps", min=1, max=MAX_REPS, help="Repetitions per level.")
    ] = REPS,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Base seed.")] = 0,
    runlogs: Annotated[
        Path | None,
        typer.Option("--runlogs", readable=False, help="Keep every run's RunLog in this folder."),
    ] = None,
    max_body: MaxBodyOpt = MAX_BODY,
    live: EngineOptions = ENGINE_DEFAULTS,
    metrics_port: _MetricsPort = None,
    export: _Export = None,
    as_json: _Json = False,
) -> None:
    """Measure latency and throughput at each load level; write a LoadCurve JSON.

    With --export, beside it: CURVE-hdr/level-L.hlog (HdrHistogram log, one interval
    per repetition) and level-L.hgrm (wrk2's percentile spectrum), CURVE_stats.csv and
    CURVE_stats_history.csv (Locust's --csv), CURVE_requests.csv (k6's --out csv).

    Per level: throughput, mean, p50/p90/p99/p99.9 (exact), per class, the share's
    CPU utilization, errors, and the generator's self-check (a level where it fell
    behind is flagged and left out of every MAT).
    """
    from shrink.export import RecordingTarget, level_samples, parse_exports, write_sweep_exports
    from shrink.measure import SweepHooks, SweepInterrupted, sweep
    from shrink.trace import Trace

    with cli_errors(), contextlib.ExitStack() as held:
        output_path(output, inputs=(trace,))
        output_path(runlogs, kind="dir", what="--runlogs")
        refuse_curve_among_runlogs(output, runlogs)
        claim_runlogs(held, runlogs)
        held.enter_context(naming_trace(trace))
        # Every option before the trace is read or the target touched.
        lv = _levels(levels, knob)
        w = parse_duration_option(warmup, "warmup", zero_ok=True)
        d = parse_duration_option(duration, "duration", least=MIN_WINDOW_S)
        formats = parse_exports(export)
        refuse_long_derived(output, sweep_twins(output, formats))
        tr = Trace.read_parquet(trace, max_body=max_body)
        tgt = live.target(target, runlog_dir=runlogs)
        _warn_docroot(tgt, tr, trace)
        if mismatch := alpha_mismatch(tgt, tr, trace):
            typer.echo(mismatch, err=True)
        guard = _guard(output, runlogs)
        keeper = keep_levels(output, guard)
        try:
            # (every run's requests are kept only for the exports asked for; for the
            # metrics alone, the last run of each level and the totals)
            asked = bool(formats) or metrics_port is not None
            recorder = RecordingTarget(tgt, (tr, lv, knob), keep=asked, last_only=not formats)
            with _metrics(recorder, metrics_port) as served:
                curve = _progress_sweep(
                    lambda progress: sweep(
                        recorder,
                        tr,
                        lv,
                        knob=knob,
                        reps=reps,
                        warmup=w,
                        duration=d,
                        seed=seed,
                        hooks=SweepHooks(_guarded(_told(progress, served), guard), keeper),
                    )
                )
            _check_folders(guard, curve)
        except (SweepInterrupted, ShrinkError) as stop:
            # A signal, a dead server, a full disk: the levels finished before it are kept,
            # with the exports asked for of them.
            _keep_partial_sweep(stop, output, runlogs, guard, keeper)
            _keep_partial_exports(stop, output, tr, recorder.runs, formats)
            raise
        curve.meta["summary"] = _curve_summary(curve)
        curve.sweep = curve.sweep.with_(generator=_generator_meta(live, tgt))
        # The finished levels first, before any export (a full disk keeps them).
        _write_curve(curve, output, keeper)
        exports = (
            write_sweep_exports(output, level_samples(curve, tr, recorder.runs), formats)
            if formats
            else []
        )
    with printing(output, *exports):
        _print_sweep(curve, knob, output, exports, as_json)
    why = _nothing_served(curve)
    if why is not None:
        exit_nothing_served(why)  # everything is written and printed first


def _check_folders(guard: FolderGuard, curve: Any) -> None:
    """The last check before the curve is written: a folder changed since the last
    level stops the sweep with every level (kept as a stopped sweep's are)."""
    from shrink.errors import FolderChangedError

    try:
        guard.check()
    except FolderChangedError as exc:
        exc.curve = curve
        raise


def _nothing_served(curve: Any) -> str | None:
    """Why no level measured the server (None when one did): exit status 1."""
    served = [lv for lv in curve.levels if any(r.overall.n for r in lv.reps)]
    if not served:
        fails: dict[str, int] = {}
        for lv in curve.levels:
            for k, v in lv.failure_counts().items():
                fails[k] = fails.get(k, 0) + v
        answering = sum(r.answering or 0 for lv in curve.levels for r in lv.reps)
        if answering:
            return (
                f"no level had a request answered: {fails.get('transport', 0):,} failed, "
                f"{answering:,} of them timed out after the server had begun to answer: "
                "it is up, and its answers began but none completed within --timeout "
                "(a large file, a slow page); raise --timeout or check those paths"
            )
        if fails.get("transport"):
            return (
                f"no level had a request answered ({fails['transport']:,} failed to connect "
                "or timed out): is the server up at the --target address?"
            )
        return "no level had a request answered: does the server have the trace's pages?"
    if all(lv.failed for lv in curve.levels):
        return (
            f"every level failed (over {_limit_text()} of its requests): not the server "
            "serving the trace; check the server's error log and the trace's pages"
        )
    return None


def _generator_meta(live: EngineOptions, tgt: Any) -> GeneratorMeta:
    """How the sweep's load generator was set up, and which replay engine ran."""
    from shrink.schemas import GeneratorMeta

    return GeneratorMeta(
        routing=live.routing,
        conns_per_session=live.conns,
        lag_limit=parse_lag_limit(live.lag_limit),
        engine=tgt.describe()["engine"],
    )


def _print_sweep(curve: Any, knob: str, output: Path, exports: list[Path], as_json: bool) -> None:
    """Per level: throughput, mean, p99.9, utilization, and why a level is excluded."""
    rows = [
        {
            "level": x.level,
            "throughput": x.throughput,
            "mean": x.stat("mean")[0],
            "p999": x.stat("p999")[0],
            "utilization": x.utilization,
            "generator_behind": x.generator_behind,
            "errors": sum(r.errors for r in x.reps),
            "failed": x.failed,
            "send_lag_p99": _max_lag(x),
            # the longest any repetition was known stopped (a signal, job control)
            "stopped": max((r.generator_stopped or 0.0 for r in x.reps), default=0.0) or None,
            # part of the generator gone in a repetition (an engine process killed)
            "generator_lost": any(r.generator_lost for r in x.reps),
            # why mean and p99.9 are null (JSON has no NaN)
            **({} if math.isfinite(x.stat("mean")[0]) else {"note": "no request was served"}),
        }
        for x in curve.levels
    ]
    from shrink.report.text import thin_tail_text
    from shrink.selfchecks import crowded_levels, thin_tails

    crowded = crowded_levels(curve)
    need, thin = thin_tails(curve, "p999")
    for r in rows:
        r["other_cpu"] = crowded.get(float(r["level"]))
        # the fewest requests behind the p99.9 in a repetition, where too few for one
        r["p999_requests"] = thin.get(float(r["level"])) if math.isfinite(r["p999"]) else None
    engine_ran = curve.sweep.generator.engine
    if as_json:
        exported = [str(p) for p in exports]
        echo_json({"curve": str(output), "engine": engine_ran, "levels": rows, "exports": exported})
        return
    from shrink.replay.selfcheck import stop_explains

    limit = curve.sweep.generator.lag_limit
    for r in rows:
        # (a stop within the lag limit made nothing late: the level was late for another cause)
        r_stop = stop_explains(r["stopped"], limit)
        flag = ""
        if r["generator_behind"]:
            lag = r["send_lag_p99"]
            why = (  # else it was stopped (or, on a cluster, lost) and sent nothing late
                f"send lag p99 {_ms(lag)} > {_ms(limit)}"
                if lag is not None and (limit is None or lag > limit)
                else "stopped or lost"
            )
            if r_stop:
                why = f"shrink itself was stopped for {r['stopped']:.2g} s"
            elif r["generator_lost"]:
                why = "part of the generator was gone mid-run (an engine process, a cluster one)"
            flag = f"  GENERATOR BEHIND ({why}: excluded)"
        if r["failed"]:
            flag += f"  {r['errors']} FAILED (over {_limit_text()}: excluded)"
        elif r["errors"]:
            flag += f"  errors {r['errors']}"
        if r["other_cpu"] is not None:
            flag += f"  OTHER WORK {100 * r['other_cpu']:.0f}% of a share CPU"
        util = "-" if r["utilization"] is None else f"{100 * r['utilization']:.0f}%"
        typer.echo(
            f"{knob} {r['level']:g}: {r['throughput']:,.1f} req/s  mean {_ms(r['mean'])}  "
            f"p99.9 {_ms(r['p999'])}{'' if r['p999_requests'] is None else '*'}  "
            f"util {util}{flag}"
        )
    if thin := {r["level"]: r["p999_requests"] for r in rows if r["p999_requests"] is not None}:
        typer.echo(f"*: that p99.9 {thin_tail_text(need, thin)}")
    typer.echo(f"curve: {printable(output)} (engine: {engine_ran})")
    if curve.sweep.target.get("awake") and curve.sweep.target.get("awake_spinners") == 0:
        why = curve.sweep.target.get("awake_why_not")  # (known: no idle cgroup for them)
        typer.echo(AWAKE_NONE_RAN if not why else AWAKE_NOT_RAN.format(why=why), err=True)
    # (a level behind because shrink was stopped, or part of its generator was gone, is
    # not other work on its CPU)
    behind = sum(
        bool(r["generator_behind"])
        and not stop_explains(r["stopped"], limit)
        and not r["generator_lost"]
        for r in rows
    )
    if behind:
        rt = curve.sweep.target.get("realtime")
        typer.echo(generator_hint(plural(behind, "level"), rt), err=True)
    if crowded:
        typer.echo(crowded_warning(crowded, curve.sweep.target.get("share_cpus")), err=True)
    if exports:
        typer.echo(f"also: {', '.join(printable(p) for p in _export_summary(exports))}")


def crowded_warning(crowded: dict[float, float], cpus: object) -> str:
    """The line that says levels ran beside other work on the share's CPUs (``cpus``, as
    a curve's target records them: not named when they are not a list of CPUs)."""
    from shrink.topology import format_cpulist, recorded_cpus

    where = f" ({format_cpulist(cpus)})" if (cpus := recorded_cpus(cpus)) else ""
    return (
        f"warning: other work (not the server's processes) took up to "
        f"{100 * max(crowded.values()):.0f}% of a CPU on the share's CPUs{where} at "
        f"{plural(len(crowded), 'level')} ({', '.join(f'{x:g}' for x in crowded)}): those "
        "levels measured a server sharing its CPUs, not the share alone; stop what else "
        "runs there (another load on the server, a busy process) and measure them again"
    )


def _max_lag(lv: Any) -> float | None:
    lags = [r.send_lag_p99 for r in lv.reps if r.send_lag_p99 is not None]
    return max(lags) if lags else None


@contextmanager
def _metrics(recorder: Any, port: int | None) -> Iterator[Any]:
    """Serve the recorder's runs as OpenMetrics while the sweep runs (when asked); yields
    the server (None when not asked)."""
    if port is None:
        yield None
        return
    from shrink.export.metrics import MetricsServer

    with as_option("--metrics-port"):  # in use: refused before a run, as a bad value (exit 2)
        server = MetricsServer(recorder.runs, port, recorder.totals)
    with server:
        console().print(f"metrics: http://127.0.0.1:{server.port}/metrics", highlight=False)
        yield server


def _told(progress: Any, served: Any) -> Any:
    """``progress``, also naming the run under way on the metrics server, when one serves
    (its ``shrink_sweep_running_info``: running that run, finished once the last is done)."""
    if served is None:
        return progress

    def tell(what: str, done: int, total: int) -> None:
        served.current = what if done < total else ""
        served.state = "running" if done < total else "finished"
        progress(what, done, total)

    return tell


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to ``app``."""
    app.command("sweep")(sweep_cmd)
