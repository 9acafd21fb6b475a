"""Synthetic parent traces for the sampler tests, built with numpy only.

Values are drawn i.i.d. per request (reply size, class) and per burst (think
time, response times), independent of session membership, so that under any
sampler that decides without looking at them, the kept and the dropped rows
are two independent samples of one distribution: the exact null hypothesis of
a two-sample KS test.
"""

from __future__ import annotations

import numpy as np

from shrink.trace import Trace


def make_trace(
    rng: np.random.Generator,
    n_sessions: int = 200,
    *,
    mean_bursts: float = 4.0,
    mean_embedded: float = 3.0,
    duration: float = 100.0,
    p_dynamic: float = 0.3,
    rt_known: float = 0.8,
    open_loop: bool = False,
) -> Trace:
    """A closed-loop session trace (or an open-loop one: one request per session).

    Session ids are distinct random integers (not 0..n-1), bursts have a page
    and Poisson(mean_embedded) embedded requests, burst times are consistent:
    t[k+1] = t[k] + max rt of burst k (0 if unknown) + think[k].
    """
    ids = rng.choice(10**12, size=n_sessions, replace=False).astype(np.int64)
    if open_loop:
        t = np.sort(rng.uniform(0.0, duration, n_sessions))
        n = n_sessions
        return Trace.from_columns(
            {
                "session": ids,
                "t": t,
                "path": [f"/r{i}" for i in range(n)],
                "cls": np.where(rng.random(n) < p_dynamic, "dynamic", "static").tolist(),
                "bytes": rng.lognormal(8.0, 1.5, n).astype(np.int64),
                "rt": np.where(rng.random(n) < rt_known, rng.exponential(0.01, n), np.nan),
            },
            meta={"mode": "open", "source": "synthetic"},
        )
    n_bursts = 1 + rng.poisson(mean_bursts - 1.0, n_sessions)
    session_of_burst = np.repeat(np.arange(n_sessions), n_bursts)
    nb = session_of_burst.size
    burst_idx = np.arange(nb) - np.repeat(np.cumsum(n_bursts) - n_bursts, n_bursts)
    size = 1 + rng.poisson(mean_embedded, nb)
    think = rng.exponential(2.0, nb)
    row_burst = np.repeat(np.arange(nb), size)
    n = row_burst.size
    rt = np.where(rng.random(n) < rt_known, rng.exponential(0.05, n), np.nan)
    rt_filled = np.where(np.isnan(rt), 0.0, rt)
    dur = np.maximum.reduceat(rt_filled, np.cumsum(size) - size)
    start = rng.uniform(0.0, duration, n_sessions)
    step = dur + think
    # Consistent times: cumulative (duration + think) of the earlier bursts.
    cum = np.cumsum(step) - step
    first = np.cumsum(n_bursts) - n_bursts
    t_burst = start[session_of_burst] + cum - cum[first][session_of_burst]
    return Trace.from_columns(
        {
            "session": ids[session_of_burst][row_burst],
            "burst": burst_idx[row_burst].astype(np.int32),
            "t": t_burst[row_burst],
            "think": think[row_burst],
            "path": [f"/r{i}" for i in range(n)],
            # i.i.d. per request (not page/embedded) keeps the tests' null exact.
            "cls": np.where(rng.random(n) < p_dynamic, "dynamic", "static").tolist(),
            "bytes": rng.lognormal(8.0, 1.5, n).astype(np.int64),
            "rt": rt,
        },
        meta={"mode": "session", "source": "synthetic", "users": n_sessions},
    )


def row_ids(trace: Trace) -> np.ndarray:
    """The parent row index of each row (make_trace writes it into the path)."""
    return np.array([int(p[2:]) for p in trace.column("path")], dtype=np.int64)
