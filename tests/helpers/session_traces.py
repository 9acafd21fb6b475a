"""Small traces for the tests, built by hand (no sampler): sessions for the replay tests,
a Poisson stream of single requests for the level searches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shrink.trace import Trace

# Two pages, the first dynamic: what the cluster tests replay.
PAGES = ("/a?bytes=512", "/b?bytes=2048")


def session_trace(
    n_sessions: int,
    paths: Sequence[str] = PAGES,
    *,
    gap: float,
    think: float,
    bursts: int = 1,
) -> Trace:
    """``n_sessions`` sessions, ``gap`` s apart, each of ``bursts`` bursts 10 s apart.

    A burst requests ``paths`` in order: the first is ``dynamic`` (the page), the rest
    ``static`` (its embedded objects); every burst is followed by ``think`` s.
    """
    cols: dict[str, list] = {k: [] for k in ("session", "burst", "t", "think", "path", "cls")}
    for s in range(n_sessions):
        for b in range(bursts):
            for k, p in enumerate(paths):
                cols["session"].append(s)
                cols["burst"].append(b)
                cols["t"].append(s * gap + b * 10.0)
                cols["think"].append(think)
                cols["path"].append(p)
                cols["cls"].append("dynamic" if k == 0 else "static")
    return Trace.from_columns(cols, meta={"mode": "session"})


def poisson_trace(rate: float, duration: float, seed: int = 0) -> Trace:
    """An open-loop trace: Poisson arrivals at ``rate`` for ``duration`` s, one request each."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, int(rate * duration * 1.2)))
    t = t[t < duration]
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/static/file1k.bin"] * t.size},
        meta={"mode": "open"},
    )
