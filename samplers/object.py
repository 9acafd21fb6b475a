"""Object-level sampling: keep documents (a page with its embedded requests).

Open loop (trace meta ``mode == "open"``, or one request per session): every
request is an object and is kept independently with probability alpha.

Closed loop (sessions with think times): an object is a burst. Each burst is
kept with probability alpha, decided by a keyed hash of (seed, session, burst).
The user stays, so it must keep its pacing (SHRiNK, footnote 5): a skipped
burst turns into extra think time of the size the recorded trace implies,

    skipped time = burst duration + its think time,
    burst duration = max of the recorded ``rt`` over its requests (0 if none known),

added to the think time of the previous kept burst of the same session. When a
session's first bursts are skipped there is no previous burst; instead the
session starts later: the first kept burst's ``t`` becomes the session's
original start ``t`` plus the skipped time. Every other kept burst keeps its
recorded ``t``, so on a consistent trace (``t`` of burst k+1 = ``t`` of burst k
+ its duration + think) all ``t`` values stay consistent. A session whose
bursts are all skipped disappears. Nothing else in a kept row changes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from samplers._hash import DOMAIN_OBJECT, unit_hash
from samplers._protocol import check_args, register_sampler, sampled
from samplers._structure import Structure, is_open_loop, structure
from shrink.trace import Trace

__all__ = ["ObjectSampler", "burst_durations", "object_u"]


def object_u(st: Structure, seed: int) -> np.ndarray:
    """Per burst: the uniform draw deciding whether it is kept."""
    return unit_hash(
        seed, st.session[st.burst_first], st.burst[st.burst_first], domain=DOMAIN_OBJECT
    )


def burst_durations(st: Structure, rt_grouped: np.ndarray) -> np.ndarray:
    """Per burst: the largest recorded response time of its requests, 0 where none is known."""
    if st.n_rows == 0:
        return np.zeros(0)
    filled = np.where(np.isnan(rt_grouped), -np.inf, rt_grouped)
    longest = np.maximum.reduceat(filled, st.burst_first)
    return np.maximum(longest, 0.0)  # -inf (nothing known) and negative garbage -> 0


class ObjectSampler:
    """Keep each object with probability alpha; skipped objects become think time."""

    name = "object"

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        """The sample; see the module docstring for the closed-loop think-time rule."""
        alpha, seed = check_args(alpha, seed)
        st = structure(trace)
        if is_open_loop(trace, st):
            return self._open(trace, st, alpha, seed)
        return self._closed(trace, st, alpha, seed)

    def _open(self, trace: Trace, st: Structure, alpha: float, seed: int) -> Trace:
        pos = st.position_in_burst()
        u = unit_hash(seed, st.session, st.burst, pos, domain=DOMAIN_OBJECT)
        keep = st.ungrouped(u < alpha)
        kept = trace.table.filter(keep)
        return sampled(
            trace, kept, self.name, alpha, seed,
            scales_users=True, parent_sessions=st.n_sessions, objects="requests (open loop)",
        )  # fmt: skip

    def _closed(self, trace: Trace, st: Structure, alpha: float, seed: int) -> Trace:
        table = trace.table
        t = st.grouped(table.column("t").to_numpy())
        think = st.grouped(table.column("think").to_numpy())
        rt = st.grouped(table.column("rt").to_numpy())

        nb = st.n_bursts
        keep_b = object_u(st, seed) < alpha
        bf = st.burst_first
        skip_time = np.where(keep_b, 0.0, burst_durations(st, rt) + think[bf])

        # The previous kept burst, if it lies in the same session, absorbs the time.
        idx = np.arange(nb, dtype=np.int64)
        prev_kept = np.maximum.accumulate(np.where(keep_b, idx, -1)) if nb else idx
        first_of_session = st.session_first_burst[st.burst_session]
        has_prev = prev_kept >= first_of_session
        to_think = ~keep_b & has_prev
        to_start = ~keep_b & ~has_prev
        # bincount sums each target's skipped times in trace order, from 0.0.
        added = np.bincount(prev_kept[to_think], weights=skip_time[to_think], minlength=nb)
        shift = np.bincount(
            st.burst_session[to_start], weights=skip_time[to_start], minlength=st.n_sessions
        )

        # The first kept burst of a session whose leading bursts were skipped.
        first_kept = keep_b & ~_kept_before(prev_kept, first_of_session)
        shifted = first_kept & (idx != first_of_session)
        start_t = t[st.session_first_row]
        new_t_b = np.where(shifted, start_t[st.burst_session] + shift[st.burst_session], t[bf])

        keep_rows = keep_b[st.row_burst]
        new_think = think + added[st.row_burst]
        new_t = np.where(shifted[st.row_burst], new_t_b[st.row_burst], t)

        table = table.set_column(
            table.schema.get_field_index("think"), "think", pa.array(st.ungrouped(new_think))
        )
        table = table.set_column(
            table.schema.get_field_index("t"), "t", pa.array(st.ungrouped(new_t))
        )
        kept = table.filter(st.ungrouped(keep_rows))
        return sampled(
            trace, kept, self.name, alpha, seed,
            scales_users=False, parent_sessions=st.n_sessions, objects="bursts (closed loop)",
            kept_bursts=int(keep_b.sum()), parent_bursts=nb,
        )  # fmt: skip

    def __repr__(self) -> str:
        return "ObjectSampler()"


def _kept_before(prev_kept: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per burst: is there a kept burst *before* it in the same session?"""
    before = np.empty_like(prev_kept)
    if before.size:
        before[0] = -1
        before[1:] = prev_kept[:-1]
    return before >= first


register_sampler("object", ObjectSampler)
