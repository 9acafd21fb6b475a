"""shrink.autolevels as a package: its public surface, and its refinement is the knee
search's (shrink.knee), not one of its own."""

from __future__ import annotations

import pytest
from helpers.session_traces import poisson_trace
from helpers.surface import exported, public_names

import shrink.autolevels as autolevels
from shrink.autolevels import _sweep
from shrink.knee import next_step
from shrink.target import FakeTarget

pytestmark = pytest.mark.compute


def test_public_surface_is_all_of_its_names():
    assert public_names(autolevels) == exported(autolevels)


def test_the_sweep_refines_where_the_knee_search_says(monkeypatch):
    asked = []

    def recorded(*args, **kwargs):
        step = next_step(*args, **kwargs)
        sides = args[0]
        asked.append((len(sides[0][0].levels), step))
        return step

    monkeypatch.setattr(_sweep, "next_step", recorded)
    plan = autolevels.AutoPlan(warmup=1, duration=10, reps=1, max_levels=10)
    target = FakeTarget(servers=1, demand={"static": 0.001})
    curve = autolevels.auto_sweep(target, poisson_trace(100.0, 200.0), {"mean": 0.005}, plan=plan)
    steps = [s for _, s in asked if s is not None]
    assert steps and all(s.why in ("refine", "re-measure") for s in steps)
    # Each step was measured, and nothing else while the knee search chose the levels.
    assert {round(s.level, 6) for s in steps} <= {lv.level for lv in curve.levels}
    assert len(curve.levels) == asked[0][0] + len(steps)


def test_a_p999_whose_knee_lies_above_the_means_still_gets_bracketed():
    # M/M/1 at 1 ms: the mean passes 5 ms at 800 req/s, the p99.9 (ln(1000) / (1000 - X))
    # passes 100 ms near 930. A coarse pass that ends low hands over to the search upward,
    # which stops at the first level over any threshold (the mean's): the p99.9's crossing
    # above it used to be left a bound.
    from shrink.mat import mat

    plan = autolevels.AutoPlan(
        warmup=1, duration=20, reps=1, max_levels=12, coarse=(0.4, 0.6), loop_window=0
    )
    thresholds = {"mean": 0.005, "p999": 0.1}
    for seed in range(4):
        target = FakeTarget(servers=1, demand={"static": 0.001})
        curve = autolevels.auto_sweep(
            target, poisson_trace(100.0, 400.0, seed), thresholds, plan=plan, seed=seed
        )
        res = mat(curve, "p999", 0.1)
        assert res.status == "ok", (seed, [lv.level for lv in curve.levels])
        assert res.mat == pytest.approx(930, rel=0.1)
        assert mat(curve, "mean", 0.005).mat == pytest.approx(800, rel=0.08)


@pytest.mark.compute
def test_a_probe_that_measured_nothing_names_the_window_its_run_needed() -> None:
    # The probe's run on a share in slow motion needs its warm-up and window scaled_time
    # times the plan's, and its window is the shorter of min_duration and duration: it
    # said "which last 4 s at that rate, short of a 3 s window" of a run that needed 6 s.
    from shrink.autolevels._plan import AutoPlan, SweepScaling
    from shrink.autolevels._sweep import _Sweep
    from shrink.schedule import open_loop_trace

    sweep = object.__new__(_Sweep)
    sweep.plan = AutoPlan(warmup=0.0, duration=3.0, min_duration=3.0)
    sweep.trace = open_loop_trace("/x", 0.25, 8.0)  # (two requests, 4 s apart)
    sweep.knob, sweep.starts_skipped = "rate_factor", False
    sweep.scaling = SweepScaling(scaled_time=2.0)
    said = sweep._too_short_for_probe(1.0)
    assert "which last 4 s at that rate, short of a 6 s window (the plan's, 2 times" in said
    sweep.plan = AutoPlan(warmup=1.0, duration=2.0, min_duration=3.0)
    sweep.scaling = SweepScaling()
    said = sweep._too_short_for_probe(1.0)
    assert "short of 1 s of warm-up and a 2 s window; use a longer trace" in said


def test_a_probe_already_past_the_threshold_is_followed_by_lower_levels():
    """A probe past the knee (the simulator's pilot misjudged the capacity: the NASA
    excerpt's probe was at utilization 1.0, mean 171 ms) was the curve's only level: the
    search only stepped up and the refinement never down, so predict said "1 usable
    level(s)". Levels below it are measured until one is under the threshold."""
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.sim import SimParams, SimTarget, support_trace

    machine = Machine(name="one", sockets=1, cores_per_socket=1)
    target = SimTarget(machine, "1-replica", Share.all_of(machine), SimParams())
    trace = support_trace(60, 40.0, seed=3, think_s=0.3)
    plan = autolevels.AutoPlan(
        warmup=1.0, duration=2.0, reps=1, max_levels=8, loop_window=2.0, probe_level=30.0
    )
    curve = autolevels.auto_sweep(target, trace, {"mean": 0.02}, plan=plan, seed=1)
    probe = next(lv for lv in curve.levels if lv.level == 30.0)
    assert probe.stat("mean")[0] > 0.02  # the probe was past the threshold
    below = [lv for lv in curve.usable() if lv.level < 30.0]
    assert any(lv.stat("mean")[0] <= 0.02 for lv in below), [
        (lv.level, lv.stat("mean")[0]) for lv in curve.levels
    ]
    curve.require_levels(2)


def test_a_threshold_no_level_meets_stops_the_step_down():
    """A threshold under what the server takes unloaded (1 ms against 10 ms requests)
    is met by no level: the step down halved the lowest level on through the whole
    budget, to levels of one request, and past 22 halvings asked for rate factor 0
    ("rate factor == 0, must be in (0, inf)"). It stops once halving the load no
    longer lowers the statistic."""
    plan = autolevels.AutoPlan(
        warmup=1, duration=4, reps=1, max_levels=40, loop_window=2.0, probe_level=2.0
    )
    target = FakeTarget(servers=1, demand={"static": 0.01})
    curve = autolevels.auto_sweep(target, poisson_trace(100.0, 200.0), {"mean": 0.001}, plan=plan)
    levels = [lv.level for lv in curve.levels]
    assert 3 <= len(levels) <= 8, levels
    assert min(levels) >= 2.0 / 2**7, levels
