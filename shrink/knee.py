"""The knee search: where each latency statistic crosses its threshold, and which
load level to measure next to find out.

Every sweep that looks for a MAT decides its levels here: the automatic sweep
(:mod:`shrink.autolevels`), the adaptive refinement of a measured curve
(:mod:`shrink.replay.adaptive`) and the simulator's core-scaling experiment
(:mod:`shrink.sim.scaling`). They run the levels; this module runs nothing and
knows no target, trace or replay engine: it reads levels and thresholds only.

Method:

1. *Capacity.* A level's utilization of the share estimates the knob value at
   which the share would be fully used, knob / utilization (:func:`capacity`).
2. *Coarse pass.* Levels at fixed fractions of that capacity bracket each
   crossing (:func:`coarse_levels`; one at a time, each above the top level so
   far, :func:`coarse_next`); the pass stops once a level is over every threshold
   or the generator ran out of CPU (:func:`past_knee` with :func:`all_over`).
3. *Search outward.* A statistic not crossed yet calls for a level higher by a
   factor, one already over at the lowest usable level for a lower one
   (:class:`Refinement` ``up`` and ``down``). The sweep's search upward steps from
   its top level (:func:`search_level`) until a level is over any threshold
   (:func:`past_knee` with :func:`any_over`); a statistic still not crossed then
   (a p99.9 above the mean's knee) gets its steps outward before any split.
4. *Refinement.* A crossing lies between two measured levels, its bracket
   (:func:`shrink.mat.mat`). The widest bracket still too wide is split, at its
   midpoint or where the crossing is interpolated (:func:`next_step`), until every
   bracket is narrow or the level budget is spent; a level already measured would
   teach nothing, so the search stops there too.
5. *Re-measure.* A statistic not reached among the usable levels, while levels
   above them were excluded (the generator stalled, requests failed), gets a level
   midway between the two (:func:`above`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from shrink.errors import MeasurementError
from shrink.loadcurve import GENERATOR_SATURATED, Level, LoadCurve
from shrink.mat import MATResult, mat

__all__ = [
    "GROWTH_NEAR",
    "SHRINK_DOWN",
    "Refinement",
    "Side",
    "Step",
    "above",
    "all_over",
    "any_over",
    "bracket_levels",
    "capacity",
    "coarse_levels",
    "coarse_next",
    "crossings",
    "generator_saturated",
    "level_for",
    "narrow",
    "next_step",
    "past_knee",
    "search_level",
]

# Levels around the capacity for a statistic the coarse pass left unbracketed
# (fractions of the capacity; the simulator's batch search).
BELOW_RANGE = (0.05, 0.1, 0.2)
NOT_REACHED = (1.0, 1.05, 1.15)


@dataclass(frozen=True)
class Step:
    """The level to measure next, and why: ``refine`` (split a bracket), ``search up``,
    ``search down`` or ``re-measure`` (below excluded levels); ``stat`` is the
    statistic it is for (None for a re-measure)."""

    level: float
    why: str
    stat: str | None = None


@dataclass(frozen=True)
class Refinement:
    """How a crossing's bracket is narrowed.

    ``width``: a bracket is narrow when its width relative to its upper level
    (``bracket``) or the MAT interval relative to the MAT (``ci``) is at most
    ``rel_width``. ``split``: the new level lies at the bracket's ``midpoint`` or
    where the crossing is ``interpolate``-d (kept within 20-80% of the bracket: a
    level at an edge would teach nothing). ``up``/``down``: the factor on the
    highest/lowest usable level for a statistic not crossed yet / crossed already at
    the lowest level (None: no step outward). ``remeasure``: measure below excluded
    levels (:func:`above`).
    """

    rel_width: float = 0.05
    width: Literal["bracket", "ci"] = "bracket"
    split: Literal["midpoint", "interpolate"] = "midpoint"
    up: float | None = None
    down: float | None = None
    remeasure: bool = True


# A curve and its thresholds (the swept target's, or its companion's).
Side = tuple[LoadCurve, Mapping[str, float]]


def capacity(level: Level, knob_value: float, unit_rate: float | None = None) -> float | None:
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


def coarse_levels(cap: float, fractions: Sequence[float]) -> list[float]:
    """The coarse pass's levels: ``fractions`` of the capacity ``cap``."""
    return [cap * x for x in fractions]


def generator_saturated(level: Level) -> bool:
    """Behind because the generator ran out of CPU: no higher level can be driven.

    A level flagged behind while the generator was mostly idle was a stall (of the
    VM, or the generator's process); it is kept out of the MAT, but the search goes
    on to higher loads.
    """
    if not level.generator_behind:
        return False
    cpus = [r.generator_cpu for r in level.reps if r.generator_cpu is not None]
    return not cpus or max(cpus) >= GENERATOR_SATURATED


def any_over(level: Level, thresholds: Mapping[str, float]) -> bool:
    return any(level.stat(stat)[0] > limit for stat, limit in thresholds.items())


def all_over(level: Level, thresholds: Mapping[str, float]) -> bool:
    return all(level.stat(stat)[0] > limit for stat, limit in thresholds.items())


# A coarse level at most this much above the top level measured would teach little.
COARSE_MARGIN = 1.02
# The search upward's step: without a capacity estimate the knee may lie anywhere
# above, with one it is near.
GROWTH_BLIND, GROWTH_NEAR = 2.0, 1.2
# The step down from a lowest level already past a threshold (its crossing lies below):
# halving reaches a level under it within a few levels of the budget.
SHRINK_DOWN = 0.5


def coarse_next(fractions: list[float], cap: float, top: float) -> float | None:
    """The coarse pass's next level: the first of the remaining ``fractions`` of the
    capacity ``cap`` above the top level measured (``fractions`` is consumed)."""
    while fractions:
        level = cap * fractions.pop(0)
        if level > top * COARSE_MARGIN:
            return level
    return None


def search_level(top: float, cap: float | None) -> float:
    """The search upward's next level, above the top level measured."""
    return top * (GROWTH_BLIND if cap is None else GROWTH_NEAR)


def past_knee(
    level: Level,
    thresholds: Mapping[str, float],
    over: Callable[[Level, Mapping[str, float]], bool],
) -> bool:
    """No higher level is needed: the generator ran out of CPU at ``level``, or ``over``
    (:func:`any_over`, :func:`all_over`) holds for it."""
    return generator_saturated(level) or over(level, thresholds)


def crossings(
    curve: LoadCurve,
    thresholds: Mapping[str, float],
    *,
    cls: str | None = None,
    strict: bool = False,
) -> dict[str, MATResult]:
    """Each statistic's MAT on ``curve``; a curve with no usable level yet has none
    (``strict``: it raises :class:`MeasurementError` instead)."""
    out = {}
    for stat, limit in thresholds.items():
        try:
            out[stat] = mat(curve, stat, limit, cls=cls)
        except MeasurementError:
            if strict:
                raise
    return out


def narrow(res: MATResult, policy: Refinement) -> bool:
    """The crossing is located well enough (see :class:`Refinement` ``width``)."""
    if policy.width == "ci":
        return res.mat > 0 and (res.ci[1] - res.ci[0]) / res.mat <= policy.rel_width
    if res.bracket is None:
        return True
    a, b = res.bracket
    return not (b - a) / b > policy.rel_width


def level_for(curve: LoadCurve, res: MATResult, policy: Refinement) -> float | None:
    """The knob value that locates ``res``'s crossing better (None: no step outward)."""
    usable = [lv.level for lv in curve.usable()]
    if res.status == "not_reached":
        if policy.up is None:
            return None
        top = max(usable)
        if _excluded_above(curve, top):
            # A level above was left out (the generator stalled, requests failed): an
            # overloaded one, so the crossing most likely lies below it (:func:`above`).
            return _midway(curve, top)
        return float(top * policy.up)
    if res.status == "below_range":
        return None if policy.down is None else _step_down(curve, res, policy.down)
    assert res.bracket is not None  # an "ok" MAT is bracketed by two levels
    lo, hi = res.bracket
    if policy.split == "midpoint":
        return (lo + hi) / 2
    by_level = {x.level: x for x in curve.usable()}
    t_lo, t_hi = by_level[lo].throughput, by_level[hi].throughput
    f = 0.5
    if np.isfinite(t_lo) and np.isfinite(t_hi) and t_hi > t_lo:
        f = (res.mat - t_lo) / (t_hi - t_lo)
    return lo + float(np.clip(f, 0.2, 0.8)) * (hi - lo)


def _step_down(curve: LoadCurve, res: MATResult, factor: float) -> float | None:
    """The lowest usable level times ``factor``, for a statistic over already there;
    None once stepping down stopped lowering it or the level would be 0. A threshold no
    level meets (one under what the server takes unloaded) spent every level of the
    budget halving, down to levels of one request, and past 22 halvings ran rate factor
    0. It stops when neither of the two lowest levels is under the least of those above
    them: two steps down brought nothing. (One step is not enough: a p99 of a few
    hundred requests that rose once by chance stopped a search one more halving would
    have brought under the threshold.)"""
    usable = curve.usable()
    level = float(round(usable[0].level * factor, 6))
    if level <= 0:
        return None
    if len(usable) > 2:
        stats = [lv.stat(res.stat, res.cls)[0] for lv in usable]
        least_above = float(np.nanmin(stats[2:])) if not np.all(np.isnan(stats[2:])) else np.nan
        if not any(s < least_above for s in stats[:2]):  # (NaN too)
            return None
    return level


def next_step(
    sides: Sequence[Side],
    policy: Refinement,
    *,
    cls: str | None = None,
    strict: bool = False,
) -> Step | None:
    """The next level for the curves in ``sides`` (each with its own thresholds), or
    None when every crossing is narrow (or nothing more can be learnt).

    A step outward for a statistic not bracketed goes first: its bracket is
    unbounded, the widest of all, and without it that MAT is only a bound (with a
    level left out above, the step goes midway to it, :func:`level_for`). Then the
    widest bracket still too wide (the largest gap in what is known of the curves),
    then a level below excluded ones.
    """
    wide: list[tuple[float, float, str]] = []
    outward: list[Step] = []
    for curve, thresholds in sides:
        for stat, res in crossings(curve, thresholds, cls=cls, strict=strict).items():
            if res.status == "ok" and res.bracket is not None:
                if not narrow(res, policy):
                    level = level_for(curve, res, policy)
                    assert level is not None
                    wide.append((res.bracket[1] - res.bracket[0], level, stat))
            elif res.status != "ok":
                level = level_for(curve, res, policy)
                if level is not None:
                    why = "search up" if res.status == "not_reached" else "search down"
                    outward.append(Step(level, why, stat))
    step = None
    if outward:
        step = outward[0]
    elif wide:
        _, level, stat = max(wide, key=lambda g: (g[0], g[1]))
        step = Step(level, "refine", stat)
    elif policy.remeasure:
        step = next(
            (Step(lv, "re-measure") for c, t in sides if (lv := above(c, t)) is not None), None
        )
    measured = [lv.level for curve, _ in sides for lv in curve.levels]
    if step is None or any(np.isclose(step.level, x) for x in measured):
        return None
    return step


def above(curve: LoadCurve, thresholds: Mapping[str, float]) -> float | None:
    """A level to measure when a statistic is not reached but excluded levels lie above.

    Midway between the highest usable level and the lowest excluded one above it,
    or None when nothing needs it.
    """
    usable = [lv.level for lv in curve.usable()]
    if not usable:
        return None
    top = max(usable)
    if any(res.status == "not_reached" for res in crossings(curve, thresholds).values()):
        mid = _midway(curve, top)
        return None if mid is None or any(lv.level == mid for lv in curve.levels) else mid
    return None


def _midway(curve: LoadCurve, top: float) -> float | None:
    """Midway between knob value ``top`` and the lowest excluded level above it; None
    when none lies above, or the generator ran out of CPU at one (no higher level can
    be measured)."""
    excluded = _excluded_above(curve, top)
    if not excluded or any(generator_saturated(lv) for lv in excluded):
        return None
    return float(round((top + min(lv.level for lv in excluded)) / 2, 6))


def _excluded_above(curve: LoadCurve, top: float) -> list[Level]:
    """The levels above ``top`` left out of the MATs: the generator fell behind, or
    requests failed (an overloaded server)."""
    return [lv for lv in curve.levels if lv.level > top and (lv.generator_behind or lv.failed)]


def bracket_levels(res: MATResult, cap: float, n: int) -> list[float]:
    """A batch of levels for one statistic: ``n`` evenly across its bracket, or a few
    about the capacity ``cap`` when the coarse pass left it unbracketed."""
    if res.status == "ok" and res.bracket is not None:
        lo, hi = res.bracket
        return [lo + (hi - lo) * (k + 1) / (n + 1) for k in range(n)]
    if res.status == "below_range":
        return [cap * x for x in BELOW_RANGE]
    if res.status == "not_reached":
        return [cap * x for x in NOT_REACHED]
    return []
