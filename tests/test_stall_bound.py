"""Levels measured while the generator stalled: the bound that lets them stand over a crossing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shrink.errors import MeasurementError
from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.mat import mat

pytestmark = pytest.mark.compute


def _rep(
    mean: float,
    thr: float,
    *,
    behind: bool = False,
    lag_max: float | None = 0.0,
    cpu: float | None = 0.02,
) -> LevelStats:
    st = ClassStats(n=1000, throughput=thr, mean=mean, p50=mean, p90=mean, p99=mean, p999=2 * mean)
    return LevelStats(
        throughput=thr,
        overall=st,
        generator_behind=behind,
        send_lag_max=lag_max,
        generator_cpu=cpu,
    )


def test_the_bound_is_the_smallest_repetition_less_twice_its_longest_lag():
    lv = Level(1.0, [_rep(0.100, 900, behind=True, lag_max=0.010), _rep(0.060, 910, behind=True)])
    assert lv.stall_bound("mean") == pytest.approx(min(0.100 - 0.020, 0.060))
    assert lv.stall_bound("p999") == pytest.approx(min(0.200 - 0.020, 0.120))


@pytest.mark.parametrize(
    "reps",
    [
        # one repetition kept up: the level is usable, not a stalled one
        [_rep(0.1, 900, behind=True), _rep(0.1, 900)],
        # a CPU-bound generator queues requests where the lag does not show it
        [_rep(0.1, 900, behind=True, cpu=0.8)],
        [_rep(0.1, 900, behind=True, cpu=None)],
        # no lag recorded (older curves), or a request never sent
        [_rep(0.1, 900, behind=True, lag_max=None)],
        [_rep(0.1, 900, behind=True, lag_max=float("inf"))],
    ],
)
def test_no_bound_without_a_pure_stall(reps):
    assert Level(1.0, reps).stall_bound("mean") is None


def _curve(top: Level) -> LoadCurve:
    under = [
        Level(x, [_rep(m, t), _rep(m, t)]) for x, m, t in ((0.5, 0.002, 500), (0.8, 0.004, 800))
    ]
    return LoadCurve(levels=[*under, top])


def test_a_stalled_level_over_the_threshold_is_a_hint_never_a_mat():
    stalled = Level(1.0, [_rep(0.050, 950, behind=True, lag_max=0.005)] * 2)
    curve = _curve(stalled)
    assert curve.usable()[-1].level == 0.8
    assert curve.stalled_over("mean", 0.005) == [stalled]
    res = mat(curve, "mean", 0.005)
    # A run whose generator fell behind is not used for a MAT: a lower bound only ...
    assert res.status == "not_reached" and res.mat == pytest.approx(800)
    # ... with where the crossing most likely lies.
    assert res.stalled_ceiling == pytest.approx(950)
    assert res.to_dict()["stalled_ceiling"] == pytest.approx(950)
    assert res.scaled(4.0).stalled_ceiling == pytest.approx(3800)
    # The same level kept up: an ordinary crossing, no hint.
    kept = mat(_curve(Level(1.0, [_rep(0.050, 950)] * 2)), "mean", 0.005)
    assert kept.status == "ok" and kept.stalled_ceiling is None


def test_a_stall_as_long_as_the_latency_proves_nothing():
    stalled = Level(1.0, [_rep(0.050, 950, behind=True, lag_max=0.024)] * 2)
    res = mat(_curve(stalled), "mean", 0.005)
    assert res.status == "not_reached" and res.stalled_ceiling is None
    assert res.mat == pytest.approx(800)


def test_a_stalled_level_is_never_evidence_of_being_under():
    # Under the threshold while stalled: the schedule was not kept, so nothing is known.
    low = Level(1.0, [_rep(0.003, 950, behind=True, lag_max=0.0)] * 2)
    assert _curve(low).stalled_over("mean", 0.005) == []
    res = mat(_curve(low), "mean", 0.005)
    assert res.status == "not_reached" and res.stalled_ceiling is None


def test_stalled_levels_alone_give_no_mat():
    curve = LoadCurve(levels=[Level(1.0, [_rep(0.050, 950, behind=True, lag_max=0.005)])])
    with pytest.raises(MeasurementError, match="no usable level"):
        mat(curve, "mean", 0.005)


def test_the_predicted_curve_scales_the_lag_with_the_latency():
    from shrink.scaling import shrink_scaled_curve

    rep = _rep(0.200, 200, behind=True, lag_max=0.020)
    rep = replace(rep, send_lag_p99=0.010)
    share = LoadCurve(
        levels=[Level(1.0, [rep])], alpha=0.25, share={"kind": "cpu_time", "fraction": 0.25}
    )
    full = shrink_scaled_curve(share)
    r = full.levels[0].reps[0]
    assert r.overall.mean == pytest.approx(0.050) and r.send_lag_max == pytest.approx(0.005)
    assert full.levels[0].stall_bound("mean") == pytest.approx(
        0.25 * share.levels[0].stall_bound("mean")
    )


# The argument behind the bound, on a FIFO server: sends held back by stalls of at most
# L (and bunched at each stall's end), replies read at most L late.


def _fifo(arrive: np.ndarray, service: np.ndarray) -> np.ndarray:
    done = np.empty_like(arrive)
    free = 0.0
    for i, (a, s) in enumerate(zip(arrive, service, strict=True)):
        free = max(a, free) + s
        done[i] = free
    return done


def _stalled_run(seed: int, rho: float) -> tuple[np.ndarray, np.ndarray, float]:
    """True and measured latencies of one run, and its longest send lag."""
    rng = np.random.default_rng(seed)
    n = 4000
    intended = np.cumsum(rng.exponential(1 / (rho * 1000), n))  # 1 ms mean service
    service = rng.exponential(1e-3, n)
    # Stalls of the generator's CPU: a few per second, up to 8 ms each.
    starts = np.sort(rng.uniform(0, intended[-1], int(intended[-1] * 5)))
    ends = starts + rng.uniform(0, 8e-3, starts.size)

    def held(t: np.ndarray) -> np.ndarray:
        """Each instant moved to the end of the stall it falls in (if any)."""
        i = np.searchsorted(starts, t, side="right") - 1
        inside = (i >= 0) & (t < ends[np.maximum(i, 0)])
        return np.where(inside, ends[np.maximum(i, 0)], t)

    sent = held(intended)
    true = _fifo(intended, service) - intended
    stamped = held(_fifo(sent, service))
    return true, stamped - intended, float(np.max(sent - intended))


@pytest.mark.parametrize("rho", [0.7, 0.95, 1.2])
def test_on_a_fifo_server_twice_the_longest_lag_bounds_the_excess(rho):
    excess_over_one_lag = 0
    for seed in range(20):
        true, measured, lag = _stalled_run(seed, rho)
        assert np.all(measured >= true - 1e-12)  # stalls never make a reply look faster
        assert np.all(measured - 2 * lag <= true + 1e-12)
        for q in (np.mean, lambda x: np.quantile(x, 0.999)):
            assert q(measured) - 2 * lag <= q(true) + 1e-12
        excess_over_one_lag += bool(np.max(measured - true) > lag)
    # The reading stall is real: one lag alone would not bound every run.
    assert excess_over_one_lag > 0


def test_the_report_names_the_hint_of_an_open_crossing(tmp_path):
    from shrink.report.build import write_report

    curve = _curve(Level(1.0, [_rep(0.050, 950, behind=True, lag_max=0.005)] * 2))
    res = mat(curve, "mean", 0.005)
    prediction = {
        "thresholds": {"mean": 0.005},
        "mappings": {"1-replica": {"mean": res.to_dict()}},
        "self_checks": {
            "generator_kept_up": False,
            "levels_behind": [1.0],
            "levels_stalled_over": {"mean": [1.0]},
        },
    }
    md = write_report(tmp_path, prediction, measured=curve)["md"].read_text()
    assert ">= 800 (not reached), under 950 \u2020" in md
    assert "That is a hint, not a measurement" in md
    assert "**stalled** (longest send lag 5 ms)" in md
    assert "the generator only stalled at 1 (mean)" in md


def test_a_level_surely_over_every_threshold_is_not_measured_again():
    from shrink.autolevels import _surely_over

    limits = {"mean": 0.005, "p999": 0.5}
    clean_over = _rep(0.300, 950)  # p999 0.6 s
    stalled_over = _rep(0.300, 950, behind=True, lag_max=0.02)
    # one repetition kept up and is over; the other stalled and is over by its bound
    assert _surely_over((Level(1.0, [clean_over, stalled_over]), None), 2, limits, None)
    # a stall long enough that the bound says nothing for the p99.9
    long = _rep(0.300, 950, behind=True, lag_max=0.06)
    assert not _surely_over((Level(1.0, [clean_over, long]), None), 2, limits, None)
    # under one threshold in the repetition that kept up
    clean_under = _rep(0.004, 900)
    assert not _surely_over((Level(1.0, [clean_under, stalled_over]), None), 2, limits, None)
    # enough repetitions kept up: nothing to decide here
    assert _surely_over((Level(1.0, [clean_under, clean_under]), None), 2, limits, None)


def test_shrink_mat_prints_the_hint_and_keeps_the_bound(tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    path = _curve(Level(1.0, [_rep(0.050, 950, behind=True, lag_max=0.005)] * 2)).write_json(
        tmp_path / "curve.json"
    )
    r = CliRunner().invoke(app, ["mat", str(path), "--stat", "mean", "--threshold", "5ms"])
    assert r.exit_code == 99, r.output  # a bound, not a MAT: the threshold was not crossed
    assert "MAT (mean < 5 ms): >= 800.0 req/s" in r.output and "(not_reached)" in r.output
    assert "hint: under 950.0 req/s" in r.output
