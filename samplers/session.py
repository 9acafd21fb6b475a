"""Session-level sampling: SHRiNK's i.i.d. sampling of user equivalents.

Each session is kept independently with probability alpha, decided by a keyed
hash of (seed, session id): a session is kept iff ``u(seed, session) < alpha``.
Samples therefore nest (at one seed, every session kept at alpha = 0.25 is
kept at alpha = 0.5) and a session's fate does not depend on the rest of the
trace. Kept sessions are copied unchanged: start times, think times, every
request. This is the right level when load is balanced per session (HTTP/1.1
keep-alive), see :mod:`samplers.consistency`.
"""

from __future__ import annotations

import numpy as np

from samplers._hash import DOMAIN_SESSION, unit_hash
from samplers._protocol import check_args, register_sampler, sampled
from shrink.trace import Trace

__all__ = ["SessionSampler", "session_u"]


def session_u(session_ids: np.ndarray, seed: int) -> np.ndarray:
    """The uniform draw of each session id (also used by :func:`samplers.split`)."""
    return unit_hash(seed, session_ids, domain=DOMAIN_SESSION)


class SessionSampler:
    """Keep each session with probability alpha (nested in alpha at a fixed seed)."""

    name = "session"

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        """Rows of the kept sessions, in the parent's order, unchanged."""
        alpha, seed = check_args(alpha, seed)
        sessions = trace.table.column("session").to_numpy()
        keep = session_u(sessions, seed) < alpha
        kept = trace.table.filter(keep)
        return sampled(trace, kept, self.name, alpha, seed, scales_users=True)

    def __repr__(self) -> str:
        return "SessionSampler()"


register_sampler("session", SessionSampler)
