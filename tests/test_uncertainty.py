"""MAT prediction intervals: what moves between runs, and whether they cover the truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from shrink.autolevels import AutoPlan
from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats
from shrink.machine import Machine
from shrink.mat import MATResult, mat
from shrink.predict import PredictConfig, predict
from shrink.providers import SimProvider
from shrink.sim import support_trace
from shrink.uncertainty import ErrorBudget, drift_sigma, interval, repetition_sigma
from shrink.validate import validate

pytestmark = pytest.mark.compute

THRESHOLDS = {"mean": 0.002, "p999": 0.05}


def test_interval_adds_the_terms_in_log_variance():
    b = ErrorBudget(repetition=0.03, drift=0.04, emulation=0.08)
    assert b.total == pytest.approx(math.sqrt(2 * 0.03**2 + 2 * 0.04**2 + 0.08**2))
    lo, hi = interval(1000.0, b)
    assert lo * hi == pytest.approx(1000.0**2)
    assert hi / 1000.0 == pytest.approx(math.exp(1.959964 * b.total))


def _curve(costs: list[list[float]], latency: list[list[float]]) -> LoadCurve:
    levels = []
    for i, (cs, ls) in enumerate(zip(costs, latency, strict=True)):
        reps = []
        for c, lat in zip(cs, ls, strict=True):
            x = 100.0 * (i + 1)
            reps.append(
                LevelStats(
                    throughput=x,
                    overall=latency_stats(np.full(50, lat), 1.0),
                    utilization=c * x,
                )
            )
        levels.append(Level(float(i + 1), reps))
    return LoadCurve(levels, share={"kind": "cores", "cpus": [0], "fraction": 1.0})


def test_drift_is_the_pooled_spread_of_cpu_per_request():
    # Two levels, each run twice: costs 1.0 / 1.2 ms and 2.0 / 2.4 ms per request.
    c = _curve([[1e-3, 1.2e-3], [2e-3, 2.4e-3]], [[1e-3, 1e-3], [2e-3, 2e-3]])
    assert drift_sigma([c]) == pytest.approx(math.log(1.2) / math.sqrt(2))
    same = _curve([[1e-3, 1e-3], [2e-3, 2e-3]], [[1e-3, 1e-3], [2e-3, 2e-3]])
    assert drift_sigma([same]) == 0.0


def test_repetition_term_follows_the_spread_and_the_elasticity():
    # Latency doubles from level to level while throughput goes 100, 200, 300, 400 req/s;
    # each level's two repetitions 10% apart. The crossing of 3 ms lies between 200 and
    # 300 req/s: elasticity log 2 / log 1.5. Per run sd log(1.1) / sqrt(2), two runs.
    lat = [[1e-3 * 2**i, 1.1e-3 * 2**i] for i in range(4)]
    c = _curve([[1e-3, 1e-3]] * 4, lat)
    res = mat(c, "mean", 3e-3)
    assert res.status == "ok" and res.bracket == (2.0, 3.0)
    want = math.log(1.1) / math.sqrt(2) / (math.log(2) / math.log(1.5)) / math.sqrt(2)
    assert repetition_sigma(c, res) == pytest.approx(want)


def _predicted_mats(prediction) -> dict[str, MATResult]:
    per = prediction.mappings["1-replica"].stats
    return {
        s: MATResult(per[s].mat, tuple(per[s].ci), s, t, per[s].status)
        for s, t in THRESHOLDS.items()
    }


def test_intervals_cover_the_measured_mat_on_the_simulator_over_seeds():
    """95% intervals against paired full-scale runs, 12 seeds (trace, sample and runs).

    On the simulator the share is exact (no emulation error) and the machine does not
    drift: what moves is the sample, the loop window's content and the repetitions.
    Counting each conclusive (statistic, seed) pair as an independent trial at the
    nominal 95%, the test fails when fewer are covered than the 2% quantile of that
    binomial (a 2% false-alarm rate); and intervals may not be uselessly wide: with
    1.5 s windows and two repetitions (about 6 degrees of freedom, t = 2.45) and a
    probed speed whose full side is read on the runs beside the share's sweep alone
    (about a thousand light requests of a mix whose response-time CV is near 3, so a
    speed term of 18-28%), a median half-width of 55-65% is what the data support;
    over 75% would mean a term counted twice.
    """
    machine = Machine(name="one", sockets=1, cores_per_socket=1)
    provider = SimProvider(machine)
    # Seven levels: where a sample's knee and the full trace's differ, the coarse pass
    # approaches the lower one first and then the other (both must be bracketed).
    plan = AutoPlan(warmup=0.4, duration=1.5, reps=2, max_levels=7, probe_reps=1, warm_run=False)
    covered, halves = [], []
    for seed in range(12):
        cfg = PredictConfig(
            alpha=0.5, thresholds=THRESHOLDS, mappings=["1-replica"], seed=seed, plan=plan,
            paired_full_run=True, share_kind="cpu_time",
        )  # fmt: skip
        res = predict(support_trace(40, 30.0, seed=seed, think_s=0.3), provider, cfg)
        assert res.full is not None
        pm = _predicted_mats(res.prediction)
        v = validate(res.predicted, res.full, THRESHOLDS, predicted_mats=pm)
        for stat in THRESHOLDS:
            if v.covered[stat] is not None:
                covered.append(v.covered[stat])
                lo, hi = v.mats[stat]["predicted_ci"]
                halves.append(math.sqrt(hi / lo) - 1)
    n = len(covered)
    assert n >= 16, "too few conclusive pairs to judge coverage"
    need = int(binom.ppf(0.02, n, 0.95))
    assert sum(covered) >= need, (sum(covered), n)
    assert np.median(halves) < 0.75, halves


def test_the_quantile_takes_the_dof_of_the_terms_that_weigh():
    """Welch-Satterthwaite: a term estimated from few runs widens the interval as much
    as it weighs in the total, and a term taken as known not at all."""
    from scipy.stats import t as student_t

    only_reps = ErrorBudget(repetition=0.05, drift=0.0, emulation=0.0, dof=4)
    assert only_reps.effective_dof == pytest.approx(4.0)
    assert only_reps.quantile == pytest.approx(student_t.ppf(0.975, 4))
    known = ErrorBudget(repetition=0.05, drift=0.0, emulation=0.0, speed=0.05)
    assert known.effective_dof is None and known.quantile == pytest.approx(1.959964)
    # the speed (thousands of requests) dominates: close to the normal's quantile
    speed = ErrorBudget(repetition=0.005, drift=0.01, emulation=0.0, speed=0.19, dof=4)
    assert speed.effective_dof > 1000 and speed.quantile < 1.97
    # the model error's fit dominates: its dof
    fitted = ErrorBudget(0.001, 0.0, emulation=0.2, dof=4, emulation_dof=9)
    assert fitted.effective_dof == pytest.approx(9.0, rel=1e-3)
    # two terms of equal weight and dof k give about 2k (both estimated, independent)
    both = ErrorBudget(0.1 / math.sqrt(2), 0.0, emulation=0.1, dof=5, emulation_dof=5)
    assert both.effective_dof == pytest.approx(10.0)
    d = fitted.to_dict()
    assert d["emulation_dof"] == 9.0 and d["effective_dof"] == pytest.approx(9.0, rel=1e-3)


def test_intervals_cover_at_their_level_whatever_term_dominates():
    """Drawn many times, with the repetitions' spread estimated from 4 dof beside a
    known speed error: the intervals cover about 95% whichever term weighs more. The
    repetitions' t quantile on the whole total over-covered where the speed dominates
    (about 99.5%): wider than the data support."""
    rng = np.random.default_rng(7)
    n, dof = 4000, 4
    for rep_sd, speed_sd in ((0.10, 0.0), (0.06, 0.10), (0.02, 0.15)):
        true_sd = math.sqrt(2 * rep_sd**2 + speed_sd**2)
        err = rng.normal(0.0, true_sd, n)
        est = rep_sd * np.sqrt(rng.chisquare(dof, n) / dof)  # the pooled estimate
        hits = 0
        for e, r in zip(err, est, strict=True):
            lo, hi = interval(1.0, ErrorBudget(r, 0.0, 0.0, speed_sd, dof))
            hits += lo <= math.exp(e) <= hi
        lo_ok, hi_ok = binom.ppf(0.001, n, 0.95) / n, binom.ppf(0.999, n, 0.95) / n
        assert lo_ok - 0.01 <= hits / n <= hi_ok + 0.005, (rep_sd, speed_sd, hits / n)
