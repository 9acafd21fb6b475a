"""``shrink replay``, ``sweep`` and ``mat``: drive a live server, read the curve."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer

from shrink.checks import check_positive, parse_duration, parse_threshold
from shrink.cli._cluster import ClusterOpt, GeneratorsOpt, cluster_spec
from shrink.cli._common import (
    STATS,
    cli_errors,
    console,
    echo_json,
    output_path,
    stat_label,
    stat_name,
)
from shrink.errors import ParameterError
from shrink.mat import EXIT_BOUND, MATResult, mat_text
from shrink.replay.cluster import ClusterSpec
from shrink.topology import parse_cpulist

if TYPE_CHECKING:
    from shrink.loadcurve import LoadCurve

_Targets = Annotated[
    list[str],
    typer.Option(
        "--target",
        help="Testbed state JSON (shrink testbed up) or http://ADDR:PORT URLs; repeat per replica.",
    ),
]
_Json = Annotated[bool, typer.Option("--json", help="Print a JSON summary.")]
_Mode = Annotated[
    str, typer.Option("--mode", help="auto (from the trace) | session (wsesslog) | open.")
]
_Routing = Annotated[
    str, typer.Option("--routing", help="hash (by session) | round-robin over the addresses.")
]
_Conns = Annotated[
    int,
    typer.Option(
        "--conns",
        help="Connections per session for embedded requests (1: one keep-alive connection "
        "per session, as httperf --wsesslog).",
    ),
]
_Procs = Annotated[
    int | None,
    typer.Option("--processes", help="Engine processes (default: one per generator CPU)."),
]
_NewConn = Annotated[
    bool,
    typer.Option("--conn-per-request", help="Open mode: a new TCP connection for every request."),
]
_GenCpus = Annotated[
    str | None,
    typer.Option("--generator-cpus", help="CPU list for engine processes, e.g. 0 or 0,2."),
]
_Overlap = Annotated[
    bool, typer.Option("--allow-overlap", help="Let the generator run on the share's CPUs.")
]
_Remote = Annotated[
    bool, typer.Option("--allow-remote", help="Allow targets that are not loopback addresses.")
]
_LagLimit = Annotated[
    str, typer.Option("--lag-limit", help="Send-lag p99 above which the generator is behind.")
]
_Timeout = Annotated[str, typer.Option("--timeout", help="Per-request timeout.")]
_Realtime = Annotated[
    int,
    typer.Option(
        "--realtime",
        help="Run the engine SCHED_FIFO at this priority (root; for machines shared with "
        "other work). 0: normal scheduling.",
    ),
]
_EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Replay engine: auto (the native core when built, else Python) | native | python.",
    ),
]


def _cpus(text: str | None) -> list[int] | None:
    return None if text is None else list(parse_cpulist(text))


def _target(
    targets: list[str],
    *,
    routing: str,
    conns: int,
    timeout: str,
    generator_cpus: str | None,
    allow_overlap: bool,
    allow_remote: bool,
    lag_limit: str,
    mode: str,
    loop: bool = True,
    warm_start: bool = True,
    runlog_dir: Path | None = None,
    realtime: int = 0,
    conn_per_request: bool = False,
    processes: int | None = None,
    engine: str = "auto",
    cluster: ClusterSpec | None = None,
) -> Any:
    from shrink.replay.live import LiveTarget

    items = [x for t in targets for x in t.split(",") if x]
    return LiveTarget.from_targets(
        items,
        generator_cpus=_cpus(generator_cpus),
        allow_overlap=allow_overlap,
        allow_remote=allow_remote,
        config={
            "routing": routing,
            "conns_per_session": conns,
            "timeout": parse_duration(timeout, "timeout"),
            "conn_per_request": conn_per_request,
        },
        mode=mode,
        loop=loop,
        warm_start=warm_start,
        lag_limit=parse_duration(lag_limit, "lag limit"),
        runlog_dir=runlog_dir,
        realtime=realtime,
        processes=processes,
        engine=engine,
        cluster=cluster,
    )


def replay(
    trace: Annotated[
        Path | None, typer.Argument(help="Trace Parquet file (omit with --rate for open loop).")
    ] = None,
    target: _Targets = ...,  # type: ignore[assignment]
    output: Annotated[Path, typer.Option("-o", "--out", help="RunLog Parquet to write.")] = ...,  # type: ignore[assignment]
    rate_factor: Annotated[
        float, typer.Option("--rate-factor", help="Speed-up of the trace's session starts.")
    ] = 1.0,
    duration: Annotated[
        str | None,
        typer.Option("--duration", help="Run length (default: one pass of the trace)."),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Pure open loop without a trace: requests per second."),
    ] = None,
    arrival: Annotated[
        str, typer.Option("--arrival", help="With --rate: constant | poisson.")
    ] = "constant",
    path: Annotated[
        str, typer.Option("--path", help="With --rate: the URL path to request.")
    ] = "/static/file1k.bin",
    seed: Annotated[int, typer.Option("--seed", help="Seed of Poisson arrivals.")] = 0,
    mode: _Mode = "auto",
    routing: _Routing = "hash",
    conns: _Conns = 1,
    timeout: _Timeout = "10s",
    generator_cpus: _GenCpus = None,
    allow_overlap: _Overlap = False,
    allow_remote: _Remote = False,
    lag_limit: _LagLimit = "1ms",
    realtime: _Realtime = 0,
    conn_per_request: _NewConn = False,
    processes: _Procs = None,
    engine: _EngineOpt = "auto",
    cluster: ClusterOpt = None,
    generators: GeneratorsOpt = None,
    as_json: _Json = False,
) -> None:
    """Replay a trace (or an open-loop rate) against a live server; write the RunLog.

    Latency is counted from each request's intended send time; the summary says
    whether the generator kept to its schedule (generator_behind).
    """
    from shrink.schedule import open_loop_trace
    from shrink.trace import Trace

    with cli_errors():
        output_path(output)
        if rate is not None:
            seconds = parse_duration(duration or "10s")
            tr = open_loop_trace(path, rate, seconds, arrival=arrival, seed=seed)
            rf = 1.0
        elif trace is None:
            raise ParameterError("give a TRACE file, or --rate for a pure open-loop run.")
        else:
            tr = Trace.read_parquet(trace)
            rf = check_positive(rate_factor, "rate factor")
            if duration is None:
                t = tr.table.column("t").to_numpy()
                span = float(t.max() - t.min()) if t.size else 0.0
                seconds = max(span / rf, 1e-3)
            else:
                seconds = parse_duration(duration)
        tgt = _target(
            target,
            routing=routing,
            conns=conns,
            timeout=timeout,
            generator_cpus=generator_cpus,
            allow_overlap=allow_overlap,
            allow_remote=allow_remote,
            lag_limit=lag_limit,
            mode=mode,
            loop=duration is not None and rate is None,
            # as httperf: the run starts empty (a sweep starts in the steady state)
            warm_start=False,
            realtime=realtime,
            conn_per_request=conn_per_request,
            processes=processes,
            engine=engine,
            cluster=cluster_spec(cluster, generators),
        )
        _warn_docroot(tgt, tr, trace)
        res = tgt.run(tr, rate_factor=rf, warmup=0.0, duration=seconds, out=output)
        summary = _summary(res, output)
    if as_json:
        echo_json(summary)
    else:
        _print_summary(summary)
    if summary["interrupted"]:
        raise typer.Exit(code=130)


def _summary(res: Any, output: Path) -> dict[str, Any]:
    from shrink.measure import level_stats, was_interrupted

    st = level_stats(res)
    g = res.generator
    o = st.overall
    return {
        "schema": "shrink.replay-summary/1",
        "runlog": str(output),
        "engine": (res.describe or {}).get("engine", {}).get("engine"),
        "requests": len(res.runlog),
        "window": list(res.window),
        "intended_rate": g.intended_rate,
        "achieved_rate": g.achieved_rate,
        "throughput": st.throughput,
        "generator_behind": g.behind,
        "behind_reason": g.reason,
        "send_lag_p50": g.send_lag_p50,
        "send_lag_p99": g.send_lag_p99,
        "send_lag_max": g.send_lag_max,
        "generator_cpu": g.cpu,
        "utilization": res.utilization,
        "errors": st.errors,
        "failures": st.failures,
        "failed": st.failed,
        "latency": {"mean": o.mean, "p50": o.p50, "p90": o.p90, "p99": o.p99, "p999": o.p999},
        "per_class": {
            c: {"n": s.n, "mean": s.mean, "p50": s.p50, "p99": s.p99, "p999": s.p999}
            for c, s in st.per_class.items()
        },
        "interrupted": was_interrupted(res),
    }


def _ms(x: float | None) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x * 1e3:.3f} ms"


def _failure_text(s: dict[str, Any]) -> str:
    """`` (transport 0, 4xx 12, 5xx 0)`` when anything failed."""
    f = s.get("failures") or {}
    if not any(f.values()):
        return ""
    return (
        f" (transport {f.get('transport', 0):,}, 4xx {f.get('http_4xx', 0):,}, "
        f"5xx {f.get('http_5xx', 0):,})"
    )


def _limit_text() -> str:
    from shrink.loadcurve import FAILURE_LIMIT

    return f"{100 * FAILURE_LIMIT:g}%"


def _print_summary(s: dict[str, Any]) -> None:
    lat = s["latency"]
    typer.echo(
        f"{s['requests']:,} requests -> {s['runlog']} (engine: {s['engine']})\n"
        f"rate: intended {s['intended_rate']:,.1f}/s, achieved {s['achieved_rate']:,.1f}/s, "
        f"completed {s['throughput']:,.1f}/s, errors {s['errors']}{_failure_text(s)}\n"
        f"latency: mean {_ms(lat['mean'])}  p50 {_ms(lat['p50'])}  p99 {_ms(lat['p99'])}  "
        f"p99.9 {_ms(lat['p999'])}\n"
        f"send lag: p50 {_ms(s['send_lag_p50'])}  p99 {_ms(s['send_lag_p99'])}"
        + ("" if s["generator_cpu"] is None else f"  generator CPU {s['generator_cpu']:.2f} cores")
        + ("" if s["utilization"] is None else f"  share busy {100 * s['utilization']:.0f}%")
    )
    if s["generator_behind"]:
        typer.echo(f"GENERATOR BEHIND: {s['behind_reason']} (not a server result)")
    if s["failed"]:
        typer.echo(
            f"FAILED REQUESTS: {s['errors']} of {s['requests']:,} (over {_limit_text()}): "
            "not the server serving the trace; such a level is never used for a MAT"
        )
    if s["interrupted"]:
        typer.echo(f"interrupted: the requests sent so far are kept in {s['runlog']}")


def _levels(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ParameterError(f"levels == {text!r}, must be numbers separated by commas.") from None
    if not out:
        raise ParameterError(f"levels == {text!r}, must name at least one level.")
    return out


def _progress_sweep(fn: Any) -> Any:
    """Run ``fn(progress)`` under a rich progress bar (what runs, time left).

    Off a terminal, one line per run instead (a bar drawn to a pipe shows nothing).
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from shrink.cli._progress import line_progress, on_terminal

    if not on_terminal():
        return fn(line_progress("", "runs"))

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} runs"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=1)

        def progress(desc: str, step: int, total: int) -> None:
            bar.update(task, description=desc, completed=step, total=total)

        return fn(progress)


def _curve_summary(curve: Any) -> list[dict[str, Any]]:
    """Per level: each statistic as [mean over repetitions, 95% CI low, high] (NaN: null)."""

    def triple(lv: Any, stat: str) -> list[float | None]:
        return [None if not np.isfinite(v) else float(v) for v in lv.stat(stat)]

    return [
        {
            "level": lv.level,
            "reps": len(lv.reps),
            **{st: triple(lv, st) for st in ("throughput", "mean", "p50", "p90", "p99", "p999")},
            "utilization": lv.utilization,
            "errors": sum(r.errors for r in lv.reps),
            "failures": lv.failure_counts(),
            "failed": lv.failed,
            "generator_behind": lv.generator_behind,
        }
        for lv in curve.levels
    ]


def _warn_docroot(tgt: Any, tr: Any, name: Any) -> None:
    """Before a run on a testbed: warn when its docroot lacks the trace's paths."""
    from shrink.testbed.coverage import docroot_coverage

    docroot = (tgt.state or {}).get("docroot")
    if docroot and Path(docroot).is_dir():
        line = docroot_coverage(tr, docroot).warning(str(name or "the trace"))
        if line:
            typer.echo(line, err=True)


def _keep_partial_sweep(stop: Any, output: Path, runlogs: Path | None) -> None:
    """Write an interrupted sweep's finished levels to OUTPUT's ``.partial.json`` twin."""
    if stop.curve.levels:
        path = output.with_name(output.name.removesuffix(".json") + ".partial.json")
        stop.curve.write_json(path)
        stop.kept.append(f"{path} ({len(stop.curve.levels)} finished levels)")
    if runlogs is not None and runlogs.is_dir() and any(runlogs.glob("*.parquet")):
        stop.kept.append(f"the run logs in {runlogs}")


def sweep_cmd(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file.")],
    target: _Targets = ...,  # type: ignore[assignment]
    levels: Annotated[
        str, typer.Option("--levels", help="Load levels, comma-separated (e.g. 1,2,4).")
    ] = ...,  # type: ignore[assignment]
    output: Annotated[Path, typer.Option("-o", "--out", help="LoadCurve JSON to write.")] = ...,  # type: ignore[assignment]
    knob: Annotated[
        str, typer.Option("--knob", help="What levels are: rate_factor | users | rate.")
    ] = "rate_factor",
    warmup: Annotated[str, typer.Option("--warmup", help="Warm-up per run.")] = "2s",
    duration: Annotated[str, typer.Option("--duration", help="Measurement window.")] = "10s",
    reps: Annotated[int, typer.Option("--reps", help="Repetitions per level.")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Base seed.")] = 0,
    runlogs: Annotated[
        Path | None, typer.Option("--runlogs", help="Keep every run's RunLog in this folder.")
    ] = None,
    mode: _Mode = "auto",
    routing: _Routing = "hash",
    conns: _Conns = 1,
    timeout: _Timeout = "10s",
    generator_cpus: _GenCpus = None,
    allow_overlap: _Overlap = False,
    allow_remote: _Remote = False,
    lag_limit: _LagLimit = "1ms",
    realtime: _Realtime = 0,
    conn_per_request: _NewConn = False,
    processes: _Procs = None,
    engine: _EngineOpt = "auto",
    cluster: ClusterOpt = None,
    generators: GeneratorsOpt = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            help="Serve the sweep's progress as OpenMetrics (Prometheus) on "
            "127.0.0.1:PORT/metrics while it runs (0: any free port).",
        ),
    ] = None,
    as_json: _Json = False,
) -> None:
    """Measure latency and throughput at each load level; write a LoadCurve JSON.

    Beside it: CURVE-hdr/level-L.hlog (HdrHistogram log, one interval per
    repetition) and level-L.hgrm (wrk2's percentile spectrum), CURVE_stats.csv and
    CURVE_stats_history.csv (Locust's --csv), CURVE_requests.csv (k6's --out csv).

    Per level: throughput, mean, p50/p90/p99/p99.9 (exact), per class, the share's
    CPU utilization, errors, and the generator's self-check (a level where it fell
    behind is flagged and left out of every MAT).
    """
    from shrink.export import RecordingTarget, level_samples, write_sweep_exports
    from shrink.measure import SweepInterrupted, sweep
    from shrink.trace import Trace

    with cli_errors():
        output_path(output)
        output_path(runlogs, kind="dir", what="--runlogs")
        tr = Trace.read_parquet(trace)
        tgt = _target(
            target,
            routing=routing,
            conns=conns,
            timeout=timeout,
            generator_cpus=generator_cpus,
            allow_overlap=allow_overlap,
            allow_remote=allow_remote,
            lag_limit=lag_limit,
            mode=mode,
            runlog_dir=runlogs,
            realtime=realtime,
            conn_per_request=conn_per_request,
            processes=processes,
            engine=engine,
            cluster=cluster_spec(cluster, generators),
        )
        lv = _levels(levels)
        w, d = parse_duration(warmup, "warmup"), parse_duration(duration, "duration")
        _warn_docroot(tgt, tr, trace)
        try:
            recorder = RecordingTarget(tgt)
            with _metrics(recorder, metrics_port):
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
                        progress=progress,
                    )
                )
        except SweepInterrupted as stop:
            _keep_partial_sweep(stop, output, runlogs)
            raise
        curve.meta["summary"] = _curve_summary(curve)
        curve.meta["generator"] = _generator_meta(routing, conns, lag_limit, tgt)
        curve.write_json(output)
        exports = write_sweep_exports(output, level_samples(curve, tr, recorder.runs))
    _print_sweep(curve, knob, output, exports, as_json)


def _generator_meta(routing: str, conns: int, lag_limit: str, tgt: Any) -> dict[str, Any]:
    """How the sweep's load generator was set up, and which replay engine ran."""
    return {
        "routing": routing,
        "conns_per_session": conns,
        "lag_limit": parse_duration(lag_limit, "lag limit"),
        "engine": tgt.describe()["engine"],
    }


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
        }
        for x in curve.levels
    ]
    engine_ran = curve.meta["generator"]["engine"]
    if as_json:
        exported = [str(p) for p in exports]
        echo_json({"curve": str(output), "engine": engine_ran, "levels": rows, "exports": exported})
        return
    for r in rows:
        flag = "  GENERATOR BEHIND (excluded)" if r["generator_behind"] else ""
        if r["failed"]:
            flag += f"  {r['errors']} FAILED (over {_limit_text()}: excluded)"
        elif r["errors"]:
            flag += f"  errors {r['errors']}"
        util = "-" if r["utilization"] is None else f"{100 * r['utilization']:.0f}%"
        typer.echo(
            f"{knob} {r['level']:g}: {r['throughput']:,.1f} req/s  mean {_ms(r['mean'])}  "
            f"p99.9 {_ms(r['p999'])}  util {util}{flag}"
        )
    typer.echo(f"curve: {output} (engine: {engine_ran})")
    typer.echo(f"also: {', '.join(str(p) for p in _export_summary(exports))}")


def _export_summary(paths: list[Path]) -> list[Path]:
    """The export files, the HdrHistogram folder named once."""
    folders = sorted({p.parent for p in paths if p.suffix in (".hlog", ".hgrm")})
    return [*(f / "" for f in folders), *(p for p in paths if p.suffix == ".csv")]


@contextmanager
def _metrics(recorder: Any, port: int | None) -> Iterator[None]:
    """Serve the recorder's runs as OpenMetrics while the sweep runs (when asked)."""
    if port is None:
        yield
        return
    from shrink.export.metrics import MetricsServer

    with MetricsServer(recorder.runs, port) as server:
        console.print(f"metrics: http://127.0.0.1:{server.port}/metrics", highlight=False)
        yield


def mat_cmd(
    curve: Annotated[Path, typer.Argument(help="LoadCurve JSON (shrink sweep).")],
    stat: Annotated[
        str, typer.Option("--stat", help="mean | p50 | p90 | p99 | p999 (or p99.9).")
    ] = "mean",
    threshold: Annotated[
        str, typer.Option("--threshold", help="SLA on the statistic, e.g. 5ms or 500ms.")
    ] = ...,  # type: ignore[assignment]
    cls: Annotated[
        str | None, typer.Option("--cls", help="Only this request class (static | dynamic).")
    ] = None,
    adaptive: Annotated[
        bool,
        typer.Option("--adaptive", help="Add levels around the crossing until the CI is narrow."),
    ] = False,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="With --adaptive: the trace to replay.")
    ] = None,
    target: Annotated[
        list[str] | None, typer.Option("--target", help="With --adaptive: state JSON or URLs.")
    ] = None,
    rel_width: Annotated[
        float,
        typer.Option("--rel-width", help="With --adaptive: stop when CI width / MAT <= this."),
    ] = 0.1,
    max_levels: Annotated[
        int, typer.Option("--max-levels", help="With --adaptive: at most this many added levels.")
    ] = 4,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="With --adaptive: write the extended curve here."),
    ] = None,
    generator_cpus: _GenCpus = None,
    allow_overlap: _Overlap = False,
    lag_limit: _LagLimit = "1ms",
    engine: _EngineOpt = "auto",
    as_json: _Json = False,
) -> None:
    """Maximum achievable throughput: where the statistic crosses the threshold, with a CI.

    When the threshold is not crossed within the measured range the MAT is only a
    bound, printed ">= X" (never reached) or "< X" (over at the lowest level), and
    the command exits with status 99 (as k6 does when a threshold fails).
    """
    from shrink.loadcurve import LoadCurve
    from shrink.mat import mat
    from shrink.replay.adaptive import refine

    with cli_errors():
        output_path(output)
        thr = parse_threshold(threshold, "threshold")
        lc = LoadCurve.read_json(curve)
        stat = stat_name(stat)
        if stat not in STATS:
            raise ParameterError(
                f"stat == {stat!r}, must be one of mean, p50, p90, p99, p999 (or p99.9)."
            )
        added: list[float] = []
        if adaptive:
            if trace is None or not target:
                raise ParameterError("--adaptive needs --trace and --target to run more levels.")
            from shrink.trace import Trace

            tgt = _target(
                target,
                routing=str(lc.meta.get("generator", {}).get("routing", "hash")),
                conns=int(lc.meta.get("generator", {}).get("conns_per_session", 1)),
                timeout="10s",
                generator_cpus=generator_cpus,
                allow_overlap=allow_overlap,
                allow_remote=False,
                lag_limit=lag_limit,
                mode="auto",
                engine=engine,
            )
            tr = Trace.read_parquet(trace)
            lc, added = _progress_sweep(
                lambda progress: refine(
                    tgt,
                    tr,
                    lc,
                    stat,
                    thr,
                    cls=cls,
                    rel_width=rel_width,
                    max_levels=max_levels,
                    progress=progress,
                )
            )
            lc.write_json(output or curve)
        res = mat(lc, stat, thr, cls=cls)
    d = res.to_dict()
    d["added_levels"] = added
    if as_json:
        echo_json(d)
    else:
        _print_mat(res, stat, thr, added, lc)
    if res.bound is not None:
        # The threshold was not crossed inside the measured range: not a MAT, a bound.
        raise typer.Exit(code=EXIT_BOUND)


def _print_mat(
    res: MATResult, stat: str, thr: float, added: list[float], lc: LoadCurve
) -> None:
    ci = "" if res.bound else f"  CI [{res.ci[0]:,.1f}, {res.ci[1]:,.1f}]"
    typer.echo(
        f"MAT ({stat_label(stat)} <= {_ms(thr)}): "
        f"{mat_text(res.mat, res.status, fmt=',.1f')} req/s{ci}  ({res.status})"
    )
    if res.bound == "lower":
        typer.echo(
            "the statistic stayed under the threshold at every level measured: the MAT is at "
            "least the highest throughput measured (measure higher levels for the MAT itself)"
        )
    elif res.bound == "upper":
        typer.echo(
            "the statistic was over the threshold already at the lowest level: the MAT lies "
            "below the lowest throughput measured (measure lower levels for the MAT itself)"
        )
    if res.stalled_ceiling is not None:
        typer.echo(
            f"hint: under {res.stalled_ceiling:,.1f} req/s, where the generator only stalled "
            "and the latency stayed over the threshold by more than twice its longest send "
            "lag (not a MAT: such levels are never used for one)"
        )
    failed = lc.failed_levels()
    if failed:
        typer.echo(
            f"levels left out (over {_limit_text()} of their requests failed): "
            + ", ".join(f"{lv.level:g} ({sum(r.errors for r in lv.reps)} failed)" for lv in failed)
        )
    if added:
        typer.echo(f"added levels: {', '.join(f'{x:g}' for x in added)}")


def register(app: typer.Typer) -> None:
    """Add ``replay``, ``sweep`` and ``mat`` to ``app``."""
    app.command("replay")(replay)
    app.command("sweep")(sweep_cmd)
    app.command("mat")(mat_cmd)
