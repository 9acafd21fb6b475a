"""Partition a trace into k disjoint parts by session hash.

Part i holds the sessions whose draw u(seed, session) (the session sampler's
draw) lies in [i/k, (i+1)/k). The parts are disjoint, their union is the
parent, each is an i.i.d. session sample of fraction about 1/k, and part 0
is exactly ``SessionSampler().sample(trace, 1/k, seed=seed)``'s sessions.
The load generator gives one part to each of its processes, or to each
replica address, so every session stays on one connection path.
"""

from __future__ import annotations

import numpy as np

from samplers._protocol import check_seed, sampled
from samplers.session import session_u
from shrink.checks import check_int
from shrink.trace import Trace

__all__ = ["MAX_PARTS", "split", "split_index"]

# Each part is a pass over the trace and, from ``shrink split``, a file
# (part-000 ... part-999): a billion parts ran for hours before writing one.
MAX_PARTS = 1000


def split_index(sessions: np.ndarray, k: int, *, seed: int = 0) -> np.ndarray:
    """Per row (or per session id): the part 0 .. k-1 its session goes to."""
    u = session_u(np.asarray(sessions), seed)
    return np.minimum((u * k).astype(np.int64), k - 1)


def split(trace: Trace, k: int, *, seed: int = 0) -> list[Trace]:
    """The k parts, rows in the parent's order; meta ``part``, ``parts`` and ``parent``."""
    k = check_int(k, "parts", low=1, high=MAX_PARTS)
    seed = check_seed(seed)
    sessions = trace.table.column("session").to_numpy()
    part_of = split_index(sessions, k, seed=seed)
    known = {"parent_id": trace.fingerprint(), "parent_sessions": trace.n_sessions}
    parts = []
    for i in range(k):
        mask = part_of == i
        kept = trace.table.filter(mask)
        parts.append(
            sampled(trace, kept, "split", 1 / k, seed, scales_users=True, **known, part=i, parts=k)
        )
    return parts
