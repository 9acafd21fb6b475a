"""Small session traces for the replay tests, built by hand (no sampler, no randomness)."""

from __future__ import annotations

from collections.abc import Sequence

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
