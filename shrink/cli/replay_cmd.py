"""``shrink replay``: replay a trace (or an open-loop rate) against a live server.

Its :func:`register` also adds ``sweep`` (:mod:`shrink.cli.sweep_cmd`) and ``mat``
(:mod:`shrink.cli.mat_cmd`), in that order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from shrink import interrupts
from shrink.checks import MIN_WINDOW_S, check_positive
from shrink.cli import mat_cmd, sweep_cmd
from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    cli_errors,
    echo_json,
    exit_nothing_served,
    options_named,
    output_path,
    parse_duration_option,
    printing,
)
from shrink.cli._derived import refuse_long_derived, replay_parts
from shrink.cli._replay_opts import (
    AWAKE_NONE_RAN,
    AWAKE_NOT_RAN,
    ENGINE_DEFAULTS,
    EngineOptions,
    _Json,
    _limit_text,
    _ms,
    _Targets,
    _warn_docroot,
    engine_options,
    generator_hint,
    naming_trace,
    note_stale_parts,
)
from shrink.cli._typed_paths import file_out
from shrink.defaults import MAX_BODY
from shrink.errors import OptionError, ParameterError, printable

# What open_loop_trace calls the options it checks.
_OPEN_LOOP_OPTIONS = {"rate": "--rate", "arrival": "--arrival", "duration": "--duration"}


@engine_options
def replay(
    trace: Annotated[
        Path | None, typer.Argument(help="Trace Parquet file (omit with --rate for open loop).")
    ] = None,
    target: _Targets = ...,  # type: ignore[assignment]
    output: Annotated[
        Path,
        file_out("RunLog Parquet to write."),
    ] = ...,  # type: ignore[assignment]
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
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of Poisson arrivals.")] = 0,
    max_body: MaxBodyOpt = MAX_BODY,
    live: EngineOptions = ENGINE_DEFAULTS,
    as_json: _Json = False,
) -> None:
    """Replay a trace (or an open-loop rate) against a live server; write the RunLog.

    Latency is counted from each request's intended send time; the summary says
    whether the generator kept to its schedule (generator_behind).
    """
    from shrink.schedule import open_loop_trace
    from shrink.trace import Trace

    with cli_errors():
        output_path(output, inputs=(trace,))
        if rate is not None and trace is not None:
            # the run was an open loop, and the TRACE named went unread without a word
            raise OptionError(
                "--rate",
                f"a pure open-loop run replays no TRACE ({printable(str(trace))}): "
                "give the TRACE (and --rate-factor) or --rate, not both",
            )
        if rate is not None:
            seconds = parse_duration_option(duration or "10s", "duration", least=MIN_WINDOW_S)
            _check_path(path)
            # Refused values name their option (exit 2): "rate == 0" exited 1 naming none.
            with as_option("--rate"), options_named(_OPEN_LOOP_OPTIONS):
                tr = open_loop_trace(path, rate, seconds, arrival=arrival, seed=seed)
            rf = 1.0
        elif trace is None:
            raise ParameterError("give a TRACE file, or --rate for a pure open-loop run.")
        else:
            tr = Trace.read_parquet(trace, max_body=max_body)
            with as_option("--rate-factor"):
                rf = check_positive(rate_factor, "rate factor")
            if duration is None:
                t = tr.table.column("t").to_numpy()
                span = float(t.max() - t.min()) if t.size else 0.0
                seconds = max(span / rf, MIN_WINDOW_S)
            else:
                seconds = parse_duration_option(duration, "duration", least=MIN_WINDOW_S)
        tgt = live.target(
            target,
            loop=duration is not None and rate is None,
            # as httperf: the run starts empty (a sweep starts in the steady state)
            warm_start=False,
        )
        refuse_long_derived(output, replay_parts(output, tgt))
        _warn_docroot(tgt, tr, trace)
        with _held(output), naming_trace(trace):
            res = tgt.run(tr, rate_factor=rf, warmup=0.0, duration=seconds, out=output)
        # a stop that came as the run ended, held while its result was made: the run is
        # whole, but the command was stopped (it exited 0 as if no stop came)
        stopped_at_end = interrupts.take_held()
        summary = _summary(res, output)
        summary["realtime"] = tgt.realtime
        summary["lag_limit"] = tgt.lag_limit
    with printing(output):
        if as_json:
            echo_json(summary)
        else:
            _print_summary(summary)
    if summary["interrupted"] or stopped_at_end:
        _say_stopped(summary, whole=not summary["interrupted"])
        raise typer.Exit(code=interrupts.exit_status())
    if summary["served"] == 0:
        # Written and printed first; then the status says no server answered.
        exit_nothing_served(summary["nothing_served"])


@contextlib.contextmanager
def _held(output: Path) -> Iterator[None]:
    """The RunLog's folder shared with other replays and refused while a sweep holds it
    (:func:`shrink.folder_locks.claimed_shared`: sweep --runlogs and a replay wrote there at
    once), cleared of the temporaries a killed replay of this file left (its .tmp and
    8 MiB .reserve, its parts' too) when no other replay writes there. The parts a replay
    into OUTPUT stopped before its merge left (kill -9) are named then, and kept."""
    import re

    from shrink.folder_locks import claimed_shared
    from shrink.replay.part_dirs import PART_NAMES, part_stem, stale_parts

    base = re.escape(part_stem(output))

    def name_parts(folder: Path) -> None:
        note_stale_parts(folder, stale_parts(folder, base), f"a replay into {output.name}")

    names = rf"{re.escape(output.name)}|{base}{PART_NAMES}"
    with claimed_shared(output.parent, names, when_alone=name_parts):
        yield


def _summary(res: Any, output: Path) -> dict[str, Any]:
    from shrink.measure import level_stats, was_interrupted

    st = level_stats(res)
    g = res.generator
    o = st.overall
    served = int(o.n)
    # (the errors of the window's requests, which ``requests`` counts: every row's, warm-up
    # too, said "all 2 requests failed (timeout 7); 5 of them timed out after ...")
    win = res.runlog.window(*res.window) if not served else None
    return {
        "schema": "shrink.replay-summary/1",
        "runlog": str(output),
        # requests answered without error in the window: 0 means no server result at all
        "served": served,
        "nothing_served": None
        if served
        else _nothing_served(
            st.requests, st.failures, _error_counts(win), win.timed_out_answering()
        ),
        # why the latencies are null (JSON has no NaN)
        "latency_note": None if served else "no request was served in the window",
        "engine": (res.describe or {}).get("engine", {}).get("engine"),
        "requests": len(res.runlog),
        "window": list(res.window),
        "intended_rate": g.intended_rate,
        "achieved_rate": g.achieved_rate,
        "throughput": st.throughput,
        "generator_behind": g.behind,
        "behind_reason": g.reason,
        # the seconds shrink itself was known stopped (a signal, job control; else None)
        "generator_stopped": getattr(g, "stopped", None),
        # part of the generator gone mid-run: an engine process killed, a lost actor
        "generator_lost": _part_lost(res.describe or {}),
        # the spinners that kept the generator's CPUs awake (None: not asked)
        "awake_spinners": _spinners_ran(res.describe or {}),
        # the idle cpu cgroup they ran in (outside the root cpu cgroup; else None)
        "awake_group": ((res.describe or {}).get("engine") or {}).get("awake_group"),
        # why none ran, when no idle cgroup could be had for them (else None)
        "awake_why_not": ((res.describe or {}).get("engine") or {}).get("awake_why_not"),
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


def _part_lost(desc: dict[str, Any]) -> bool:
    """Whether part of the generator was gone mid-run (an engine process that ended
    without its report, a cluster's generator lost)."""
    from shrink.measure.stats import part_lost

    return part_lost(desc)


def _spinners_ran(desc: dict[str, Any]) -> int | None:
    """How many spinners kept the generator's CPUs awake in the run (None: not asked)."""
    if not desc.get("awake"):
        return None
    return int((desc.get("engine") or {}).get("awake_spinners") or 0)


def _awake_text(
    spinners: int | None, group: str | list[str] | None = None, why_not: str | None = None
) -> str:
    """The summary's line on the spinners asked for ('' when not asked); ``group``, the
    idle cpu cgroup they ran in, or one per engine process; ``why_not``, why none ran."""
    if spinners is None:
        return ""
    if spinners == 0:
        return "\n" + (AWAKE_NONE_RAN if why_not is None else AWAKE_NOT_RAN.format(why=why_not))
    groups = [group] if isinstance(group, str) else list(group or [])
    where = (
        f" (from the idle cpu cgroup{'s' if len(groups) > 1 else ''} {', '.join(groups)})"
        if groups
        else ""
    )
    return (
        f"\nawake: {spinners} spinner{'s' if spinners > 1 else ''} kept the generator's CPUs "
        f"awake{where}"
    )


def _error_counts(log: Any) -> dict[str, int]:
    """How many requests failed with each named error, commonest first."""
    from collections import Counter

    names = log.table.column("error").to_pylist()
    return dict(Counter(n for n in names if n).most_common())


def _nothing_served(
    requests: int | None,
    failures: dict[str, int] | None,
    errors: dict[str, int] | None = None,
    answering: int = 0,
) -> str:
    """Why a run served nothing, and what to check (``answering``: the requests that
    timed out after the server had begun to answer: it is up, its answers are long)."""
    f = failures or {}
    if not requests:
        return "no request was sent in the window (a trace shorter than the warm-up?)"
    if f.get("transport"):
        named = ", ".join(f"{k} {v:,}" for k, v in (errors or {}).items()) or "no error named"
        if answering:
            return (
                f"all {requests:,} requests failed ({named}); {answering:,} of them timed out "
                "after the server had begun to answer: it is up, and its answers take longer "
                "than --timeout (a large file, a slow page); raise --timeout or check those paths"
            )
        if set(errors or {}) <= {"refused", "connect", "timeout", "files"}:
            return (
                f"all {requests:,} requests failed to connect or timed out ({named}): "
                "is the server up at the --target address?"
            )
        return (
            f"all {requests:,} requests failed without a whole HTTP/1.1 answer ({named}): "
            "is the server up at the --target address, and does it speak HTTP/1.1?"
        )
    return (
        f"all {requests:,} requests failed (4xx {f.get('http_4xx', 0):,}, "
        f"5xx {f.get('http_5xx', 0):,}): does the server have the trace's pages?"
    )


def _failure_text(s: dict[str, Any]) -> str:
    """`` (transport 0, 4xx 12, 5xx 0)`` when anything failed."""
    f = s.get("failures") or {}
    if not any(f.values()):
        return ""
    return (
        f" (transport {f.get('transport', 0):,}, 4xx {f.get('http_4xx', 0):,}, "
        f"5xx {f.get('http_5xx', 0):,})"
    )


def _print_summary(s: dict[str, Any]) -> None:
    from shrink.replay.selfcheck import stop_explains

    lat = s["latency"]
    typer.echo(
        f"{s['requests']:,} requests -> {printable(s['runlog'])} (engine: {s['engine']})\n"
        f"rate: intended {s['intended_rate']:,.1f}/s, achieved {s['achieved_rate']:,.1f}/s, "
        f"completed {s['throughput']:,.1f}/s, errors {s['errors']}{_failure_text(s)}\n"
        f"latency: mean {_ms(lat['mean'])}  p50 {_ms(lat['p50'])}  p99 {_ms(lat['p99'])}  "
        f"p99.9 {_ms(lat['p999'])}\n"
        f"send lag: p50 {_ms(s['send_lag_p50'])}  p99 {_ms(s['send_lag_p99'])}"
        + ("" if s["generator_cpu"] is None else f"  generator CPU {s['generator_cpu']:.2f} cores")
        + ("" if s["utilization"] is None else f"  share busy {100 * s['utilization']:.0f}%")
        + _awake_text(s.get("awake_spinners"), s.get("awake_group"), s.get("awake_why_not"))
    )
    if s["generator_behind"]:
        typer.echo(f"GENERATOR BEHIND: {s['behind_reason']} (not a server result)")
        # (a stop is not other work on its CPU; one within the lag limit made nothing late;
        # nor is a part of the generator gone)
        stop = stop_explains(s["generator_stopped"], s.get("lag_limit"))
        if not stop and not s.get("generator_lost"):
            typer.echo(generator_hint("this run", s.get("realtime")), err=True)
    if s["failed"]:
        typer.echo(
            f"FAILED REQUESTS: {s['errors']} of {s['requests']:,} (over {_limit_text()}): "
            "not the server serving the trace; such a level is never used for a MAT"
        )


def _say_stopped(s: dict[str, Any], whole: bool = False) -> None:
    """The one line on stderr a stop signal gets (with --json too, whose stdout is the
    summary): it was on stdout after the summary, and --json had none. ``whole``: the
    stop came once the run had ended."""
    kept = "the whole run is" if whole else "the requests sent so far are"
    typer.echo(
        f"{interrupts.stopped_by()}: {kept} kept in {printable(s['runlog'])}",
        err=True,
    )


def register(app: typer.Typer) -> None:
    """Add ``replay``, ``sweep`` and ``mat`` to ``app``."""
    app.command("replay")(replay)
    sweep_cmd.register(app)
    mat_cmd.register(app)


def _check_path(path: str) -> None:
    """``--path`` as it can go on the wire; refused naming the option (it is no trace's
    row, as the schedule's check would say)."""
    from shrink.wire import wire_target

    try:
        wire_target(path)
    except ValueError as exc:
        raise OptionError("--path", f"{path[:60]!r} cannot be sent: {exc}") from None
