"""The knee search on synthetic curves: it brackets the true crossing, stops, and spends
its budget where the crossing is."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from shrink.knee import (
    Refinement,
    Step,
    above,
    all_over,
    any_over,
    bracket_levels,
    capacity,
    coarse_levels,
    coarse_next,
    level_for,
    next_step,
    past_knee,
    search_level,
)
from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.mat import mat

pytestmark = pytest.mark.compute

THRESHOLD = 0.005  # mean latency, seconds


def _mm1(x: float) -> float:
    """Mean latency of an M/M/1 server of 1 ms at rate factor x (capacity at x = 10):
    it crosses THRESHOLD at x = 8 exactly."""
    return 0.001 / (1 - x / 10) if x < 10 else 1.0


def _level(x: float, latency: Callable[[float], float], **kw: float | bool) -> Level:
    mean = latency(x)
    cs = ClassStats(1000, 100 * x, mean, mean, mean, mean, mean)
    rep = LevelStats(100 * x, cs, utilization=min(1.0, x / 10), requests=1000, **kw)  # type: ignore[arg-type]
    return Level(float(x), [rep])


def _search(
    start: list[float],
    policy: Refinement,
    latency: Callable[[float], float] = _mm1,
    budget: int = 20,
) -> tuple[LoadCurve, list[Step]]:
    """Measure what the knee search asks for, up to ``budget`` levels."""
    levels = [_level(x, latency) for x in start]
    steps: list[Step] = []
    while len(steps) < budget:
        step = next_step([(LoadCurve(levels=levels), {"mean": THRESHOLD})], policy)
        if step is None:
            break
        steps.append(step)
        levels.append(_level(step.level, latency))
    return LoadCurve(levels=levels), steps


@pytest.mark.parametrize("rel_width", [0.2, 0.05, 0.01])
def test_a_monotone_curve_ends_with_a_bracket_around_the_true_crossing(rel_width):
    curve, steps = _search([1.0, 9.5], Refinement(rel_width=rel_width))
    res = mat(curve, "mean", THRESHOLD)
    assert res.status == "ok" and res.bracket is not None
    lo, hi = res.bracket
    assert lo < 8.0 < hi and (hi - lo) / hi <= rel_width
    assert all(s.why == "refine" and 1.0 < s.level < 9.5 for s in steps)
    # Bisection: each level halves the bracket, so about log2(8.5 / (8 * rel_width)).
    assert len(steps) <= 1 + math.ceil(math.log2(8.5 / (8.0 * rel_width)))


def test_the_search_steps_up_then_down_to_bracket_a_crossing_outside_the_levels():
    policy = Refinement(rel_width=0.05, up=1.5, down=0.5)
    curve, steps = _search([1.0, 2.0], policy)
    assert [s.level for s in steps[:4]] == pytest.approx([3.0, 4.5, 6.75, 10.125])
    assert [s.why for s in steps[:4]] == ["search up"] * 4
    lo, hi = mat(curve, "mean", THRESHOLD).bracket or (0, 0)
    assert lo < 8.0 < hi and (hi - lo) / hi <= 0.05
    curve, steps = _search([9.0, 9.5], policy)
    assert steps[0] == Step(4.5, "search down", "mean")
    lo, hi = mat(curve, "mean", THRESHOLD).bracket or (0, 0)
    assert lo < 8.0 < hi


def test_without_steps_outward_an_unbracketed_crossing_ends_the_search():
    assert _search([1.0, 2.0], Refinement())[1] == []
    assert _search([9.0, 9.5], Refinement())[1] == []


def test_a_budget_of_one_or_two_levels_goes_where_the_crossing_is():
    _, steps = _search([1.0, 9.5], Refinement(rel_width=0.01), budget=1)
    assert [s.level for s in steps] == [5.25]  # the bracket's midpoint
    _, steps = _search([1.0, 9.5], Refinement(rel_width=0.01), budget=2)
    # 5.25 is under the threshold: the crossing lies in the upper half
    assert [s.level for s in steps] == [5.25, 7.375]


def test_a_non_monotone_curve_still_ends_and_never_measures_a_level_twice():
    def bumpy(x: float) -> float:
        # over the threshold around x = 4 (a slow minute), under again until x = 8
        return 0.008 if 3.5 < x < 4.5 else _mm1(x)

    curve, steps = _search([1.0, 3.0, 4.0, 5.0, 9.5], Refinement(rel_width=0.02), bumpy)
    assert len(steps) < 20  # it stopped by itself
    levels = [lv.level for lv in curve.levels]
    assert len(set(levels)) == len(levels)
    res = mat(curve, "mean", THRESHOLD)
    assert res.status == "ok" and res.bracket is not None
    lo, hi = res.bracket
    # The isotonic fit pools the bump: the crossing is placed at the first level over.
    assert bumpy(hi) > THRESHOLD and (hi - lo) / hi <= 0.02


def test_the_widest_bracket_of_either_side_is_split_first():
    a = LoadCurve(levels=[_level(x, _mm1) for x in (7.0, 9.0)])  # bracket width 2
    b = LoadCurve(levels=[_level(x, _mm1) for x in (1.0, 9.5)])  # bracket width 8.5
    step = next_step([(a, {"mean": THRESHOLD}), (b, {"mean": THRESHOLD})], Refinement())
    assert step == Step(5.25, "refine", "mean")
    # the same sides once b is narrow: a's bracket next
    b = LoadCurve(levels=[_level(x, _mm1) for x in (7.9, 8.1)])
    step = next_step([(a, {"mean": THRESHOLD}), (b, {"mean": THRESHOLD})], Refinement())
    assert step == Step(8.0, "refine", "mean")


def test_excluded_levels_above_get_a_level_in_between():
    levels = [_level(x, _mm1) for x in (2.0, 4.0)]
    levels.append(_level(9.0, _mm1, generator_behind=True, generator_cpu=0.1))
    curve = LoadCurve(levels=levels)
    assert above(curve, {"mean": THRESHOLD}) == 6.5
    assert next_step([(curve, {"mean": THRESHOLD})], Refinement()) == Step(6.5, "re-measure")
    assert next_step([(curve, {"mean": THRESHOLD})], Refinement(remeasure=False)) is None
    # a generator out of CPU cannot drive any level over the usable ones
    levels[-1] = _level(9.0, _mm1, generator_behind=True, generator_cpu=0.99)
    assert above(LoadCurve(levels=levels), {"mean": THRESHOLD}) is None


def test_a_statistic_not_crossed_steps_up_before_a_wide_bracket_is_split():
    # a's crossing (x = 8) lies in a wide bracket, b's above its top level: b's is only
    # a bound until a level crosses it, so the step up comes first.
    a = LoadCurve(levels=[_level(x, _mm1) for x in (1.0, 9.5)])
    b = LoadCurve(levels=[_level(x, _mm1) for x in (2.0, 5.0)])
    sides = [(a, {"mean": THRESHOLD}), (b, {"mean": THRESHOLD})]
    assert next_step(sides, Refinement(up=1.2)) == Step(6.0, "search up", "mean")
    # without steps outward the split is all there is
    assert next_step(sides, Refinement()) == Step(5.25, "refine", "mean")
    # a level left out above (the generator stalled) bounds the step up: midway to it
    b.levels.append(_level(9.0, _mm1, generator_behind=True, generator_cpu=0.1))
    assert next_step(sides, Refinement(up=1.2)) == Step(7.0, "search up", "mean")
    # and a generator out of CPU there ends the steps up
    b.levels[-1] = _level(9.0, _mm1, generator_behind=True, generator_cpu=0.99)
    assert next_step(sides, Refinement(up=1.2)) == Step(5.25, "refine", "mean")


def test_the_interpolated_split_leans_toward_the_crossing_but_not_onto_an_edge():
    policy = Refinement(split="interpolate")
    curve = LoadCurve(levels=[_level(x, _mm1) for x in (1.0, 8.2)])
    res = mat(curve, "mean", THRESHOLD)
    x = level_for(curve, res, policy)
    assert x == pytest.approx(1.0 + 0.8 * 7.2)  # the crossing is near 8.2: clipped at 80%
    assert level_for(curve, res, Refinement()) == pytest.approx(4.6)


def test_capacity_and_the_batches_of_levels():
    assert capacity(_level(2.0, _mm1), 2.0) == pytest.approx(10.0)
    assert capacity(_level(0.01, _mm1), 0.01) is None  # 0.1% busy says nothing
    assert capacity(_level(9.9, _mm1), 9.9) is None  # saturated
    # By the utilization law over a window offering 100 req/s per unit: X / U / 100. A
    # level at 2 that drew 150 req/s (its window offered more than 2 units) at U = 0.2
    # puts the capacity at 7.5, not 10.
    light = _level(2.0, _mm1)
    light.reps[0].throughput = 150.0
    assert capacity(light, 2.0, unit_rate=100.0) == pytest.approx(7.5)
    assert coarse_levels(10.0, (0.5, 0.9)) == [5.0, 9.0]
    curve = LoadCurve(levels=[_level(x, _mm1) for x in (4.0, 9.0)])
    assert bracket_levels(mat(curve, "mean", THRESHOLD), 10.0, 4) == [5.0, 6.0, 7.0, 8.0]
    low = LoadCurve(levels=[_level(x, _mm1) for x in (1.0, 2.0)])
    assert bracket_levels(mat(low, "mean", THRESHOLD), 10.0, 4) == pytest.approx([10.0, 10.5, 11.5])


def test_a_level_already_measured_ends_the_search():
    # The bracket (4, 9) has its midpoint at a stalled level: measuring it again would
    # spend the budget on what is known (the sweep keeps its levels).
    levels = [_level(x, _mm1) for x in (4.0, 9.0)]
    levels.append(_level(6.5, _mm1, generator_behind=True, generator_cpu=0.1))
    curve = LoadCurve(levels=levels)
    assert mat(curve, "mean", THRESHOLD).bracket == (4.0, 9.0)
    assert next_step([(curve, {"mean": THRESHOLD})], Refinement()) is None


def test_the_coarse_pass_and_the_search_upward_stop_past_the_knee():
    fractions = [0.35, 0.6, 0.8, 0.9]
    # 3.5 and 6.0 lie under the top level measured (6.1 * 1.02): the next is 8.0
    assert coarse_next(fractions, 10.0, 6.1) == 8.0 and fractions == [0.9]
    assert coarse_next(fractions, 10.0, 9.5) is None and fractions == []
    assert search_level(4.0, None) == 8.0 and search_level(4.0, 10.0) == pytest.approx(4.8)
    limits = {"mean": THRESHOLD, "p999": 0.5}
    at9 = _level(9.0, _mm1)  # mean 10 ms: over one threshold, not both
    assert past_knee(at9, limits, any_over) and not past_knee(at9, limits, all_over)
    assert past_knee(_level(2.0, _mm1, generator_behind=True, generator_cpu=0.99), limits, all_over)


def test_a_statistic_that_rose_once_by_chance_does_not_stop_the_step_down():
    """The step down stopped at the first halving that did not lower the statistic: a
    p99 of few requests that rose once by chance (15 ms at 4, 16 ms at 2) stopped a
    search the next halving would have brought under the threshold (4 ms at 1), and the
    MAT was left a bound. Two halvings that bring nothing stop it."""
    noisy = {4.0: 0.015, 2.0: 0.016, 1.0: 0.004}
    policy = Refinement(rel_width=0.5, down=0.5)
    curve, steps = _search([4.0], policy, latency=lambda x: noisy.get(x, 0.004), budget=6)
    assert [s.level for s in steps][:2] == [2.0, 1.0], steps
    assert mat(curve, "mean", THRESHOLD).status == "ok"


def test_a_statistic_no_halving_lowers_stops_the_step_down_after_two():
    """A threshold under what the server takes unloaded: two halvings, then no more."""
    policy = Refinement(rel_width=0.5, down=0.5)
    _, steps = _search([4.0], policy, latency=lambda x: 0.010, budget=20)
    assert [s.level for s in steps] == [2.0, 1.0], steps
