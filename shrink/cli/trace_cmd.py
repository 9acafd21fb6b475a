"""``shrink trace info``: summary statistics of a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.cli._common import (
    MaxBodyOpt,
    cli_errors,
    echo_json,
    escape,
    fmt_number,
    out_console,
    print_table,
)
from shrink.defaults import MAX_BODY
from shrink.errors import printable

trace_app = typer.Typer(help="Look at traces.", no_args_is_help=True)


@trace_app.command("info")
def info(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Sessions, requests, the time from the first request to the last, the rate over it,
    a looped replay's period, static/dynamic mix, reply sizes, think times."""
    from shrink.schedule import trace_extent, trace_mode
    from shrink.trace import Trace

    with cli_errors(measures=False):
        tr = Trace.read_parquet(trace, max_body=max_body)
        inf = tr.info()
        # the replay's loop period: what one pass of the trace lasts (shrink.schedule)
        span = trace_extent(tr)[1] if len(tr) else 0.0
        starts = "session starts" if trace_mode(tr) == "session" else "requests"
        basis = _period_basis(tr, starts)
    if as_json:
        echo_json({**inf.to_dict(), "span": span})
        return
    from rich.table import Table

    t = Table(title=escape(printable(trace)), show_header=False)
    t.add_row("sessions", f"{inf.sessions:,}")
    t.add_row("requests", f"{inf.requests:,}")
    t.add_row("bursts", f"{inf.bursts:,}")
    # two lengths a reader could not tell apart as "duration" and "span"
    t.add_row("first to last request", f"{inf.duration:,.3f} s (the bursts' start times)")
    t.add_row(
        "loop period",
        f"{span:,.3f} s: a looped replay starts the trace again this often ({basis}; a "
        "pass still running overlaps the next)",
    )
    rate = (
        f"{inf.request_rate:,.2f} req/s (over first to last request)"
        if inf.duration > 0
        else "none: every request is at one instant"
    )
    t.add_row("request rate", rate)
    t.add_row("dynamic fraction", f"{100 * inf.dynamic_fraction:.2f} %")
    t.add_row("unknown reply sizes", f"{inf.unknown_bytes:,}")
    for label, q in (
        ("reply bytes", inf.bytes_quantiles),
        ("think time (s)", inf.think_quantiles),
        ("requests/session", inf.requests_per_session),
    ):
        if q:
            t.add_row(label, "  ".join(f"{k} {fmt_number(v)}" for k, v in q.items()))
    for k in (
        "reader",
        "source",
        "workload",
        "users",
        "sampler",
        "level",
        "alpha",
        "seed",
        "parent",
        "skipped",
        "seen_twice",
        "skew_seen",
        "forced",
        "warnings",
    ):
        if k in inf.meta:
            t.add_row(k, escape(printable(inf.meta[k])))  # the file's, not ours: escaped
    print_table(out_console(), t)


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")


def _period_basis(tr: Any, starts: str) -> str:
    """What a looped replay's period is made of (:func:`shrink.schedule.trace_extent`):
    the arrivals' span plus one mean gap between them, or, with a single arrival (or all
    at one instant), one copy's last burst start, at least 1 s. A trace of one session
    was said to be paced by "its session starts' span plus one mean gap between them"."""
    import math

    import numpy as np

    if len(tr) == 0:
        return "an empty trace: nothing is replayed"
    t = tr.table.column("t").to_numpy()
    if starts == "session starts":
        sess = tr.table.column("session").to_numpy()
        t = t[np.r_[True, sess[1:] != sess[:-1]]]
    origin = float(t.min())
    start = tr.meta.get("t_start")
    if isinstance(start, int | float) and math.isfinite(start):
        origin = min(origin, float(start))
    if t.size > 1 and float(t.max()) - origin > 0:
        return f"its {starts}' span plus one mean gap between them"
    one = starts.removesuffix("s")
    what = f"every {one} at one instant" if t.size > 1 else f"a single {one}"
    return f"{what}: one pass lasts from its start to its last burst's start, at least 1 s"
