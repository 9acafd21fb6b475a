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
comes from the processes' own counters (:func:`process_cpu_seconds`), less the time
a real-time native loop under pressure waited out its send windows on the clock
(its loop count ``polled_us``), which it chose and could have slept.

Where the engine says how long its send thread waited on the run queue
(``thread_wait``, a fraction of the run's time), a late level says which of two
causes it was. A send is late for as long as the thread waits while sends fall due,
so a thread that waited at least half as long as its sends were late (the fraction
of the window's sends later than ``lag_limit``) was held by other work of this
machine on its CPU (under SCHED_FIFO, the kernel still gives normal tasks up to 50 ms
of each second, kernel.sched_rt_runtime_us; a thread that waited well past that share
was held by a real-time task of its priority or a higher one). One that waited less,
only its wake-ups' worth, was held below the scheduler (interrupts, or on a VM the
host not running the virtual CPU), which no setting of shrink's can win back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
    "stop_explains",
    "thread_wait",
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
    thread_wait: float | None = None,
    realtime: bool = False,
    stopped: float = 0.0,
) -> GeneratorCheck:
    """Rates and send-lag percentiles over ``window``; ``behind`` per the module's criterion.
    ``thread_wait``: the send thread's time on the run queue over the run's time;
    ``realtime``: whether it ran SCHED_FIFO (the module docstring says what both tell);
    ``stopped``: the seconds the generator's process is known to have been stopped (a
    signal, job control), which then is what made its sends late."""
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
        reasons.append(
            f"send-lag p99 {p99 * 1e3:.3g} ms > {lag_limit * 1e3:g} ms"
            + _late_because(
                stopped, lag_limit, thread_wait, float(np.mean(lag > lag_limit)), width, realtime
            )
        )
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
        thread_wait=thread_wait,
        stopped=stopped if stopped > 0 else None,
    )


def thread_wait(stats: Iterable[Any]) -> float | None:
    """The send thread's time waiting for its CPU over its run's time, the most over a
    run's engine processes (None where no engine counted it: an older native core, or a
    machine whose /proc does not say)."""
    waits = []
    for st in stats:
        us = ((getattr(st, "extra", None) or {}).get("loop") or {}).get("runq_wait_us")
        wall = getattr(st, "wall", 0.0)
        if us is not None and wall > 0:
            waits.append(float(us) / 1e6 / wall)
    return max(waits) if waits else None


def stop_explains(stopped: float | None, lag_limit: float | None) -> bool:
    """Whether a generator known to have been stopped for ``stopped`` seconds was held up
    by that: a stop no longer than the lag limit cannot have made the sends that late,
    and none (0, None) held nothing (``lag_limit`` None: :data:`LAG_LIMIT`)."""
    limit = LAG_LIMIT if lag_limit is None else lag_limit
    return stopped is not None and stopped > 0 and stopped >= limit


def _late_because(
    stopped: float, lag_limit: float, wait: float | None, late: float, width: float, rt: bool
) -> str:
    """What held the late sends (``late``: their fraction): a stop, the send thread's wait
    for its CPU, or both. A stop accounts for the sends due while it lasted (its share of
    the window); a thread that waited at least half as long as the rest were late was
    held by other work too. A stop and a real-time task above the send thread's on its
    CPU were said to be the stop alone, "not the host's doing"."""
    if not stop_explains(stopped, lag_limit):
        return _held_by(wait, late, rt)
    rest = late - (stopped / width if width > 0 else late)
    if wait is None or rest <= 0.01 or wait < rest / 2:
        return _stopped_text(stopped)
    return (
        f" (shrink itself was stopped, by a signal or job control, for {stopped:.2g} s during "
        f"the run; and {_held_by(wait, rest, rt)[2:]}"
    )


def _stopped_text(stopped: float) -> str:
    """What held the late sends of a generator known to have been stopped."""
    return (
        f" (shrink itself was stopped, by a signal or job control, for {stopped:.2g} s "
        "during the run: the sends due meanwhile went out late when it went on; not the "
        "host's doing nor the server's)"
    )


def _held_by(wait: float | None, late: float, realtime: bool) -> str:
    """What held the late sends (``late``: the fraction of them over the limit), from the
    send thread's wait for its CPU (a fraction of the run; '' when unknown)."""
    if wait is None:
        return ""
    facts = f"its send thread waited for its CPU {100 * wait:.2g}% of the run"
    if wait >= late / 2:
        why = "other work ran there"
        share = _rt_throttled() if realtime else 0.0
        if realtime and wait > 2 * share + 0.01:
            # more than the normal tasks' share: a real-time task at the send thread's
            # priority or above (another replay's send thread, SCHED_FIFO 10 by default)
            why = (
                "a real-time task at or above the send thread's priority (SCHED_FIFO, "
                "SCHED_RR or SCHED_DEADLINE: another replay's send thread too) ran there"
                + (", more than the normal tasks' share under SCHED_FIFO" if share else "")
                + "; give the generator a CPU that task does not use"
            )
        elif realtime and share:
            why = (
                f"under SCHED_FIFO the kernel still gives normal tasks up to "
                f"{1e3 * share:.3g} ms a second there; lower the rate or add generator CPUs"
            )
        elif realtime:  # (kernel.sched_rt_runtime_us -1: normal tasks get none of it)
            why = (
                "a real-time task at or above the send thread's priority, or the kernel, ran there"
            )
        return f" ({facts}: {why})"
    return (
        f" ({facts}, {100 * late:.2g}% of its sends were late: the delay was below the "
        "scheduler, interrupts or the host not running this virtual CPU, which no setting "
        "here wins back)"
    )


def _rt_throttled(sysctl: str = "/proc/sys/kernel") -> float:
    """The share of each second the kernel keeps from real-time tasks for normal ones
    (kernel.sched_rt_runtime_us of sched_rt_period_us; 5% by default, 0 unlimited)."""
    try:
        with open(f"{sysctl}/sched_rt_runtime_us") as f:
            runtime = int(f.read())
        with open(f"{sysctl}/sched_rt_period_us") as f:
            period = int(f.read())
    except (OSError, ValueError):
        return 0.05
    if runtime < 0 or period <= 0:
        return 0.0
    return max(0.0, 1.0 - runtime / period)
