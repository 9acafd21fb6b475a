"""The generator's self-check: did it keep to its schedule over the measurement window?

A level is **behind** (flagged, and excluded from every MAT) when, over the
requests intended inside the window,

* the 99th percentile of the send lag exceeds ``lag_limit`` (default 1 ms), or
* the achieved request rate is below ``min_ratio`` (default 0.97) of the
  intended one (only judged with at least ``MIN_REQUESTS`` requests intended), or
* a generator process used more than ``cpu_limit`` (default 0.9) of its core:
  a saturated generator queues requests in its own connection pools, where the
  wait looks like server latency and the send lag alone does not show it.

The send lag is ``dispatched - intended`` where the RunLog has the engine's
``dispatched`` column (when the engine acted on the request: wrote it on an open
connection, or began connecting for it), else ``sent - intended``. Using
``dispatched`` keeps a slow server's TCP accept from being blamed on the
generator. A request that was never dispatched has an infinite lag.

The generator's CPU (seconds of CPU per wall second, summed over its processes)
comes from the processes' own counters (:func:`process_cpu_seconds`).
"""

from __future__ import annotations

import numpy as np

from shrink.procfs import process_cpu_seconds
from shrink.runlog import RunLog
from shrink.target import GeneratorCheck

__all__ = [
    "CPU_LIMIT",
    "LAG_LIMIT",
    "MIN_RATIO",
    "MIN_REQUESTS",
    "generator_check",
    "process_cpu_seconds",
]

LAG_LIMIT = 1e-3
MIN_RATIO = 0.97
MIN_REQUESTS = 50
CPU_LIMIT = 0.9


def generator_check(
    log: RunLog,
    window: tuple[float, float],
    *,
    cpu: float | None = None,
    lag_limit: float = LAG_LIMIT,
    min_ratio: float = MIN_RATIO,
    processes: int = 1,
    cpu_limit: float = CPU_LIMIT,
) -> GeneratorCheck:
    """Rates and send-lag percentiles over ``window``; ``behind`` per the module's criterion."""
    start, end = window
    width = end - start
    intended = log.column("intended")
    sent = log.column("sent")
    stamp = sent
    if "dispatched" in log.table.column_names:  # RunLogs from other tools may lack it
        disp = log.column("dispatched")
        stamp = np.where(np.isfinite(disp), disp, sent)
    in_win = (intended >= start) & (intended < end)
    n_int = int(in_win.sum())
    achieved = int(np.sum((stamp >= start) & (stamp < end)))
    lag = stamp[in_win] - intended[in_win]
    lag = np.where(np.isfinite(lag), lag, np.inf)
    if lag.size:
        finite = np.where(np.isfinite(lag), lag, 1e9)
        p50, p99 = (float(x) for x in np.quantile(finite, [0.5, 0.99]))
        lag_max = float(np.max(lag))
    else:
        p50 = p99 = lag_max = 0.0
    intended_rate = n_int / width if width > 0 else 0.0
    achieved_rate = achieved / width if width > 0 else 0.0
    reasons = []
    if p99 > lag_limit:
        reasons.append(f"send-lag p99 {p99 * 1e3:.3g} ms > {lag_limit * 1e3:g} ms")
    if n_int >= MIN_REQUESTS and achieved_rate < min_ratio * intended_rate:
        reasons.append(
            f"achieved {achieved_rate:.1f} req/s < {min_ratio:g} x intended {intended_rate:.1f}"
        )
    if cpu is not None and processes > 0 and cpu / processes > cpu_limit:
        reasons.append(
            f"generator CPU {100 * cpu / processes:.0f}% of a core > {100 * cpu_limit:.0f}%"
        )
    return GeneratorCheck(
        intended_rate=intended_rate,
        achieved_rate=achieved_rate,
        send_lag_p50=p50,
        send_lag_p99=p99,
        send_lag_max=lag_max,
        cpu=cpu,
        behind=bool(reasons),
        reason="; ".join(reasons),
    )
