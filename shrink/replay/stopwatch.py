"""A generator that did not run: stopped (SIGSTOP, Ctrl-Z) or frozen during a run.

Stopped past its horizon and continued, the engine ends at once: the requests due
meanwhile are neither sent nor late, and the level measured a fraction of its load
with a small send lag, unflagged. A thread that wakes every 50 ms sees the gap.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from time import monotonic

from shrink.target import GeneratorCheck

__all__ = ["STOPPED_GAP", "StopWatch", "flag_if_stopped"]


# A gap this long between a watcher's wake-ups (50 ms apart) is a process that did not
# run: stopped (SIGSTOP, Ctrl-Z) or frozen, never a busy CPU (its fair share comes at
# least every 50 ms; the send thread is SCHED_FIFO only on a CPU of its own).
STOPPED_GAP = 1.0


class StopWatch(threading.Thread):
    """The longest time this process did not run during a run. A generator stopped past
    its horizon and continued ends at once: the requests due meanwhile are neither sent
    nor late, and the level measured a fraction of its load, unflagged."""

    def __init__(self, until: float) -> None:
        super().__init__(daemon=True)
        self.until = until
        self.gap = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        last = monotonic()
        while not self.stop.wait(0.05):
            now = monotonic()
            self.gap = max(self.gap, now - last)
            last = now
            if now > self.until:
                return


def flag_if_stopped(check: GeneratorCheck, gap: float, inline: bool) -> GeneratorCheck:
    """``check`` flagged behind when this process, running the engine (``inline``), did
    not run for longer than :data:`STOPPED_GAP`."""
    if gap <= STOPPED_GAP or not inline or check.behind:
        return check
    why = f"the generator did not run for {gap:.1f} s (stopped, or frozen)"
    return replace(check, behind=True, reason=why)
