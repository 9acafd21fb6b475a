"""Request-level sampling: keep each request independently with probability alpha.

On a closed-loop trace this breaks the traffic's structure (SHRiNK): a page
loses some of its embedded requests, every user stays (with all its
keep-alive connections) while sending fewer requests, so the per-user load and
the connection count no longer scale together. The sampler therefore warns
with :class:`~samplers.StructureWarning` and records the caveat in the
sample's ``warnings`` meta. On an open-loop trace (one request per session)
there is no structure to break and it is the same as object sampling.
Kept rows are unchanged.
"""

from __future__ import annotations

import warnings

from samplers._hash import DOMAIN_REQUEST, unit_hash
from samplers._protocol import StructureWarning, check_args, register_sampler, sampled
from samplers._structure import is_open_loop, structure
from shrink.trace import Trace

__all__ = ["STRUCTURE_CAVEAT", "RequestSampler"]

STRUCTURE_CAVEAT = (
    "request-level sampling breaks the traffic's structure: pages lose embedded "
    "requests and every user (and its keep-alive connection) stays while sending fewer "
    "requests; sample sessions or objects to keep the structure"
)


class RequestSampler:
    """Keep each request with probability alpha (warns on closed-loop traces)."""

    name = "request"

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        """Kept requests in the parent's order, unchanged."""
        alpha, seed = check_args(alpha, seed)
        st = structure(trace)
        u = unit_hash(seed, st.session, st.burst, st.position_in_burst(), domain=DOMAIN_REQUEST)
        keep_grouped = u < alpha
        kept = trace.table.filter(st.ungrouped(keep_grouped))
        caveats: list[str] = []
        if not is_open_loop(trace, st) and alpha < 1.0:
            warnings.warn(STRUCTURE_CAVEAT, StructureWarning, stacklevel=2)
            caveats.append(STRUCTURE_CAVEAT)
        return sampled(
            trace, kept, self.name, alpha, seed,
            scales_users=False, parent_sessions=st.n_sessions, warnings=caveats,
        )  # fmt: skip

    def __repr__(self) -> str:
        return "RequestSampler()"


register_sampler("request", RequestSampler)
