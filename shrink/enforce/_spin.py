"""The co-runner in Python, for machines without a C compiler (coarser: see corunner.c).

python -m shrink.enforce._spin CPU PERIOD_US SPIN_US WATCH_PID
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended: no such process, or a zombie not yet reaped (which
    ``kill(pid, 0)`` passes; init reaps an orphan's a second or more late)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"Z", b"X")


def main(argv: list[str]) -> int:
    cpu, period_us, spin_us, watch = (int(x) for x in argv)
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
            if _gone(watch):
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
