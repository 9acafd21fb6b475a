"""The load curves an automatic sweep hands back: the swept target's and its companion's."""

from __future__ import annotations

from shrink.autolevels._plan import AutoPlan, Companion
from shrink.loadcurve import Level, LoadCurve
from shrink.schemas import CurveMeta
from shrink.share import Share
from shrink.target import Target
from shrink.trace import Trace


def companion_curve(
    companion: Companion,
    *,
    knob: str = "rate_factor",
    plan: AutoPlan | None = None,
) -> LoadCurve:
    """The companion's levels as a full-scale curve (alpha 1), marked as paired."""
    curve = curve_of(
        companion.levels,
        knob,
        companion.target,
        companion.trace,
        1.0,
        base_rate=companion.trace.info().request_rate,
        plan=plan,
    )
    curve.sweep = curve.sweep.with_(paired=True)
    return curve


def curve_of(
    levels: dict[float, Level],
    knob: str,
    target: Target,
    trace: Trace,
    alpha: float | None,
    *,
    base_rate: float | None = None,
    plan: AutoPlan | None = None,
) -> LoadCurve:
    """The levels measured so far as a curve of ``target`` (``plan``: with its windows)."""
    desc = target.describe()
    mapping = desc.get("mapping", "")
    meta = {
        "trace": {
            **{k: trace.meta.get(k) for k in ("source", "workload", "users", "sampler", "seed")},
            # the trace as the sweep was given it, not its window (validate tells traces
            # apart by it)
            "fingerprint": trace.meta.get("given_fingerprint") or trace.fingerprint(),
        },
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
        sweep=CurveMeta(target=desc),
        meta=meta,
    )
