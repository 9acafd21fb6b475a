"""From runs to a LoadCurve, one concept a module:

- :mod:`shrink.measure.window`: the trace as a level's runs replay it (skip, loop
  window, looped runs, slow motion, the rate factor of a level);
- :mod:`shrink.measure.stats`: one run's statistics, and whether the offered load
  followed the levels;
- :mod:`shrink.measure.interrupt`: a sweep stopped by a signal, and what it kept;
- :mod:`shrink.measure.fixed_sweep`: a sweep over a fixed list of levels (a module
  name apart from the function :func:`sweep`, which the package exports);
- :mod:`shrink.measure.search`: the loop of every level search (choose, measure, stop),
  its policy a parameter.
"""

from __future__ import annotations

from shrink.measure.fixed_sweep import SweepHooks, sweep
from shrink.measure.interrupt import SweepInterrupted, stop_if_interrupted, was_interrupted
from shrink.measure.stats import (
    CLASSES,
    LINEAR_TOLERANCE,
    SATURATED,
    level_stats,
    offered_check,
    part_lost,
)
from shrink.measure.window import (
    KNOBS,
    LOOP_SESSIONS,
    WHOLE_SESSION_QUANTILE,
    LoopedRun,
    complete_end,
    default_loop_window,
    default_skip,
    loop_window,
    looped_run,
    rate_factor_for,
    skip_start,
    slow_motion,
    trace_span,
    window_for,
)

__all__ = [
    "CLASSES",
    "KNOBS",
    "LINEAR_TOLERANCE",
    "LOOP_SESSIONS",
    "SATURATED",
    "WHOLE_SESSION_QUANTILE",
    "LoopedRun",
    "SweepHooks",
    "SweepInterrupted",
    "complete_end",
    "default_loop_window",
    "default_skip",
    "level_stats",
    "loop_window",
    "looped_run",
    "offered_check",
    "part_lost",
    "rate_factor_for",
    "skip_start",
    "slow_motion",
    "stop_if_interrupted",
    "sweep",
    "trace_span",
    "was_interrupted",
    "window_for",
]
