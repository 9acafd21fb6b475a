"""A predict run's steps for a CPU-time share's speed: before the sweep and after it.

Before: the light probe (:func:`shrink.speed.measure_speed`), the loaded runs
(:func:`shrink.busyspeed.loaded_speed`), the sweep's share load, and the full
capacity's checks during the sweep (:class:`shrink.busyspeed.FullChecks`). After:
one more check, and the speed at the knee (:func:`shrink.busyspeed.knee_speed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from shrink.autolevels import AutoPlan
from shrink.busyspeed import BusyRuns, FullChecks, knee_speed, loaded_speed
from shrink.errors import ParameterError
from shrink.loadcurve import LoadCurve
from shrink.measure import loop_window
from shrink.share import Share
from shrink.speed import measure_speed
from shrink.target import Target
from shrink.trace import Trace

__all__ = [
    "SAMPLE_RATIO_RANGE",
    "SHARE_LOAD_RANGE",
    "SpeedSettings",
    "sample_ratio",
    "share_load",
    "speed_after",
    "speed_before",
]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class SpeedSettings:
    """A predict run's settings for the speed (``PredictConfig``'s): the seed, the light
    probe's budget in seconds, and whether the busy runs measure it again."""

    seed: int = 0
    budget_s: float = 20.0
    loaded: bool = True


# Bounds on the share's load relative to the full target's (``AutoPlan.share_load``): a
# probe that measured a share several times slower or faster than nominal measured a
# disturbance, and the sweep should not follow it far.
SHARE_LOAD_RANGE = (0.5, 1.5)


def share_load(share: Share) -> float:
    """The share's rate factor over the full target's at one level: its measured speed
    over its nominal fraction, within SHARE_LOAD_RANGE.

    1 when the speed was assumed, or when it lies within two of the probe's own standard
    deviations of nominal: a share that is nominal within the probe's noise would
    otherwise be moved off the full target's levels by that noise (on the simulator,
    whose share is exact, following it left 2 of 24 (statistic, seed) pairs of
    test_uncertainty's coverage check unbracketed).
    """
    sp = share.speed
    if sp is None or sp.method == "nominal" or sp.effective <= 0 or share.cpu_fraction <= 0:
        return 1.0
    ratio = sp.effective / share.cpu_fraction
    if abs(math.log(ratio)) <= 2.0 * sp.sigma:
        return 1.0
    lo, hi = SHARE_LOAD_RANGE
    return float(min(hi, max(lo, ratio)))


# Bounds on the sample's rate over alpha of the trace's: a sample further off than this
# is too small to stand for the window, and the load follows it no further.
SAMPLE_RATIO_RANGE = (0.5, 2.0)


def sample_ratio(trace: Trace, sample: Trace, plan: AutoPlan, alpha: float) -> float:
    """The sample's request rate over ``alpha`` times the trace's, in the window the
    sweep loops (after ``plan.skip``), within SAMPLE_RATIO_RANGE; 1 without a window."""
    if not plan.loop_window or alpha <= 0 or len(sample) == 0:
        return 1.0
    try:
        # Requests a loop period: both windows are equally long.
        mine = len(loop_window(sample, plan.skip, plan.loop_window))
        whole = len(loop_window(trace, plan.skip, plan.loop_window))
    except ParameterError:  # no session starts in the window: nothing to compare
        return 1.0
    if mine == 0 or whole == 0:
        return 1.0
    lo, hi = SAMPLE_RATIO_RANGE
    return float(min(hi, max(lo, mine / (alpha * whole))))


def _busy_runs(plan: AutoPlan, config: SpeedSettings) -> BusyRuns:
    """The busy speed runs: the sweep's loop window and run lengths."""
    return BusyRuns(
        plan.skip, plan.loop_window or 0.0, plan.warmup, plan.duration, plan.scaled_time,
        config.seed + 7,
    )  # fmt: skip


def speed_before(
    target: Target,
    full_target: Target | None,
    trace: Trace,
    sample: Trace,
    share: Share,
    config: SpeedSettings,
    plan: AutoPlan,
    progress: Progress | None,
) -> tuple[Share, AutoPlan, FullChecks | None]:
    """Before the sweep: the CPU-time share's speed per class, measured against the full
    target when there is one (a light probe), then with both sides loaded (see
    :func:`loaded_speed`); the plan's share load; and the full capacity's checks during
    and after the sweep (where a loaded run gave one)."""
    steps = 2 if config.loaded else 1
    if progress is not None:
        progress("speed probe", 0, steps)
    speed = measure_speed(
        target,
        full_target,
        sample,
        nominal=share.cpu_fraction,
        seed=config.seed,
        budget_s=config.budget_s,
    )
    if config.loaded:
        if progress is not None:
            progress("speed probe, loaded", 1, steps)
        speed = loaded_speed(target, full_target, sample, trace, speed, _busy_runs(plan, config))
    if progress is not None:
        progress("speed probe", steps, steps)
    share = share.with_speed(speed)
    load = share_load(share)
    # The sample's own rate in the loop window: a sample of alpha of the sessions holds
    # a few percent more or fewer of the window's requests (0.96 of alpha x them in the
    # demo), and at the same level its share would be that much less loaded than the
    # whole target: its knee a level higher, out of the sweep's reach.
    ratio = sample_ratio(trace, sample, plan, share.cpu_fraction)
    # Time scaling follows the speed the sweep assumes (alpha times the share load), not
    # the nominal alpha: a share at speed s moves through its queueing states 1/s slower,
    # and the sweep runs it in slow motion by that factor, windows and think times alike
    # (shrink.measure.slow_motion). s was 0.12-0.17 of the whole core here, not 0.25.
    scaled = plan.scaled_time / load if plan.scaled_time != 1.0 else 1.0
    plan = replace(plan, share_load=load / ratio, scaled_time=scaled)
    sp = share.speed
    if full_target is None or sp is None or sp.method != "probe+loaded" or not config.loaded:
        return share, plan, None
    return share, plan, FullChecks(full_target, trace, sp, _busy_runs(plan, config))


def speed_after(
    share: Share, measured: LoadCurve, config: SpeedSettings, checks: FullChecks | None
) -> Share:
    """After the sweep: the full capacity checked once more (the median of every busy
    run), and the CPU-time share's speed where its MAT is decided: its saturated
    repetitions."""
    if share.kind != "cpu_time" or not config.loaded or share.speed is None:
        return share
    speed = share.speed
    if checks is not None:
        checks.check()
        speed = checks.apply(speed)
    return share.with_speed(knee_speed(measured, speed))
