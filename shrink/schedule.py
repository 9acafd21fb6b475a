"""What to send and when: a Trace turned into a replay schedule.

Two modes, chosen by the trace's meta ``mode`` unless forced:

* ``session`` (httperf ``--wsesslog`` semantics): sessions start open-loop at
  their recorded start times divided by the rate factor; inside a session the
  bursts run closed-loop — a burst's first request alone, then its embedded
  requests over up to N connections of the session, then the burst's think time
  (think times are the users' and are not scaled by the rate factor; a time-scaled
  share's sample is stretched before, :func:`shrink.measure.slow_motion`).
* ``open``: every request is sent at its own ``t / rate_factor``, whatever the
  server does (the TCP/IP workload; :func:`open_loop_trace` makes one at a
  constant or Poisson rate).

Times are seconds from the run's start. Requests are identified by their row in
the trace; identical (method, path, body, Content-Type) share one request key so that the
engine builds each distinct request's bytes once per target. This is the one schedule
builder: the live engine (:mod:`shrink.replay.engine`), the simulator
(:class:`shrink.sim.target.SimTarget`), the fake engine and the fake target all replay
what :func:`build_schedule` plans.

**A pass sends every request.** Without ``loop`` the sessions starting up to the
horizon run to their end (``Schedule.end`` is infinite), as httperf runs every
session it starts. With ``loop`` the trace repeats every **span** seconds (the
span of its arrivals plus one mean gap, as ``shrink trace info`` reports it: see
:func:`trace_extent`), and nothing starts at or after the horizon.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow.compute as pc

from shrink import request_keys
from shrink.checks import MAX_SECONDS, check_positive, check_rate
from shrink.errors import ParameterError
from shrink.trace import Trace

__all__ = [
    "CHUNK",
    "MAX_REQUESTS",
    "Chunk",
    "Schedule",
    "ScheduleArrays",
    "ScheduleOptions",
    "build_schedule",
    "open_loop_trace",
    "schedule_arrays",
    "session_hash",
    "trace_extent",
    "trace_mode",
]

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
# The most requests one run may plan by repeating its trace (a trace that is larger
# alone is still sent once, whole).
MAX_REQUESTS = 50_000_000


def session_hash(sessions: np.ndarray, salt: int = 0) -> np.ndarray:
    """A well-mixed 64-bit hash of session ids (splitmix64), stable across runs and machines."""
    with np.errstate(over="ignore"):
        z = np.asarray(sessions).astype(np.int64).view(np.uint64) + np.uint64(
            (0x9E3779B97F4A7C15 * (salt + 1)) & 0xFFFFFFFFFFFFFFFF
        )
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & _MASK
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & _MASK
        return z ^ (z >> np.uint64(31))


def trace_mode(trace: Trace, mode: str = "auto") -> str:
    """``session`` or ``open``: ``auto`` reads the trace's meta ``mode`` (default session)."""
    if mode == "auto":
        mode = str(trace.meta.get("mode") or "session")
    if mode not in ("session", "open"):
        raise ParameterError(f"mode == {mode!r}, must be one of auto, session, open.")
    return mode


# Sessions (or open-mode requests) per chunk of :meth:`Schedule.chunks`: what an engine
# holds of the plan as Python objects at a time, whatever the run's length.
CHUNK = 4096


@dataclass(frozen=True)
class Chunk:
    """Consecutive entries of a schedule, in start order.

    Per entry: its start (seconds from the run's zero), session id, unit (index of
    the trace's session, or open-mode request, in :attr:`Schedule.base_t`'s
    order) and first burst (a session the loop's earlier copies left running
    joins at a later burst; 0 otherwise).
    """

    t: np.ndarray
    ids: np.ndarray
    unit: np.ndarray
    burst: np.ndarray


@dataclass
class Schedule:
    """A replay plan, kept compact: one copy of the trace, repeated as it is read.

    Memory is O(trace), not O(run): the entries of a looped run (each copy's
    sessions, or open-mode requests, shifted by ``period`` and their ids by
    ``id_stride``, plus the warm-start sessions) are made chunk by chunk by
    :meth:`chunks`, which the Python engine reads as it goes. ``session_start``,
    ``session_ids``, ``session_bursts`` (session mode) and ``times``, ``rows``,
    ``open_sessions`` (open mode) are the whole plan at once, for the simulator,
    the fakes and the native core's arrays.

    ``keys[key_of_row[r]]`` is row r's (method, path, body, Content-Type or "");
    ``cls_of_row`` holds 0 (static) or 1 (dynamic).
    """

    mode: str
    keys: list[request_keys.Key]
    key_of_row: np.ndarray
    cls_of_row: np.ndarray
    horizon: float = 0.0
    rate_factor: float = 1.0
    copies: int = 1
    # No burst starts at or after ``end``: the horizon when looping, else infinite
    # (a single pass runs its sessions out).
    end: float = float("inf")
    period: float = 0.0  # seconds between looped copies (span / rate factor)
    id_stride: int = 1
    # One copy, sorted by start: per unit its start, session id and (open mode) row.
    base_t: np.ndarray = field(default_factory=lambda: np.empty(0))
    base_ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    base_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    # Session mode, per unit: its bursts as (first row, end row, think), and the same
    # flattened (``burst_off[u]:burst_off[u + 1]`` are unit u's in ``burst_rows``).
    plans: list[list[tuple[int, int, float]]] = field(default_factory=list)
    burst_off: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    burst_rows: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))
    burst_think: np.ndarray = field(default_factory=lambda: np.empty(0))
    # The warm-start sessions (see :func:`_warm_sessions`), sorted by start.
    warm: Chunk = field(default_factory=lambda: _empty_chunk())

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        """The plan in start order, about ``size`` entries a chunk (none empty).

        Entries of equal start keep build order: copies in turn, each in its
        trace order, then the warm-start sessions.
        """
        n = self.base_t.size
        if n == 0 or self.copies == 0:
            if self.warm.t.size:
                yield self.warm
            return
        first, last = float(self.base_t[0]), float(self.base_t[-1])
        stop = min(self.horizon, last + (self.copies - 1) * self.period)
        if self.warm.t.size:
            stop = max(stop, float(self.warm.t[-1]))
        # A window of starts expected to hold ``size`` entries (a copy holds n per period).
        width = max(self.period, 1e-9) * size / n
        a = min(first, float(self.warm.t[0]) if self.warm.t.size else first)
        while a <= stop:
            b = a + width
            ch = self._window(a, b)
            if ch is not None:
                yield ch
            a = b

    def _window(self, a: float, b: float) -> Chunk | None:
        """The entries starting in ``[a, b)`` (and before the horizon), in start order."""
        period, base = self.period, self.base_t
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        k_lo = max(0, int(np.floor((a - base[-1]) / period)) - 1) if period > 0 else 0
        k_hi = min(self.copies - 1, int(np.floor(b / period)) + 1) if period > 0 else 0
        for k in range(k_lo, k_hi + 1):
            # rough bounds by searchsorted, then the exact test on the shifted times
            lo = int(np.searchsorted(base, a - k * period - 1e-9 * (1 + abs(a)), "left"))
            hi = int(np.searchsorted(base, b - k * period + 1e-9 * (1 + abs(b)), "right"))
            if lo >= hi:
                continue
            t = base[lo:hi] + k * period
            keep = (t >= a) & (t < b) & (t < self.horizon)
            if keep.any():
                unit = np.arange(lo, hi, dtype=np.int64)[keep]
                ids = self.base_ids[unit] + k * self.id_stride
                parts.append((t[keep], ids, unit, np.zeros(unit.size, np.int64)))
        w = self.warm
        if w.t.size:
            lo, hi = np.searchsorted(w.t, a, "left"), np.searchsorted(w.t, b, "left")
            if lo < hi:
                parts.append((w.t[lo:hi], w.ids[lo:hi], w.unit[lo:hi], w.burst[lo:hi]))
        if not parts:
            return None
        t, ids, unit, burst = (np.concatenate(x) for x in zip(*parts, strict=True))
        order = np.argsort(t, kind="stable")
        return Chunk(t[order], ids[order], unit[order], burst[order])

    def whole(self) -> Chunk:
        """The whole plan as one chunk (O(run) arrays, not kept: see ``_whole``)."""
        parts = list(self.chunks(1 << 16))
        if not parts:
            return _empty_chunk()
        cols = zip(*((c.t, c.ids, c.unit, c.burst) for c in parts), strict=True)
        return Chunk(*(np.concatenate(x) for x in cols))

    # The whole plan at once (O(run)): the simulator, the fakes, the native core.
    @cached_property
    def _whole(self) -> Chunk:
        return self.whole()

    @property
    def times(self) -> np.ndarray:
        """Open mode: each request's time, sorted."""
        return self._whole.t if self.mode == "open" else np.empty(0)

    @property
    def rows(self) -> np.ndarray:
        """Open mode: each request's trace row."""
        return self.base_rows[self._whole.unit] if self.mode == "open" else _NO_INT

    @property
    def open_sessions(self) -> np.ndarray:
        """Open mode: each request's session id."""
        return self._whole.ids if self.mode == "open" else _NO_INT

    @property
    def session_start(self) -> np.ndarray:
        """Session mode: each session's start, sorted."""
        return self._whole.t if self.mode == "session" else np.empty(0)

    @property
    def session_ids(self) -> list[int]:
        """Session mode: each session's id."""
        return self._whole.ids.tolist() if self.mode == "session" else []

    @property
    def session_bursts(self) -> list[list[tuple[int, int, float]]]:
        """Session mode: each session's bursts as (first row, end row, think)."""
        if self.mode != "session":
            return []
        w = self._whole
        return self.bursts_of(w.unit, w.burst)

    def bursts_of(self, unit: np.ndarray, burst: np.ndarray) -> list[list[tuple[int, int, float]]]:
        """The bursts of the sessions ``(unit, first burst)``, as the engine runs them."""
        plans = self.plans
        return [plans[u][b:] if b else plans[u] for u, b in zip(unit.tolist(), burst.tolist(),
                                                                 strict=True)]  # fmt: skip

    def flat_bursts(
        self, w: Chunk | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Session mode's bursts as arrays: offsets per session, first row, end row, think.

        ``w`` is :meth:`whole`'s result where the caller has it (default: the kept one).
        """
        w = self._whole if w is None else w
        lo = self.burst_off[w.unit] + w.burst
        hi = self.burst_off[w.unit + 1]
        off = np.zeros(lo.size + 1, np.int64)
        np.cumsum(hi - lo, out=off[1:])
        idx = _ranges(lo, hi)
        return off, self.burst_rows[idx, 0], self.burst_rows[idx, 1], self.burst_think[idx]

    def __len__(self) -> int:
        if self.mode == "open":
            return sum(int(c.t.size) for c in self.chunks(1 << 16))
        req = self.burst_rows[:, 1] - self.burst_rows[:, 0]
        cum = np.r_[0, np.cumsum(req)]
        total = 0
        for c in self.chunks(1 << 16):
            ends, starts = self.burst_off[c.unit + 1], self.burst_off[c.unit] + c.burst
            total += int((cum[ends] - cum[starts]).sum())
        return total

    def offered_rate(self) -> float:
        """Requests per second the schedule would send if the server answered instantly."""
        return len(self) / self.horizon if self.horizon > 0 else 0.0


_NO_INT = np.empty(0, np.int64)


def _empty_chunk() -> Chunk:
    return Chunk(np.empty(0), _NO_INT, _NO_INT, _NO_INT)


@dataclass(frozen=True)
class ScheduleArrays:
    """A :class:`Schedule` flattened for vectorised use (the simulator).

    Requests are listed burst after burst, sessions in start order; ``rows`` are
    their trace rows. Open mode makes each request a session of one burst.
    """

    rows: np.ndarray  # per request: trace row
    req_burst: np.ndarray  # per request: its burst
    req_session: np.ndarray  # per request: its session (index in start order)
    burst_first: np.ndarray  # per burst: its first request
    burst_end: np.ndarray  # per burst: one past its last request
    burst_think: np.ndarray  # per burst: think time after it (seconds)
    burst_next: np.ndarray  # per burst: the session's next burst, -1 after the last
    sess_start: np.ndarray  # per session: start time (seconds from the run's start)
    sess_first_burst: np.ndarray  # per session: its first burst
    sess_ids: np.ndarray  # per session: id (looped copies offset by the id stride)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each pair, vectorised."""
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offs = np.repeat(starts - np.r_[0, np.cumsum(lens)[:-1]], lens)
    return np.arange(total, dtype=np.int64) + offs


def schedule_arrays(sched: Schedule) -> ScheduleArrays:
    """Flatten ``sched`` into per-request, per-burst and per-session arrays."""
    if sched.mode == "open":
        n = int(sched.times.size)
        idx = np.arange(n, dtype=np.int64)
        return ScheduleArrays(
            rows=sched.rows.astype(np.int64),
            req_burst=idx,
            req_session=idx,
            burst_first=idx,
            burst_end=idx + 1,
            burst_think=np.zeros(n),
            burst_next=np.full(n, -1, np.int64),
            sess_start=sched.times.astype(np.float64),
            sess_first_burst=idx,
            sess_ids=sched.open_sessions.astype(np.int64),
        )
    off, first_row, end_row, think = sched.flat_bursts()
    counts = np.diff(off)
    lens = end_row - first_row
    burst_sess = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    burst_first = np.r_[0, np.cumsum(lens)[:-1]].astype(np.int64)
    req_burst = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
    same_next = np.r_[burst_sess[1:] == burst_sess[:-1], False]
    return ScheduleArrays(
        rows=_ranges(first_row, end_row),
        req_burst=req_burst,
        req_session=burst_sess[req_burst],
        burst_first=burst_first,
        burst_end=burst_first + lens,
        burst_think=think.astype(np.float64),
        burst_next=np.where(same_next, np.arange(lens.size) + 1, -1).astype(np.int64),
        sess_start=np.asarray(sched.session_start, np.float64),
        sess_first_burst=off[:-1].astype(np.int64),
        sess_ids=np.asarray(sched.session_ids, np.int64),
    )


def trace_extent(trace: Trace, mode: str = "auto") -> tuple[float, float, int]:
    """(origin, span, id stride) of a trace.

    ``origin`` is its first time, or its meta ``t_start`` where that is earlier: a
    replay's time zero, for a trace whose first request is meant to come some time
    into the run (the calibration's probe places its periods in the run's window).
    ``span`` is the loop period (``shrink trace
    info`` reports it as the trace's span): the span of its arrivals (session
    starts; each request's in open mode) plus one mean gap between them. Copies
    follow on at the trace's own pace, as httperf --wsesslog starts the sessions
    of a longer run one after another at ``--rate``: the sessions of one copy
    still running when the next begins overlap it, as in the steady state (a
    period as long as the last burst's time would leave a hole in the arrivals
    every loop). With a single arrival, its last burst start (at least 1 s).
    ``id stride`` keeps looped session ids distinct.
    """
    mode = trace_mode(trace, mode)
    if len(trace) == 0:
        return 0.0, 1.0, 1
    sess = trace.table.column("session").to_numpy()
    t_all = trace.table.column("t").to_numpy()
    t = t_all
    if mode == "session":  # the pace of session arrivals, not of their later pages
        t = t[np.r_[True, sess[1:] != sess[:-1]]]
    origin = float(t.min())
    start = trace.meta.get("t_start")
    if isinstance(start, int | float) and math.isfinite(start):
        origin = min(origin, float(start))
    n_units = t.size
    raw = float(t.max() - origin)
    if raw > 0 and n_units > 1:
        span = raw * n_units / (n_units - 1)
    else:  # one arrival (or all at once): a copy as long as its bursts, at least 1 s
        span = max(float(t_all.max()) - origin, 1.0)
    return origin, span, int(sess.max()) + 1


@dataclass(frozen=True)
class ScheduleOptions:
    """How a run replays its trace (:func:`build_schedule`'s options): ``mode``
    ``session``, ``open`` or ``auto`` (from the trace), ``loop`` (repeat the trace until
    the horizon) and ``warm_start`` (a looped session run starts in the steady state)."""

    mode: str = "auto"
    loop: bool = True
    warm_start: bool = True


def build_schedule(
    trace: Trace,
    rate_factor: float,
    horizon: float,
    *,
    mode: str = "auto",
    loop: bool = True,
    origin: float | None = None,
    span: float | None = None,
    id_stride: int | None = None,
    warm_start: bool = True,
) -> Schedule:
    """Turn ``trace`` into a schedule covering ``[0, horizon)`` seconds at ``rate_factor``.

    With ``loop`` the trace repeats every ``span / rate_factor`` seconds (session
    ids offset by ``id_stride`` per copy) until the horizon is covered, so a short
    trace still loads the whole window; nothing starts at or after the horizon.
    Without it, one pass: every session (or open-loop request) due by the horizon,
    the horizon itself included, and each session runs to its end.
    ``origin``, ``span`` and ``id_stride`` default to this trace's own; partitions
    of one trace pass the whole trace's values so that they stay aligned. In
    session mode with ``loop``, ``warm_start`` also runs the sessions that the
    loop's earlier copies would still have open at time 0 (see
    :func:`_warm_sessions`), so a short warm-up reaches the steady state.
    """
    check_positive(rate_factor, "rate factor")
    check_positive(horizon, "horizon")
    mode = trace_mode(trace, mode)
    keys, key_of_row = request_keys.request_keys(trace)
    # compared in Arrow: the column as Python strings cost a tenth of a second a call
    cls_of_row = pc.equal(trace.table.column("cls"), "dynamic").to_numpy(False).astype(np.int8)
    sched = Schedule(mode, keys, key_of_row, cls_of_row, horizon=horizon, rate_factor=rate_factor)
    if len(trace) == 0:
        return sched
    sess = trace.table.column("session").to_numpy()
    t = trace.table.column("t").to_numpy()
    own = trace_extent(trace, mode)
    origin = own[0] if origin is None else origin
    span = own[1] if span is None else span
    id_stride = own[2] if id_stride is None else id_stride
    if not span / rate_factor <= MAX_SECONDS:
        # 1e-320 made the trace's times inf, then NaN: a ValueError in the window, exit 70.
        raise ParameterError(
            f"rate factor {rate_factor:g} stretches the trace's {span:g} s to "
            f"{span / rate_factor:.3g} s, past the {MAX_SECONDS:.0f} s (a century) a run "
            "may span; raise the level."
        )
    if mode == "open":
        order = np.argsort(t, kind="stable")
        base_t, base_ids = (t[order] - origin) / rate_factor, sess[order].astype(np.int64)
        sched.base_rows = order.astype(np.int64)
    else:
        first = np.flatnonzero(np.r_[True, sess[1:] != sess[:-1]])
        raw_t = (t[first] - origin) / rate_factor
        order = np.argsort(raw_t, kind="stable")  # the units in start order
        base_t, base_ids = raw_t[order], sess[first][order].astype(np.int64)
    period = span / rate_factor
    ratio = horizon / period if loop else 1.0
    # A rate factor of 1e308 made the ratio inf: int() raised OverflowError, exit 70.
    copies = max(1, int(np.ceil(ratio))) if ratio < 1e15 else None
    if copies is None or (copies > 1 and copies * len(trace) > MAX_REQUESTS):
        # Every copy's times and the run log's rows are held in memory: a window of
        # 1e9 s, or a rate factor of 1e12, asked for terabytes and ended in a MemoryError.
        times = f"{ratio:.3g}" if copies is None else f"{copies:,}"
        raise ParameterError(
            f"rate factor {rate_factor:g} over {horizon:g} s repeats the trace's "
            f"{len(trace):,} requests {times} times, more than the {MAX_REQUESTS:,} "
            "requests one run may hold; shorten the window or lower the level."
        )
    sched.copies, sched.period, sched.id_stride = copies, period, id_stride
    sched.base_t, sched.base_ids = base_t, base_ids
    if not loop:
        # one pass: a unit due exactly at the horizon (the trace's last) is sent too
        sched.horizon = horizon = float(np.nextafter(horizon, np.inf))
    else:
        sched.end = horizon
    if mode == "open":
        return sched
    bursts_of = _bursts(trace, first)
    sched.plans = [bursts_of[j] for j in order]
    counts = np.fromiter((len(p) for p in sched.plans), np.int64, len(sched.plans))
    sched.burst_off = np.r_[0, np.cumsum(counts)].astype(np.int64)
    flat = [b for plan in sched.plans for b in plan]
    sched.burst_rows = np.array([(f, e) for f, e, _ in flat], np.int64).reshape(-1, 2)
    sched.burst_think = np.fromiter((b[2] for b in flat), np.float64, len(flat))
    if loop and warm_start:
        unit_of = np.empty(order.size, np.int64)
        unit_of[order] = np.arange(order.size)  # trace order -> start order
        sched.warm = _warm_sessions(raw_t, bursts_of, period, horizon, sess[first], unit_of,
                                    copies * id_stride, id_stride)  # fmt: skip
    return sched


def _warm_sessions(
    base_t: np.ndarray,
    bursts_of: list[list[tuple[int, int, float]]],
    period: float,
    horizon: float,
    sids: np.ndarray,
    unit_of: np.ndarray,
    id_base: int,
    id_stride: int,
) -> Chunk:
    """The sessions that earlier copies of the looped trace would still be running at
    time 0, each joining at its first burst due at or after 0, sorted by start.

    Sessions last many think times (tens of seconds in Support), far longer than
    a warm-up; without these the run would start empty and fill up over a whole
    session lifetime. Burst times are estimated from the think times alone
    (responses taken as instant), so the run starts near the trace's steady
    state rather than exactly in it. ``base_t`` and ``sids`` are in trace order;
    ``unit_of`` maps that order to the schedule's units.
    """
    offsets = [np.r_[0.0, np.cumsum([b[2] for b in plan])[:-1]] for plan in bursts_of]
    life = max((float(o[-1]) for o in offsets if o.size), default=0.0)
    back = int(np.ceil(life / period)) if period > 0 else 0
    starts: list[float] = []
    ids: list[int] = []
    units: list[int] = []
    first: list[int] = []
    for k in range(1, back + 1):
        for j, plan in enumerate(bursts_of):
            st = base_t[j] - k * period
            at = st + offsets[j]
            b = int(np.searchsorted(at, 0.0))  # first burst due at or after 0
            if b < len(plan) and at[b] < horizon:
                starts.append(float(at[b]))
                # ids after the forward copies', a function of the session alone
                ids.append(id_base + (k - 1) * id_stride + int(sids[j]))
                units.append(int(unit_of[j]))
                first.append(b)
    order = np.argsort(np.asarray(starts, np.float64), kind="stable")
    return Chunk(
        np.asarray(starts, np.float64)[order],
        np.asarray(ids, np.int64)[order],
        np.asarray(units, np.int64)[order],
        np.asarray(first, np.int64)[order],
    )


def _bursts(trace: Trace, first: np.ndarray) -> list[list[tuple[int, int, float]]]:
    """Per session (rows ``first[j]`` onwards), its bursts as (first row, end row, think)."""
    burst = trace.table.column("burst").to_numpy()
    sess = trace.table.column("session").to_numpy()
    think = trace.table.column("think").to_numpy()
    n = burst.size
    starts = np.flatnonzero(np.r_[True, (sess[1:] != sess[:-1]) | (burst[1:] != burst[:-1])])
    ends = np.r_[starts[1:], n]
    out: list[list[tuple[int, int, float]]] = []
    bi = 0
    bounds = np.r_[first, n]
    for j in range(first.size):
        stop = bounds[j + 1]
        plan = []
        while bi < starts.size and starts[bi] < stop:
            plan.append((int(starts[bi]), int(ends[bi]), float(think[starts[bi]])))
            bi += 1
        out.append(plan)
    return out


def open_loop_trace(
    path: str,
    rate: float,
    duration: float,
    *,
    arrival: str = "constant",
    seed: int = 0,
    cls: str = "static",
) -> Trace:
    """A pure open-loop trace: one request to ``path`` per arrival, each its own session.
    ``arrival`` is ``constant`` (every 1/rate seconds) or ``poisson`` (exponential gaps,
    seeded)."""
    check_rate(rate)
    check_positive(duration, "duration")
    if not 1.0 <= (expected := rate * duration) <= MAX_REQUESTS:  # all drawn at once
        raise ParameterError(
            f"rate {rate:g}/s over {duration:g} s makes about {expected:.3g} requests; a run "
            f"needs one at least and holds {MAX_REQUESTS:,} at most: change the rate or length."
        )
    if arrival == "constant":
        t = np.arange(int(np.ceil(rate * duration))) / rate
    elif arrival == "poisson":
        rng = np.random.default_rng(seed)
        n = int(rate * duration + 10 * np.sqrt(rate * duration) + 10)
        t = np.cumsum(rng.exponential(1.0 / rate, n)) - 0.0
        t = t[t < duration]
    else:
        raise ParameterError(f"arrival == {arrival!r}, must be one of constant, poisson.")
    n = t.size
    return Trace.from_columns(
        {"session": np.arange(n), "t": t, "path": [path] * n, "cls": [cls] * n},
        meta={"mode": "open", "workload": "open", "arrival": arrival, "rate": rate, "seed": seed},
    )
