"""The session -> burst -> request structure of a trace, as flat numpy index arrays.

A trace stores its rows session by session (see ``shrink.trace``). A reader
that interleaves sessions is tolerated: the structure is then computed on a
stable sort by session id, and ``perm`` maps it back to the trace's rows.
A burst is a maximal run of rows with the same (session, burst) inside a
session; a burst is the SHRiNK "object" of a closed-loop session.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shrink.trace import Trace

__all__ = ["Structure", "is_open_loop", "structure"]


@dataclass(frozen=True)
class Structure:
    """Group indices of a trace, all in *grouped order* (rows sorted by session).

    ``perm[i]`` is the trace row at grouped position ``i``; ``perm is None``
    when the trace is already grouped (the common case, no copy needed).
    """

    perm: np.ndarray | None
    session: np.ndarray  # per row: session id
    burst: np.ndarray  # per row: burst id
    row_burst: np.ndarray  # per row: index of its burst (0 .. n_bursts-1)
    row_session: np.ndarray  # per row: index of its session (0 .. n_sessions-1)
    burst_first: np.ndarray  # per burst: first row
    burst_session: np.ndarray  # per burst: index of its session
    session_first_burst: np.ndarray  # per session: index of its first burst
    session_first_row: np.ndarray  # per session: first row

    @property
    def n_rows(self) -> int:
        return int(self.session.size)

    @property
    def n_bursts(self) -> int:
        return int(self.burst_first.size)

    @property
    def n_sessions(self) -> int:
        return int(self.session_first_row.size)

    def grouped(self, values: np.ndarray) -> np.ndarray:
        """A per-row column of the trace, put in grouped order."""
        return values if self.perm is None else values[self.perm]

    def ungrouped(self, values: np.ndarray) -> np.ndarray:
        """A per-row array in grouped order, put back in the trace's row order."""
        if self.perm is None:
            return values
        out = np.empty_like(values)
        out[self.perm] = values
        return out

    def position_in_burst(self) -> np.ndarray:
        """Per row: 0 for the burst's first request, 1 for the next, ..."""
        return np.arange(self.n_rows, dtype=np.int64) - self.burst_first[self.row_burst]


def _column(trace: Trace, name: str) -> np.ndarray:
    return trace.table.column(name).to_numpy()


def structure(trace: Trace) -> Structure:
    """Compute the grouping of ``trace`` (O(n), or O(n log n) if sessions interleave)."""
    s = _column(trace, "session")
    b = _column(trace, "burst")
    n = s.size
    perm: np.ndarray | None = None
    if n:
        change = np.flatnonzero(s[1:] != s[:-1])
        if np.unique(s[np.r_[0, change + 1]]).size != change.size + 1:
            perm = np.argsort(s, kind="stable")
            s, b = s[perm], b[perm]
    sess_start = np.ones(n, dtype=bool)
    burst_start = np.ones(n, dtype=bool)
    if n:
        sess_start[1:] = s[1:] != s[:-1]
        burst_start[1:] = sess_start[1:] | (b[1:] != b[:-1])
    row_burst = np.cumsum(burst_start, dtype=np.int64) - 1
    row_session = np.cumsum(sess_start, dtype=np.int64) - 1
    burst_first = np.flatnonzero(burst_start)
    session_first_row = np.flatnonzero(sess_start)
    return Structure(
        perm=perm,
        session=s,
        burst=b,
        row_burst=row_burst,
        row_session=row_session,
        burst_first=burst_first,
        burst_session=row_session[burst_first],
        session_first_burst=row_burst[session_first_row],
        session_first_row=session_first_row,
    )


def is_open_loop(trace: Trace, st: Structure | None = None) -> bool:
    """True for open-loop traces: meta ``mode == "open"`` or one request per session."""
    mode = trace.meta.get("mode")
    if mode == "open":
        return True
    if mode == "session":
        return False
    st = st or structure(trace)
    return st.n_sessions == st.n_rows
