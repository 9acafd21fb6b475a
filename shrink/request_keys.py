"""A trace's requests as they go on the wire: each distinct (method, target, body)
checked once, each row's index among them, kept for the last few traces."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from shrink.errors import TraceFormatError
from shrink.trace import Trace
from shrink.wire import wire_method, wire_target

__all__ = ["request_keys"]


# The request keys of the last few traces: a search builds schedules of one trace (a
# paired search: of the sample and of the whole trace) at level after level, and
# checking every row's method and path was most of a simulated run. Keyed by the
# (immutable) Arrow table, held weakly so a dropped trace is not kept.
_KEPT = 4
_recent_keys: list[tuple[weakref.ref, list[tuple[str, str, str]], np.ndarray]] = []


def request_keys(trace: Trace) -> tuple[list[tuple[str, str, str]], np.ndarray]:
    """The trace's distinct requests as sent (method, target, body), and each row's
    index among them; every distinct method and path checked once."""
    for ref, keys, codes in _recent_keys:
        if ref() is trace.table:
            return list(keys), codes
    keys, codes = _check_request_keys(trace)
    codes.flags.writeable = False  # shared by every schedule of this trace
    _recent_keys[:] = [(weakref.ref(trace.table), keys, codes), *_recent_keys[: _KEPT - 1]]
    return list(keys), codes


def _check_request_keys(trace: Trace) -> tuple[list[tuple[str, str, str]], np.ndarray]:
    methods = trace.column("method")
    paths = trace.column("path")
    bodies = trace.column("body") if trace.has("body") else None
    index: dict[tuple[str, str, str], int] = {}
    codes = np.empty(len(trace), np.int64)
    raw: dict[tuple[str, str, str], int] = {}
    for i in range(len(trace)):
        k = (methods[i], paths[i], "" if bodies is None else (bodies[i] or ""))
        c = raw.get(k)
        if c is None:
            # Checked once per distinct request, before anything is sent.
            sent = (_on_wire(trace, i, wire_method, k[0]), _on_wire(trace, i, wire_target, k[1]))
            c = raw[k] = index.setdefault((*sent, k[2]), len(index))
        codes[i] = c
    return list(index), codes


def _on_wire(trace: Trace, row: int, check: Callable[[str], str], value: str) -> str:
    """``check(value)``; its ValueError becomes a TraceFormatError naming the trace row."""
    try:
        return check(value)
    except ValueError as exc:
        source = trace.meta.get("source")
        origin = f", read from {source}" if isinstance(source, str) else ""
        session = trace.table.column("session")[row].as_py()
        raise TraceFormatError(
            f"trace row {row} (session {session}{origin}): {value[:60]!r} cannot be sent: {exc}"
        ) from None
