"""A fixed-level sweep: each of a list of levels run its repetitions, into a LoadCurve."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shrink import interrupts
from shrink.checks import check_int, check_positive
from shrink.defaults import MAX_REPS
from shrink.errors import ParameterError, ShrinkError
from shrink.loadcurve import Level, LoadCurve
from shrink.measure.interrupt import SweepInterrupted, stop_if_interrupted
from shrink.measure.stats import level_stats
from shrink.measure.window import rate_factor_for, trace_span, window_for
from shrink.schemas import CurveMeta
from shrink.share import Share
from shrink.target import Target
from shrink.trace import Trace

__all__ = ["SweepHooks", "sweep"]


@dataclass(frozen=True)
class SweepHooks:
    """What a sweep tells as it goes: ``progress`` (what runs now, the runs done, the
    runs in all) and ``keep``, called with the curve so far after each level
    (:class:`shrink.measure.keep.KeepLevels`, which writes it)."""

    progress: Callable[[str, int, int], None] | None = None
    keep: Callable[[LoadCurve], None] | None = None


def sweep(
    target: Target,
    trace: Trace,
    levels: Sequence[float],
    *,
    knob: str = "rate_factor",
    reps: int = 1,
    warmup: float = 2.0,
    duration: float = 10.0,
    seed: int = 0,
    alpha: float | None = None,
    hooks: SweepHooks = SweepHooks(),
) -> LoadCurve:
    """Run ``trace`` on ``target`` at each level ``reps`` times; return the LoadCurve.

    Each repetition gets its own seed (``seed + 1000 * level_index + rep``) so runs
    are independent yet the whole sweep is reproducible.
    """
    progress, keep = hooks.progress, hooks.keep
    check_int(reps, "reps", low=1, high=MAX_REPS)
    check_positive(duration, "duration")
    if warmup < 0:
        raise ParameterError(f"warmup == {warmup:g}, must be in [0, inf).")
    if not levels:
        raise ParameterError("levels is empty, must name at least one load level.")
    out: list[Level] = []
    total = len(levels) * reps
    step = 0
    desc: dict[str, Any] = {}
    meta = {"seed": seed, "warmup": warmup, "duration": duration, "reps": reps}
    plan = _LevelRuns(knob, reps, warmup, duration, seed, total, progress)
    # Every level's window before the first run: a level the trace cannot fill is
    # refused now, not after the levels below it have run for minutes.
    windows = _windows(target, trace, levels, plan)
    try:
        for i, level in enumerate(levels):
            step = _sweep_level(target, trace, (i, level, *windows[i]), plan, step, out, desc)
            if keep is not None:
                keep(_sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc}))
    except KeyboardInterrupt as exc:
        # Keep what was measured: the finished levels, as a curve marked partial.
        partial = _sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc})
        partial.meta["interrupted"] = True
        raise SweepInterrupted(partial) from exc
    except ShrinkError as exc:
        # A dead server or a full disk stops the sweep; the finished levels stay.
        if out:
            exc.curve = _sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc})
            exc.curve.meta["stopped"] = str(exc)
        raise
    if progress is not None:
        progress("done", total, total)
    return _sweep_curve(target, trace, out, knob, alpha, {**meta, "last_run": desc})


@dataclass(frozen=True)
class _LevelRuns:
    """How every level of a fixed-level sweep is run: its knob, repetitions, warm-up,
    window and base seed, and the progress callback with the sweep's runs in all."""

    knob: str
    reps: int
    warmup: float
    duration: float
    seed: int
    total: int
    progress: Callable[[str, int, int], None] | None


def _windows(
    target: Target, trace: Trace, levels: Sequence[float], plan: _LevelRuns
) -> list[tuple[float, float]]:
    """Each level's rate factor and measurement window; a ParameterError naming the
    levels the trace cannot fill (sped up that much, it ends before a window would)."""
    loops = bool(getattr(target, "loops_trace", False))
    out: list[tuple[float, float]] = []
    short: list[tuple[float, float]] = []
    for level in levels:
        factor = rate_factor_for(trace, level, plan.knob)
        w = window_for(trace, factor, plan.warmup, plan.duration, min(plan.duration, 3.0),
                       loops=loops)  # fmt: skip
        if w is None:
            short.append((level, factor))
        out.append((factor, w if w is not None else 0.0))
    if short:
        level, factor = short[0]
        more = len(short) - 1
        also = f" (and {more} more)" if more else ""
        raise ParameterError(
            f"{plan.knob} {level:g}{also}: the trace spans {trace_span(trace):.1f} s, which "
            f"sped up {factor:g}x cannot fill {plan.warmup:g} s of warm-up and a measurement "
            "window; use a longer trace or lower levels (nothing was run)"
        )
    return out


def _sweep_level(
    target: Target,
    trace: Trace,
    at: tuple[int, float, float, float],
    plan: _LevelRuns,
    step: int,
    out: list[Level],
    desc: dict[str, Any],
) -> int:
    """Run one level's repetitions, append it to ``out``; returns the runs done so far.
    ``at``: the level's index, the level, its rate factor and its window."""
    reps, warmup = plan.reps, plan.warmup
    i, level, factor, window = at
    knob = plan.knob
    stats = []
    for r in range(reps):
        if plan.progress is not None:
            plan.progress(f"{knob} {level:g} rep {r + 1}/{reps}", step, plan.total)
        res = target.run(
            trace,
            rate_factor=factor,
            warmup=warmup,
            duration=window,
            seed=plan.seed + 1000 * i + r,
        )
        stop_if_interrupted(res, held=False)  # stopped mid-run: not a repetition
        # A stop once the run is over waits until it is counted (and, after the last,
        # the level kept): in the moment after a level's last run it lost the level.
        with interrupts.deferred():
            if res.describe:
                desc.clear()
                desc.update(res.describe)
            stats.append(level_stats(res))
            step += 1
            if len(stats) == reps:
                out.append(Level(float(level), stats))
        interrupts.raise_if_held()
    return step


def _sweep_curve(
    target: Target,
    trace: Trace,
    levels: list[Level],
    knob: str,
    alpha: float | None,
    meta: dict[str, Any],
) -> LoadCurve:
    describe = target.describe()
    return LoadCurve(
        levels=list(levels),
        knob=knob,
        alpha=float(alpha if alpha is not None else trace.meta.get("alpha", 1.0)),
        share=Share.from_dict(describe.get("share")),
        mapping=describe.get("mapping", {}).get("name", "")
        if isinstance(describe.get("mapping"), dict)
        else str(describe.get("mapping", "")),
        machine=describe.get("machine", {}),
        sweep=CurveMeta(target=describe),
        meta={
            "trace": {
                **{k: trace.meta.get(k) for k in ("source", "workload", "users", "sampler")},
                "fingerprint": trace.fingerprint(),  # (what validate tells traces apart by)
            },
            **meta,
        },
    )
