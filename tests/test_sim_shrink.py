"""The SHRiNK self-check on the simulator.

alpha of the sessions on alpha of the cores must give the full system's
normalized curve (mean latency against throughput / alpha) when the simulator's
cross-socket effects are off; with them on, the two differ, and that difference
is what the extrapolation stage has to correct.

SHRiNK's premise is that load is balanced i.i.d. per session *before* the
servers, so the check routes connections to workers at random. The default
model lets an idle worker accept first (lighttpd's workers share one listen
socket), which pools the workers: 8 pooled workers beat 4 at the same per-core
load even with no cross-socket effect at all. The last test pins that down,
because it is a second thing a one-socket share cannot show.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers.machines import NEHALEM

from shrink.loadcurve import LoadCurve
from shrink.measure import sweep
from shrink.share import Share
from shrink.sim import SimParams, SimTarget, tcp_trace
from shrink.trace import Trace

pytestmark = pytest.mark.compute

ALPHA = 0.5
LEVELS = [5.0, 10.0]  # rate factors on a 10,000 req/s trace: about 30% and 60% busy
REPS = 4
# exponential demands: the check is about scaling, and a lighter tail gives tighter CIs
IID = SimParams(accept_policy="random", static_cv=1.0)


def _sample_sessions(trace: Trace, alpha: float, seed: int) -> Trace:
    try:
        import samplers
    except ImportError:  # fall back to a keyed hash of the session id
        from shrink.schedule import session_hash as _session_hash

        u = _session_hash(trace.table.column("session").to_numpy(), 99 + seed) / 2.0**64
        return trace.filter(u < alpha, sampler="session", alpha=alpha, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return samplers.sample(trace, alpha, seed=seed)


def _curves(params: SimParams) -> tuple[LoadCurve, LoadCurve]:
    trace = tcp_trace(10_000, 4.0, seed=5)
    full = SimTarget(NEHALEM, "1-replica", None, params)
    part = SimTarget(NEHALEM, "1-replica", Share.cores_of(NEHALEM, (0, 1, 2, 3)), params)
    kw = {"reps": REPS, "warmup": 0.05, "duration": 0.25}
    c_full = sweep(full, trace, LEVELS, seed=1, **kw)
    c_part = sweep(part, _sample_sessions(trace, ALPHA, 3), LEVELS, seed=2, alpha=ALPHA, **kw)
    return c_full.normalized(), c_part.normalized()


def _compare(full: LoadCurve, part: LoadCurve) -> list[tuple[float, float, float, float]]:
    """Per level: (relative throughput difference, mean full, mean part, CI half-widths summed)."""
    out = []
    for a, b in zip(full.levels, part.levels, strict=True):
        ma, lo_a, hi_a = a.stat("mean")
        mb, lo_b, hi_b = b.stat("mean")
        out.append(
            (abs(a.throughput / b.throughput - 1), ma, mb, (hi_a - lo_a) / 2 + (hi_b - lo_b) / 2)
        )
    return out


def test_shrink_holds_without_cross_socket_effects_and_fails_with_them():
    off = _compare(*_curves(IID.without_cross_socket()))
    for thr_diff, m_full, m_part, half in off:
        assert thr_diff < 0.02  # normalized throughput matches
        # the normalized curves agree within the simulation's confidence intervals
        assert abs(m_full - m_part) <= half, (m_full, m_part, half)
    on = _compare(*_curves(IID))
    diffs = [(m_full - m_part) / m_part for _, m_full, m_part, _ in on]
    for (_, m_full, m_part, half), rel in zip(on, diffs, strict=True):
        # the full machine is slower than its one-socket share predicts, beyond the CIs
        assert m_full - m_part > half and rel > 0.05, (m_full, m_part, half)
    assert np.all(np.diff(diffs) > 0)  # and more so the busier it is


def test_pooled_accept_makes_the_full_machine_faster_than_its_share():
    p = SimParams().without_cross_socket()  # idle-first accept, the default
    trace = tcp_trace(10_000, 3.0, seed=5)
    full = SimTarget(NEHALEM, "1-replica", None, p)
    part = SimTarget(NEHALEM, "1-replica", Share.cores_of(NEHALEM, (0, 1, 2, 3)), p)
    means = []
    for seed in range(2):
        a = full.run(trace, rate_factor=10.0, warmup=0.05, duration=0.15, seed=seed)
        b = part.run(
            _sample_sessions(trace, ALPHA, 3),
            rate_factor=10.0,
            warmup=0.05,
            duration=0.15,
            seed=seed,
        )
        means.append((a.runlog.latencies().mean(), b.runlog.latencies().mean()))
    for m_full, m_part in means:
        assert m_part > 1.1 * m_full
