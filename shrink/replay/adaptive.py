"""Adaptive MAT search: add load levels around the threshold crossing.

Starting from a measured curve, each step places one new level where the
crossing is expected (the MAT mapped back onto the knob by linear interpolation
between the bracketing levels, kept inside the bracket), measures it with the
curve's own warm-up, window and repetitions, and stops when the MAT's interval
is narrower than ``rel_width`` of the MAT or the level budget is spent. A curve
that never crosses grows upward (x1.5), one already over at its lowest level
grows downward (/2).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shrink.errors import MeasurementError
from shrink.loadcurve import LoadCurve
from shrink.mat import MATResult, mat
from shrink.measure import sweep
from shrink.target import Target
from shrink.trace import Trace

__all__ = ["next_level", "refine"]


def next_level(curve: LoadCurve, res: MATResult) -> float:
    """The knob value to measure next for ``res`` (see the module docstring)."""
    usable = curve.usable()
    levels = np.array([lv.level for lv in usable])
    if res.status == "not_reached":
        return float(levels.max() * 1.5)
    if res.status == "below_range":
        return float(levels.min() / 2)
    assert res.bracket is not None
    lo, hi = res.bracket
    lv = {x.level: x for x in usable}
    t_lo, t_hi = lv[lo].throughput, lv[hi].throughput
    if np.isfinite(t_lo) and np.isfinite(t_hi) and t_hi > t_lo:
        f = (res.mat - t_lo) / (t_hi - t_lo)
    else:
        f = 0.5
    f = float(np.clip(f, 0.2, 0.8))  # a new level on a bracket edge would teach nothing
    return lo + f * (hi - lo)


def refine(
    target: Target,
    trace: Trace,
    curve: LoadCurve,
    stat: str,
    threshold: float,
    *,
    cls: str | None = None,
    rel_width: float = 0.1,
    max_levels: int = 4,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[LoadCurve, list[float]]:
    """Measure up to ``max_levels`` more levels; return the extended curve and the levels added."""
    meta = curve.meta
    warmup = float(meta.get("warmup", 2.0))
    duration = float(meta.get("duration", 10.0))
    reps = int(meta.get("reps", 1))
    seed = int(meta.get("seed", 0))
    added: list[float] = []
    for k in range(max_levels):
        res = mat(curve, stat, threshold, cls=cls)
        if res.status == "ok" and res.mat > 0 and (res.ci[1] - res.ci[0]) / res.mat <= rel_width:
            break
        level = next_level(curve, res)
        if any(np.isclose(level, lv.level) for lv in curve.levels):
            break
        if progress is not None:
            progress(f"adaptive: {curve.knob} {level:g}", k, max_levels)
        extra = sweep(
            target,
            trace,
            [level],
            knob=curve.knob,
            reps=reps,
            warmup=warmup,
            duration=duration,
            seed=seed + 7919 * (len(curve.levels) + 1),
            alpha=curve.alpha,
        )
        if not extra.levels:
            raise MeasurementError(f"level {level:g} produced no measurement")
        curve = LoadCurve(
            levels=[*curve.levels, *extra.levels],
            knob=curve.knob,
            alpha=curve.alpha,
            share=curve.share,
            mapping=curve.mapping,
            machine=curve.machine,
            meta={**meta, "adaptive": [*meta.get("adaptive", []), level]},
        )
        added.append(level)
    if progress is not None:
        progress("done", max_levels, max_levels)
    return curve, added
