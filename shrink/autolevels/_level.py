"""One level of an automatic sweep: its repetitions, paired with the companion's, and
whether one more is worth its time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from shrink.autolevels._plan import AutoPlan, Companion, SweepScaling
from shrink.loadcurve import Level, LevelStats
from shrink.measure import (
    LoopedRun,
    level_stats,
    looped_run,
    rate_factor_for,
    stop_if_interrupted,
    window_for,
)
from shrink.target import Target
from shrink.trace import Trace


def side_run(
    target: Target,
    trace: Trace,
    factor: float,
    warmup: float,
    duration: float,
    k: float,
    plan: AutoPlan,
    copies: int | None = None,
) -> tuple[Target, LoopedRun] | None:
    """One side's run at ``factor``: its loop window looped (a controlled load), or,
    for a trace without one, the trace from its start in the window it can fill."""
    if "loop_span" in trace.meta:
        return target, looped_run(trace, factor, warmup, duration, copies=copies)
    loops = bool(getattr(target, "loops_trace", False))
    shortest = k * min(plan.min_duration, plan.duration)
    window = window_for(trace, factor, warmup, duration, shortest, loops=loops)
    if window is None:
        return None
    return target, LoopedRun(trace, warmup, window, 0)


def run_level(
    target: Target,
    trace: Trace,
    level: float,
    knob: str,
    plan: AutoPlan,
    seed: int,
    companion: Companion | None = None,
    first_rep: int = 0,
    scaling: SweepScaling = SweepScaling(),
) -> tuple[Level, Level | None] | None:
    """Run ``plan.reps`` repetitions (numbered from ``first_rep``) of one level, the
    swept side's as ``scaling`` says."""
    factor = rate_factor_for(trace, level, knob)
    k = scaling.scaled_time
    scaled = factor * scaling.share_load
    pair = None
    if companion is not None:
        c_target, c_trace = companion.target, companion.trace
        pair = side_run(c_target, c_trace, factor, plan.warmup, plan.duration, 1.0, plan)
    # The scaled side's run is its own, whether a companion runs beside it or not: the
    # companion steers nothing of it.
    mine = side_run(target, trace, scaled, k * plan.warmup, k * plan.duration, k, plan)
    # Each side with the rate factor it runs at: the share's scaled, its twin's the level's.
    got = [(mine, scaled)] + ([(pair, factor)] if companion is not None else [])
    if any(side is None for side, _ in got):
        return None
    sides = [(*side, f) for side, f in got if side is not None]
    if len(sides) == 2 and "loop_span" not in trace.meta:
        # Without a loop a short trace shrinks a window: both sides alike, time-scaled.
        d = min(sides[0][1].duration / k, sides[1][1].duration)
        sides = [
            (t, replace(r, duration=d * f), x) for (t, r, x), f in zip(sides, (k, 1.0), strict=True)
        ]
    reps, c_reps = [], []
    for r in range(first_rep, first_rep + plan.reps):
        runs = [(sides[0], reps)]
        if companion is not None:
            # Counterbalanced order: whatever the first run leaves behind (warm caches,
            # a slow minute starting) falls on each side equally often.
            runs = [runs[0], (sides[1], c_reps)] if r % 2 == 0 else [(sides[1], c_reps), runs[0]]
        for (tgt, run, side_factor), out in runs:
            res = tgt.run(
                run.trace,
                rate_factor=side_factor,
                warmup=run.warmup,
                duration=run.duration,
                seed=seed + r,
            )
            stop_if_interrupted(res)
            out.append(level_stats(res))
    return Level(float(level), reps), (Level(float(level), c_reps) if c_reps else None)


def behind(got: tuple[Level, Level | None], reps: int) -> bool:
    """Too few repetitions, on either side, kept to their schedule.

    Two kept repetitions make a level usable (with three, one disturbed repetition
    is outvoted by the median); a level run once needs its one.
    """
    need = min(reps, 2)
    return any(lv is not None and len(lv.reps) - lv.reps_behind < need for lv in got)


def floor_of(rep: LevelStats, stat: str) -> float | None:
    """The least ``stat`` can have been in one repetition.

    Its value when the generator kept up; its stall bound when the generator only
    stalled (:meth:`Level.stall_bound`); None when nothing bounds it.
    """
    if not rep.generator_behind:
        return rep.get(stat)
    return Level(0.0, [rep]).stall_bound(stat)


def surely_over(
    got: tuple[Level, Level | None],
    reps: int,
    thresholds: Mapping[str, float],
    companion: Companion | None,
) -> bool:
    """Every side short of kept repetitions is over every threshold in every repetition.

    A repetition that stalled counts by its stall bound. Such a level lies above
    each crossing whatever another repetition would show, so measuring it again
    would spend the time budget where it tells nothing new (the refinement
    measures below it instead).
    """
    sides = [(got[0], thresholds)]
    if got[1] is not None and companion is not None:
        sides.append((got[1], companion.thresholds))
    for lv, limits in sides:
        if len(lv.reps) - lv.reps_behind >= min(reps, 2):
            continue
        for stat, limit in limits.items():
            for rep in lv.reps:
                floor = floor_of(rep, stat)
                if floor is None or not floor > limit:
                    return False
    return True


def merge(a: Level | None, b: Level | None) -> Level | None:
    if a is None or b is None:
        return a or b
    return Level(a.level, [*a.reps, *b.reps])
