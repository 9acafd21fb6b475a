"""Sweep + MAT on the fake target: the plumbing later stages rely on."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.fake_targets import Altered
from helpers.session_traces import poisson_trace

from shrink.errors import MeasurementError, ParameterError
from shrink.mat import mat
from shrink.measure import rate_factor_for, sweep
from shrink.target import FakeTarget, Target

pytestmark = pytest.mark.compute


def test_fake_is_a_target():
    assert isinstance(FakeTarget(), Target)


def test_sweep_on_mm1_fake_finds_the_mat():
    # Base trace 100 req/s; rate factors 3..9.5 give 300..950 req/s on a 1 ms server.
    trace = poisson_trace(100.0, 200.0)
    target = FakeTarget(servers=1, demand={"static": 0.001})
    curve = sweep(target, trace, [3, 5, 7, 8.5, 9.5], reps=3, warmup=2, duration=20, seed=1)
    thr = [lv.throughput for lv in curve.levels]
    assert thr == sorted(thr)
    assert thr[0] == pytest.approx(300, rel=0.1)
    # M/M/1: mean = 1/(1000 - lam) = 5 ms at 800 req/s.
    res = mat(curve, "mean", 0.005)
    assert res.status == "ok"
    assert res.mat == pytest.approx(800, rel=0.08)
    util = curve.levels[0].utilization
    assert util == pytest.approx(0.3, abs=0.05)


def test_levels_where_the_generator_fell_behind_are_flagged_and_excluded():
    trace = poisson_trace(100.0, 200.0)
    target = FakeTarget(servers=1, demand={"static": 0.001}, generator_capacity=600.0)
    curve = sweep(target, trace, [3, 5, 8], warmup=1, duration=10)
    assert [lv.generator_behind for lv in curve.levels] == [False, False, True]
    assert len(curve.usable()) == 2


def test_users_knob_needs_users_in_meta():
    trace = poisson_trace(10.0, 5.0)
    with pytest.raises(ParameterError, match="users"):
        rate_factor_for(trace, 100, "users")
    assert rate_factor_for(trace.with_meta(users=50), 100, "users") == 2.0


def test_auto_sweep_places_levels_around_the_knee():
    from shrink.autolevels import AutoPlan, auto_sweep

    trace = poisson_trace(100.0, 200.0)
    target = FakeTarget(servers=1, demand={"static": 0.001})
    plan = AutoPlan(warmup=1, duration=10, reps=2, max_levels=10)
    curve = auto_sweep(target, trace, {"mean": 0.005, "p999": 0.030}, plan=plan, seed=3)
    assert 4 <= len(curve.levels) <= 10
    res = mat(curve, "mean", 0.005)
    assert res.status == "ok"
    assert res.mat == pytest.approx(800, rel=0.08)
    # Most levels sit near the knee (over half the capacity), not at light load.
    assert sum(lv.throughput > 500 for lv in curve.levels) >= len(curve.levels) - 2


class _Recorder:
    """A fake target that notes which side ran, in order."""

    def __init__(self, name: str, calls: list, servers_demand: float):
        self.name = name
        self.calls = calls
        self.inner = FakeTarget(servers=1, demand={"static": servers_demand})
        self.windows: list[tuple[float, float]] = []

    def describe(self):
        return self.inner.describe()

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        self.calls.append((self.name, rate_factor, seed))
        self.windows.append((warmup, duration))
        return self.inner.run(
            trace, rate_factor=rate_factor, warmup=warmup, duration=duration, seed=seed
        )


def test_paired_sweep_runs_each_rep_on_both_sides_in_alternating_order():
    from shrink.autolevels import AutoPlan, Companion, Pairing, auto_sweep, companion_curve

    full = poisson_trace(400.0, 200.0)
    scaled = poisson_trace(100.0, 200.0)
    calls: list = []
    # The scaled side is a 4x slower server with a quarter of the load: same knee.
    side = _Recorder("scaled", calls, 0.004)
    comp = Companion(_Recorder("full", calls, 0.001), full, {"mean": 0.005})
    plan = AutoPlan(warmup=1, duration=10, reps=3, max_levels=6)
    curve = auto_sweep(
        side, scaled, {"mean": 0.020}, plan=plan, seed=3, pairing=Pairing(companion=comp)
    )
    assert set(comp.levels) == {lv.level for lv in curve.levels}
    assert all(len(lv.reps) == 3 for lv in comp.levels.values())
    # Every rep is a pair at one rate factor and seed; the order alternates within a level.
    pairs = [calls[i : i + 2] for i in range(0, len(calls), 2)]
    assert all(a[1:] == b[1:] and {a[0], b[0]} == {"scaled", "full"} for a, b in pairs)
    firsts = [p[0][0] for p in pairs[1:4]]  # the probe's three reps (after the warm run)
    assert firsts == ["scaled", "full", "scaled"]
    full_curve = companion_curve(comp, plan=plan)
    assert full_curve.alpha == 1.0 and full_curve.sweep.paired
    scaled_mat = mat(curve, "mean", 0.020).mat * 4
    full_mat = mat(full_curve, "mean", 0.005).mat
    assert mat(full_curve, "mean", 0.005).status == "ok"
    assert scaled_mat == pytest.approx(full_mat, rel=0.10)


def test_the_scaled_side_runs_1_over_alpha_longer_than_its_companion():
    from shrink.autolevels import AutoPlan, Companion, Pairing, SweepScaling, auto_sweep

    calls: list = []
    side = _Recorder("scaled", calls, 0.004)
    full = _Recorder("full", calls, 0.001)
    comp = Companion(full, poisson_trace(400.0, 200.0), {"mean": 0.005})
    plan = AutoPlan(warmup=1, duration=10, reps=2, max_levels=4)
    curve = auto_sweep(
        side,
        poisson_trace(100.0, 200.0),
        {"mean": 0.020},
        plan=plan,
        seed=3,
        pairing=Pairing(companion=comp),
        scaling=SweepScaling(scaled_time=4.0),
    )
    assert len(side.windows) == len(full.windows) > 4
    # Each pair: the share's window about four times longer (each side holds the whole
    # copies of the loop window nearest its own planned window, so a level's two round
    # apart: the share's run is its own, not set by its companion); warm-ups at most the
    # plan's, each starting at the first request of a copy (within one gap).
    ratios = [a[1] / b[1] for a, b in zip(side.windows, full.windows, strict=True)]
    assert float(np.median(ratios)) == pytest.approx(4.0, rel=0.25), ratios
    assert all(
        4 * plan.warmup - 0.05 <= a[0] <= 4 * plan.warmup
        and plan.warmup - 0.05 <= b[0] <= plan.warmup
        for a, b in zip(side.windows, full.windows, strict=True)
    )
    # The light probe: the companion's holds no whole copy and measures the plan's window;
    # the share's (four times longer) holds one copy, at most twice its planned 40 s.
    assert 40.0 <= side.windows[0][1] <= 80.0 and full.windows[0][1] == 10.0
    assert curve.sweep.scaled_time == 4.0


def test_the_scaled_side_runs_at_share_load_times_its_companions_rate_factor():
    """A share measured slower than alpha (share_load < 1) gets the full target's
    normalized load at every level: its rate factor is share_load times its twin's, its
    windows stay k times its twin's, and the levels stay the companion's."""
    from shrink.autolevels import AutoPlan, Companion, Pairing, SweepScaling, auto_sweep

    calls: list = []
    # A share at 0.75 of alpha's speed (0.004 / 0.75 s a request at a quarter of the load).
    side = _Recorder("scaled", calls, 0.004 / 0.75)
    full = _Recorder("full", calls, 0.001)
    comp = Companion(full, poisson_trace(400.0, 200.0), {"mean": 0.005})
    plan = AutoPlan(warmup=1, duration=10, reps=2, max_levels=6)
    load = 0.75
    curve = auto_sweep(
        side,
        poisson_trace(100.0, 200.0),
        {"mean": 0.020 / 0.75},
        plan=plan,
        seed=3,
        pairing=Pairing(companion=comp),
        scaling=SweepScaling(scaled_time=4.0, share_load=load),
    )
    pairs = [calls[i : i + 2] for i in range(0, len(calls), 2)]
    assert len(pairs) > 4
    for a, b in pairs:
        by = {a[0]: a, b[0]: b}
        assert by["scaled"][1] == pytest.approx(load * by["full"][1])
        assert by["scaled"][2] == by["full"][2]
    ratios = [a[1] / b[1] for a, b in zip(side.windows, full.windows, strict=True)]
    assert float(np.median(ratios)) == pytest.approx(4.0, rel=0.25), ratios
    assert curve.sweep.share_load == load
    assert set(comp.levels) == {lv.level for lv in curve.levels}
    # Matched loads: at each level both sides are equally busy (the share is 0.75 of
    # alpha's speed and gets 0.75 of alpha's load), so one level brackets both knees.
    light = [lv for lv in curve.levels if comp.levels[lv.level].utilization < 0.9]
    assert len(light) >= 2
    for lv in light:
        assert lv.utilization == pytest.approx(comp.levels[lv.level].utilization, rel=0.12)


def test_a_short_trace_shrinks_both_windows_of_a_time_scaled_pair():
    from shrink.autolevels import AutoPlan, Companion, SweepScaling, _run_level

    calls: list = []
    side, full = _Recorder("scaled", calls, 0.004), _Recorder("full", calls, 0.001)
    # 60 s of trace at rate factor 1: the share (warm-up 8 s) can fill 52 s, i.e. 13 s
    # of the plan's time; the full side could fill 20 s.
    comp = Companion(full, poisson_trace(400.0, 60.0), {"mean": 0.005})
    plan = AutoPlan(warmup=2, duration=20, reps=1)
    got = _run_level(
        side,
        poisson_trace(100.0, 60.0),
        1.0,
        "rate_factor",
        plan,
        0,
        comp,
        scaling=SweepScaling(scaled_time=4.0),
    )
    assert got is not None
    (w_s, d_s), (w_f, d_f) = side.windows[0], full.windows[0]
    assert (w_s, w_f) == (8.0, 2.0)
    assert d_f == pytest.approx(13.0, abs=0.2) and d_s == pytest.approx(4 * d_f)


def test_a_time_budget_stops_the_sweep_before_a_level_that_would_overrun_it():
    from shrink.autolevels import AutoPlan, auto_sweep

    trace = poisson_trace(100.0, 200.0)
    target = FakeTarget(servers=1, demand={"static": 0.001})
    # 11 planned seconds a repetition: warm run 11, probe 22, then 22 a level. The fake
    # takes no time, so the planned seconds are what counts: room for two more levels.
    plan = AutoPlan(warmup=1, duration=10, reps=2, max_levels=10, budget_s=33 + 2 * 22 + 21)
    curve = auto_sweep(target, trace, {"mean": 0.005}, plan=plan, seed=3)
    assert len(curve.levels) == 3
    assert curve.meta["levels_skipped_time_budget"]
    unlimited = auto_sweep(
        target, trace, {"mean": 0.005}, plan=replace(plan, budget_s=None), seed=3
    )
    assert len(unlimited.levels) > 3 and "levels_skipped_time_budget" not in unlimited.meta


def test_paired_sweep_needs_the_rate_factor_knob():
    from shrink.autolevels import Companion, Pairing, auto_sweep

    trace = poisson_trace(100.0, 50.0).with_meta(users=10)
    comp = Companion(FakeTarget(), trace, {"mean": 0.005})
    with pytest.raises(MeasurementError, match="rate_factor"):
        auto_sweep(
            FakeTarget(), trace, {"mean": 0.005}, knob="users", pairing=Pairing(companion=comp)
        )


def test_share_utilization_reports_other_work_on_the_share_cpus():
    from shrink.measure import level_stats
    from shrink.providers import _ShareUtilization

    class Inner:
        def describe(self):
            return {}

        def run(self, trace, **kw):
            res = FakeTarget().run(trace, **kw)
            # CPU 1 was busy 55% of the time (5% of it stolen by the host); the server's
            # processes used 0.20 CPU of it.
            res.per_cpu_utilization = {1: 0.55}
            res.utilization = 0.55
            res.describe = {"server_cpu": 0.20, "share_steal": 0.05, "generator_steal": 0.12}
            return res

    res = _ShareUtilization(Inner(), 0.25, 1).run(
        poisson_trace(50.0, 20.0), rate_factor=1.0, warmup=1.0, duration=5.0, seed=0
    )
    st = level_stats(res)
    assert st.other_cpu == pytest.approx(0.30)
    assert st.steal == pytest.approx(0.05)
    assert st.generator_steal == pytest.approx(0.12)
    assert st.utilization == pytest.approx(0.80)  # 0.20 CPU of a 0.25 share


def test_a_repetition_that_fell_behind_is_left_out_not_the_level():
    from dataclasses import replace

    from shrink.loadcurve import Level

    trace = poisson_trace(200.0, 60.0)
    ok = [level_stats_of(FakeTarget(), trace, seed) for seed in (1, 2)]
    stalled = replace(ok[0], generator_behind=True, overall=ok[0].overall)
    stalled = replace(stalled, throughput=1.0)  # what a stalled run looks like
    lv = Level(1.0, [ok[0], stalled, ok[1]])
    assert not lv.generator_behind and lv.reps_behind == 1
    assert lv.throughput == pytest.approx((ok[0].throughput + ok[1].throughput) / 2)
    assert Level(1.0, [stalled]).generator_behind


def level_stats_of(target, trace, seed):
    from shrink.measure import level_stats

    return level_stats(target.run(trace, rate_factor=1.0, warmup=1.0, duration=10.0, seed=seed))


class _Tampered(Altered):
    """FakeTarget whose runs numbered in ``at`` get ``tamper(result)`` applied."""

    def __init__(self, at: set[int]):
        super().__init__(FakeTarget(servers=1, demand={"static": 0.001}))
        self.at = at
        self.calls = 0

    def tamper(self, res):
        raise NotImplementedError

    def alter(self, res, kw):
        if self.calls in self.at:
            self.tamper(res)
        self.calls += 1


class _Stalling(_Tampered):
    """Runs numbered in ``at`` report a generator stall (2 ms lag, idle CPU)."""

    def tamper(self, res):
        from dataclasses import replace

        res.generator = replace(
            res.generator, behind=True, send_lag_p99=0.002, send_lag_max=0.004, cpu=0.02
        )


def test_stalls_are_rerun_and_merged_and_the_knee_still_found():
    from shrink.autolevels import AutoPlan, auto_sweep

    trace = poisson_trace(100.0, 200.0)
    plan = AutoPlan(warmup=1, duration=10, reps=2, max_levels=10)
    clean = auto_sweep(
        FakeTarget(servers=1, demand={"static": 0.001}), trace, {"mean": 0.005}, plan=plan, seed=3
    )
    # Stall one repetition of several levels (calls 0-1 are the warm run and the probe).
    target = _Stalling({3, 6, 8, 11})
    curve = auto_sweep(target, trace, {"mean": 0.005}, plan=plan, seed=3)
    assert curve.meta["levels_rerun_generator_behind"]
    # One more repetition each, until two kept up.
    merged = [lv for lv in curve.levels if len(lv.reps) == 3]
    assert merged and all(not lv.generator_behind for lv in merged)
    res, ref = mat(curve, "mean", 0.005), mat(clean, "mean", 0.005)
    assert res.status == "ok"
    assert res.mat == pytest.approx(ref.mat, rel=0.08)


class _StallsWhenOverloaded(Altered):
    """FakeTarget whose generator stalls (idle CPU, ``lag`` s longest) above ``factor``."""

    def __init__(self, factor: float, lag: float):
        super().__init__(FakeTarget(servers=1, demand={"static": 0.001}))
        self.factor, self.lag = factor, lag
        self.calls: list[float] = []

    def alter(self, res, kw):
        self.calls.append(kw["rate_factor"])
        if kw["rate_factor"] >= self.factor:
            res.generator = replace(
                res.generator, behind=True, send_lag_p99=self.lag / 2, send_lag_max=self.lag,
                cpu=0.03,
            )  # fmt: skip


def test_overloaded_levels_where_the_generator_stalled_are_not_measured_again():
    from shrink.autolevels import AutoPlan, auto_sweep

    trace = poisson_trace(100.0, 200.0)
    # Probe, three coarse levels (the last near 9.8, far over 5 ms), then refinement.
    # Each level replays the trace from its start (no loop window): the stall geometry
    # below (stalls from 8.5, the MAT near 8.0) was set for that, on fresh arrivals.
    plan = AutoPlan(
        warmup=1, duration=10, reps=2, max_levels=7, coarse=(0.35, 0.6, 1.0), loop_window=0
    )
    saved = 0
    for seed in range(6):
        # From 85% of the M/M/1 capacity on, the generator stalls, as on a VM whose host
        # takes its CPU at the busiest levels. A 1 ms stall leaves those levels over 5 ms
        # by their bound: no run there is repeated, the sweep measures in between, and
        # the MAT (800 req/s) comes from levels that kept up.
        short = _StallsWhenOverloaded(8.5, lag=0.001)
        curve = auto_sweep(short, trace, {"mean": 0.005}, plan=plan, seed=seed)
        res = mat(curve, "mean", 0.005)
        assert res.status == "ok" and res.mat == pytest.approx(800, rel=0.08)
        assert "levels_rerun_generator_behind" not in curve.meta
        assert all(len(lv.reps) == 2 for lv in curve.levels if lv.generator_behind)
        # Stalls as long as the latencies prove nothing: such a level is measured again.
        long = _StallsWhenOverloaded(8.5, lag=0.5)
        curve = auto_sweep(long, trace, {"mean": 0.005}, plan=plan, seed=seed)
        assert curve.meta["levels_rerun_generator_behind"]
        saved += len(long.calls) - len(short.calls)
    assert saved > 0


def test_a_threshold_hidden_behind_excluded_levels_gets_a_level_in_between():
    from dataclasses import replace

    from shrink.autolevels import _above
    from shrink.loadcurve import Level, LoadCurve

    trace = poisson_trace(100.0, 60.0)
    target = FakeTarget(servers=1, demand={"static": 0.001})
    runs = {f: level_stats_of_factor(target, trace, f) for f in (2.0, 4.0, 9.5)}
    # A stall as long as the latency itself: the level says nothing, not even "over".
    lag = runs[9.5].overall.mean / 2
    stalled = replace(runs[9.5], generator_behind=True, generator_cpu=0.02, send_lag_max=lag)
    levels = {
        2.0: Level(2.0, [runs[2.0]]),
        4.0: Level(4.0, [runs[4.0]]),
        9.5: Level(9.5, [stalled]),
    }
    curve = LoadCurve(levels=list(levels.values()))
    assert _above(levels, curve, {"mean": 0.005}) == pytest.approx(6.75)
    # A short stall leaves it over the threshold by its stall bound: still no MAT from
    # it (a hint of where the crossing lies), so the level in between is still needed.
    levels[9.5] = Level(9.5, [replace(stalled, send_lag_max=0.001)])
    curve = LoadCurve(levels=list(levels.values()))
    assert _above(levels, curve, {"mean": 0.005}) == pytest.approx(6.75)
    res = mat(curve, "mean", 0.005)
    assert res.status == "not_reached" and res.stalled_ceiling == pytest.approx(
        runs[9.5].throughput
    )
    # Nothing to do once the threshold is crossed among usable levels.
    levels[9.5] = Level(9.5, [runs[9.5]])
    assert _above(levels, LoadCurve(levels=list(levels.values())), {"mean": 0.005}) is None


def level_stats_of_factor(target, trace, factor):
    from shrink.measure import level_stats

    return level_stats(target.run(trace, rate_factor=factor, warmup=1.0, duration=10.0, seed=1))


def test_the_median_of_three_repetitions_outvotes_one_disturbed_window():
    from dataclasses import replace

    from shrink.loadcurve import Level

    trace = poisson_trace(200.0, 60.0)
    a, b = (level_stats_of(FakeTarget(), trace, seed) for seed in (1, 2))
    # A slow minute of the host: one window's mean latency five times the others'.
    slow = replace(a, overall=replace(a.overall, mean=5 * max(a.overall.mean, b.overall.mean)))
    three = Level(1.0, [a, slow, b])
    centre, lo, hi = three.stat("mean")
    assert centre == pytest.approx(max(a.overall.mean, b.overall.mean))
    # The interval is still the mean's: it widens with the disturbed repetition.
    assert lo <= centre <= hi and hi > slow.overall.mean / 2
    # One or two repetitions: the centre is their mean, as before.
    two = Level(1.0, [a, slow])
    assert two.stat("mean")[0] == pytest.approx((a.overall.mean + slow.overall.mean) / 2)


def test_with_three_repetitions_one_stall_is_not_rerun_two_are():
    from shrink.autolevels import AutoPlan, auto_sweep

    trace = poisson_trace(100.0, 200.0)
    plan = AutoPlan(warmup=1, duration=10, reps=3, probe_reps=1, max_levels=3, warm_run=False)
    # Calls: 0 the probe (one repetition), 1-3 the first coarse level, 4-6 the next.
    one = auto_sweep(_Stalling({2}), trace, {"mean": 0.005}, plan=plan, seed=3)
    assert "levels_rerun_generator_behind" not in one.meta
    assert [len(lv.reps) for lv in one.levels] == [1, 3, 3]
    two = auto_sweep(_Stalling({2, 3}), trace, {"mean": 0.005}, plan=plan, seed=3)
    assert len(two.meta["levels_rerun_generator_behind"]) == 1
    # One more repetition makes two that kept up.
    assert sorted(len(lv.reps) for lv in two.levels) == [1, 3, 4]
    # A probe run once is rerun when its one repetition stalled.
    probe = auto_sweep(_Stalling({0}), trace, {"mean": 0.005}, plan=plan, seed=3)
    assert len(probe.levels[0].reps) == 2 and not probe.levels[0].generator_behind


class _Interrupted(_Tampered):
    """Runs numbered in ``at`` were stopped by a signal (the engine's flag)."""

    def tamper(self, res):
        res.describe = {**(res.describe or {}), "engine": {"interrupted": True}}


@pytest.mark.parametrize("at", [0, 3])
def test_a_signal_stops_the_whole_sweep_not_one_run(at):
    from shrink.autolevels import AutoPlan, auto_sweep
    from shrink.measure import sweep

    trace = poisson_trace(100.0, 200.0)
    target = _Interrupted({at})
    with pytest.raises(KeyboardInterrupt):
        sweep(target, trace, [1.0, 2.0, 3.0], reps=2, warmup=1, duration=5)
    assert target.calls == at + 1
    target = _Interrupted({at})
    with pytest.raises(KeyboardInterrupt):
        auto_sweep(target, trace, {"mean": 0.005}, plan=AutoPlan(warmup=1, duration=5))
    assert target.calls == at + 1


def test_an_interrupted_sweep_hands_back_the_levels_it_finished():
    from shrink.autolevels import AutoPlan, SweepInterrupted, auto_sweep

    trace = poisson_trace(100.0, 200.0)
    plan = AutoPlan(warmup=1, duration=5, reps=2, warm_run=False)
    # Calls 0-1: the probe; 2-3: the first coarse level; 4: stopped mid-level.
    with pytest.raises(SweepInterrupted) as stop:
        auto_sweep(_Interrupted({4}), trace, {"mean": 0.005}, plan=plan, seed=3)
    partial = stop.value.curve
    assert partial.meta["interrupted"]
    assert [len(lv.reps) for lv in partial.levels] == [2, 2]
    # Stopped before any level finished: an empty curve, still marked.
    with pytest.raises(SweepInterrupted) as stop:
        auto_sweep(_Interrupted({0}), trace, {"mean": 0.005}, plan=plan, seed=3)
    assert stop.value.curve.levels == [] and stop.value.curve.meta["interrupted"]


def test_skip_start_drops_the_first_seconds_and_shifts_the_rest():
    from shrink.measure import default_skip, skip_start

    trace = poisson_trace(100.0, 200.0)
    t0 = float(trace.column("t").min())
    later = skip_start(trace, 50.0)
    kept = trace.column("t") >= t0 + 50.0
    assert len(later) == int(kept.sum()) and 0 < len(later) < len(trace)
    assert later.column("t").min() >= 0.0
    assert np.allclose(later.column("t"), trace.column("t")[kept] - t0 - 50.0)
    assert list(later.column("session")) == list(trace.column("session")[kept])
    assert skip_start(trace, 0.0) is trace
    assert default_skip(trace) == pytest.approx(0.1 * (trace.column("t").max() - t0))
    with pytest.raises(ParameterError, match="skipping the first 500 s"):
        skip_start(trace, 500.0)


def test_a_sweep_with_skip_replays_the_trace_from_there():
    from shrink.autolevels import AutoPlan, auto_sweep

    calls: list = []
    side = _Recorder("scaled", calls, 0.001)
    seen = []
    run = side.run
    side.run = lambda tr, **kw: (seen.append(float(tr.column("t").max())), run(tr, **kw))[1]
    trace = poisson_trace(100.0, 200.0)
    plan = AutoPlan(warmup=1, duration=5, reps=1, max_levels=3, skip=120.0)
    curve = auto_sweep(side, trace, {"mean": 0.005}, plan=plan, seed=3)
    assert curve.sweep.skip == 120.0
    # Every run saw the trace from 120 s on (its last request near 80 s, not 200 s).
    assert seen and all(x < 81.0 for x in seen)


def test_isotonic_is_the_least_squares_monotone_fit():
    from shrink.mat import isotonic

    y = np.array([1.0, 3.0, 2.0, 2.0, 5.0, 4.0])
    assert isotonic(y).tolist() == pytest.approx([1.0, 7 / 3, 7 / 3, 7 / 3, 4.5, 4.5])
    w = np.array([1.0, 1.0, 3.0, 1.0, 1.0, 1.0])
    assert isotonic(y, w).tolist() == pytest.approx([1.0, 2.2, 2.2, 2.2, 4.5, 4.5])
    assert isotonic(np.array([])).size == 0


def test_measure_is_split_by_concept_and_keeps_its_names():
    """Each public name of shrink.measure lives in the module of its concept, and the
    package still exports it for callers."""
    import shrink.measure as measure
    from shrink.measure import fixed_sweep, interrupt, stats, window

    home = {
        window: ["skip_start", "loop_window", "looped_run", "slow_motion", "rate_factor_for"],
        stats: ["level_stats", "offered_check"],
        interrupt: ["SweepInterrupted", "stop_if_interrupted", "was_interrupted"],
        fixed_sweep: ["sweep"],
    }
    for module, names in home.items():
        for name in names:
            assert getattr(measure, name) is getattr(module, name), name
            assert getattr(module, name).__module__ == module.__name__, name
    assert set(measure.__all__) == {n for m in home for n in m.__all__}


def test_the_level_search_stops_at_the_policys_end_a_measured_stop_or_the_budget():
    from shrink.measure.search import level_search

    def run(levels: list[float], stop_at: float | None, budget: int | None) -> list[float]:
        ahead = iter(levels)
        seen: list[float] = []

        def measure(level: float) -> bool:
            seen.append(level)
            return level != stop_at

        assert level_search(lambda: next(ahead, None), measure, budget) == len(seen)
        return seen

    assert run([1.0, 2.0, 3.0], None, None) == [1.0, 2.0, 3.0]  # the policy has no more
    assert run([1.0, 2.0, 3.0], 2.0, None) == [1.0, 2.0]  # level 2 ended it
    assert run([1.0, 2.0, 3.0], None, 2) == [1.0, 2.0]  # the budget
    assert run([1.0, 2.0], None, 0) == []


def test_the_three_level_searches_run_through_one_driver(monkeypatch):
    """The knee search, the simulator's MAT search and the adaptive refinement each
    measure the levels their policy chooses through shrink.measure.search."""
    import importlib

    import shrink.autolevels._sweep as knee_search
    import shrink.replay.adaptive as adaptive
    from shrink.autolevels import AutoPlan, auto_sweep
    from shrink.machine import Machine
    from shrink.measure.search import level_search
    from shrink.share import Share
    from shrink.sim.target import SimTarget
    from shrink.sim.workloads import tcp_trace
    from tests.conftest import ROOT

    # the package shrink.sim exports a function named scaling, which hides the module
    sim_scaling = importlib.import_module("shrink.sim.scaling")
    driven: dict[str, list] = {}

    def recording(name: str):
        def drive(choose, measure, budget=None):
            def chosen():
                step = choose()
                if step is not None:
                    driven.setdefault(name, []).append(step)
                return step

            return level_search(chosen, measure, budget)

        return drive

    for name, module in (("knee", knee_search), ("sim", sim_scaling), ("adaptive", adaptive)):
        monkeypatch.setattr(module, "level_search", recording(name))
    target = FakeTarget(servers=1, demand={"static": 0.001})
    trace = poisson_trace(100.0, 200.0)
    plan = AutoPlan(warmup=1, duration=5, reps=1, max_levels=6)
    curve = auto_sweep(target, trace, {"mean": 0.005}, plan=plan, seed=1)
    # every level after the probe was chosen by a policy the driver ran
    assert len(curve.levels) - 1 == len(driven["knee"]) > 0
    fixed = sweep(target, trace, [3.0, 9.5], reps=2, warmup=2, duration=20, seed=1)
    _, added = adaptive.refine(target, trace, fixed, "mean", 0.005, rel_width=0.01)
    assert added == [step.level for step in driven["adaptive"]] and added
    machine = Machine.read_toml(ROOT / "examples" / "machines" / "nehalem-2s.toml")
    cpus = Share.cores_of(machine, sim_scaling.compact_cpus(machine, 1))
    # a mean of 5 ms on tcp's 40 us requests lies past saturation: the search goes up
    mats = sim_scaling.find_mats(
        SimTarget(machine, "1-replica", cpus, None),
        tcp_trace(10_000.0, 20.0, seed=0),
        {"mean": 0.005},
        search=sim_scaling.MatSearch(requests_per_level=1000, coarse=(0.5, 0.9), refine=0),
    )
    above = [lv.level for lv in mats.curve.levels if lv.level > mats.capacity_factor]
    assert [f for _, f in driven["sim"]] and set(f for _, f in driven["sim"]) <= set(above)


def _mat_of_one_and_two_reps(tmp_path: Path, extra: list[str]) -> dict[int, str]:
    """``shrink mat`` (with ``extra``) of a fake core's curve of one, then two,
    repetitions a level: what it printed, by repetitions."""
    from typer.testing import CliRunner

    from shrink.cli import app

    trace = poisson_trace(rate=50.0, duration=60.0, seed=1)
    target = FakeTarget(servers=1, demand={"static": 0.01, "dynamic": 0.01})
    out = {}
    for reps in (1, 2):
        curve = sweep(target, trace, [1, 1.5, 1.8], reps=reps, warmup=1.0, duration=8.0)
        path = tmp_path / f"c{reps}.json"
        curve.write_json(path)
        r = CliRunner().invoke(app, ["mat", str(path), "--threshold", "40ms", *extra])
        assert r.exit_code == 0, r.output
        out[reps] = r.stdout
    return out


def test_shrink_mat_says_one_repetition_gives_no_interval(tmp_path):
    """With --reps 1 ``shrink mat`` printed 'CI [1,270.1, 1,270.1]': a 95% interval of
    no width, where one repetition a level measured no spread at all."""

    out = _mat_of_one_and_two_reps(tmp_path, [])
    assert "CI none (one repetition per level" in out[1], out[1]
    assert "CI [" in out[2] and "CI none" not in out[2], out[2]


def test_shrink_mat_json_writes_no_interval_for_one_repetition(tmp_path):
    """``mat --json`` of a curve of one repetition a level wrote ``"ci": [x, x]`` (and a
    text 'x [x, x]') where the text said 'CI none': one repetition measures no spread."""
    import json

    out = _mat_of_one_and_two_reps(tmp_path, ["--json"])
    one, two = json.loads(out[1]), json.loads(out[2])
    assert one["status"] == "ok" and one["ci"] is None and "[" not in one["text"], one
    assert one["ci_note"].startswith("one repetition per level: no spread to read"), one
    assert two["ci"][0] < two["mat"] < two["ci"][1] and "ci_note" not in two, two


def test_shrink_mat_json_names_its_curve_and_confidence_and_adaptive_needs_two_reps(tmp_path):
    """``mat --json`` gave the interval without its confidence (0.95 was only in the
    words) or the curve it read; ``mat --adaptive`` on a curve of one repetition a level
    stopped at once (an interval of no width reads as narrow) and said nothing."""
    import json

    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.mat import MATResult

    trace = poisson_trace(rate=50.0, duration=60.0, seed=1)
    target = FakeTarget(servers=1, demand={"static": 0.01, "dynamic": 0.01})
    curve = sweep(target, trace, [1, 1.5, 1.8], reps=1, warmup=1.0, duration=8.0)
    path = tmp_path / "c.json"
    curve.write_json(path)
    r = CliRunner().invoke(app, ["mat", str(path), "--threshold", "40ms", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["confidence"] == 0.95 and d["curve"] == str(path)
    assert MATResult.from_dict({k: v for k, v in d.items() if k not in ("curve", "added_levels")})
    # --generator-cpus: as root, the target's default is SCHED_FIFO and its note
    cpu = str(min(os.sched_getaffinity(0)))
    r = CliRunner().invoke(
        app, ["mat", str(path), "--threshold", "40ms", "--adaptive", "--trace", str(path),
              "--target", "http://127.0.0.1:9", "--generator-cpus", cpu],
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "a curve of one repetition a level has none: sweep it with --reps 2" in r.output
    # Refused before the target is made: its SCHED_FIFO note came first.
    assert "SCHED_FIFO" not in r.output


def test_a_sweep_on_a_testbed_state_reads_utilization_as_a_part_of_the_share(tmp_path: Path):
    """``shrink sweep --target STATE`` on a 25% CPU-time share recorded the CPU's busy
    fraction: 0.25 for a saturated share ("util 25%"), and 1.0 for a share at 8% whose
    CPU another process kept busy, where predict records the server's CPU over the share."""
    from helpers.testbed import lighttpd_replica

    from shrink.cli._replay_opts import EngineOptions
    from shrink.replay.window_cpu import of_share
    from shrink.testbed.state import TestbedState

    st = TestbedState(
        [lighttpd_replica(8080)], {"kind": "cpu_time", "cpus": [1], "fraction": 0.25},
        {"name": "1-replica"},
        {"name": "m", "sockets": 1, "cores_per_socket": 2}, "doc", {"php": "8"}, "t",
    )  # fmt: skip
    path = st.write(tmp_path / "state.json")
    target = EngineOptions(generator_cpus="0", allow_overlap=True, realtime=0).target([str(path)])
    assert target.share_scale == (0.25, 1)
    # What LiveTarget.run then returns: CPU 1 busy all the window, the server 0.02 of it.
    busy = FakeTarget().run(
        poisson_trace(20.0, 5.0), rate_factor=1.0, warmup=0.0, duration=5.0, seed=0
    )
    busy.utilization, busy.per_cpu_utilization = 1.0, {1: 1.0}
    busy.describe = {"server_cpu": 0.02}
    res = of_share(busy, *target.share_scale)
    assert res.utilization == pytest.approx(0.08)
    assert res.describe["share_other_cpu"] == pytest.approx(0.98)


@pytest.mark.compute
def test_sweeps_level_line_marks_a_p999_from_too_few_requests(capsys):
    """sweep's own line printed a p99.9 from 100 requests as it printed one from 2,000,
    with no mark (the report's figure marked it "n=", mat says so): marked "*" now, the
    mark said once."""
    import json

    from shrink.cli.sweep_cmd import _print_sweep

    trace = poisson_trace(200.0, 30.0)  # 200 req/s: levels of about 100 and 2,000 requests
    curve = sweep(FakeTarget(), trace, [0.5, 10.0], reps=1, warmup=0.0, duration=1.0)
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    lines = capsys.readouterr().out.splitlines()
    assert " ms*  util" in lines[0] and "*" not in lines[1]
    assert lines[2].startswith("*: that p99.9 rests on fewer than 1,000 requests a repetition")
    assert sum("rests on fewer" in line for line in lines) == 1
    _print_sweep(curve, "rate_factor", Path("c.json"), [], True)
    rows = json.loads(capsys.readouterr().out)["levels"]
    assert 50 < rows[0]["p999_requests"] < 1000 and rows[1]["p999_requests"] is None


@pytest.mark.compute
def test_mat_says_when_a_percentile_rests_on_too_few_requests(tmp_path: Path):
    """`shrink mat curve.json --stat p99.9` on a sweep of 1 s levels at 60 and 340 req/s
    printed the MAT "(ok)": each level's p99.9 was its slowest request or two."""
    from typer.testing import CliRunner

    from shrink.cli import app

    trace = poisson_trace(200.0, 30.0)  # 200 req/s: levels of 100 and 300 requests
    curve = sweep(FakeTarget(), trace, [0.5, 1.5], reps=2, warmup=0.0, duration=1.0)
    curve.write_json(tmp_path / "c.json")
    runner = CliRunner()
    r = runner.invoke(
        app, ["mat", str(tmp_path / "c.json"), "--stat", "p99.9", "--threshold", "1s"]
    )
    said = " ".join(r.output.split())
    assert "p99.9 at 2 levels (0.5, 1.5) rests on fewer than 1,000 requests a repetition" in said
    # The mean, and a percentile with enough requests behind it, are said as before.
    for stat in ("mean", "p90"):
        r = runner.invoke(
            app, ["mat", str(tmp_path / "c.json"), "--stat", stat, "--threshold", "1s"]
        )
        assert "rests on fewer" not in r.output


@pytest.mark.parametrize(
    ("share", "scale"),
    [
        ({"kind": "cores", "cpus": [1], "fraction": 0.5, "cpu_fraction": None}, 1.0),
        ({"kind": "cores", "cpus": [1], "fraction": 0.5}, 1.0),
        ({"kind": "cpu_time", "cpus": [1], "fraction": 0.25}, 0.25),
    ],
)
def test_an_older_states_share_scales_utilization_as_the_state_reads(
    tmp_path: Path, share: dict, scale: float
):
    """A state with a null cpu_fraction, which the state's reader takes for the default
    (an older file), stopped replay and sweep with a TypeError; one without it, for a
    cores share, divided the utilization by the share's fraction of the machine."""
    import json

    from helpers.testbed import lighttpd_replica

    from shrink.cli._replay_opts import EngineOptions
    from shrink.testbed.state import TestbedState

    st = TestbedState(
        [lighttpd_replica(8080)], {"kind": "cores", "cpus": [1], "fraction": 0.5},
        {"name": "1-replica"},
        {"name": "m", "sockets": 1, "cores_per_socket": 2}, "doc", {"php": "8"}, "t",
    )  # fmt: skip
    path = st.write(tmp_path / "state.json")
    d = json.loads(path.read_text())
    d["share"] = share
    path.write_text(json.dumps(d))
    target = EngineOptions(generator_cpus="0", allow_overlap=True, realtime=0).target([str(path)])
    assert target.share_scale == (scale, 1)


@pytest.mark.parametrize("fraction", [0, 0.0])
def test_a_states_share_of_no_cpu_time_is_refused_before_a_run(tmp_path: Path, fraction):
    """A state whose CPU-time share holds cpu_fraction 0 (which its reader takes) ran the
    level and then stopped with a ZeroDivisionError traceback, scaling the run's
    utilization by it (found by bench_fuzz.py's state reader, seed 21)."""
    import json

    from helpers.testbed import lighttpd_replica

    from shrink.cli._replay_opts import EngineOptions
    from shrink.errors import TestbedError
    from shrink.testbed.state import TestbedState

    st = TestbedState(
        [lighttpd_replica(8080)], {"kind": "cpu_time", "cpus": [1], "cpu_fraction": 0.25},
        {"name": "1-replica"},
        {"name": "m", "sockets": 1, "cores_per_socket": 2}, "doc", {"php": "8"}, "t",
    )  # fmt: skip
    path = st.write(tmp_path / "state.json")
    d = json.loads(path.read_text())
    d["share"]["cpu_fraction"] = fraction
    path.write_text(json.dumps(d))
    with pytest.raises(
        TestbedError, match=r"state\.json: share\.cpu_fraction: 0 gives the share no"
    ):
        EngineOptions(generator_cpus="0", allow_overlap=True, realtime=0).target([str(path)])


def test_a_looped_window_of_sessions_thinking_a_billion_seconds_lays_out_few_copies(
    tmp_path: Path,
) -> None:
    # Every row by every copy since the longest session began was laid out: at rate
    # factor 15,000, 3 * 10^12 copies of a 5 s window (out of memory; predict --skip 0s
    # of such a session log said "error: out of memory").
    from shrink.ingest import read_trace
    from shrink.measure import loop_window, looped_run

    log = tmp_path / "s.log"
    log.write_text("".join(f"/a{i} think=1000000000\n/b{i}\n\n" for i in range(5)))
    window = loop_window(read_trace(log, format="wsesslog"), 0.0, 5.0)
    run = looped_run(window, 15000.0, 0.0, 3.0)
    paths = run.trace.column("path").tolist()
    # each copy's five first requests, and the second ones of copies 10^9 s back
    assert run.copies == 9000 and len(paths) == 10 * 9000
    assert set(paths) == {f"/{x}{i}" for i in range(5) for x in "ab"}
