"""The schedule is kept compact and read in chunks: same plan as built whole, O(trace) memory."""

from __future__ import annotations

import numpy as np
import pytest

from shrink.schedule import build_schedule, open_loop_trace
from shrink.sim import support_trace
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _reference_sessions(trace, rate_factor, horizon):
    """The looped plan spelled out whole (what build_schedule built before it streamed)."""
    sched = build_schedule(trace, rate_factor, horizon, warm_start=False)
    starts, ids = [], []
    for k in range(sched.copies):
        for t, sid in zip(sched.base_t, sched.base_ids, strict=True):
            st = t + k * sched.period
            if st < horizon:
                starts.append(st)
                ids.append(int(sid) + k * sched.id_stride)
    order = np.argsort(np.asarray(starts), kind="stable")
    return np.asarray(starts)[order], [ids[i] for i in order]


@pytest.mark.parametrize("seed", [0, 2, 3])
@pytest.mark.parametrize("size", [3, 4096])
def test_chunks_concatenate_to_the_whole_plan(seed, size):
    trace = support_trace(users=25, duration=20.0, seed=seed)
    rate_factor = [1.0, 2.5, 0.7, 4.0][seed]
    sched = build_schedule(trace, rate_factor, 90.0)  # many copies, warm-start sessions
    chunks = list(sched.chunks(size))
    assert all(c.t.size > 0 for c in chunks)
    t = np.concatenate([c.t for c in chunks])
    assert np.all(np.diff(t) >= 0) and t.max() < 90.0
    np.testing.assert_array_equal(t, sched.session_start)
    ids = np.concatenate([c.ids for c in chunks]).tolist()
    assert ids == sched.session_ids and len(set(ids)) == len(ids)
    # without the warm start, the plan is the copies spelled out
    cold = build_schedule(trace, rate_factor, 90.0, warm_start=False)
    ref_t, ref_ids = _reference_sessions(trace, rate_factor, 90.0)
    np.testing.assert_array_equal(cold.session_start, ref_t)
    assert cold.session_ids == ref_ids


def test_a_long_run_is_kept_as_one_copy_of_the_trace():
    trace = open_loop_trace("/x", 1000.0, 1.0)
    short = build_schedule(trace, 1.0, 10.0)
    long = build_schedule(trace, 1.0, 1000.0)  # a million requests
    assert long.base_t.size == short.base_t.size == 1000 and long.copies == 1000
    biggest = max(c.t.size for c in long.chunks())
    assert 1000 <= biggest <= 2 * 4096  # a chunk is bounded, whatever the run's length
    assert len(long) == 1_000_000
    head = next(iter(long.chunks(100)))
    np.testing.assert_array_equal(long.base_rows[head.unit], np.arange(head.t.size))
    np.testing.assert_allclose(head.t, np.arange(head.t.size) / 1000.0)


def test_flat_bursts_match_the_sessions_plans():
    trace = support_trace(users=20, duration=20.0, seed=5)
    sched = build_schedule(trace, 1.5, 60.0)
    off, first, end, think = sched.flat_bursts()
    plans = sched.session_bursts
    assert off.size == len(plans) + 1
    for i in (0, 1, len(plans) // 2, len(plans) - 1):
        got = list(zip(first[off[i] : off[i + 1]].tolist(), end[off[i] : off[i + 1]].tolist(),
                       think[off[i] : off[i + 1]].tolist(), strict=True))  # fmt: skip
        assert got == plans[i]
    assert len(sched) == int((end - first).sum())


def test_a_traces_t_start_is_the_runs_time_zero():
    """A probe places its first period some time into the run (``meta["t_start"]``):
    the schedule keeps it there instead of starting the run at the first request."""
    from shrink.schedule import build_schedule, trace_extent

    tr = Trace.from_columns(
        {"session": np.arange(3), "t": np.array([1.5, 1.6, 1.7]), "path": ["/a"] * 3},
        meta={"mode": "open", "t_start": 0.0},
    )
    assert trace_extent(tr)[0] == 0.0
    cols = {c: tr.column(c) for c in ("session", "t", "path")}
    plain = Trace.from_columns(cols, meta={"mode": "open"})
    assert trace_extent(plain)[0] == 1.5
    sched = build_schedule(tr, 1.0, 3.0)
    assert np.allclose(sched.base_t[:3], [1.5, 1.6, 1.7])
