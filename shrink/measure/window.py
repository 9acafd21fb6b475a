"""A trace as a level's runs replay it: the start skipped, the loop window every level
replays, its copies looped for one run at a rate factor, and slow motion.

A level is a controlled load: level L replays the same stretch of the trace at L
times its rate (:func:`loop_window`, :func:`looped_run`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shrink.checks import check_positive
from shrink.errors import ParameterError
from shrink.trace import Trace

__all__ = [
    "KNOBS",
    "LOOP_SESSIONS",
    "WHOLE_SESSION_QUANTILE",
    "LoopedRun",
    "complete_end",
    "default_loop_window",
    "default_skip",
    "loop_window",
    "looped_run",
    "rate_factor_for",
    "skip_start",
    "slow_motion",
    "trace_span",
    "window_for",
]


def trace_span(trace: Trace) -> float:
    """Seconds from the trace's first to its last burst start."""
    t = trace.table.column("t").to_numpy()
    return float(t.max() - t.min()) if t.size else 0.0


def skip_start(trace: Trace, seconds: float) -> Trace:
    """The trace from ``seconds`` after its first request on, shifted to start there.

    A trace's first seconds are rarely typical: a synthetic workload's users start
    their sessions together, and a recorded log cuts into sessions already running.
    Runs that start later measure the workload's steady mix. Requests keep their
    sessions (a session cut by the skip is replayed from where it is).
    """
    if seconds <= 0:
        return trace
    t = trace.column("t")
    if t.size == 0:
        return trace
    start = float(t.min()) + seconds
    keep = t >= start
    if not keep.any():
        raise ParameterError(
            f"skipping the first {seconds:g} s leaves nothing of a trace that spans "
            f"{trace_span(trace):.1f} s; skip less"
        )
    return trace.filter(keep).with_column("t", t[keep] - start)


def default_skip(trace: Trace) -> float:
    """Seconds to skip by default: a tenth of the trace's span, at most a minute."""
    return min(60.0, 0.1 * trace_span(trace))


# Sessions (of the whole trace) the loop window of an automatic sweep holds by
# default (``AutoPlan.loop_window``): enough that a sample of alpha of them keeps
# the trace's mix, few enough that the window is a short, steady stretch.
LOOP_SESSIONS = 2000


def _is_open(trace: Trace) -> bool:
    return str(trace.meta.get("mode") or "session") == "open"


def _unit_starts(trace: Trace) -> np.ndarray:
    """Per row, the start of its replay unit: its session's first burst (session mode)
    or the row's own time (open mode, where every request is sent at its own time)."""
    t = trace.column("t").astype(float)
    if _is_open(trace) or t.size == 0:
        return t
    _, inv = np.unique(trace.column("session"), return_inverse=True)
    start = np.full(int(inv.max()) + 1, np.inf)
    np.minimum.at(start, inv, t)
    return start[inv]


def default_loop_window(trace: Trace, skip: float, sessions: int = LOOP_SESSIONS) -> float:
    """Trace seconds after ``skip`` that hold ``sessions`` session starts (units in open
    mode), at most up to :func:`complete_end`.

    The window must hold whole sessions: a session that starts near the end of the
    recording was cut by it, and looped, the tails it lacks leave a hole at the start
    of every copy (the demo's 300 s trace, looped whole, offered 30% of its rate in a
    copy's first seconds and the low levels of a sweep replayed only that).
    """
    starts = np.unique(_unit_starts(trace))
    if starts.size == 0:
        return 0.0
    t0 = float(starts[0]) + skip
    rest = starts[starts >= t0]
    if rest.size == 0:
        return 0.0
    rest = rest[rest < max(complete_end(trace, skip), float(rest[0]) + 1e-9)]
    end = float(rest[-1]) - t0
    if rest.size <= sessions:
        # The whole rest, plus one mean gap so that the loop does not pile two starts up.
        return end * rest.size / (rest.size - 1) if rest.size > 1 and end > 0 else max(end, 1.0)
    return float(rest[sessions]) - t0


# The quantile of session length that a loop window leaves room for before the
# recording's end: longer sessions starting in the window's last seconds lose their
# tails (a few percent of the load, spread over the copy) where a higher quantile
# would shorten the window to few sessions.
WHOLE_SESSION_QUANTILE = 0.9


def complete_end(trace: Trace, skip: float) -> float:
    """The latest session start (trace seconds) after which sessions are likely cut by
    the recording's end: the end less the ``WHOLE_SESSION_QUANTILE`` of session
    lengths, at least halfway between ``skip`` and the end.

    Session lengths are taken from the sessions that start in the first half of the
    rest (the least cut by the end). Open mode replays requests alone: nothing is cut.
    """
    t = trace.column("t").astype(float)
    if t.size == 0 or _is_open(trace):
        return math.inf
    t_end = float(t.max())
    t0 = float(t.min()) + max(0.0, skip)
    if t_end <= t0:
        return math.inf
    _, inv = np.unique(trace.column("session"), return_inverse=True)
    first = np.full(int(inv.max()) + 1, np.inf)
    last = np.full(int(inv.max()) + 1, -np.inf)
    np.minimum.at(first, inv, t)
    np.maximum.at(last, inv, t)
    half = (first >= t0) & (first < t0 + 0.5 * (t_end - t0))
    if not half.any():
        return math.inf
    length = float(np.quantile(last[half] - first[half], WHOLE_SESSION_QUANTILE))
    return max(t_end - length, t0 + 0.5 * (t_end - t0))


def loop_window(trace: Trace, skip: float, seconds: float) -> Trace:
    """The units (whole sessions, or open-loop requests) that start in
    ``[skip, skip + seconds)`` seconds of the trace, shifted to start at 0: the one
    stretch every level of a sweep replays, looped (:func:`looped_run`).

    A level is then a controlled load: level L replays the same content at L times
    its rate, where consecutive stretches of a non-stationary trace would offer
    different loads at neighbouring levels. Sessions already running at ``skip`` are
    left out: in the loop, the window's own earlier copies stand in for them. The
    window's length is recorded in meta ``loop_span`` (the loop period, trace seconds).
    """
    check_positive(seconds, "loop window")
    if len(trace) == 0:
        return trace.with_meta(loop_span=float(seconds))
    t0 = float(trace.column("t").min()) + max(0.0, skip)
    starts = _unit_starts(trace)
    keep = (starts >= t0) & (starts < t0 + seconds)
    if not keep.any():
        raise ParameterError(
            f"no session starts in the trace's [{skip:g}, {skip + seconds:g}) s; "
            "skip less or loop a longer window"
        )
    out = trace.filter(keep, loop_span=float(seconds))
    return out.with_column("t", out.column("t") - t0)


def slow_motion(trace: Trace, k: float) -> Trace:
    """The trace in slow motion: its users think ``k`` times as long, and every request
    after a session's first comes ``k`` times as late into the session.

    Within a run's window a Support session's users are a closed population (a session
    lasts minutes of think time), so above the knee a server's response time is about
    users x requests / capacity - think time, not a queue that grows with the window.
    On a share at speed s with the sessions arriving at s of the rate, unscaled think
    times leave that response time the whole server's, and scaled by s it came out
    0.2-0.3 of the whole core's in overload (a 2-vCPU VM, quiet host): the share's MAT
    was never reached. Think times 1/s as long (``k``, the windows' own factor) make the
    share the whole server in slow motion. The recorded times move with them, because
    a looped run plans the sessions of earlier copies from those times
    (:func:`looped_run`). Open-loop units (one request each) do not change.
    """
    check_positive(k, "slow-motion factor")
    if len(trace) == 0 or k == 1.0:
        return trace
    t = trace.column("t").astype(float)
    starts = _unit_starts(trace)
    out = trace.with_column("t", starts + k * (t - starts))
    return out.with_column("think", trace.column("think") * k).with_meta(think_scale=k)


@dataclass(frozen=True)
class LoopedRun:
    """One run's trace and window. ``copies``: whole copies of the loop window in the
    measurement window (0: a level too slow to hold one measures a prefix of it)."""

    trace: Trace
    warmup: float
    duration: float
    copies: int


def looped_run(
    window: Trace,
    factor: float,
    warmup: float,
    duration: float,
    *,
    max_stretch: float = 2.0,
    copies: int | None = None,
) -> LoopedRun:
    """``window`` (from :func:`loop_window`) looped for one run at ``factor`` times its rate.

    Copy k of the window starts at ``k * span`` trace seconds (session ids offset per
    copy), and the measurement window starts with copy 0 and holds
    ``n = round(factor * duration / span)`` whole copies (at least one, unless one copy
    would take over ``max_stretch`` times ``duration``: then the planned window, a
    prefix of a copy). The run starts in steady state: sessions of earlier copies
    still open at its start (their think times are not scaled) are replayed from
    their first burst after it, as :func:`skip_start` does. The run's trace is built
    here, so every target replays the same requests whatever its own loop period;
    the returned warm-up (<= ``warmup``) replaces the planned one. ``copies`` forces
    the number of copies (a paired side measuring k times its twin's).
    """
    span = float(window.meta["loop_span"])
    check_positive(factor, "rate factor")
    n = round(factor * duration / span) if copies is None else copies
    if copies is None and n < 1 and span / factor <= max_stretch * duration:
        n = 1
    body = n * span if n else factor * duration  # trace seconds measured
    meta = {k: v for k, v in window.meta.items() if k != "loop_span"}
    if len(window) == 0:
        return LoopedRun(Trace.from_table(window.table, meta), warmup, body / factor, n)
    t = window.column("t").astype(float)
    starts = _unit_starts(window)
    off = t - starts  # seconds into the session, real time (think times are not scaled)
    k_lo = math.floor(-factor * (warmup + float(off.max())) / span) - 1
    k_hi = math.ceil(body / span) + 1
    rows, k = _copies_of_rows(starts, off, factor, span, warmup, body, (k_lo, k_hi))
    st = starts[rows] + k * span
    real = st / factor + off[rows]  # each row's send time, seconds from 0
    # Nothing planned after the window's end: it would not be measured, and a single
    # pass runs every session it holds to its end (think times of minutes, at a low
    # level far past the window), so the run would outlast its window many times.
    keep = (real >= -warmup) & (st < body) & (real < body / factor)
    rows, copy, real = rows[keep], (k - k_lo)[keep], real[keep]
    if real.size == 0:
        raise ParameterError(
            f"the loop window holds no request to replay at rate factor {factor:g} in "
            f"{duration:g} s (the trace's window spans {span:g} s): give a longer "
            "--duration, or a trace with more requests in its steady part"
        )
    first = float(real.min())
    sess = window.column("session").astype(np.int64)
    stride = int(sess.max()) + 1
    run = window.take(rows).with_column("t", factor * (real - first))
    run = run.with_column("session", sess[rows] + copy * stride)
    run = Trace.from_table(run.table, {**meta, "loop_copies": n})
    # Nothing of earlier copies reaches the start (a level far below the window's
    # pace): the run starts at its first request, the window short by the gap.
    late = max(0.0, first)
    return LoopedRun(run, max(0.0, -first), body / factor - late, n)


def _copies_of_rows(
    starts: np.ndarray,
    off: np.ndarray,
    factor: float,
    span: float,
    warmup: float,
    body: float,
    bounds: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """(row, copy k) pairs, ordered by copy then row, of the copies in ``bounds`` that may
    send each row inside the run (a margin of one copy each side; the caller keeps the
    exact ones). Every row by every copy was laid out: a session thinking 10^9 s at a
    rate factor of 15,000 asked for 3 * 10^12 copies (out of memory), of which each row
    falls in the run in a few."""
    lo = np.floor((-factor * (warmup + off) - starts) / span) - 1
    hi = np.ceil((np.minimum(body, body - factor * off) - starts) / span) + 1
    lo = np.clip(lo, bounds[0], bounds[1]).astype(np.int64)
    hi = np.clip(hi + 1, bounds[0], bounds[1]).astype(np.int64)  # (exclusive)
    count = np.maximum(hi - lo, 0)
    rows = np.repeat(np.arange(starts.size), count)
    k = (
        np.repeat(lo, count)
        + np.arange(int(count.sum()))
        - np.repeat(np.cumsum(count) - count, count)
    )
    order = np.lexsort((rows, k))
    return rows[order], k[order]


def window_for(
    trace: Trace,
    factor: float,
    warmup: float,
    duration: float,
    min_duration: float = 3.0,
    *,
    loops: bool = False,
) -> float | None:
    """The measurement window the trace can fill at ``factor``, or None if too short.

    A trace sped up by ``factor`` lasts span / factor seconds; a window past its end
    would count silence as capacity, so the window shrinks to fit (never below
    ``min_duration``). A target that loops the trace (``loops=True``) fills any window.
    """
    if loops:
        return duration
    avail = trace_span(trace) / factor - warmup
    if avail < min_duration:
        return None
    return min(duration, avail)


# What a load level can be: a rate factor, a number of users, a request rate.
KNOBS = ("rate_factor", "users", "rate")


def rate_factor_for(trace: Trace, level: float, knob: str) -> float:
    """The rate factor that realises ``level`` of ``knob`` on ``trace``.

    ``rate_factor``: the level itself. ``users``: level / the users the trace
    models (meta ``users``). ``rate``: level / the trace's mean request rate.
    """
    if knob == "rate_factor":
        return check_positive(level, "rate factor")
    if knob == "users":
        users = trace.meta.get("users")
        if not users:
            raise ParameterError(
                "levels in users need a trace that records how many users it models "
                "(meta 'users', written by shrink synth support); use rate factors instead."
            )
        return check_positive(level, "users") / float(users)
    if knob == "rate":
        rate = trace.info().request_rate
        if not np.isfinite(rate) or rate <= 0:
            raise ParameterError("levels as a request rate need a trace with a duration")
        return check_positive(level, "rate") / rate
    raise ParameterError(f"knob == {knob!r}, must be one of {', '.join(KNOBS)}.")
