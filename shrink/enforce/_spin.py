"""The co-runner in Python, for machines without a C compiler (coarser: see corunner.c).

python -m shrink.enforce._spin CPU PERIOD_US SPIN_US WATCH_PID [WATCH_START]
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _gone(pid: int, start: int = -1) -> bool:
    """Whether ``pid`` has ended: no such process, a zombie not yet reaped (which
    ``kill(pid, 0)`` passes; init reaps an orphan's a second or more late), or another
    process under that number (its start time is not ``start``; -1: not compared)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return bool(fields)
    return start >= 0 and len(fields) > 19 and int(fields[19]) != start


def main(argv: list[str]) -> int:
    cpu, period_us, spin_us, watch, start = (int(x) for x in [*argv, "-1"][:5])
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        print("co-runner: SCHED_FIFO needs root", file=sys.stderr)
        return 1
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    period, spin = period_us * 1000, spin_us * 1000
    edge = checked = time.monotonic_ns()
    while not stop:
        while time.monotonic_ns() < edge + spin:
            pass
        edge = max(edge + period, time.monotonic_ns())
        time.sleep(max(0, edge - time.monotonic_ns()) / 1e9)
        if edge - checked > 100_000_000:
            checked = edge
            if _gone(watch, start):
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
