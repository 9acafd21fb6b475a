"""Property tests (hypothesis): a sample is a subsequence of its parent, fields unchanged.

The only changes allowed are the closed-loop object sampler's: the think time
of a kept burst grows by exactly the skipped time of the bursts after it (up
to the next kept burst of its session), and the first kept burst of a session
whose first bursts were skipped starts at the session's start plus exactly
their skipped time. The expected values are computed here by a plain loop,
summing in trace order as the sampler does, and compared with ``==``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import samplers
from samplers import StructureWarning
from shrink.trace import Trace

pytestmark = pytest.mark.compute

finite = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
rt_values = st.one_of(st.just(math.nan), st.floats(min_value=0.0, max_value=5.0))


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    """Sessions of bursts of requests; ids arbitrary, times arbitrary, rt sometimes unknown."""
    n_sessions = draw(st.integers(1, 8))
    ids = draw(
        st.lists(
            st.integers(-(2**40), 2**40), min_size=n_sessions, max_size=n_sessions, unique=True
        )
    )
    cols: dict[str, list] = {
        k: [] for k in ("session", "burst", "t", "think", "rt", "bytes", "cls")
    }
    for sid in ids:
        t = draw(finite)
        for b in range(draw(st.integers(1, 5))):
            think = draw(finite)
            for _ in range(draw(st.integers(1, 4))):
                cols["session"].append(sid)
                cols["burst"].append(b)
                cols["t"].append(t)
                cols["think"].append(think)
                cols["rt"].append(draw(rt_values))
                cols["bytes"].append(draw(st.integers(-1, 10**6)))
                cols["cls"].append(draw(st.sampled_from(["static", "dynamic"])))
            t += draw(finite)
    n = len(cols["session"])
    mode = draw(st.sampled_from([None, "session", "open"]))
    meta = {"mode": mode} if mode else {}
    return Trace.from_columns({**cols, "path": [f"/r{i}" for i in range(n)]}, meta=meta)


def _ids(trace: Trace) -> np.ndarray:
    return np.array([int(p[2:]) for p in trace.column("path")], dtype=np.int64)


def _sample(trace: Trace, alpha: float, seed: int, level: str) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StructureWarning)
        return samplers.sample(trace, alpha, seed=seed, level=level)


def _expected_object_columns(parent: Trace, kept_rows: set[int]) -> tuple[list, list]:
    """(t, think) per kept row, by the documented closed-loop rule, with a plain loop."""
    s, b = parent.column("session").tolist(), parent.column("burst").tolist()
    t, think, rt = parent.column("t"), parent.column("think"), parent.column("rt")
    bursts: list[list[int]] = []
    for i in range(len(s)):
        if i and s[i] == s[i - 1] and b[i] == b[i - 1]:
            bursts[-1].append(i)
        else:
            bursts.append([i])
    new_t = {i: float(t[i]) for i in range(len(s))}
    new_think = {i: float(think[i]) for i in range(len(s))}
    added: dict[int, float] = {}
    shift: dict[int, float] = {}
    session_start: dict[int, float] = {}
    last_kept: dict[int, int] = {}
    for k, rows in enumerate(bursts):
        sid = s[rows[0]]
        session_start.setdefault(sid, float(t[rows[0]]))
        known = [float(rt[i]) for i in rows if not math.isnan(rt[i])]
        skipped = max([*known, 0.0]) + float(think[rows[0]])
        if rows[0] in kept_rows:
            # The session's first kept burst, after skipped ones: a later start.
            if sid not in last_kept and k > 0 and s[bursts[k - 1][0]] == sid:
                for i in rows:
                    new_t[i] = session_start[sid] + shift.get(sid, 0.0)
            last_kept[sid] = k
        elif sid in last_kept:
            added[last_kept[sid]] = added.get(last_kept[sid], 0.0) + skipped
        else:
            shift[sid] = shift.get(sid, 0.0) + skipped
    for k, extra in added.items():
        for i in bursts[k]:
            new_think[i] = float(think[i]) + extra
    order = sorted(kept_rows)
    return [new_t[i] for i in order], [new_think[i] for i in order]


UNCHANGED = ("session", "burst", "method", "path", "cls", "bytes", "status", "client")


@settings(max_examples=60, deadline=None)
@given(
    trace=traces(),
    alpha=st.floats(min_value=0.01, max_value=1.0),
    seed=st.integers(0, 2**63),
    level=st.sampled_from(["session", "object", "request", "stratified"]),
)
def test_sample_is_an_ordered_subset_with_unchanged_fields(trace, alpha, seed, level):
    s = _sample(trace, alpha, seed, level)
    ids = _ids(s)
    assert (np.diff(ids) > 0).all()  # the parent's rows, in the parent's order
    for col in UNCHANGED:
        assert s.column(col).tolist() == trace.column(col)[ids].tolist(), col
    assert np.array_equal(s.column("rt"), trace.column("rt")[ids], equal_nan=True)
    closed_object = level == "object" and not samplers.is_open_loop(trace)
    if closed_object:
        exp_t, exp_think = _expected_object_columns(trace, set(ids.tolist()))
        assert s.column("t").tolist() == exp_t
        assert s.column("think").tolist() == exp_think
    else:
        assert s.column("t").tolist() == trace.column("t")[ids].tolist()
        assert s.column("think").tolist() == trace.column("think")[ids].tolist()
    if level == "session":  # whole sessions or nothing
        kept = set(s.column("session").tolist())
        assert len(s) == int(np.isin(trace.column("session"), list(kept)).sum())


@settings(max_examples=25, deadline=None)
@given(trace=traces(), seed=st.integers(0, 2**63), k=st.integers(1, 6))
def test_split_parts_partition_the_parent(trace, seed, k):
    parts = samplers.split(trace, k, seed=seed)
    ids = np.concatenate([_ids(p) for p in parts])
    assert np.array_equal(np.sort(ids), np.arange(len(trace)))
    seen: set[int] = set()
    for p in parts:
        sessions = set(p.column("session").tolist())
        assert not sessions & seen
        seen |= sessions
