"""A fake sampler for tests of code that takes a :class:`~samplers.Sampler`.

It keeps the first ``floor(alpha * n + 0.5)`` sessions in order of first
appearance: predictable by eye, and obviously *not* an i.i.d. sample, so it is
not registered and must never feed a measurement.
"""

from __future__ import annotations

import numpy as np

from samplers._protocol import check_args, sampled
from shrink.trace import Trace

__all__ = ["FirstSessionsSampler"]


class FirstSessionsSampler:
    """Keep the first round(alpha * n) sessions of the trace (deterministic fake)."""

    name = "first-sessions"

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        """The rows of the first sessions; ``seed`` is recorded but not used."""
        alpha, seed = check_args(alpha, seed)
        sessions = trace.table.column("session").to_numpy()
        ids, first = np.unique(sessions, return_index=True)
        wanted = ids[np.argsort(first)][: int(np.floor(alpha * ids.size + 0.5))]
        keep = np.isin(sessions, wanted)
        kept = trace.table.filter(keep)
        return sampled(trace, kept, self.name, alpha, seed, scales_users=True)
