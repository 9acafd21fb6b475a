"""The automatic sweep's steps: warm run, probe, coarse pass, search upward, refinement.

The levels are the knee search's (:mod:`shrink.knee`); this module measures them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from shrink.autolevels._clock import Clock
from shrink.autolevels._curve import curve_of
from shrink.autolevels._level import behind, merge, run_level, surely_over
from shrink.autolevels._plan import AutoPlan, Companion, Pairing, SweepScaling, loop_span
from shrink.errors import MeasurementError, ParameterError, ShrinkError
from shrink.knee import (
    GROWTH_NEAR,
    SHRINK_DOWN,
    Refinement,
    Step,
    all_over,
    any_over,
    capacity,
    coarse_next,
    generator_saturated,
    next_step,
    past_knee,
    search_level,
)
from shrink.loadcurve import Level, LoadCurve
from shrink.measure import (
    SweepInterrupted,
    default_loop_window,
    loop_window,
    rate_factor_for,
    skip_start,
    slow_motion,
    trace_span,
)
from shrink.measure.search import level_search
from shrink.target import Target
from shrink.trace import Trace

Progress = Callable[[str, int, int], None]


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
    pairing: Pairing = Pairing(),
    scaling: SweepScaling = SweepScaling(),
) -> LoadCurve:
    """Sweep ``trace`` on ``target`` with levels chosen around the thresholds' crossings.

    ``pairing`` (:class:`Pairing`): with a ``companion``, every repetition also runs on
    the companion's target (see :class:`Companion`); its levels land in
    ``companion.levels``. The companion only follows: its results choose no level and
    re-run no repetition of the swept side, so the swept curve is the same with or
    without it.

    ``start``: levels already measured on ``target`` (a companion's, for a
    validation): the sweep goes on from them with its own search upward and
    refinement until its own crossings are bracketed, without a probe or coarse pass.

    ``scaling``: how the swept side's runs depart from the plan (time scaling, matched
    load), recorded in the curve's meta.
    """
    companion, start = pairing.companion, pairing.start
    plan = plan or AutoPlan()
    if companion is not None and knob != "rate_factor":
        raise MeasurementError(
            f"a companion (paired full-scale) run needs the rate_factor knob, not {knob!r}: "
            "only equal rate factors put a sample and the whole trace at the same load"
        )
    # The curves record the trace as given, not the window of it each level replays:
    # validate tells traces apart by it, and every fresh full run read as another trace.
    trace = trace.with_meta(given_fingerprint=trace.fingerprint())
    if companion is not None:
        given = companion.trace.fingerprint()
        companion = replace(companion, trace=companion.trace.with_meta(given_fingerprint=given))
    span = loop_span(companion.trace if companion is not None else trace, plan)
    if span > 0:
        # Every level replays one window of the trace after the skip, looped: a
        # controlled load. The companion loops the same window of the whole trace.
        trace = _sample_window(trace, plan.skip, span, alpha)
        if companion is not None:
            companion = replace(companion, trace=loop_window(companion.trace, plan.skip, span))
    elif plan.skip > 0:
        # No window to loop: was it because every session starts inside the skip?
        starts_skipped = len(trace) > 0 and default_loop_window(trace, plan.skip, 1) == 0
        trace = skip_start(trace, plan.skip)
        if companion is not None:
            # The same span of the whole trace (the levels dict stays shared).
            companion = replace(companion, trace=skip_start(companion.trace, plan.skip))
    # The rate before slow motion: sessions start as often, and send as many requests a
    # second once the run is in its steady state; only each session lasts longer.
    base_rate = trace.info().request_rate
    if scaling.scaled_time != 1.0:
        trace = slow_motion(trace, scaling.scaled_time)
    sweep = _Sweep(target, trace, thresholds, knob, plan, seed, alpha, progress, companion, scaling)
    sweep.starts_skipped = span <= 0 and plan.skip > 0 and starts_skipped
    sweep.between = pairing.between
    if (keep := pairing.keep) is not None:
        sweep.keep = lambda levels: keep(
            curve_of(levels, knob, target, trace, alpha, base_rate=base_rate, plan=plan)
        )
    if start:
        sweep.levels.update({float(round(k, 6)): v for k, v in start.items()})
    try:
        sweep.measure()
    except KeyboardInterrupt as exc:
        # Keep what was measured: the levels so far, as a curve marked partial.
        partial = curve_of(sweep.levels, knob, target, trace, alpha, base_rate=base_rate, plan=plan)
        partial.meta["interrupted"] = True
        raise SweepInterrupted(partial) from exc
    except ShrinkError as exc:
        # A dead server or a full disk stops the sweep; the finished levels stay.
        if sweep.levels:
            exc.curve = curve_of(
                sweep.levels, knob, target, trace, alpha, base_rate=base_rate, plan=plan
            )
            exc.curve.meta["stopped"] = str(exc)
        raise
    if progress is not None:
        progress("done", plan.max_levels, plan.max_levels)
    curve = curve_of(sweep.levels, knob, target, trace, alpha, base_rate=base_rate, plan=plan)
    if sweep.too_short:
        curve.meta["levels_skipped_trace_too_short"] = sweep.too_short
    if sweep.out_of_time:
        curve.meta["levels_skipped_time_budget"] = sweep.out_of_time
    curve.sweep = curve.sweep.with_(
        **scaling.meta(), **({"skip": plan.skip} if plan.skip > 0 else {})
    )
    if sweep.retried:
        curve.meta["levels_rerun_generator_behind"] = sweep.retried
    return curve


@dataclass(eq=False)
class _Sweep:
    """One sweep's state and its steps: probe, coarse pass, search upward, refinement.

    ``budget`` counts the levels still allowed (``plan.max_levels``), ``clock``
    the seconds (``plan.budget_s``).
    """

    target: Target
    trace: Trace
    thresholds: Mapping[str, float]
    knob: str
    plan: AutoPlan
    seed: int
    alpha: float | None
    progress: Progress | None
    companion: Companion | None
    scaling: SweepScaling
    levels: dict[float, Level] = field(default_factory=dict, init=False)
    too_short: list[float] = field(default_factory=list, init=False)
    out_of_time: list[float] = field(default_factory=list, init=False)
    retried: list[float] = field(default_factory=list, init=False)
    starts_skipped: bool = field(default=False, init=False)
    step: int = field(default=0, init=False)
    between: Callable[[Level], None] | None = field(default=None, init=False)
    keep: Callable[[dict[float, Level]], None] | None = field(default=None, init=False)
    budget: int = field(init=False)
    clock: Clock = field(init=False)

    def __post_init__(self) -> None:
        self.budget = self.plan.max_levels
        self.clock = Clock(self.plan, self.companion is not None, self.scaling.scaled_time)

    def measure(self) -> None:
        if self.levels:  # going on from measured levels (a validation's own search)
            last = self.levels[last_level(self.levels)]
            self._search(last, None)
            self._refine()
            return
        plan, knob = self.plan, self.knob
        unit = {"rate_factor": 1.0, "users": float(self.trace.meta.get("users") or 1.0)}
        probe = plan.probe_level if plan.probe_level is not None else 0.1 * unit.get(knob, 1.0)
        # The probe runs whatever else is left out, but only the repetitions that end
        # within the budget: a time budget bounds the wall time, the first level too.
        reps = self.clock.reps_that_fit(plan.probe_reps or plan.reps)
        if reps == 0:
            raise ParameterError(
                f"a time budget of {self.clock.budget:g} s cannot hold one repetition "
                f"({self.clock.per_rep:g} s of warm-up and window); allow more time or "
                "shorten the warm-up and window"
            )
        if plan.warm_run and self.clock.fits(reps + 1):
            self._warm(probe)
            # The warm run told what a run costs here (start-up, drain, writing the log
            # beside the warm-up and window): the probe's repetitions are counted again.
            # Counted before it, a 30 s budget on a time-scaled share ran a warm run and
            # two repetitions of 10 s planned, 11.7 s each: 35 s.
            reps = self.clock.reps_that_fit(reps)
            if reps == 0:
                raise ParameterError(
                    f"a time budget of {self.clock.budget:g} s held the warm-up run, but "
                    f"not one repetition at what that run took ({self.clock.per_rep:.1f} s); "
                    "allow more time or shorten the warm-up and window"
                )
        first = self.run(probe, "probe", replace(plan, reps=reps), True)
        self.budget -= 1
        if first is None:
            raise MeasurementError(self._too_short_for_probe(probe))
        est = self._capacity(first, probe)
        last: Level | None = first
        if est is not None:
            last, est = self._coarse(first, est)
        self._search(last, est)
        self._refine()

    def _too_short_for_probe(self, probe: float) -> str:
        """Why the probe level measured nothing: the trace it replays (no window looped)
        lasts less than the warm-up and the shortest window at the probe's rate.

        It said "the trace spans 3.0 s" of a session log spanning 10^9 s: the span was
        of what was left after the skip, and the skip had taken every session start."""
        plan, trace = self.plan, self.trace
        span = trace_span(trace)
        factor = rate_factor_for(trace, probe, self.knob) * self.scaling.share_load
        n = len(trace)
        what = (
            f"{n:,} request{'s' if n != 1 else ''} spanning {span:.3g} s"
            f", which last {span / factor:.3g} s at that rate"
        )
        # (what the scaled side's run needed: its warm-up and window k times the plan's)
        k = self.scaling.scaled_time
        warm, least = k * plan.warmup, k * min(plan.min_duration, plan.duration)
        need = f"{warm:g} s of warm-up and a {least:g} s window" if warm > 0 else ""
        need = need or f"a {least:g} s window"
        if k != 1.0:
            need += f" (the plan's, {k:g} times as long on the share)"
        head = f"the probe level ({self.knob} {probe:g}) measured nothing"
        if self.starts_skipped:
            return (
                f"{head}: every session of the trace starts in the first {plan.skip:g} s, "
                f"which the sweep skips (--skip; by default a tenth of the trace's span, at "
                f"most a minute), so no window of whole sessions is left to loop. What is "
                f"left is the rest of sessions begun before it: {what}, short of {need}; "
                "skip less of the trace's start (--skip 0s)"
            )
        return f"{head}: the trace it replays holds {what}, short of {need}; use a longer trace"

    def _unit_rate(self) -> float | None:
        """Requests a second one unit of the level offers the swept side (at share_load
        times the companion's rate factor)."""
        unit = _unit_rate(self.trace, self.knob)
        return None if unit is None else unit * self.scaling.share_load

    def _capacity(self, level: Level, knob_value: float) -> float | None:
        """The swept side's capacity estimate at ``level`` (None without one)."""
        return capacity(level, knob_value, self._unit_rate())

    def _warm(self, probe: float) -> None:
        """A discarded run first: a server that just started has cold caches, PHP
        processes that have not run a page yet, and no open connections."""
        if self.progress is not None:
            self.progress(f"warm-up run: {self.knob} {probe:g}", 0, self.plan.max_levels)
        self.clock.timed(
            1,
            run_level,
            self.target,
            self.trace,
            probe,
            self.knob,
            replace(self.plan, reps=1),
            self.seed + 999_983,
            self.companion,
            scaling=self.scaling,
        )

    def _coarse(self, last: Level, est: float) -> tuple[Level, float]:
        """Levels at fractions of the estimated capacity.

        Re-estimates from each new level, since utilization grows faster than
        linearly near the knee on real servers (caches, PHP pools) and a single
        light probe misjudges it. When the time budget cannot hold every fraction left,
        the lowest go first: the crossings lie at or above the knee, and a light probe
        reads the capacity low (a server's cost per request falls with its load), so
        a pass that ran out of time below the knee would leave every MAT a bound.
        """
        fractions = list(self.plan.coarse)

        def choose() -> float | None:
            room = int(min(len(fractions), self.clock.levels_that_fit(self.plan.reps)))
            del fractions[: len(fractions) - max(1, room)]
            return coarse_next(fractions, est, last_level(self.levels))

        def measure(lvl: float) -> bool:
            nonlocal last, est
            lv = self.run(lvl, "coarse")
            if lv is None:  # the trace cannot fill a window this fast: no higher level can
                return False
            last = lv
            if past_knee(lv, self.thresholds, all_over):
                return False
            est = self._capacity(lv, lvl) or est
            return True

        self.budget -= level_search(choose, measure, self.budget)
        return last, est

    def _search(self, last: Level | None, est: float | None) -> None:
        """Nothing crossed yet (no utilization, or it misled): step up geometrically."""

        def choose() -> float | None:
            if last is None or past_knee(last, self.thresholds, any_over):
                return None
            return search_level(last_level(self.levels), est)

        def measure(lvl: float) -> bool:
            nonlocal last
            lv = self.run(lvl, "search")
            if lv is not None:
                last = lv
            return lv is not None

        self.budget -= level_search(choose, measure, self.budget)

    def _refine(self) -> None:
        """Split the bracket of each statistic's crossing on the swept curve."""
        # Steps up for a statistic not crossed yet: the search upward stops once any
        # statistic is over, and a p99.9 whose knee lies above the mean's would be left
        # only a bound. Steps down for a statistic already over at the lowest level: a
        # probe past the knee (a simulator's pilot that misjudged the capacity) was
        # the curve's only usable level, and the sweep ended with nothing below it.
        policy = Refinement(rel_width=self.plan.refine_rel_width, up=GROWTH_NEAR, down=SHRINK_DOWN)

        def choose() -> Step | None:
            curve = curve_of(self.levels, self.knob, self.target, self.trace, self.alpha)
            return next_step([(curve, self.thresholds)], policy)

        def measure(step: Step) -> bool:
            return self.run(step.level, step.why) is not None

        self.budget -= level_search(choose, measure, self.budget)

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
            run_level,
            self.target,
            self.trace,
            level,
            self.knob,
            lplan,
            self.seed + 1000 * self.step,
            self.companion,
            scaling=self.scaling,
        )
        self.step += 1
        if got is not None:
            got = self._rerun_behind(got, level, lplan)
        if self.between is not None and got is not None:
            self.clock.timed(0, self.between, got[0])
        if got is None:
            if level not in self.too_short:  # (asked again by a search up from below it)
                self.too_short.append(level)
            return None
        self.levels[level] = got[0]
        if self.companion is not None and got[1] is not None:
            self.companion.levels[level] = got[1]
        if self.keep is not None:
            self.keep(self.levels)
        return got[0]

    def _rerun_behind(
        self, got: tuple[Level, Level | None], level: float, lplan: AutoPlan
    ) -> tuple[Level, Level | None]:
        """One hiccup (a scheduling stall of the generator, a host that stole the CPU)
        should not end a sweep: run one more (paired) repetition until enough kept up,
        and keep every repetition (those that fell behind are left out of the
        statistics). A generator that really cannot keep up stops this at once or
        after ``reps`` more. Only the swept side decides: the companion steers nothing."""
        extra = 0
        while (
            self.plan.retry_behind
            and extra < lplan.reps
            and behind((got[0], None), lplan.reps)
            and not surely_over((got[0], None), lplan.reps, self.thresholds, None)
            and not generator_saturated(got[0])
            and self.clock.fits(1)
        ):
            if not extra:
                self.retried.append(level)
            again = self.clock.timed(
                1,
                run_level,
                self.target,
                self.trace,
                level,
                self.knob,
                replace(lplan, reps=1),
                self.seed + 1000 * self.step + 500,
                self.companion,
                first_rep=lplan.reps + extra,
                scaling=self.scaling,
            )
            extra += 1
            if again is None:
                break
            got = (merge(got[0], again[0]), merge(got[1], again[1]))
        return got


def last_level(levels: dict[float, Level]) -> float:
    """The highest level measured so far (0 before the first)."""
    return max(levels) if levels else 0.0


def _unit_rate(trace: Trace, knob: str) -> float | None:
    """Requests a second at rate factor 1 of a looped window (None for other knobs)."""
    span = float(trace.meta.get("loop_span") or 0.0)
    if knob != "rate_factor" or span <= 0 or len(trace) == 0:
        return None
    return len(trace) / span


def _sample_window(trace: Trace, skip: float, span: float, alpha: float | None) -> Trace:
    """The window of ``trace`` each level replays; a sample none of whose sessions start
    in it is said as the sample's (the window is the whole trace's): it was said as
    "skip less or loop a longer window", and predict has no option to loop longer."""
    try:
        return loop_window(trace, skip, span)
    except ParameterError as exc:
        if alpha is None or alpha >= 1 or len(trace) == 0:
            raise
        sessions = trace.n_sessions
        kept = (
            "1 session, which does not start"
            if sessions == 1
            else (f"{sessions:,} sessions, none of which starts")
        )
        raise ParameterError(
            f"the sample (alpha {alpha:g}) kept {kept} in the window of the trace each "
            f"level replays ([{skip:.2f}, {skip + span:.2f}) s after its start): raise "
            f"alpha, or skip less of the trace's start (--skip, now {skip:.2f} s)"
        ) from exc
