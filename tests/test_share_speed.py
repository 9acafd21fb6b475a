"""predict measures the share's speed (shrink.speed) and scales by it; the report says so."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.fake_provider import FakeProvider, sessions

from shrink.autolevels import AutoPlan
from shrink.measure import loop_window
from shrink.predict import PredictConfig, predict
from shrink.report.build import write_report
from shrink.share import Share, ShareSpeed


@pytest.mark.parametrize("paired", [True, False])
def test_predict_scales_by_the_measured_speed_and_reports_it(monkeypatch, tmp_path, paired):
    calls = []

    def probe(share_target, full_target, trace, *, nominal, seed, budget_s):
        calls.append((full_target is not None, nominal))
        if full_target is None:
            return ShareSpeed.assumed(nominal)
        return ShareSpeed(nominal, {"static": 0.2, "dynamic": 0.2}, 0.2, "probe", 3.0)

    monkeypatch.setattr("shrink.speedsteps.measure_speed", probe)
    plan = AutoPlan(warmup=2, duration=10, reps=2, max_levels=7, probe_level=1.0)
    cfg = PredictConfig(
        alpha=0.25, thresholds={"mean": 0.004}, mappings=["1-replica"], seed=3, plan=plan,
        paired_full_run=paired,
    )  # fmt: skip
    trace = sessions(6000, 1, span=1000.0)
    res = predict(trace, FakeProvider(speed=0.2), cfg)
    pred = res.prediction
    assert calls == [(paired, 0.25)]
    # The share's load follows the sample's own rate in the loop window, relative to
    # alpha's (a sample holds a few percent more or fewer of its requests).
    skip, span = res.measured.meta.get("skip", 0.0), res.measured.meta["loop_window"]
    ratio = len(loop_window(res.sample, skip, span)) / (0.25 * len(loop_window(trace, skip, span)))
    assert ratio != pytest.approx(1.0, abs=1e-3)
    assert pred.share.speed == ShareSpeed.from_dict(pred.to_dict()["speed"])
    assert Share.from_dict(pred.to_dict()["share"]).speed == pred.share.speed
    text = " ".join(pred.assumptions)
    if paired:
        assert pred.share.speed.effective == 0.2 and "measured 0.2" in text and "3.0 s" in text
        # Scaled by the measured speed, the share's MAT is the full core's: the paired
        # full-scale curve says what that is.
        from shrink.mat import mat

        truth = mat(res.full, "mean", 0.004).mat
        # The share ran at its measured speed over alpha times each level's rate factor.
        load = 0.8 / ratio
        assert res.measured.meta["share_load"] == pytest.approx(load)
        assert "Matched load" in text and f"{load:.3g} times" in text
        # Its windows were 1/s = 5 times the full target's, not 1/alpha = 4: a share at
        # speed 0.2 moves through its queueing states five times slower.
        assert res.measured.meta["scaled_time"] == pytest.approx(5.0)
        assert "were 5 times the full-scale" in text
        assert pred.mappings["1-replica"].stats["mean"].mat == pytest.approx(truth, rel=0.25)
    else:
        assert pred.share.speed.method == "nominal" and "assumed, not measured: 0.25" in text
        assert res.measured.meta["share_load"] == pytest.approx(1.0 / ratio)
        assert res.measured.meta["scaled_time"] == 4.0 and "were 4 times the full-scale" in text
    write_report(tmp_path, pred, measured=res.measured, full_run=res.full)
    md = (tmp_path / "report.md").read_text()
    want = "nominal 0.25, measured 0.2 (probe, 3.0 s" if paired else "**assumed**"
    assert want in md


def test_scaled_by_the_measured_speed_the_share_predicts_the_paired_truth_over_seeds(
    monkeypatch,
):
    """The fake's share is exactly 0.2 of a core: scaled by that speed, the share's MAT
    is the full core's up to the two sweeps' sampling noise (a session sample, its
    own levels), over eight seeds, not one."""
    from shrink.mat import mat

    speed = ShareSpeed(0.25, {"static": 0.2, "dynamic": 0.2}, 0.2, "probe", 3.0)
    monkeypatch.setattr("shrink.speedsteps.measure_speed", lambda *a, **k: speed)
    plan = AutoPlan(warmup=2, duration=10, reps=2, max_levels=7, probe_level=1.0)
    trace = sessions(6000, 1, span=1000.0)
    errors = []
    for seed in range(8):
        cfg = PredictConfig(
            alpha=0.25, thresholds={"mean": 0.004}, mappings=["1-replica"], seed=seed,
            plan=plan, paired_full_run=True,
        )  # fmt: skip
        res = predict(trace, FakeProvider(speed=0.2), cfg)
        truth = mat(res.full, "mean", 0.004).mat
        errors.append(res.prediction.mappings["1-replica"].stats["mean"].mat / truth - 1)
    # measured 2026-11-24: median |error| 3.8%, the largest 14.4%
    assert float(np.median(np.abs(errors))) <= 0.06, errors
    assert max(np.abs(errors)) <= 0.2, errors


@pytest.mark.parametrize(
    ("effective", "sigma", "method", "want"),
    [
        (0.19, 0.05, "probe", 0.76),  # slower than nominal beyond the probe's noise
        (0.24, 0.05, "probe", 1.0),  # within two of its sds of nominal: noise, not followed
        (0.05, 0.05, "probe", 0.5),  # a probe that far off measured a disturbance: clamped
        (0.19, 0.0, "nominal", 1.0),  # assumed, not measured
    ],
)
def test_the_share_runs_at_its_measured_speed_over_alpha_when_the_probe_says_so(
    effective, sigma, method, want
):
    from shrink.speedsteps import share_load

    share = Share.cpu_time((1,), 0.25).with_speed(
        ShareSpeed(0.25, {"static": effective}, effective, method, 3.0, sigma=sigma)
    )
    assert share_load(share) == pytest.approx(want)


@pytest.mark.parametrize(("loaded", "want"), [(0.25, 0.25), (0.3, 0.3), (0.15, 0.15)])
def test_a_loaded_run_measures_the_speed_where_the_share_is_busy(loaded, want):
    """The light probe reads the share at 0.2; one run with the share loaded reads what
    it really serves there, against the full target's capacity measured busy too. A
    share slower than the probe said (0.15) runs busier: its capacity is what it
    completes a second over its utilization, not what it is sent."""
    import samplers
    from shrink.busyspeed import BusyRuns, loaded_speed
    from shrink.measure import default_loop_window
    from shrink.speed import measure_speed
    from shrink.target import FakeTarget

    trace = sessions(4000, 2, span=800.0)
    sample = samplers.sample(trace, 0.25, seed=1, level="session")
    demand = {"static": 0.0005, "dynamic": 0.004}
    full = FakeTarget(servers=1, demand=demand)
    light_share = FakeTarget(servers=1, demand={k: v / 0.2 for k, v in demand.items()})
    light = measure_speed(light_share, full, sample, nominal=0.25, seed=4)
    # The full target's capacity for the sample's mix: requests over their CPU seconds.
    cls = sample.column("cls").astype(str)
    mix = len(cls) / sum(demand[c] for c in cls)
    assert light.full_capacity == pytest.approx(mix, rel=0.1)
    assert light.effective == pytest.approx(0.2, rel=0.1) and light.light is None
    busy_share = FakeTarget(servers=1, demand={k: v / loaded for k, v in demand.items()})
    runs = BusyRuns(0.0, default_loop_window(trace, 0.0), 5.0, 20.0, scaled_time=4.0, seed=5)
    got = loaded_speed(busy_share, full, sample, trace, light, runs)
    assert got.method == "probe+loaded" and got.light == light.effective
    assert got.effective == pytest.approx(want, rel=0.1)
    assert got.full_capacity == pytest.approx(mix, rel=0.1)
    for c, v in got.per_class.items():
        assert v / light.per_class[c] == pytest.approx(got.effective / light.effective)


class _DearerBehind:
    """A FakeTarget share that costs ``dearer`` times as much per request once it is
    offered more than ``keep_up`` req/s: a CFS quota behind pays for the queue
    (seen on this project's VM); it records the traces it ran."""

    def __init__(self, demand: dict[str, float], keep_up: float, dearer: float) -> None:
        from shrink.target import FakeTarget

        self.keep_up, self.ran = keep_up, []
        self.fast = FakeTarget(servers=1, demand=demand)
        self.slow = FakeTarget(servers=1, demand={k: v * dearer for k, v in demand.items()})

    def describe(self) -> dict:
        return {"target": "fake-dearer-behind"}

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        self.ran.append(trace)
        offered = len(trace) / (trace.info().duration or 1.0) * rate_factor
        side = self.slow if offered > self.keep_up else self.fast
        return side.run(trace, rate_factor=rate_factor, warmup=warmup, duration=duration, seed=seed)


def test_the_loaded_run_keeps_the_share_up_in_slow_motion_as_the_sweep_does():
    """The share's loaded speed places the sweep's levels, and its knee lies where it
    stops keeping up. A run pushed past the light probe's capacity read a share that
    had fallen behind (0.13 of the whole core where it kept up at 0.19-0.21, and its knee
    then lay 40% above the whole core's, out of the demo's time). Here the share keeps
    up at 0.2 and costs 1.5x as much behind it: the loaded run must read 0.2, and
    replay the sample in slow motion by the time scale, as the sweep's repetitions do."""
    import samplers
    from shrink.busyspeed import BusyRuns, loaded_speed
    from shrink.measure import default_loop_window
    from shrink.target import FakeTarget

    trace = sessions(4000, 2, span=800.0)
    sample = samplers.sample(trace, 0.25, seed=1, level="session")
    demand = {"static": 0.0005, "dynamic": 0.004}
    full = FakeTarget(servers=1, demand=demand)
    cls = sample.column("cls").astype(str)
    mix = len(cls) / sum(demand[c] for c in cls)
    # the light probe's reading: the share at 0.2 of the full target's capacity
    light = ShareSpeed(0.25, {"static": 0.2, "dynamic": 0.2}, 0.2, "probe", 3.0, full_capacity=mix)
    share = _DearerBehind({k: v / 0.2 for k, v in demand.items()}, 0.2 * mix, 1.5)
    runs = BusyRuns(0.0, default_loop_window(trace, 0.0), 5.0, 20.0, scaled_time=4.0, seed=5)
    got = loaded_speed(share, full, sample, trace, light, runs)
    assert got.method == "probe+loaded"
    assert got.effective == pytest.approx(0.2, rel=0.1)
    assert [t.meta.get("think_scale") for t in share.ran] == [4.0]


def test_a_loaded_run_is_skipped_without_the_probes_full_capacity():
    from shrink.busyspeed import BusyRuns, loaded_speed
    from shrink.target import FakeTarget

    assumed = ShareSpeed.assumed(0.25)
    target = FakeTarget(servers=1, demand={"static": 0.002})
    trace = sessions(100)
    got = loaded_speed(target, target, trace, trace, assumed, BusyRuns(0.0, 100.0, 1, 1))
    assert got is assumed


def _rep(throughput: float, utilization: float, behind: bool = False):
    from shrink.loadcurve import ClassStats, LevelStats

    cs = ClassStats(100, throughput, 0.01, 0.01, 0.02, 0.03, 0.04)
    return LevelStats(throughput, cs, utilization=utilization, generator_behind=behind)


def test_the_speed_at_the_knee_is_the_saturated_repetitions_median_capacity():
    """The loaded run read the share at 0.2 (600 req/s of a 3,000 full capacity); the
    sweep's saturated repetitions served 450 req/s: the speed is 0.15. Repetitions under
    95% busy, or whose generator fell behind, do not count."""
    from shrink.busyspeed import knee_speed
    from shrink.loadcurve import Level, LoadCurve

    loaded = ShareSpeed(
        0.25, {"static": 0.21, "dynamic": 0.19}, 0.2, "probe+loaded", 40.0, sigma=0.05,
        full_capacity=3000.0, light=0.22,
    )  # fmt: skip
    levels = [
        Level(2.0, [_rep(400, 0.6), _rep(410, 0.62)]),  # keeping up: cheaper, ignored
        Level(3.0, [_rep(440, 0.98), _rep(900, 1.0, behind=True)]),
        Level(4.0, [_rep(450, 1.0), _rep(460, 1.0)]),
    ]
    got = knee_speed(LoadCurve(levels, alpha=0.25), loaded)
    assert got.method == "probe+knee" and got.light == 0.22
    assert got.effective == pytest.approx(450 / 3000)
    assert got.per_class["static"] == pytest.approx(0.21 * 0.15 / 0.2)
    assert got.sigma > loaded.sigma
    # Too few saturated repetitions, or no full capacity: the speed stays as it was.
    assert knee_speed(LoadCurve(levels[:2], alpha=0.25), loaded) is loaded
    no_cap = ShareSpeed(0.25, {}, 0.2, "probe", 20.0)
    assert knee_speed(LoadCurve(levels, alpha=0.25), no_cap) is no_cap


class _DriftingTarget:
    """A FakeTarget whose demand is multiplied by ``slow[k]`` on its k-th run (the last
    factor holds after): a host whose speed drifts between runs."""

    def __init__(self, demand: dict[str, float], slow: list[float]) -> None:
        from shrink.target import FakeTarget

        self.fake = FakeTarget(servers=1, demand=demand)
        self.base = dict(demand)
        self.slow = slow
        self.runs = 0

    def run(self, trace, **kw):
        f = self.slow[min(self.runs, len(self.slow) - 1)]
        self.fake.demand = {c: d * f for c, d in self.base.items()}
        self.runs += 1
        return self.fake.run(trace, **kw)


def test_the_full_capacity_is_the_median_of_the_busy_runs_over_the_sweep():
    """The loaded run caught the host 30% slow (capacity 1/1.3 of its usual); the checks
    after each level and after the sweep found it back at speed: the median is the
    usual capacity, the slow run stays on record, each level's check is kept for its
    repetitions, and the note says how many runs it took."""
    from shrink.busyspeed import BusyRuns, FullChecks, knee_speed
    from shrink.loadcurve import Level, LoadCurve
    from shrink.measure import default_loop_window

    trace = sessions(3000, 2, span=600.0)
    demand = {"static": 0.0005, "dynamic": 0.004}
    cls = trace.column("cls").astype(str)
    usual = len(cls) / sum(demand[c] for c in cls)
    slow_first = usual / 1.3
    loaded = ShareSpeed(
        0.25, {"static": 0.2, "dynamic": 0.2}, 0.2, "probe+loaded", 30.0,
        full_capacity=slow_first, full_capacities=(slow_first,), light=0.22,
    )  # fmt: skip
    runs = BusyRuns(0.0, default_loop_window(trace, 0.0), 2.0, 20.0, seed=3)
    target = _DriftingTarget(demand, [1.0, 1.0, 2.0, 1.0])  # slow at the third check
    # Checks as long as the runs: a 2.5 s one measures its window's own mix of classes.
    checks = FullChecks(target, trace, loaded, runs, check_s=(2.0, 20.0))
    for level in (1.0, 2.0, 3.0):
        checks.after_level(level)
    assert target.runs == 3
    checks.check()
    got = checks.apply(loaded)
    assert len(got.full_capacities) == 5 and got.full_capacities[0] == slow_first
    assert got.full_capacity == pytest.approx(usual, rel=0.1)
    assert set(got.full_capacity_at) == {1.0, 2.0, 3.0}
    assert got.full_capacity_at[3.0] == pytest.approx(usual / 2, rel=0.1)
    assert "measured busy 5 times" in got.notes[-1] and got.cost_s >= loaded.cost_s
    assert ShareSpeed.from_dict(got.to_dict()).full_capacity_at == got.full_capacity_at
    # The knee's speed divides by that median, and its sigma carries the spread.
    levels = [Level(4.0, [_rep(0.15 * usual, 1.0), _rep(0.15 * usual, 1.0)]),
              Level(5.0, [_rep(0.15 * usual, 1.0)])]  # fmt: skip
    at_knee = knee_speed(LoadCurve(levels, alpha=0.25), got)
    assert at_knee.effective == pytest.approx(0.15, rel=0.1)
    one_run = knee_speed(LoadCurve(levels, alpha=0.25), loaded)
    assert one_run.effective == pytest.approx(0.15 * 1.3, rel=0.01)
    assert at_knee.sigma > one_run.sigma
    # A check whose generator fell behind is counted, not used.
    from shrink.target import FakeTarget

    late = FullChecks(FakeTarget(demand=demand, generator_capacity=1.0), trace, loaded, runs)
    late.after_level(1.0)
    kept = late.apply(loaded)
    assert kept.full_capacities == (slow_first,) and "1 more unusable" in kept.notes[-1]
    assert kept.full_capacity_at == {}
    # Without a loaded run's speed there is nothing to correct.
    assert checks.apply(ShareSpeed.assumed(0.25)).method == "nominal"


def test_predict_measures_the_full_capacity_before_during_and_after_the_sweep():
    """A paired predict on a CPU-time share: the loaded run, a check after every level
    of the sweep and one after it, all in the prediction's speed."""

    trace = sessions(3000, 2, span=900.0)
    plan = AutoPlan(warmup=2.0, duration=10.0, reps=1, max_levels=9)
    cfg = PredictConfig(
        alpha=0.25, share_kind="cpu_time", thresholds={"mean": 0.05}, plan=plan,
        paired_full_run=True, seed=2, speed_budget=4.0,
    )  # fmt: skip
    res = predict(trace, FakeProvider(), cfg)
    sp = res.prediction.share.speed
    n_levels = len(res.measured.levels)
    assert sp.method in ("probe+loaded", "probe+knee")
    assert len(sp.full_capacities) == 2 + n_levels
    assert set(sp.full_capacity_at) == {lv.level for lv in res.measured.levels}
    assert sp.full_capacity == pytest.approx(float(np.median(sp.full_capacities)))
    # The host's drift over the sweep is a self-check, and the report says it.
    checks = res.prediction.self_checks
    assert checks["host_checks"] == len(sp.full_capacities)
    assert checks["host_capacity_range"] == [min(sp.full_capacities), max(sp.full_capacities)]


def test_the_host_counts_as_steady_only_while_its_busy_checks_stay_within_the_spread(tmp_path):
    """Checks within STEADY_SPREAD of each other: steady; one check 1.5x another: the
    host moved, and the report says a MAT measured on it is only as sure as that."""
    from types import SimpleNamespace

    from shrink.busyspeed import STEADY_SPREAD, host_drift
    from shrink.report.blocks import Doc, render_markdown
    from shrink.report.sections.self_checks import add_self_checks

    def speed(*caps: float) -> ShareSpeed:
        return ShareSpeed(
            0.25, {}, 0.15, "probe+loaded", full_capacity=caps[0], full_capacities=caps
        )

    assert host_drift(None) == {} and host_drift(speed(6000.0)) == {}
    steady = host_drift(speed(6000.0, 5600.0, 6500.0))
    assert steady["host_steady"] and steady["host_spread"] == pytest.approx(6500 / 5600)
    edge = host_drift(speed(4000.0, 4000.0 * STEADY_SPREAD))
    assert edge["host_steady"]
    moved = host_drift(speed(6000.0, 4000.0, 5800.0))
    assert not moved["host_steady"] and moved["host_spread"] == pytest.approx(1.5)
    assert moved["host_capacity_range"] == [4000.0, 6000.0] and moved["host_checks"] == 3
    texts = []
    for drift in (steady, moved):
        pred = SimpleNamespace(self_checks=drift, full_run=None)
        doc = Doc("report")
        add_self_checks(doc, pred, {"mean": 0.01}, None, "", None)
        texts.append(render_markdown(doc))
    assert "4,000-6,000 req/s (max / min 1.50)" in texts[1]
    assert "The host's speed moved during the run" in texts[1]
    assert "the host held steady" in texts[0] and "moved during" not in texts[0]
