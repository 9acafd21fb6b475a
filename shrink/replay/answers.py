"""What a run's answers say of the server: gone (its requests reached nothing), or
serving none of the trace's pages (4xx to nearly every one)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.runlog import RunLog
from shrink.trace import Trace

__all__ = ["UNREACHED_SHARE", "expects_4xx", "refused", "stopped_window", "unreached"]


# Errors of a request that never reached a server: nothing listens, or it hung up.
_UNREACHED = ("refused", "connect", "reset", "closed")
# The share of a run's requests that, unreached, says the server is gone rather than
# loaded: an overloaded server still answers most, or times them out.
UNREACHED_SHARE = 0.99


def unreached(log: RunLog, window: tuple[float, float]) -> tuple[int, int]:
    """(requests intended in ``window``, those that never reached a server)."""
    intended = log.column("intended")
    in_win = (intended >= window[0]) & (intended < window[1])
    err = pc.is_in(log.table.column("error"), value_set=pa.array(_UNREACHED))
    return int(in_win.sum()), int((in_win & err.to_numpy(zero_copy_only=False)).sum())


def refused(log: RunLog, window: tuple[float, float]) -> tuple[int, int, int]:
    """(requests intended in ``window``, those answered with a 4xx status, the commonest
    such status or 0)."""
    intended = log.column("intended")
    status = log.column("status")
    in_win = (intended >= window[0]) & (intended < window[1])
    hit = in_win & (status >= 400) & (status < 500)
    codes, counts = np.unique(status[hit], return_counts=True)
    return int(in_win.sum()), int(hit.sum()), int(codes[np.argmax(counts)]) if len(codes) else 0


def expects_4xx(trace: Trace) -> bool:
    """Whether the trace recorded 4xx answers (an access log's 404s): then a replay that
    gets them is the trace's, not a server gone wrong."""
    if not trace.has("status") or not len(trace):
        return False
    status = trace.column("status")
    return bool(np.mean((status >= 400) & (status < 500)) >= 0.01)


def stopped_window(
    window: tuple[float, float], at: float | None, log: RunLog
) -> tuple[float, float]:
    """The measurement window of a run stopped by a signal (or its stop event) at ``at``
    (seconds from the run's zero; None: not recorded, then just after the last send the
    RunLog holds): it ends at the stop, not at the planned end, which nothing was sent
    to fill. A stop before the window began leaves it as planned (nothing in it sent)."""
    start, end = window
    if at is None:
        sent = log.column("sent")
        sent = sent[np.isfinite(sent)]
        if not sent.size:
            return window
        at = float(np.nextafter(sent.max(), np.inf))
    return (start, min(end, at)) if at > start else window
