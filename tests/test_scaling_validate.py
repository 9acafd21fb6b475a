"""SHRiNK scaling of curves, and validation against a full run, on queueing ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from shrink.loadcurve import QGRID, Level, LevelStats, LoadCurve, latency_stats
from shrink.mat import mat
from shrink.scaling import shrink_scaled_curve
from shrink.validate import validate, wasserstein1


def _mm1(rates, mu, *, alpha=1.0, share=None, seed=0, n=40000, reps=2):
    """Exponential response times of an M/M/1 (FIFO == PS in the mean) at each rate."""
    rng = np.random.default_rng(seed)
    levels = []
    for lam in rates:
        reps_ = []
        for _ in range(reps):
            lat = rng.exponential(1 / (mu - lam), n)
            s = latency_stats(lat, n / lam)
            reps_.append(LevelStats(throughput=float(lam), overall=s, per_class={"static": s}))
        levels.append(Level(float(lam), reps_))
    return LoadCurve(levels, knob="rate", alpha=alpha, share=share or {"kind": "all"})


def test_cpu_time_share_scaling_recovers_the_full_server():
    mu, alpha = 1000.0, 0.25
    full_rates = np.array([400, 600, 750, 850, 920])
    # A server at alpha of the speed (mu * alpha) fed alpha of the load.
    scaled = _mm1(
        alpha * full_rates,
        alpha * mu,
        alpha=alpha,
        share={"kind": "cpu_time", "fraction": alpha},
        seed=1,
    )
    full = _mm1(full_rates, mu, seed=2)
    predicted = shrink_scaled_curve(scaled)
    thresholds = {"mean": 0.005, "p999": 0.050}
    v = validate(predicted, full, thresholds)
    assert abs(v.mat_error["mean"]) < 0.03
    assert abs(v.mat_error["p999"]) < 0.05
    # Same distributions at matched loads: W1 small against the mean.
    assert all(row["w1_relative_to_mean"] < 0.05 for row in v.wasserstein)
    assert len(v.wasserstein) == 5


def test_core_share_scaling_keeps_latencies():
    scaled = _mm1([100, 200], 1000.0, alpha=0.5, share={"kind": "cores", "fraction": 0.5})
    pred = shrink_scaled_curve(scaled)
    assert pred.levels[0].throughput == pytest.approx(200)
    assert pred.levels[0].stat("mean")[0] == pytest.approx(scaled.levels[0].stat("mean")[0])


def test_validation_detects_a_wrong_prediction():
    full = _mm1([400, 600, 750, 850, 920], 1000.0, seed=3)
    wrong = _mm1([400, 600, 750, 850, 920], 1200.0, seed=4)  # a server 20% too fast
    v = validate(wrong, full, {"mean": 0.005})
    assert v.mat_error["mean"] > 0.1
    assert mat(full, "mean", 0.005).mat == pytest.approx(800, rel=0.05)


def test_wasserstein_of_shifted_quantiles_is_the_shift():
    q = np.quantile(np.random.default_rng(0).exponential(1.0, 10000), QGRID)
    assert wasserstein1(q, q + 0.5) == pytest.approx(0.5)
