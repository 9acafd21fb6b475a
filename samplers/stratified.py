"""Stratified sampling: the mix of a column (default ``cls``) is kept exact up to rounding.

Units are sessions on a closed-loop trace and requests on an open-loop one.
A session's stratum is its *dominant* value of the column (the most frequent
among its requests; ties go to the smallest value, so "dynamic" before
"static"). Within each stratum of n units exactly ``floor(alpha * n + 0.5)``
units are kept: those with the smallest keyed hash u(seed, unit), the same
draw the session sampler uses. The exactness claim is about the units: the
number of sessions (or open-loop requests) of each stratum. The request-level
mix of a session trace follows only as closely as sessions are pure.

Ranking by the hash keeps samples nested in alpha at a fixed seed, and on a
session trace the kept sessions are always those the session sampler would
rank first.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from samplers._hash import DOMAIN_OBJECT, DOMAIN_SESSION, unit_hash
from samplers._protocol import check_args, register_sampler, sampled
from samplers._structure import is_open_loop, structure
from shrink.errors import ParameterError
from shrink.trace import Trace

__all__ = ["StratifiedSampler", "keep_exact_per_stratum", "stratum_codes"]


def stratum_codes(values: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[object]]:
    """Per row: an integer code of its value, codes ordered by sorted value; and the values."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = pc.dictionary_encode(values)
    dictionary = enc.dictionary.to_pylist()
    indices = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = sorted(range(len(dictionary)), key=lambda i: (dictionary[i] is None, dictionary[i]))
    remap = np.empty(len(dictionary), dtype=np.int64)
    remap[order] = np.arange(len(dictionary))
    return remap[indices], [dictionary[i] for i in order]


def keep_exact_per_stratum(codes: np.ndarray, u: np.ndarray, alpha: float) -> np.ndarray:
    """Mask keeping, in each stratum, the floor(alpha*n + 0.5) units with the smallest u."""
    n = codes.size
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    order = np.lexsort((u, codes))
    counts = np.bincount(codes)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    quota = np.floor(alpha * counts + 0.5).astype(np.int64)
    rank = np.arange(n) - starts[codes[order]]
    keep[order] = rank < quota[codes[order]]
    return keep


class StratifiedSampler:
    """Keep exactly round(alpha * n) units of each stratum of ``column``."""

    name = "stratified"

    def __init__(self, column: str = "cls") -> None:
        self.column = column

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        """The stratified sample; meta ``strata`` lists each value's kept/total units."""
        alpha, seed = check_args(alpha, seed)
        if not trace.has(self.column):
            raise ParameterError(
                f"column == {self.column!r}, must be one of {', '.join(trace.columns)}."
            )
        st = structure(trace)
        codes_rows, values = stratum_codes(trace.table.column(self.column))
        codes_rows = st.grouped(codes_rows)
        open_loop = is_open_loop(trace, st)
        if open_loop:
            unit_codes = codes_rows
            u = unit_hash(seed, st.session, st.burst, st.position_in_burst(), domain=DOMAIN_OBJECT)
            keep_units = keep_exact_per_stratum(unit_codes, u, alpha)
            keep_rows = keep_units
            units = "requests"
        else:
            k = max(len(values), 1)
            counts = np.bincount(st.row_session * k + codes_rows, minlength=st.n_sessions * k)
            unit_codes = counts.reshape(st.n_sessions, k).argmax(axis=1)
            u = unit_hash(seed, st.session[st.session_first_row], domain=DOMAIN_SESSION)
            keep_units = keep_exact_per_stratum(unit_codes, u, alpha)
            keep_rows = keep_units[st.row_session]
            units = "sessions (by dominant value)"
        kept = trace.table.filter(st.ungrouped(keep_rows))
        total = np.bincount(unit_codes, minlength=len(values))
        taken = np.bincount(unit_codes[keep_units], minlength=len(values))
        strata = {
            str(v): {"units": int(n), "kept": int(m)}
            for v, n, m in zip(values, total, taken, strict=True)
        }
        return sampled(
            trace, kept, self.name, alpha, seed,
            scales_users=True, parent_sessions=st.n_sessions,
            stratify_by=self.column, strata_units=units, strata=strata,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"StratifiedSampler(column={self.column!r})"


register_sampler("stratified", StratifiedSampler)
