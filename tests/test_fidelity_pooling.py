"""Pooling: Erlang's C against its closed forms, against simulated queues, and the curve
transform against the M/M/n formulas it stands on."""

from __future__ import annotations

import heapq
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from fidelity_pooling import erlang_c, pooled_curve, wait_ratio

pytestmark = pytest.mark.compute


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.6, 0.8, 0.95])
def test_erlang_c_has_its_closed_forms(rho):
    assert erlang_c(1, rho) == pytest.approx(rho)
    assert erlang_c(2, rho) == pytest.approx(2 * rho**2 / (1 + rho))
    assert wait_ratio(1, 2, rho) == pytest.approx(rho / (1 + rho))
    assert wait_ratio(3, 3, rho) == pytest.approx(1.0)
    ratios = [wait_ratio(1, n, rho) for n in (1, 2, 4, 8, 64)]
    assert all(a > b for a, b in itertools.pairwise(ratios))  # more pooling, less wait


def _mean_wait(n: int, rho: float, seed: int, count: int = 60_000) -> float:
    """The mean wait of a simulated FCFS M/M/n queue (service rate 1 per server)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / (n * rho), count))
    services = rng.exponential(1.0, count)
    free = [0.0] * n
    waits = np.empty(count)
    for i, (t, s) in enumerate(zip(arrivals.tolist(), services.tolist(), strict=True)):
        start = max(t, heapq.heappop(free))
        waits[i] = start - t
        heapq.heappush(free, start + s)
    return float(waits[count // 10 :].mean())  # the first tenth warms the queue up


@pytest.mark.parametrize("n", [2, 4])
def test_the_ratio_is_what_simulated_queues_wait(n):
    """Over 8 seeds, the simulated M/M/n's mean wait over M/M/1's lies within 6% of the
    ratio (the seeds' spread is about 4%)."""
    rho = 0.7
    got = [_mean_wait(n, rho, seed) / _mean_wait(1, rho, 100 + seed) for seed in range(8)]
    assert np.median(got) == pytest.approx(wait_ratio(1, n, rho), rel=0.06)


def _mm1_curve(service: float, rhos: list[float]) -> LoadCurve:
    def rep(rho: float) -> LevelStats:
        r = service / (1 - rho)
        st = ClassStats(n=1000, throughput=rho / service, mean=r, p50=r, p90=r, p99=r, p999=r)
        return LevelStats(throughput=rho / service, overall=st, utilization=rho)

    return LoadCurve(levels=[Level(rho, [rep(rho), rep(rho)]) for rho in rhos])


def test_a_curve_of_one_server_becomes_the_pooled_one():
    """An M/M/1 curve's excess over its lightest level, pooled to two servers, is the
    M/M/2 formula's S / (1 - rho^2), up to the lightest level's own wait."""
    service = 0.004
    rhos = [0.01, 0.3, 0.5, 0.7, 0.9]
    out = pooled_curve(_mm1_curve(service, rhos), 1, 2)
    floor = service / (1 - rhos[0])
    for lv, rho in zip(out.levels, rhos, strict=True):
        want = floor + (service / (1 - rho) - floor) * rho / (1 + rho)
        assert lv.reps[0].overall.mean == pytest.approx(want)
        assert lv.reps[0].overall.mean == pytest.approx(service / (1 - rho**2), rel=0.02)
    # Nothing to pool: the same cores, or a repetition without its utilization.
    same = pooled_curve(_mm1_curve(service, rhos), 2, 2)
    assert [lv.reps[0].overall.mean for lv in same.levels] == pytest.approx(
        [service / (1 - r) for r in rhos]
    )
    bare = _mm1_curve(service, rhos)
    for lv in bare.levels:
        for r in lv.reps:
            r.utilization = None
    assert pooled_curve(bare, 1, 2).levels[-1].reps[0].overall.mean == pytest.approx(
        service / (1 - rhos[-1])
    )
