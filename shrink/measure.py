"""From runs to a LoadCurve: per-level statistics and the load sweep.

Throughput counts requests *completed* inside the measurement window (so an
overloaded server shows its real rate, not the offered one); latency statistics
cover requests *intended* inside the window that completed (coordinated
omission: counted from the intended time). Requests intended in the window that
did not succeed (no whole 2xx/3xx response) are errors, counted by class
(:meth:`shrink.runlog.RunLog.failures`); a repetition with more than
:data:`shrink.loadcurve.FAILURE_LIMIT` of them keeps its level out of every MAT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shrink.checks import check_int, check_positive
from shrink.errors import ParameterError, ShrinkError
from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats
from shrink.share import Share
from shrink.target import RunResult, Target
from shrink.trace import Trace

__all__ = [
    "LOOP_SESSIONS",
    "LoopedRun",
    "SweepInterrupted",
    "default_loop_window",
    "level_stats",
    "loop_window",
    "looped_run",
    "offered_check",
    "rate_factor_for",
    "slow_motion",
    "stop_if_interrupted",
    "sweep",
    "was_interrupted",
]

CLASSES = ("static", "dynamic")
# Utilization from which a level counts as saturated for the offered-load check.
SATURATED = 0.9


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
    ks = np.arange(k_lo, k_hi)
    st = (starts[None, :] + ks[:, None] * span).ravel()
    real = st / factor + np.tile(off, ks.size)  # each row's send time, seconds from 0
    # Nothing planned after the window's end: it would not be measured, and a single
    # pass runs every session it holds to its end (think times of minutes, at a low
    # level far past the window), so the run would outlast its window many times.
    keep = (real >= -warmup) & (st < body) & (real < body / factor)
    rows = np.tile(np.arange(len(window)), ks.size)[keep]
    copy = np.repeat(ks - k_lo, len(window))[keep]
    real = real[keep]
    if real.size == 0:
        raise ParameterError("the loop window holds no request to replay")
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


# Offered load per unit of level may stray this far from its median and still count as
# following the level: a light level's short window holds few sessions, and what they
# offer strays by several percent (shrink.knee.capacity says more).
LINEAR_TOLERANCE = 0.10


def offered_check(curve: LoadCurve) -> dict[str, Any]:
    """Does offered load rise with the level? A controlled load offers ``level`` times
    one rate: monotone in the level, and ``offered / level`` the same at every level.

    ``offered_monotone``: offered load rises with the level (by level, repetitions
    averaged). ``offered_per_level``: the median of offered / level.
    ``offered_linearity``: the largest relative departure of offered / level from it;
    ``offered_linear``: the verdict, that departure at most :data:`LINEAR_TOLERANCE`,
    and ``offered_worst_level`` the level it was largest at.
    ``offered``: ``[level, offered]`` pairs. ``offered_saturated``: levels left out,
    where the server was saturated (utilization at least :data:`SATURATED`): a
    session sends its next burst only after the last one's responses (httperf's
    wsesslog), so a saturated server holds the offered load down, as it would a
    user's; that is the server's answer, not the load's control.
    """
    pts = []
    saturated = []
    for lv in sorted(curve.levels, key=lambda lv: lv.level):
        x = [r.offered for r in lv.reps if r.offered and r.offered > 0]
        u = lv.utilization
        if u is not None and u >= SATURATED:
            saturated.append(float(lv.level))
            continue
        if x and lv.level > 0:
            pts.append((float(lv.level), float(np.mean(x))))
    if len(pts) < 2:
        return {
            "offered_monotone": None,
            "offered_per_level": None,
            "offered_linearity": None,
            "offered_saturated": saturated,
        }
    lvl, off = np.array(pts).T
    ratio = off / lvl
    med = float(np.median(ratio))
    linearity = float(np.max(np.abs(ratio / med - 1)))
    return {
        "offered_monotone": bool(np.all(np.diff(off) > 0)),
        "offered_per_level": med,
        "offered_linearity": linearity,
        # the verdict: within LINEAR_TOLERANCE the load followed the level
        "offered_linear": linearity <= LINEAR_TOLERANCE,
        "offered_linear_tolerance": LINEAR_TOLERANCE,
        # the level furthest from linear (where to look)
        "offered_worst_level": float(lvl[int(np.argmax(np.abs(ratio / med - 1)))]),
        "offered": [[a, b] for a, b in pts],
        "offered_saturated": saturated,
    }


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


def was_interrupted(result: RunResult) -> bool:
    """The replay engine was stopped by SIGINT/SIGTERM/SIGHUP during this run."""
    engine = (result.describe or {}).get("engine") or {}
    return bool(engine.get("interrupted", False))


def stop_if_interrupted(result: RunResult) -> None:
    """Raise KeyboardInterrupt when the run was stopped by SIGINT/SIGTERM/SIGHUP.

    The replay engine catches those signals to close its run log cleanly and return
    what it measured; a sweep must then stop too, not go on to the next run (a user's
    Ctrl-C would otherwise stop one run of dozens). The run logs already written stay.
    """
    if was_interrupted(result):
        raise KeyboardInterrupt


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT/SIGTERM/SIGHUP, carrying the levels measured before it.

    ``curve`` holds the swept target's finished levels (meta ``interrupted``); a
    companion's finished levels stay in ``companion.levels``. Whoever writes them
    to disk appends the paths to ``kept``, so that the message about what was kept
    names only files that exist.
    """

    def __init__(self, curve: LoadCurve) -> None:
        super().__init__()
        self.curve = curve
        self.kept: list[str] = []


def level_stats(result: RunResult) -> LevelStats:
    """Exact statistics of one run's measurement window."""
    log = result.runlog
    start, end = result.window
    width = end - start
    intended = log.column("intended")
    done = log.column("done")
    cls = log.column("cls")
    ok = log.ok_mask()
    in_win = (intended >= start) & (intended < end)
    finished_in_win = ok & (done >= start) & (done < end)
    lat = done - intended
    measured = in_win & ok
    per_class = {}
    for c in CLASSES:
        m = cls == c
        if np.any(in_win & m):
            st = latency_stats(lat[measured & m], width)
            st.throughput = float(np.sum(finished_in_win & m)) / width
            per_class[c] = st
    overall = latency_stats(lat[measured], width)
    overall.throughput = float(np.sum(finished_in_win)) / width
    g = result.generator
    return LevelStats(
        throughput=overall.throughput,
        overall=overall,
        per_class=per_class,
        offered=float(np.sum(in_win)) / width,
        utilization=result.utilization,
        errors=int(np.sum(in_win & ~ok)),
        failures=log.failures(in_win),
        requests=int(np.sum(in_win)),
        generator_behind=g.behind,
        send_lag_p99=g.send_lag_p99,
        send_lag_max=g.send_lag_max,
        generator_cpu=g.cpu,
        other_cpu=(result.describe or {}).get("share_other_cpu"),
        steal=(result.describe or {}).get("share_steal"),
        generator_steal=(result.describe or {}).get("generator_steal"),
    )


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
    raise ParameterError(f"knob == {knob!r}, must be one of rate_factor, users, rate.")


def sweep(
    target: Target,
    trace: Trace,
    levels: Sequence[float],
    *,
    knob: str = "rate_factor",
    reps: int = 1,
    warmup: float = 2.0,
    duration: float = 10.0,
    seed: int = 0,
    alpha: float | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> LoadCurve:
    """Run ``trace`` on ``target`` at each level ``reps`` times; return the LoadCurve.

    Each repetition gets its own seed (``seed + 1000 * level_index + rep``) so runs
    are independent yet the whole sweep is reproducible.
    """
    check_int(reps, "reps", low=1)
    check_positive(duration, "duration")
    if warmup < 0:
        raise ParameterError(f"warmup == {warmup:g}, must be in [0, inf).")
    if not levels:
        raise ParameterError("levels is empty, must name at least one load level.")
    out: list[Level] = []
    total = len(levels) * reps
    step = 0
    desc: dict[str, Any] = {}
    meta = {"seed": seed, "warmup": warmup, "duration": duration, "reps": reps}
    plan = _LevelRuns(knob, reps, warmup, duration, seed, total, progress)
    try:
        for i, level in enumerate(levels):
            step = _sweep_level(target, trace, i, level, plan, step, out, desc)
    except KeyboardInterrupt as exc:
        # Keep what was measured: the finished levels, as a curve marked partial.
        partial = _sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc})
        partial.meta["interrupted"] = True
        raise SweepInterrupted(partial) from exc
    except ShrinkError as exc:
        # A dead server or a full disk stops the sweep; the finished levels stay.
        if out:
            exc.curve = _sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc})
            exc.curve.meta["stopped"] = str(exc)
        raise
    if progress is not None:
        progress("done", total, total)
    return _sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc})


@dataclass(frozen=True)
class _LevelRuns:
    """How every level of a fixed-level sweep is run: its knob, repetitions, warm-up,
    window and base seed, and the progress callback with the sweep's runs in all."""

    knob: str
    reps: int
    warmup: float
    duration: float
    seed: int
    total: int
    progress: Callable[[str, int, int], None] | None


def _sweep_level(
    target: Target,
    trace: Trace,
    i: int,
    level: float,
    plan: _LevelRuns,
    step: int,
    out: list[Level],
    desc: dict[str, Any],
) -> int:
    """Run one level's repetitions, append it to ``out``; returns the runs done so far."""
    knob, reps, warmup, duration = plan.knob, plan.reps, plan.warmup, plan.duration
    factor = rate_factor_for(trace, level, knob)
    loops = bool(getattr(target, "loops_trace", False))
    window = window_for(trace, factor, warmup, duration, min(duration, 3.0), loops=loops)
    if window is None:
        raise ParameterError(
            f"{knob} {level:g}: the trace spans {trace_span(trace):.1f} s, which sped up "
            f"{factor:g}x cannot fill {warmup:g} s of warm-up and a measurement window; "
            "use a longer trace or lower levels"
        )
    stats = []
    for r in range(reps):
        if plan.progress is not None:
            plan.progress(f"{knob} {level:g} rep {r + 1}/{reps}", step, plan.total)
        res = target.run(
            trace,
            rate_factor=factor,
            warmup=warmup,
            duration=window,
            seed=plan.seed + 1000 * i + r,
        )
        stop_if_interrupted(res)
        if res.describe:
            desc.clear()
            desc.update(res.describe)
        stats.append(level_stats(res))
        step += 1
    out.append(Level(float(level), stats))
    return step


def _sweep_curve(
    target: Target,
    trace: Trace,
    levels: list[Level],
    knob: str,
    alpha: float | None,
    meta: dict[str, Any],
) -> LoadCurve:
    describe = target.describe()
    return LoadCurve(
        levels=list(levels),
        knob=knob,
        alpha=float(alpha if alpha is not None else trace.meta.get("alpha", 1.0)),
        share=Share.from_dict(describe.get("share")),
        mapping=describe.get("mapping", {}).get("name", "")
        if isinstance(describe.get("mapping"), dict)
        else str(describe.get("mapping", "")),
        machine=describe.get("machine", {}),
        meta={
            "target": describe,
            "trace": {k: trace.meta.get(k) for k in ("source", "workload", "users", "sampler")},
            **meta,
        },
    )
