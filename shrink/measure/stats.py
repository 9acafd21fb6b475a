"""One run's statistics (:func:`level_stats`) and whether a curve's offered load
followed its levels (:func:`offered_check`).

Throughput counts requests *completed* inside the measurement window (so an
overloaded server shows its real rate, not the offered one); latency statistics
cover requests *intended* inside the window that completed (coordinated
omission: counted from the intended time). Requests intended in the window that
did not succeed (no whole 2xx/3xx response) are errors, counted by class
(:meth:`shrink.runlog.RunLog.failures`); a repetition with more than
:data:`shrink.loadcurve.FAILURE_LIMIT` of them keeps its level out of every MAT.

A run stopped by a signal measured up to its stop (its window ends there): the
requests the stop cut off (in flight then, ``cut``, or never sent, ``unsent``) are
not the server's failures and are left out of the counts (they stay in the RunLog,
marked so); those never sent are not offered load either.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shrink.errors import ParameterError
from shrink.loadcurve import LevelStats, LoadCurve, latency_stats
from shrink.measure.interrupt import was_interrupted
from shrink.target import RunResult

__all__ = [
    "CLASSES",
    "LINEAR_TOLERANCE",
    "SATURATED",
    "level_stats",
    "offered_check",
    "part_lost",
]

CLASSES = ("static", "dynamic")
# Utilization from which a level counts as saturated for the offered-load check.
SATURATED = 0.9


def level_stats(result: RunResult) -> LevelStats:
    """Exact statistics of one run's measurement window."""
    log = result.runlog
    start, end = result.window
    width = end - start
    if not width > 0:
        raise ParameterError(f"the measurement window [{start:g} s, {end:g} s) is empty.")
    intended = log.column("intended")
    done = log.column("done")
    cls = log.column("cls")
    ok = log.ok_mask()
    in_win = (intended >= start) & (intended < end)
    offered = in_win
    if was_interrupted(result):
        # cut off by the stop: not measured (see the module docstring)
        offered = in_win & ~log.cut_off(("unsent",))
        in_win = in_win & ~log.cut_off()
    finished_in_win = ok & (done >= start) & (done < end)
    lat = done - intended
    measured = in_win & ok
    per_class = {}
    for c in CLASSES:
        m = cls == c
        if np.any(in_win & m):
            st = latency_stats(lat[measured & m], width)
            st.throughput = float(np.sum(finished_in_win & m)) / width
            per_class[c] = st
    overall = latency_stats(lat[measured], width)
    overall.throughput = float(np.sum(finished_in_win)) / width
    g = result.generator
    return LevelStats(
        throughput=overall.throughput,
        overall=overall,
        per_class=per_class,
        offered=float(np.sum(offered)) / width,
        utilization=result.utilization,
        errors=int(np.sum(in_win & ~ok)),
        failures=log.failures(in_win),
        requests=int(np.sum(in_win)),
        answering=log.timed_out_answering(in_win),
        generator_behind=g.behind,
        send_lag_p99=g.send_lag_p99,
        send_lag_max=g.send_lag_max,
        generator_cpu=g.cpu,
        generator_stopped=getattr(g, "stopped", None),
        generator_lost=part_lost(result.describe or {}),
        other_cpu=(result.describe or {}).get("share_other_cpu"),
        steal=(result.describe or {}).get("share_steal"),
        generator_steal=(result.describe or {}).get("generator_steal"),
    )


def part_lost(desc: dict[str, Any]) -> bool:
    """Whether part of the generator was gone mid-run, as a run's description says (an
    engine process that ended without its report, a cluster's generator lost)."""
    engine = desc.get("engine") or {}
    return bool(engine.get("errors") or engine.get("lost_generators"))


# Offered load per unit of level may stray this far from its median and still count as
# following the level: a light level's short window holds few sessions, and what they
# offer strays by several percent (shrink.knee.capacity says more).
LINEAR_TOLERANCE = 0.10


def offered_check(curve: LoadCurve) -> dict[str, Any]:
    """Does offered load rise with the level? A controlled load offers ``level`` times
    one rate: monotone in the level, and ``offered / level`` the same at every level.

    ``offered_monotone``: offered load rises with the level (by level, repetitions
    averaged). ``offered_per_level``: the median of offered / level.
    ``offered_linearity``: the largest relative departure of offered / level from it;
    ``offered_linear``: the verdict, that departure at most :data:`LINEAR_TOLERANCE`,
    and ``offered_worst_level`` the level it was largest at.
    ``offered``: ``[level, offered]`` pairs. ``offered_saturated``: levels left out,
    where the server was saturated (utilization at least :data:`SATURATED`): a
    session sends its next burst only after the last one's responses (httperf's
    wsesslog), so a saturated server holds the offered load down, as it would a
    user's; that is the server's answer, not the load's control.
    """
    pts = []
    saturated = []
    for lv in sorted(curve.levels, key=lambda lv: lv.level):
        x = [r.offered for r in lv.reps if r.offered and r.offered > 0]
        u = lv.utilization
        if u is not None and u >= SATURATED:
            saturated.append(float(lv.level))
            continue
        if x and lv.level > 0:
            pts.append((float(lv.level), float(np.mean(x))))
    if len(pts) < 2:
        return {
            "offered_monotone": None,
            "offered_per_level": None,
            "offered_linearity": None,
            "offered_saturated": saturated,
        }
    lvl, off = np.array(pts).T
    ratio = off / lvl
    med = float(np.median(ratio))
    linearity = float(np.max(np.abs(ratio / med - 1)))
    return {
        "offered_monotone": bool(np.all(np.diff(off) > 0)),
        "offered_per_level": med,
        "offered_linearity": linearity,
        # the verdict: within LINEAR_TOLERANCE the load followed the level
        "offered_linear": linearity <= LINEAR_TOLERANCE,
        "offered_linear_tolerance": LINEAR_TOLERANCE,
        # the level furthest from linear (where to look)
        "offered_worst_level": float(lvl[int(np.argmax(np.abs(ratio / med - 1)))]),
        "offered": [[a, b] for a, b in pts],
        "offered_saturated": saturated,
    }
