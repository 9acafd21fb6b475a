"""Choosing load levels automatically around the knee.

A quick probe at a light load measures throughput and utilization of the share,
which estimates the capacity (throughput / utilization). Levels are then placed
densely where the thresholds are crossed (60-105% of that capacity), a coarse
pass confirms where each statistic crosses its threshold, and a refinement pass
adds levels inside each crossing's bracket until the MAT interval is narrow or the
level budget is spent. Without a utilization reading, a geometric pass finds the
knee instead.

A *companion* (the full target with the full trace) can be measured alongside:
every repetition of every level then runs on both, back to back, in alternating
order (scaled first, then full first, ...). Two runs minutes apart on a machine
whose speed drifts (a VM whose CPU speed moves by 1.8x within a minute) differ by
that drift; two runs seconds apart, in counterbalanced order, see nearly the same
machine. Refinement then splits the brackets of both curves' crossings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from shrink.errors import MeasurementError
from shrink.loadcurve import GENERATOR_SATURATED, Level, LevelStats, LoadCurve
from shrink.mat import mat
from shrink.measure import (
    LOOP_SESSIONS,
    LoopedRun,
    SweepInterrupted,
    default_loop_window,
    level_stats,
    loop_window,
    looped_run,
    rate_factor_for,
    skip_start,
    stop_if_interrupted,
    trace_span,
    window_for,
)
from shrink.share import Share
from shrink.target import Target
from shrink.trace import Trace

__all__ = ["AutoPlan", "Companion", "SweepInterrupted", "auto_sweep", "companion_curve"]

Progress = Callable[[str, int, int], None]
_T = TypeVar("_T")


@dataclass(frozen=True)
class AutoPlan:
    """How an automatic sweep spends its time."""

    warmup: float = 2.0
    duration: float = 8.0
    reps: int = 2
    probe_level: float | None = None  # knob value of the probe; default: 10% of the trace's rate
    # Repetitions of the probe: it only estimates the capacity and gives the curve its
    # light-load end, so one is often enough (None: ``reps``).
    probe_reps: int | None = None
    coarse: tuple[float, ...] = (0.35, 0.6, 0.8, 0.9, 1.0, 1.1, 1.25)
    warm_run: bool = True  # a discarded run before the probe (cold caches, idle pools)
    # When fewer than two of a level's repetitions (on either side of a pair) kept to
    # the schedule, add one (paired) repetition at a time, up to ``reps`` more.
    retry_behind: bool = True
    max_levels: int = 12
    min_duration: float = 3.0  # shortest measurement window a level may have
    refine_rel_width: float = 0.05  # stop refining when the bracket is this narrow (relative)
    util_target: float = 0.8  # a level near this utilization is kept for the CDF figures
    # The swept (scaled) target's warm-up and window are this many times the plan's;
    # the companion keeps the plan's. A server at alpha of the speed moves through its
    # queueing states 1/alpha slower and sees alpha of the requests a second, so SHRiNK
    # needs 1/alpha longer runs on a CPU-time share for the same state and the same
    # number of requests (set by ``shrink.predict``).
    scaled_time: float = 1.0
    # Trace seconds left out at the start of every run (``shrink.measure.skip_start``):
    # a trace's first seconds (sessions starting together) are not its steady mix.
    skip: float = 0.0
    # Seconds of runs (both sides of a pair, warm-up included) the sweep may spend; no
    # new level starts that would not end within it (None: no limit but ``max_levels``).
    budget_s: float | None = None
    # Trace seconds (after the skip) of the one window every level loops, so that a
    # level is a controlled load: the same content at ``level`` times its rate
    # (``shrink.measure.loop_window``). None: the seconds that hold LOOP_SESSIONS
    # sessions of the whole trace, at most the rest of it; 0: no loop, each level
    # replays the trace from its start (the older design).
    loop_window: float | None = None


@dataclass
class Companion:
    """The full target and trace, measured rep by rep alongside a scaled sweep.

    Only the ``rate_factor`` knob pairs levels exactly: a session sample of
    alpha at rate factor f is at the same normalized load as the whole trace at f.
    ``thresholds`` are the full target's (unscaled); ``levels`` fills as the
    sweep runs.
    """

    target: Target
    trace: Trace
    thresholds: Mapping[str, float]
    levels: dict[float, Level] = field(default_factory=dict)


def _side(
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


def _run_level(
    target: Target,
    trace: Trace,
    level: float,
    knob: str,
    plan: AutoPlan,
    seed: int,
    companion: Companion | None = None,
    first_rep: int = 0,
) -> tuple[Level, Level | None] | None:
    """Run ``plan.reps`` repetitions (numbered from ``first_rep``) of one level."""
    factor = rate_factor_for(trace, level, knob)
    k = plan.scaled_time
    pair = None
    if companion is not None:
        c_target, c_trace = companion.target, companion.trace
        pair = _side(c_target, c_trace, factor, plan.warmup, plan.duration, 1.0, plan)
    # Time scaling stays exact: the scaled side measures k times its twin's copies.
    copies = None if pair is None else round(k * pair[1].copies)
    got = [_side(target, trace, factor, k * plan.warmup, k * plan.duration, k, plan, copies)]
    if companion is not None:
        got.append(pair)
    sides = [side for side in got if side is not None]
    if len(sides) < len(got):
        return None
    if len(sides) == 2 and "loop_span" not in trace.meta:
        # Without a loop a short trace shrinks a window: both sides alike, time-scaled.
        d = min(sides[0][1].duration / k, sides[1][1].duration)
        sides = [(t, replace(r, duration=d * f)) for (t, r), f in zip(sides, (k, 1.0), strict=True)]
    reps, c_reps = [], []
    for r in range(first_rep, first_rep + plan.reps):
        runs = [(sides[0], reps)]
        if companion is not None:
            # Counterbalanced order: whatever the first run leaves behind (warm caches,
            # a slow minute starting) falls on each side equally often.
            runs = [runs[0], (sides[1], c_reps)] if r % 2 == 0 else [(sides[1], c_reps), runs[0]]
        for (tgt, run), out in runs:
            res = tgt.run(
                run.trace,
                rate_factor=factor,
                warmup=run.warmup,
                duration=run.duration,
                seed=seed + r,
            )
            stop_if_interrupted(res)
            out.append(level_stats(res))
    return Level(float(level), reps), (Level(float(level), c_reps) if c_reps else None)


def auto_sweep(
    target: Target,
    trace: Trace,
    thresholds: Mapping[str, float],
    *,
    knob: str = "rate_factor",
    plan: AutoPlan | None = None,
    seed: int = 0,
    alpha: float | None = None,
    progress: Progress | None = None,
    companion: Companion | None = None,
) -> LoadCurve:
    """Sweep ``trace`` on ``target`` with levels chosen around the thresholds' crossings.

    With a ``companion``, every repetition also runs on the companion's target
    (see :class:`Companion`); its levels land in ``companion.levels``.
    """
    plan = plan or AutoPlan()
    if companion is not None and knob != "rate_factor":
        raise MeasurementError(
            f"a companion (paired full-scale) run needs the rate_factor knob, not {knob!r}: "
            "only equal rate factors put a sample and the whole trace at the same load"
        )
    span = _loop_span(companion.trace if companion is not None else trace, plan)
    if span > 0:
        # Every level replays one window of the trace after the skip, looped: a
        # controlled load. The companion loops the same window of the whole trace.
        trace = loop_window(trace, plan.skip, span)
        if companion is not None:
            companion = replace(companion, trace=loop_window(companion.trace, plan.skip, span))
    elif plan.skip > 0:
        trace = skip_start(trace, plan.skip)
        if companion is not None:
            # The same span of the whole trace (the levels dict stays shared).
            companion = replace(companion, trace=skip_start(companion.trace, plan.skip))
    sweep = _Sweep(target, trace, thresholds, knob, plan, seed, alpha, progress, companion)
    base_rate = trace.info().request_rate
    try:
        sweep.measure()
    except KeyboardInterrupt as exc:
        # Keep what was measured: the levels so far, as a curve marked partial.
        partial = _curve(sweep.levels, knob, target, trace, alpha, base_rate=base_rate, plan=plan)
        partial.meta["interrupted"] = True
        raise SweepInterrupted(partial) from exc
    if progress is not None:
        progress("done", plan.max_levels, plan.max_levels)
    curve = _curve(sweep.levels, knob, target, trace, alpha, base_rate=base_rate, plan=plan)
    if sweep.too_short:
        curve.meta["levels_skipped_trace_too_short"] = sweep.too_short
    if sweep.out_of_time:
        curve.meta["levels_skipped_time_budget"] = sweep.out_of_time
    if plan.scaled_time != 1.0:
        curve.meta["scaled_time"] = plan.scaled_time
    if plan.skip > 0:
        curve.meta["skip"] = plan.skip
    if sweep.retried:
        curve.meta["levels_rerun_generator_behind"] = sweep.retried
    return curve


class _Sweep:
    """One sweep's state and its steps: probe, coarse pass, search upward, refinement.

    ``budget`` counts the levels still allowed (``plan.max_levels``), ``clock``
    the seconds (``plan.budget_s``).
    """

    def __init__(
        self,
        target: Target,
        trace: Trace,
        thresholds: Mapping[str, float],
        knob: str,
        plan: AutoPlan,
        seed: int,
        alpha: float | None,
        progress: Progress | None,
        companion: Companion | None,
    ) -> None:
        self.alpha = alpha
        self.target = target
        self.trace = trace
        self.thresholds = thresholds
        self.knob = knob
        self.plan = plan
        self.seed = seed
        self.progress = progress
        self.companion = companion
        self.levels: dict[float, Level] = {}
        self.too_short: list[float] = []
        self.out_of_time: list[float] = []
        self.retried: list[float] = []
        self.budget = plan.max_levels
        self.step = 0
        self.clock = _Clock(plan, companion is not None)

    def measure(self) -> None:
        plan, knob = self.plan, self.knob
        unit = {"rate_factor": 1.0, "users": float(self.trace.meta.get("users") or 1.0)}
        probe = plan.probe_level if plan.probe_level is not None else 0.1 * unit.get(knob, 1.0)
        if plan.warm_run:
            self._warm(probe)
        first = self.run(probe, "probe", replace(plan, reps=plan.probe_reps or plan.reps), True)
        self.budget -= 1
        if first is None:
            raise MeasurementError(
                f"the trace spans {trace_span(self.trace):.1f} s: too short for even the probe "
                f"level ({knob} {probe:g}) with {plan.warmup:g} s warm-up and a "
                f"{plan.min_duration:g} s window; use a longer trace or a lower probe level"
            )
        est = _capacity(first, probe, _unit_rate(self.trace, knob))
        last: Level | None = first
        if est is not None:
            last, est = self._coarse(first, est)
        self._search(last, est)
        self._refine()

    def _warm(self, probe: float) -> None:
        """A discarded run first: a server that just started has cold caches, PHP
        processes that have not run a page yet, and no open connections."""
        if self.progress is not None:
            self.progress(f"warm-up run: {self.knob} {probe:g}", 0, self.plan.max_levels)
        self.clock.timed(
            1,
            _run_level,
            self.target,
            self.trace,
            probe,
            self.knob,
            replace(self.plan, reps=1),
            self.seed + 999_983,
            self.companion,
        )

    def _coarse(self, last: Level, est: float) -> tuple[Level, float]:
        """Levels at fractions of the estimated capacity.

        Re-estimates from each new level, since utilization grows faster than
        linearly near the knee on real servers (caches, PHP pools) and a single
        light probe misjudges it.
        """
        fractions = list(self.plan.coarse)
        while self.budget > 0 and fractions:
            lvl = est * fractions.pop(0)
            if lvl <= last_level(self.levels) * 1.02:
                continue
            lv = self.run(lvl, "coarse")
            self.budget -= 1
            if lv is None:  # the trace cannot fill a window this fast: no higher level can
                break
            last = lv
            if _generator_saturated(lv) or _on_both(
                _all_over, lv, self.thresholds, self.companion
            ):
                break
            est = _capacity(lv, lvl, _unit_rate(self.trace, self.knob)) or est
        return last, est

    def _search(self, last: Level | None, est: float | None) -> None:
        """Nothing crossed yet (no utilization, or it misled): step up geometrically.

        With a companion, both curves must cross: the prediction may be off either way.
        """
        growth = 2.0 if est is None else 1.2
        while (
            self.budget > 0
            and last is not None
            and not _generator_saturated(last)
            and not _on_both(_any_over, last, self.thresholds, self.companion)
        ):
            lv = self.run(last_level(self.levels) * growth, "search")
            self.budget -= 1
            if lv is None:
                break
            last = lv

    def _refine(self) -> None:
        """Split the bracket of each statistic's crossing."""
        companion, plan = self.companion, self.plan
        while self.budget > 0:
            curve = _curve(self.levels, self.knob, self.target, self.trace, self.alpha)
            gaps = _gaps(curve, self.thresholds, plan)
            above = _above(self.levels, curve, self.thresholds)
            if companion is not None:
                c_curve = _curve(
                    companion.levels, self.knob, companion.target, companion.trace, 1.0
                )
                gaps += _gaps(c_curve, companion.thresholds, plan)
                above = above or _above(companion.levels, c_curve, companion.thresholds)
            if gaps:
                gaps.sort(reverse=True)
                nxt, what = gaps[0][1], "refine"
            elif above is not None:
                # A threshold is not crossed among the usable levels, though the search went
                # past it (the levels over it were all excluded): measure in between again.
                nxt, what = above, "re-measure"
            else:
                break
            self.budget -= 1
            if self.run(nxt, what) is None:
                break

    def run(
        self, level: float, what: str, lplan: AutoPlan | None = None, must: bool = False
    ) -> Level | None:
        """Measure ``level`` once (a level already measured is not run again)."""
        lplan = lplan or self.plan
        level = float(round(level, 6))
        if level in self.levels:
            return self.levels[level]
        if not must and not self.clock.fits(lplan.reps):
            self.out_of_time.append(level)
            return None
        if self.progress is not None:
            self.progress(f"{what}: {self.knob} {level:g}", self.step, self.plan.max_levels)
        got = self.clock.timed(
            lplan.reps,
            _run_level,
            self.target,
            self.trace,
            level,
            self.knob,
            lplan,
            self.seed + 1000 * self.step,
            self.companion,
        )
        self.step += 1
        if got is not None:
            got = self._rerun_behind(got, level, lplan)
        if got is None:
            self.too_short.append(level)
            return None
        self.levels[level] = got[0]
        if self.companion is not None and got[1] is not None:
            self.companion.levels[level] = got[1]
        return got[0]

    def _rerun_behind(
        self, got: tuple[Level, Level | None], level: float, lplan: AutoPlan
    ) -> tuple[Level, Level | None]:
        """One hiccup (a scheduling stall of the generator, a host that stole the CPU)
        should not end a sweep: run one more (paired) repetition until enough kept up,
        and keep every repetition (those that fell behind are left out of the
        statistics). A generator that really cannot keep up stops this at once or
        after ``reps`` more."""
        extra = 0
        while (
            self.plan.retry_behind
            and extra < lplan.reps
            and _behind(got, lplan.reps)
            and not _surely_over(got, lplan.reps, self.thresholds, self.companion)
            and not _generator_saturated(got[0])
            and self.clock.fits(1)
        ):
            if not extra:
                self.retried.append(level)
            again = self.clock.timed(
                1,
                _run_level,
                self.target,
                self.trace,
                level,
                self.knob,
                replace(lplan, reps=1),
                self.seed + 1000 * self.step + 500,
                self.companion,
                first_rep=lplan.reps + extra,
            )
            extra += 1
            if again is None:
                break
            got = (_merge(got[0], again[0]), _merge(got[1], again[1]))
        return got


def _loop_span(trace: Trace, plan: AutoPlan) -> float:
    """Trace seconds of the loop window: the plan's, else about LOOP_SESSIONS sessions
    of the whole trace (so that a sample of alpha of them keeps its mix)."""
    if plan.loop_window is not None:
        return float(plan.loop_window)
    alpha = float(trace.meta.get("alpha") or 1.0)
    return default_loop_window(trace, plan.skip, round(LOOP_SESSIONS * alpha))


class _Clock:
    """What a sweep has spent of ``plan.budget_s``, and whether the next runs fit.

    Each repetition is charged the larger of its wall time and its planned seconds
    (warm-up and window, on both sides of a pair), so the budget holds on a slow
    machine and is deterministic against targets that take no time (fakes, tests).
    A level is started only if its repetitions, at the mean cost of a repetition so
    far (start-up and teardown included), end within the budget.
    """

    def __init__(self, plan: AutoPlan, paired: bool) -> None:
        self.budget = plan.budget_s
        side = plan.warmup + plan.duration
        self.planned = side * plan.scaled_time + (side if paired else 0.0)
        self.spent = 0.0
        self.reps = 0
        self.per_rep = self.planned

    def fits(self, reps: int) -> bool:
        return self.budget is None or self.spent + reps * self.per_rep <= self.budget

    def timed(self, reps: int, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        t0 = time.monotonic()
        out = fn(*args, **kwargs)
        took = time.monotonic() - t0
        self.spent += took
        if out is not None:  # None: the trace was too short, nothing ran
            self.spent += max(0.0, reps * self.planned - took)
            self.reps += reps
            self.per_rep = max(self.planned, self.spent / self.reps)
        return out


def companion_curve(
    companion: Companion,
    *,
    knob: str = "rate_factor",
    plan: AutoPlan | None = None,
) -> LoadCurve:
    """The companion's levels as a full-scale curve (alpha 1), marked as paired."""
    curve = _curve(
        companion.levels,
        knob,
        companion.target,
        companion.trace,
        1.0,
        base_rate=companion.trace.info().request_rate,
        plan=plan,
    )
    curve.meta["paired"] = True
    return curve


def _gaps(
    curve: LoadCurve, thresholds: Mapping[str, float], plan: AutoPlan
) -> list[tuple[float, float]]:
    """(width, midpoint) of each crossing's bracket still wider than the plan wants."""
    gaps = []
    for stat, limit in thresholds.items():
        try:
            res = mat(curve, stat, limit)
        except MeasurementError:  # no usable level yet: nothing to refine
            continue
        if res.status == "ok" and res.bracket is not None:
            a, b = res.bracket
            if (b - a) / b > plan.refine_rel_width:
                gaps.append((b - a, (a + b) / 2))
    return gaps


def _above(
    levels: dict[float, Level], curve: LoadCurve, thresholds: Mapping[str, float]
) -> float | None:
    """A level to measure when a statistic is not reached but excluded levels lie above.

    Midway between the highest usable level and the lowest excluded one above it,
    or None when nothing needs it.
    """
    usable = [lv.level for lv in curve.usable()]
    if not usable:
        return None
    top = max(usable)
    # excluded: the generator fell behind, or requests failed (an overloaded server)
    excluded = [
        lv for lv in levels if lv > top and (levels[lv].generator_behind or levels[lv].failed)
    ]
    if not excluded or any(_generator_saturated(levels[lv]) for lv in excluded):
        return None
    for stat, limit in thresholds.items():
        try:
            status = mat(curve, stat, limit).status
        except MeasurementError:
            continue
        if status == "not_reached":
            mid = float(round((top + min(excluded)) / 2, 6))
            return None if mid in levels else mid
    return None


def _on_both(
    over: Callable[[Level, Mapping[str, float]], bool],
    level: Level,
    thresholds: Mapping[str, float],
    companion: Companion | None,
) -> bool:
    """``over`` holds for the level and, with a companion, for its twin at that level too."""
    if not over(level, thresholds):
        return False
    twin = None if companion is None else companion.levels.get(level.level)
    return twin is None or companion is None or over(twin, companion.thresholds)


def _behind(got: tuple[Level, Level | None], reps: int) -> bool:
    """Too few repetitions, on either side, kept to their schedule.

    Two kept repetitions make a level usable (with three, one disturbed repetition
    is outvoted by the median); a level run once needs its one.
    """
    need = min(reps, 2)
    return any(lv is not None and len(lv.reps) - lv.reps_behind < need for lv in got)


def _floor(rep: LevelStats, stat: str) -> float | None:
    """The least ``stat`` can have been in one repetition.

    Its value when the generator kept up; its stall bound when the generator only
    stalled (:meth:`Level.stall_bound`); None when nothing bounds it.
    """
    if not rep.generator_behind:
        return rep.get(stat)
    return Level(0.0, [rep]).stall_bound(stat)


def _surely_over(
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
                floor = _floor(rep, stat)
                if floor is None or not floor > limit:
                    return False
    return True


def _merge(a: Level | None, b: Level | None) -> Level | None:
    if a is None or b is None:
        return a or b
    return Level(a.level, [*a.reps, *b.reps])


def last_level(levels: dict[float, Level]) -> float:
    return max(levels) if levels else 0.0


def _capacity(level: Level, knob_value: float, unit_rate: float | None = None) -> float | None:
    """The knob value at which the share would be fully used, from one level's utilization.

    With ``unit_rate`` (requests a second that one unit of the knob offers: a loop
    window's requests over its period), the capacity is the utilization law's X / U
    over it. A light level's short window holds few sessions, and what it offers
    strays from ``knob_value * unit_rate`` by tens of percent; X / U does not.
    """
    u = level.utilization
    if u is None or not 0.005 <= u < 0.97 or level.throughput <= 0:
        return None
    if unit_rate:
        return min(1000.0 * knob_value, level.throughput / u / unit_rate)
    return knob_value * min(1000.0, 1.0 / u)


def _unit_rate(trace: Trace, knob: str) -> float | None:
    """Requests a second at rate factor 1 of a looped window (None for other knobs)."""
    span = float(trace.meta.get("loop_span") or 0.0)
    if knob != "rate_factor" or span <= 0 or len(trace) == 0:
        return None
    return len(trace) / span


def _generator_saturated(level: Level) -> bool:
    """Behind because the generator ran out of CPU: no higher level can be driven.

    A level flagged behind while the generator was mostly idle was a stall (of the
    VM, or the generator's process); it is kept out of the MAT, but the search goes
    on to higher loads.
    """
    if not level.generator_behind:
        return False
    cpus = [r.generator_cpu for r in level.reps if r.generator_cpu is not None]
    return not cpus or max(cpus) >= GENERATOR_SATURATED


def _any_over(level: Level, thresholds: Mapping[str, float]) -> bool:
    return any(level.stat(stat)[0] > limit for stat, limit in thresholds.items())


def _all_over(level: Level, thresholds: Mapping[str, float]) -> bool:
    return all(level.stat(stat)[0] > limit for stat, limit in thresholds.items())


def _curve(
    levels: dict[float, Level],
    knob: str,
    target: Target,
    trace: Trace,
    alpha: float | None,
    *,
    base_rate: float | None = None,
    plan: AutoPlan | None = None,
) -> LoadCurve:
    desc = target.describe()
    mapping = desc.get("mapping", "")
    meta = {
        "target": desc,
        "trace": {k: trace.meta.get(k) for k in ("source", "workload", "users", "sampler", "seed")},
        "auto_levels": True,
    }
    if plan is not None:
        meta.update(warmup=plan.warmup, duration=plan.duration, reps=plan.reps)
    if base_rate is not None:
        meta["trace_rate"] = base_rate
    if "loop_span" in trace.meta:
        meta["loop_window"] = trace.meta["loop_span"]
    return LoadCurve(
        levels=list(levels.values()),
        knob=knob,
        alpha=float(alpha if alpha is not None else trace.meta.get("alpha", 1.0)),
        share=Share.from_dict(desc.get("share")),
        mapping=mapping.get("name", "") if isinstance(mapping, dict) else str(mapping),
        machine=desc.get("machine", {}),
        meta=meta,
    )
