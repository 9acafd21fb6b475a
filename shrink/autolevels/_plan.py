"""An automatic sweep's plan (how it spends its time) and its companion (the full target,
measured alongside)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from shrink.loadcurve import Level, LoadCurve
from shrink.measure import LOOP_SESSIONS, default_loop_window
from shrink.target import Target
from shrink.trace import Trace


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


@dataclass(frozen=True)
class SweepScaling:
    """How the swept (scaled) side's runs depart from the plan, derived once from the
    plan, the share and its calibrated speed (:func:`sweep_scaling`), never rewritten.

    ``scaled_time``: its warm-up, window and users' think times are this many times the
    plan's; the companion keeps the plan's. A server at alpha of the speed moves through
    its queueing states 1/alpha slower and sees alpha of the requests a second, so
    SHRiNK needs 1/alpha longer runs on a CPU-time share for the same state and the same
    number of requests.

    ``share_load``: its rate factor is the level's times this; the companion's is the
    level's. The share's measured speed over its nominal fraction (``effective /
    alpha``): a share slower than alpha then gets the same normalized load as the full
    target at every level, so one paired level sits as near the share's knee as the
    full target's, and the levels that bracket one crossing bracket the other (with
    equal rate factors a share at 0.19 of a core against a nominal 0.25 saturated at 75%
    of the full target's knee level, and the time budget went to levels above one knee
    and below the other).
    """

    scaled_time: float = 1.0
    share_load: float = 1.0

    def meta(self) -> dict[str, float]:
        """The curve's meta keys for what departs from the plan (none: the plan's runs)."""
        out = {}
        if self.scaled_time != 1.0:
            out["scaled_time"] = self.scaled_time
        if self.share_load != 1.0:
            out["share_load"] = self.share_load
        return out


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


def loop_span(trace: Trace, plan: AutoPlan) -> float:
    """Trace seconds of the loop window: the plan's, else about LOOP_SESSIONS sessions
    of the whole trace (so that a sample of alpha of them keeps its mix)."""
    if plan.loop_window is not None:
        return float(plan.loop_window)
    alpha = float(trace.meta.get("alpha") or 1.0)
    return default_loop_window(trace, plan.skip, round(LOOP_SESSIONS * alpha))


def sweep_scaling(
    speed: float, nominal: float, sample_ratio: float, time_scaling: bool = True
) -> SweepScaling:
    """The swept side's scaling on a CPU-time share of ``nominal`` whose speed is ``speed``.

    The share's load per level is its speed over its nominal fraction, over the
    sample's own share of the loop window's requests relative to alpha
    (``sample_ratio``): at one level the share is then as loaded as the full target
    would be, so one sweep's levels reach its knee. With ``time_scaling`` its time runs
    slow by 1/speed (shrink.measure.slow_motion): a server at speed s moves through its
    queueing states 1/s slower. Both only choose where and how long the share is
    measured; the scaling reads throughputs, not levels.
    """
    load = speed / nominal if nominal > 0 and speed > 0 else 1.0
    # Time scaling by the nominal alpha, rescaled by the measured speed.
    nominal_time = 1.0 / nominal if time_scaling else 1.0
    scaled = nominal_time / load if nominal_time != 1.0 else 1.0
    return SweepScaling(scaled_time=scaled, share_load=load / sample_ratio)


def least_scaled_time(cpu_time: bool, nominal: float, time_scaling: bool = True) -> float:
    """How many times its warm-up and window a share's repetition lasts at least: 1/nominal
    on a CPU-time share in slow motion (a calibrated speed is at most its nominal
    fraction, so :func:`sweep_scaling` slows it no less), else 1."""
    return 1.0 / nominal if cpu_time and time_scaling and nominal > 0 else 1.0


def sample_ratio(trace: Trace, sample: Trace, plan: AutoPlan, alpha: float) -> float:
    """The sample's request rate over ``alpha`` times the trace's in the window the sweep
    loops (after ``plan.skip``); 1 without a window or where either is empty."""
    from shrink.errors import ParameterError
    from shrink.measure import loop_window

    if not plan.loop_window or alpha <= 0 or len(sample) == 0:
        return 1.0
    try:
        mine = len(loop_window(sample, plan.skip, plan.loop_window))
        whole = len(loop_window(trace, plan.skip, plan.loop_window))
    except ParameterError:  # no session starts in the window: nothing to compare
        return 1.0
    return mine / (alpha * whole) if mine and whole else 1.0


@dataclass(frozen=True)
class Pairing:
    """How a sweep is paired with a full-scale one: a ``companion`` that follows its
    levels (the share's sweep, :class:`Companion`), or the levels a companion already
    measured on this sweep's target, to go on from (``start``: the validation's own
    search). Neither: a sweep on its own. ``between``: called with each level of the
    swept side once measured (a calibration's light runs on the full target, beside
    the share's levels); it steers nothing either. ``keep``: called after each of those
    levels with the swept side's curve so far (:class:`shrink.measure.keep.KeepLevels`,
    which writes it)."""

    companion: Companion | None = None
    start: Mapping[float, Level] | None = None
    between: Callable[[Level], None] | None = None
    keep: Callable[[LoadCurve], None] | None = None
