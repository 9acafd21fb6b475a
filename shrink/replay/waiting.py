"""The thread that waits for a scaled-out run's engine processes (:func:`waiting_above`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["waiting_above"]


@contextlib.contextmanager
def waiting_above(realtime: int) -> Iterator[None]:
    """The calling thread, which waits for the engine processes, SCHED_FIFO one step above
    their ``realtime`` inside (nothing at 0), as it was after: a stop signal sent to this
    process alone is passed on at once. At normal priority beside real-time engines on
    every CPU it may use, it passed one on up to 21 ms late, and they sent on meanwhile.
    It sleeps but for a signal or an engine's report. Without CAP_SYS_NICE, as before."""
    old = (os.sched_getscheduler(0), os.sched_getparam(0))
    top = os.sched_get_priority_max(os.SCHED_FIFO)
    raised = False
    if realtime > 0:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(min(realtime + 1, top)))
            raised = True
    try:
        yield
    finally:
        if raised:
            os.sched_setscheduler(0, old[0], old[1])
