"""SHRiNK scaling of curves, and validation against a full run, on queueing ground truth."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.curves import mm1_curve

from shrink.loadcurve import QGRID, Level, LevelStats, LoadCurve, latency_stats
from shrink.mat import mat
from shrink.scaling import shrink_scaled_curve
from shrink.validate import validate, wasserstein1

pytestmark = pytest.mark.compute


def _mm1(rates, mu, *, n=40000, reps=2, **kw):
    return mm1_curve(rates, mu, n=n, reps=reps, **kw)


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


def test_an_error_between_bounds_is_marked_inconclusive():
    full = _mm1([400, 600, 750, 850, 920], 1000.0, seed=3)
    low = _mm1([400, 600, 700], 1000.0, seed=4)  # never crosses 5 ms: "not reached"
    thresholds = {"mean": 0.005}
    assert validate(full, full, thresholds).to_dict()["conclusive"] == {"mean": True}
    v = validate(low, full, thresholds)
    assert v.mats["mean"]["predicted_status"] == "not_reached"
    assert v.to_dict()["conclusive"] == {"mean": False}


def test_a_full_scale_run_beside_other_work_is_inconclusive():
    """Other work (or steal) over the share's own self-check on the full target's CPUs,
    in any kept repetition of a usable level: its MATs are not the server's alone."""
    thresholds = {"mean": 0.005}
    full = _mm1([400, 600, 750, 850, 920], 1000.0, seed=3)
    for lv in full.levels:
        for r in lv.reps:
            r.other_cpu, r.steal = 0.02, 0.01
    quiet = validate(full, full, thresholds).to_dict()
    assert quiet["conclusive"] == {"mean": True} and quiet["full_quiet"] is True
    assert quiet["full_other_cpu"] == pytest.approx(0.03)
    full.levels[1].reps[0].other_cpu = 0.5
    noisy = validate(full, full, thresholds).to_dict()
    assert noisy["conclusive"] == {"mean": False} and noisy["full_quiet"] is False
    assert noisy["full_other_cpu"] == pytest.approx(0.51)
    # Read back from validation.json, the same.
    from shrink.validate import Validation

    again = Validation.from_dict(noisy)
    assert again.full_quiet is False and again.conclusive == {"mean": False}
    # A generator placed on the target's own CPUs (--allow-overlap) is the run's own
    # work: its CPU is not other work. Elsewhere it does not count at all.
    from shrink.loadcurve import LoadCurve

    d = full.to_dict()
    d["share"] = {**d["share"], "cpus": [0, 1]}
    for gen_cpus, want in (([0], True), ([2], False)):
        d["meta"] = {**d["meta"], "target": {"generator_cpus": gen_cpus}}
        mine = LoadCurve.from_dict(d)
        mine.levels[1].reps[0].generator_cpu = 0.45
        assert validate(mine, mine, thresholds).full_quiet is want


def test_wasserstein_of_shifted_quantiles_is_the_shift():
    q = np.quantile(np.random.default_rng(0).exponential(1.0, 10000), QGRID)
    assert wasserstein1(q, q + 0.5) == pytest.approx(0.5)


def _costly(rates, cost, *, cpu_fraction, behind=()):
    """Paired-looking levels whose repetitions spent ``cost`` CPU seconds a request."""
    share = {"kind": "cpu_time", "cpus": [1], "cpu_fraction": cpu_fraction, "fraction": 0.5}
    if cpu_fraction == 1.0:
        share = {"kind": "cores", "cpus": [1], "cpu_fraction": 1.0, "fraction": 0.5}
    levels = []
    for i, lam in enumerate(rates):
        s = latency_stats(np.full(100, 0.001), 1.0)
        reps = [
            LevelStats(
                throughput=float(lam),
                overall=s,
                utilization=lam * c / cpu_fraction,
                generator_behind=(i, r) in behind,
            )
            for r, c in enumerate(cost)
        ]
        levels.append(Level(float(i + 1) / 10, reps))
    return LoadCurve(levels=levels, share=share)


def test_cost_ratio_compares_paired_repetitions_near_the_mat():
    from shrink.validate import cost_ratio

    # The share spent 1.0 ms a request; the full core 1.1 and 1.3 ms in its two repetitions.
    scaled = _costly([50, 100, 150, 200], [0.001, 0.001], cpu_fraction=0.25)
    full = _costly([200, 400, 600, 800], [0.0011, 0.0013], cpu_fraction=1.0)
    got = cost_ratio(scaled, full, [600.0])
    assert got["pairs"] == 2 and got["levels"] == [0.3]  # only the level near the MAT
    assert got["median"] == pytest.approx(1.2)
    assert (got["min"], got["max"]) == (pytest.approx(1.1), pytest.approx(1.3))
    # A repetition that fell behind on either side leaves its pair out.
    full = _costly([200, 400, 600, 800], [0.0011, 0.0013], cpu_fraction=1.0, behind={(2, 1)})
    assert cost_ratio(scaled, full, [600.0])["median"] == pytest.approx(1.1)
    # Nothing to compare: no level near the MATs, or no MAT at all.
    assert cost_ratio(scaled, full, [5000.0]) is None
    assert cost_ratio(scaled, full, []) is None


def test_cost_adjusted_errors_scale_the_measured_mat_by_the_ratio():
    from shrink.validate import cost_adjusted_errors

    mats = {
        "mean": {"predicted": 1100.0, "measured": 1000.0},
        "p999": {"predicted": 900.0, "measured": 1000.0},
        "p99": {"predicted": 900.0, "measured": None},  # nothing measured: left out
    }
    # The full target spent 10% more per request: at the share's cost it would have
    # reached 1,100 req/s, so the +10% prediction was right.
    got = cost_adjusted_errors(mats, 1.1)
    assert set(got) == {"mean", "p999"}
    assert got["mean"] == pytest.approx(0.0)
    assert got["p999"] == pytest.approx(900 / 1100 - 1)
