"""The one recommendation rule: which mapping to deploy, or none, and why.

``predict``, ``extrapolate`` (a measured curve re-mapped) and ``whatif`` all call
:func:`recommend`. The mappings rank by their MATs (:func:`shrink.prediction.rank_mappings`);
a mapping is recommended only when the comparison that makes it best is conclusive.
A MAT that is only a bound (the threshold was not crossed within the measured range:
``>= X`` or ``< X``) decides nothing against another MAT it might exceed or fall
short of: then no mapping is recommended. ``1-replica >= 81,084`` against
``2-replica-direct 90,000`` says nothing about which is higher.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shrink.mat import bound_of
from shrink.prediction import MappingPrediction, StatPrediction, rank_mappings

__all__ = ["Recommendation", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    """The rule's verdict, as facts (:func:`shrink.report.recommendation.reason_text`
    puts it in words).

    ``rule``: ``only`` (one mapping), ``equal`` (the best two predicted equal: the
    simplest, 1-replica, is named), ``higher`` (the best MAT is higher, conclusively),
    ``bounds`` (a bound leaves the order open: ``mapping`` is None), ``none`` (no MAT),
    ``zero`` (the best MAT is 0: no load meets the threshold, so none is deployable),
    ``over`` (every MAT is ``< X``: the threshold was not met even at the lowest load
    measured, so none is known to be deployable), ``only_at_least`` (one mapping, and
    its MAT only ``>= X``: the threshold was met at every load measured, so it is the
    one to run, but its MAT was not reached; ``at_least`` is X).
    """

    mapping: str | None
    rule: str
    stat: str
    runner_up: str | None = None
    gain: float | None = None  # best over runner-up, minus 1
    overlap: bool | None = None  # the two intervals overlap: treat them as close
    bounds: tuple[str, ...] = field(default_factory=tuple)  # mappings whose MAT is a bound
    at_least: float | None = None  # the lone mapping's ">= X" (rule only_at_least)


def _range(sp: StatPrediction | None) -> tuple[float, float] | None:
    """Where the MAT may lie: a point, [X, inf) for ``>= X``, [0, X) for ``< X``."""
    if sp is None or sp.mat is None or not math.isfinite(sp.mat):
        return None
    kind = bound_of(sp.status)
    if kind == "lower":
        return sp.mat, math.inf
    if kind == "upper":
        return 0.0, sp.mat
    return sp.mat, sp.mat


def recommend(
    mappings: Mapping[str, MappingPrediction],
    stats: Sequence[str],
    *,
    decimals: int | None = None,
) -> Recommendation:
    """The mapping to deploy by ``stats`` (the first decides), or None when bounds leave
    the order open. ``decimals`` as :func:`shrink.prediction.rank_mappings`."""
    stat = stats[0]
    ranked = rank_mappings(dict(mappings), list(stats), decimals=decimals)
    bounds = tuple(
        n for n in ranked if (sp := mappings[n].stats.get(stat)) is not None and sp.is_bound
    )
    b = mappings[ranked[0]].stats.get(stat)
    # "< X" everywhere: no measured load met the threshold, with one mapping or several.
    statuses = [getattr(mappings[n].stats.get(stat), "status", None) for n in ranked]
    if statuses and all(bound_of(s) == "upper" for s in statuses):
        return Recommendation(None, "over", stat, bounds=bounds)
    if len(ranked) == 1:
        # One mapping, but no load meets the threshold: nothing to deploy, as with several.
        if b is not None and b.mat is not None and b.mat <= 0 and not b.is_bound:
            return Recommendation(None, "zero", stat, bounds=bounds)
        if b is not None and bound_of(b.status) == "lower":
            # The only mapping, but ">= X" is all that is known of its MAT: say so, not
            # only that it is the one to run.
            return Recommendation(ranked[0], "only_at_least", stat, bounds=bounds, at_least=b.mat)
        return Recommendation(ranked[0], "only", stat, bounds=bounds)
    best, runner = ranked[0], ranked[1]
    r = mappings[runner].stats.get(stat)
    rb = _range(b)
    if rb is None:
        return Recommendation(None, "none", stat, bounds=bounds)
    # Conclusive only if the best's lowest possible MAT is at least every other's
    # highest possible one (two points compare as points).
    for other in ranked[1:]:
        ro = _range(mappings[other].stats.get(stat))
        either_bound = b is not None and (b.is_bound or mappings[other].stats[stat].is_bound)
        if ro is not None and either_bound and rb[0] < ro[1]:
            return Recommendation(None, "bounds", stat, runner_up=other, bounds=bounds)
    assert b is not None and b.mat is not None
    if b.mat <= 0 and not b.is_bound:
        return Recommendation(None, "zero", stat, runner_up=runner, bounds=bounds)
    if r is None or not r.mat:
        return Recommendation(best, "higher", stat, runner, None, None, bounds)
    gain = (b.mat - r.mat) / r.mat
    if abs(gain) < 1e-9:
        simplest = "1-replica" if "1-replica" in mappings else best
        return Recommendation(simplest, "equal", stat, runner, 0.0, True, bounds)
    overlap = b.ci[0] is not None and r.ci[1] is not None and b.ci[0] <= r.ci[1]
    return Recommendation(best, "higher", stat, runner, gain, overlap, bounds)
