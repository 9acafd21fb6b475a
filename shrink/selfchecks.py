"""What a measured curve says about its own measurement: the prediction's self-checks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from shrink.loadcurve import FAILURE_LIMIT, LoadCurve, pooled_capacity
from shrink.measure import offered_check

__all__ = [
    "QUIET_OTHER_CPU",
    "crowded_levels",
    "full_checks",
    "host_drift",
    "host_moved",
    "load_dependence",
    "self_checks",
    "stopped_levels",
    "thin_tails",
]

# Other work (kernel threads, softirqs, other processes) over this fraction of the
# share's CPUs in a window fails the "share was quiet" self-check: whatever runs in a
# CPU-time share's gaps evicts the server's caches. On the project's VM a quiet run read
# 3-10% (the generator's share of CPU 0 included on a core subset), one beside test runs
# pinned to the share's CPU 97%.
QUIET_OTHER_CPU = 0.10
# A repetition at least this busy shows the full target's capacity (X / U) near its
# knee, where a validation's MAT lies.
BUSY = 0.5
# A repetition at most this busy is as light as a calibration's runs (at most 10%)
# with room for the validation's lowest level.
LIGHT = 0.2


def self_checks(curve: LoadCurve, limits: Mapping[str, float]) -> dict[str, Any]:
    """What the curve says about its own measurement; ``limits`` in the curve's own seconds."""
    behind = [lv.level for lv in curve.levels if lv.generator_behind]
    stalled = {
        stat: [lv.level for lv in curve.stalled_over(stat, limit)] for stat, limit in limits.items()
    }
    reps_out = sum(lv.reps_behind for lv in curve.levels if not lv.generator_behind)
    utils = [min(1.0, lv.utilization) for lv in curve.usable() if lv.utilization is not None]
    umax = max(utils) if utils else None
    gen_cpu = [r.generator_cpu for lv in curve.levels for r in lv.reps]
    gen_cpu = [x for x in gen_cpu if x is not None]
    others = [r.other_cpu for lv in curve.usable() for r in lv.kept if r.other_cpu is not None]
    steal = [r.steal for lv in curve.usable() for r in lv.kept if r.steal is not None]
    # Over every repetition, kept or not: steal there is what makes one fall behind.
    gen_steal = [r.generator_steal for lv in curve.levels for r in lv.reps]
    gen_steal = [x for x in gen_steal if x is not None]
    # which replay engine measured the curve (native core or Python; live runs only)
    engine = curve.sweep.target.get("engine")
    cluster = curve.sweep.target.get("cluster")
    return {
        **({"generator_engine": engine} if engine else {}),
        **({"generator_cluster": cluster} if cluster else {}),
        "max_other_cpu": max(others) if others else None,
        "max_steal": max(steal) if steal else None,
        "max_generator_steal": max(gen_steal) if gen_steal else None,
        # The generator's CPU (seconds a second, at most): on a core subset that shares a
        # CPU with it, what it took from the server.
        "max_generator_cpu": max(gen_cpu) if gen_cpu else None,
        "generator_kept_up": not behind,
        "levels_behind": behind,
        # Of those, the ones still over a threshold by their stall bound (never a MAT: a hint).
        "levels_stalled_over": {k: v for k, v in stalled.items() if v},
        "repetitions_excluded": reps_out,
        # [level, seconds]: where shrink itself was stopped (Ctrl-Z, SIGSTOP) in a
        # repetition left out, which that stop made late
        "levels_stopped": [[lv, s] for lv, s in stopped_levels(curve).items()],
        "max_utilization": umax,
        "utilization_reached": bool(umax is not None and umax >= 0.85),
        "usable_levels": len(curve.usable()),
        # Levels where requests failed (over FAILURE_LIMIT): never used for a MAT.
        "levels_failed": [lv.level for lv in curve.failed_levels()],
        "failures": _failure_totals(curve),
        "failure_limit": FAILURE_LIMIT,
        # A controlled load: offered load rises with the level, ~linearly.
        **{k: v for k, v in offered_check(curve).items() if k != "offered"},
    }


def stopped_levels(curve: LoadCurve) -> dict[float, float]:
    """Level -> the longest time shrink itself is known to have been stopped (a signal, job
    control) in one of its repetitions left out as behind, where that stop made it late
    (:func:`shrink.replay.selfcheck.stop_explains`): "fell behind" alone read as the
    generator's host or CPU."""
    from shrink.replay.selfcheck import stop_explains

    limit = curve.sweep.generator.lag_limit
    out: dict[float, float] = {}
    for lv in curve.levels:
        stops = [
            float(r.generator_stopped)
            for r in lv.reps
            if r.generator_behind
            and r.generator_stopped
            and stop_explains(r.generator_stopped, limit)
        ]
        if stops:
            out[float(lv.level)] = max(stops)
    return out


def crowded_levels(curve: LoadCurve) -> dict[float, float]:
    """Level -> the most other work (CPUs) on the share's CPUs in one of its kept
    repetitions, for the levels over :data:`QUIET_OTHER_CPU`: another process, or a
    second load's server work, ran beside the server there, so the level measured a
    server that shared its CPUs, not the share alone."""
    out: dict[float, float] = {}
    for lv in curve.levels:
        other = [r.other_cpu for r in lv.kept if r.other_cpu is not None]
        if other and max(other) > QUIET_OTHER_CPU:
            out[float(lv.level)] = float(max(other))
    return out


def thin_tails(
    curve: LoadCurve, stat: str, cls: str | None = None, levels: tuple[float, ...] | None = None
) -> tuple[int, dict[float, int]]:
    """(requests a percentile ``stat`` needs, level -> the fewest requests behind it in one
    kept repetition, for the ``levels`` (default all) where that is fewer).

    A repetition's p99.9 is its own requests' (:func:`shrink.loadcurve.latency_stats`):
    from fewer than 1 / (1 - q) of them it is the slowest request or two, not a tail.
    The mean, or a percentile every level has enough requests for, gives nothing."""
    from shrink.checks import stat_quantile

    q = stat_quantile(stat)
    if q is None or q >= 1:
        return 0, {}
    need = math.ceil(1 / (1 - q) - 1e-9)
    out: dict[float, int] = {}
    for lv in curve.levels:
        if levels is not None and float(lv.level) not in levels:
            continue
        ns = [(r.per_class.get(cls) if cls else r.overall) for r in lv.kept]
        counts = [int(c.n) for c in ns if c is not None]
        if counts and min(counts) < need:
            out[float(lv.level)] = min(counts)
    return need, out


def _failure_totals(curve: LoadCurve) -> dict[str, int]:
    """Failures by class over every repetition of the curve."""
    out: dict[str, int] = {}
    for lv in curve.levels:
        for k, v in lv.failure_counts().items():
            out[k] = out.get(k, 0) + v
    return out


def host_drift(full: LoadCurve) -> dict[str, Any]:
    """How far the full target's speed moved over a validation's runs.

    Its capacity (throughput over utilization) in every kept repetition at least BUSY
    busy, in the order they ran: the range and its spread (max / min). A host whose
    speed moves moves a prediction's and a validation's MATs alike; the spread says by
    how much. Empty without two such repetitions.
    """
    caps = [
        r.capacity
        for lv in full.usable()
        for r in lv.kept
        if r.capacity is not None and (r.utilization or 0.0) >= BUSY
    ]
    if len(caps) < 2:
        return {}
    return {
        "host_checks": len(caps),
        "host_capacity_range": [min(caps), max(caps)],
        "host_spread": max(caps) / min(caps),
    }


def host_moved(full: LoadCurve, paired: LoadCurve) -> dict[str, Any]:
    """How far the full target's speed moved between the runs beside the share's
    (the validation's levels that are also ``paired``'s, run interleaved with them)
    and its own search afterwards: the busy capacity (all requests over all CPU of the
    repetitions at least BUSY busy) of its own levels over that of the paired ones.
    The validation's MAT is read on its own levels, the prediction's on the share's:
    a host faster (above 1) or slower afterwards moves the measured MAT, not the
    predicted one. Empty without busy repetitions on both."""
    beside = {round(lv.level, 6) for lv in paired.levels}
    caps = [
        pooled_capacity(
            (r for lv in full.usable() if (round(lv.level, 6) in beside) == side for r in lv.kept),
            (BUSY, 1.01),
        )
        for side in (True, False)
    ]
    if caps[0] is None or caps[1] is None:
        return {}
    return {
        "host_beside_share": caps[0][0],
        "host_after_share": caps[1][0],
        "host_after_over_beside": caps[1][0] / caps[0][0],
    }


def load_dependence(full: LoadCurve) -> dict[str, Any]:
    """Whether the full target's cost per request depends on its load, as the CPU-time
    share's calibration takes it not to (shrink.scaling): the median capacity (X / U)
    of the validation's light repetitions (at most LIGHT busy) over its busy ones (at
    least BUSY). Empty without both."""
    light, busy = [], []
    for lv in full.usable():
        for r in lv.kept:
            cap = r.capacity
            if cap is None or r.utilization is None:
                continue
            if r.utilization <= LIGHT:
                light.append(cap)
            elif r.utilization >= BUSY:
                busy.append(cap)
    if not light or not busy:
        return {}
    lo, hi = statistics.median(light), statistics.median(busy)
    return {"light_capacity": lo, "busy_capacity": hi, "light_over_busy": lo / hi}


def full_checks(full: LoadCurve, limits: Mapping[str, float]) -> dict[str, Any]:
    """A full-scale (validation) curve's checks: its own, the host's drift over it, and
    whether its cost per request moved with its load."""
    return {**self_checks(full, limits), **host_drift(full), **load_dependence(full)}
