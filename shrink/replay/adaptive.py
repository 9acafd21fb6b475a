"""Adaptive MAT search: add load levels around the threshold crossing.

Starting from a measured curve, each step places one new level where the
crossing is expected (the MAT mapped back onto the knob by linear interpolation
between the bracketing levels, kept inside the bracket), measures it with the
curve's own warm-up, window and repetitions, and stops when the MAT's interval
is narrower than ``rel_width`` of the MAT or the level budget is spent. A curve
that never crosses grows upward (x1.5), one already over at its lowest level
grows downward (/2). The choice is the knee search's (:mod:`shrink.knee`); this
module measures what it chooses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shrink.errors import MeasurementError, ShrinkError
from shrink.knee import Refinement, Step, level_for, next_step
from shrink.loadcurve import LoadCurve
from shrink.mat import MATResult
from shrink.measure import SweepInterrupted, sweep
from shrink.measure.search import level_search
from shrink.target import Target
from shrink.trace import Trace

__all__ = ["next_level", "other_testbed", "refine"]


def _policy(rel_width: float = 0.1) -> Refinement:
    """The knee search's refinement as this module places levels (module docstring)."""
    return Refinement(
        rel_width=rel_width, width="ci", split="interpolate", up=1.5, down=0.5, remeasure=False
    )


def next_level(curve: LoadCurve, res: MATResult) -> float:
    """The knob value to measure next for ``res`` (see the module docstring)."""
    level = level_for(curve, res, _policy())
    assert level is not None  # this policy always steps outward
    return level


def _testbed(d: dict[str, Any]) -> dict[str, Any]:
    """What a target's record says of the server a level is measured on: its kind,
    server, share (CPUs, fraction, enforcement) and mapping; not its ports or start."""
    share = d.get("share") or {}
    mapping = d.get("mapping") or {}
    return {
        "target": d.get("target"),
        "server": (d.get("server") or {}).get("name"),
        "share CPUs": share.get("cpus"),
        "share fraction": share.get("cpu_fraction"),
        "enforcement": (share.get("enforce") or {}).get("mechanism"),
        "mapping": mapping.get("name"),
        "replicas": len(mapping.get("replicas") or []),
    }


def other_testbed(curve: LoadCurve, target: Target) -> str | None:
    """How ``target`` differs from the testbed ``curve`` was measured on (a server, share
    or mapping of another), in words; None if it does not, or the curve (or a target
    given as a URL) says nothing of its own. A level measured on another testbed is not
    the curve's."""
    was = curve.sweep.target
    if not isinstance(was, dict) or not was.get("server"):
        return None
    before, now = _testbed(was), _testbed(target.describe())
    if now["server"] is None:
        return None  # a URL: what serves it is not known, so not said to differ
    diff = [f"{k} {now[k]!r}, not {before[k]!r}" for k in before if before[k] != now[k]]
    return "; ".join(diff) or None


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
    policy = _policy(rel_width)

    def choose() -> Step | None:
        # None: narrow enough, or the next level was measured already
        return next_step([(curve, {stat: threshold})], policy, cls=cls, strict=True)

    def measure(step: Step) -> bool:
        nonlocal curve
        level = step.level
        if progress is not None:
            progress(f"adaptive: {curve.knob} {level:g}", len(added), max_levels)
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
        # The same curve (its typed sweep too) with the new levels, the level noted.
        curve = replace(
            curve,
            levels=[*curve.levels, *extra.levels],
            meta={**meta, "adaptive": [*meta.get("adaptive", []), level]},
        )
        added.append(level)
        return True

    try:
        level_search(choose, measure, max_levels)
    except SweepInterrupted as stop:
        # The levels added before the signal are measured: they stay, with the curve.
        kept = _with_added(curve, added, stop.curve, "interrupted")
        if kept is None:
            raise
        raise SweepInterrupted(kept) from stop
    except ShrinkError as exc:  # a dead server, a full disk
        exc.curve = _with_added(curve, added, exc.curve, "stopped")
        raise
    if progress is not None:
        progress("done", max_levels, max_levels)
    return curve, added


def _with_added(
    curve: LoadCurve, added: list[float], part: LoadCurve | None, why: str
) -> LoadCurve | None:
    """``curve`` with the levels a stopped refinement finished (those of the stopped
    level's own partial sweep ``part`` too), marked ``why``; None if it added none."""
    extra = list(part.levels) if part is not None else []
    if not added and not extra:
        return None
    return replace(curve, levels=[*curve.levels, *extra], meta={**curve.meta, why: True})
