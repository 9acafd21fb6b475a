"""From timestamped requests to sessions, bursts and think times (shared by the log readers).

The rules, applied by :func:`sessionize`:

* **Sessions.** Requests with the same key (a session id, or a client address and
  user agent) belong to one session, in send-time order (file order breaks ties).
  With ``idle_gap`` set, a silence longer than ``idle_gap`` between two
  consecutive requests of a key starts a new session (the usual 30-minute rule
  of web-log analysis).
* **Bursts.** A request whose send time is within ``burst_gap`` of the *first*
  request of the current burst joins that burst (a page and its embedded
  objects); otherwise it starts a new burst. Anchoring on the first request
  keeps a steady trickle of requests from chaining into one endless burst.
* **Think time** after a burst is the gap from the end of the burst to the
  next burst's first send time, never negative. The end of a burst is the
  latest of its requests' send time plus response time (response time counted
  as 0 where unknown). The last burst of a session has think time 0.
* **t** of a burst is its first send time minus the earliest send time of the
  whole trace. Sessions are numbered 0, 1, ... in order of their start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shrink.checks import MAX_SECONDS, check_scalar, parse_duration
from shrink.errors import TraceFormatError

__all__ = ["Sessions", "TimeSpan", "non_negative_duration", "sessionize"]


class TimeSpan:
    """The earliest and the latest send time a log reader read, with their line numbers
    and the time as written: :meth:`check` refuses a log spanning more than a trace may
    (a century), naming the lines. Left to the trace check, that error named a row of
    the sorted trace, which no line number leads to."""

    def __init__(self) -> None:
        self.low: tuple[float, int, str] = (float("inf"), 0, "")
        self.high: tuple[float, int, str] = (float("-inf"), 0, "")

    def see(self, time: float, line: int, text: str) -> None:
        if time < self.low[0]:
            self.low = (time, line, text)
        if time > self.high[0]:
            self.high = (time, line, text)

    def check(self, path: Path) -> None:
        """A TraceFormatError naming the later line when the times span over a century."""
        (first, at, text), (last, at2, text2) = self.low, self.high
        if last - first <= MAX_SECONDS:
            return
        years = (last - first) / (365.25 * 86400)
        apart = f"{years:,.0f}" if years < 1e6 else f"{years:.1e}"
        raise TraceFormatError(
            f"time {text2} is {apart} years after line {at}'s {text}: a trace spans at "
            "most a century, so one of the two is wrong; fix or remove it",
            path=path,
            line=at2,
        )


@dataclass(frozen=True)
class Sessions:
    """Row order and the session/burst columns that :func:`sessionize` computed.

    ``order`` indexes the input requests; the other arrays are in that order.
    """

    order: np.ndarray
    session: np.ndarray
    burst: np.ndarray
    t: np.ndarray
    think: np.ndarray
    origin: float


def sessionize(
    key: np.ndarray,
    time: np.ndarray,
    rt: np.ndarray | None = None,
    *,
    burst_gap: float,
    idle_gap: float | None = None,
) -> Sessions:
    """Group requests into sessions and bursts; see the module docstring for the rules.

    ``key`` holds integer session keys, ``time`` absolute send times in seconds,
    ``rt`` response times in seconds (NaN unknown).
    """
    key = np.asarray(key, dtype=np.int64)
    time = np.asarray(time, dtype=np.float64)
    n = key.size
    if n == 0:
        empty_f = np.empty(0, dtype=np.float64)
        empty_i = np.empty(0, dtype=np.int64)
        return Sessions(empty_i, empty_i, empty_i.astype(np.int32), empty_f, empty_f, 0.0)

    # lexsort is stable (each key sorted with a stable sort): ties in (key, time) keep
    # file order. A log may hold millions of rows and every step below makes arrays of
    # that length: each is dropped (del) or overwritten in place once the next step no
    # longer needs it, so that few are alive at once.
    order = np.lexsort((time, key))
    k = key[order]
    new_session = np.r_[True, k[1:] != k[:-1]]
    del k
    tm = time[order]
    if idle_gap is not None:
        new_session[1:] |= (tm[1:] - tm[:-1]) > idle_gap

    burst, burst_start = _bursts(tm, new_session, burst_gap)
    starts = np.flatnonzero(burst_start)
    del burst_start
    think_b = _think(tm, rt, order, new_session, starts)
    burst_t0 = tm[starts]

    # Number sessions by start time; the stable sort keeps each session's rows together.
    session_first = np.flatnonzero(new_session)
    session_t0 = tm[session_first]
    origin = float(tm.min())
    del tm
    rank = np.empty(session_first.size, dtype=np.int64)
    rank[np.lexsort((np.arange(session_first.size), session_t0))] = np.arange(session_first.size)
    session = np.cumsum(new_session) - 1
    del new_session
    session = rank[session]
    del rank
    regroup = np.argsort(session, kind="stable")
    order = order[regroup]
    session = session[regroup]
    burst = burst[regroup].astype(np.int32, copy=False)
    # The burst of each row (over the file), in the final order: where its burst starts.
    burst_of_row = np.searchsorted(starts, regroup, side="right") - 1
    del regroup, starts
    t = burst_t0[burst_of_row]
    t -= origin
    think = think_b[burst_of_row]
    return Sessions(order=order, session=session, burst=burst, t=t, think=think, origin=origin)


def _think(
    tm: np.ndarray,
    rt: np.ndarray | None,
    order: np.ndarray,
    new_session: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray:
    """Think time after each burst: the gap from its end (latest send + rt) to the next
    burst's first send time, in the same session only; ``starts`` are the bursts' first rows."""
    if rt is None:
        burst_end = np.maximum.reduceat(tm, starts)
    else:
        end = np.asarray(rt, dtype=np.float64)[order]
        np.nan_to_num(end, copy=False, nan=0.0)
        np.add(tm, end, out=end)
        burst_end = np.maximum.reduceat(end, starts)
        del end
    think_b = np.zeros(starts.size)
    same = ~new_session[starts[1:]]
    gaps = tm[starts[1:]] - burst_end[:-1]
    think_b[:-1] = np.where(same, np.maximum(gaps, 0.0), 0.0)
    return think_b


_SLICE = 65_536  # rows turned into Python objects at a time (a log may hold millions)


def _bursts(tm: np.ndarray, new_session: np.ndarray, burst_gap: float) -> tuple[np.ndarray, ...]:
    """Burst index inside the session and burst-start flags, anchored on each burst's first send."""
    # int32, the type of the trace's column, unless a session could have more bursts.
    burst = np.empty(tm.size, dtype=np.int32 if tm.size <= 2**31 else np.int64)
    start = np.empty(tm.size, dtype=bool)
    b = -1
    anchor = 0.0
    for lo in range(0, tm.size, _SLICE):
        out_b: list[int] = []
        out_s: list[bool] = []
        times = tm[lo : lo + _SLICE].tolist()
        for ti, first in zip(times, new_session[lo : lo + _SLICE].tolist(), strict=True):
            if first or ti - anchor > burst_gap:
                b = 0 if first else b + 1
                anchor = ti
                out_s.append(True)
            else:
                out_s.append(False)
            out_b.append(b)
        burst[lo : lo + len(out_b)] = out_b
        start[lo : lo + len(out_s)] = out_s
    return burst, start


def non_negative_duration(value: float | str, name: str) -> float:
    """Seconds from a number or a duration such as ``"500ms"``; unlike parse_duration, 0 is ok."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return check_scalar(value, name, low=0.0)
    text = str(value).strip()
    if text.rstrip("smhinu").strip() in ("0", "0.0", ".0"):
        return 0.0
    return parse_duration(text, name)
