"""A trace's requests as they go on the wire: each distinct (method, target, body,
Content-Type) checked once, each row's index among them, kept for the last few traces."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.errors import TraceFormatError
from shrink.trace import Trace
from shrink.wire import wire_content_type, wire_method, wire_target

__all__ = ["Key", "request_keys"]

# A request as it goes on the wire: (method, target, body, Content-Type or "" for none).
Key = tuple[str, str, bytes, str]


# The request keys of the last few traces: a search builds schedules of one trace (a
# paired search: of the sample and of the whole trace) at level after level, and
# checking every row's method and path was most of a simulated run. Keyed by the
# (immutable) Arrow table, held weakly so a dropped trace is not kept.
_KEPT = 4
_recent_keys: list[tuple[weakref.ref, list[Key], np.ndarray]] = []


def request_keys(trace: Trace) -> tuple[list[Key], np.ndarray]:
    """The trace's distinct requests as sent (method, target, body bytes, Content-Type or
    "" for none), and each row's index among them; every distinct method, path and type
    checked once."""
    for ref, keys, codes in _recent_keys:
        if ref() is trace.table:
            return list(keys), codes
    keys, codes = _check_request_keys(trace)
    codes.flags.writeable = False  # shared by every schedule of this trace
    _recent_keys[:] = [(weakref.ref(trace.table), keys, codes), *_recent_keys[: _KEPT - 1]]
    return list(keys), codes


def _check_request_keys(trace: Trace) -> tuple[list[Key], np.ndarray]:
    # Arrow finds each distinct method, path, body and type, and each distinct (method,
    # path, body, type); a value is checked once, at the first request that holds it (so
    # a row that cannot be sent is named as before: the first). A loop over the rows in
    # Python was most of the cost of a sampled trace's first schedule.
    table, n = trace.table, len(trace)
    values: list[list[Any]] = []  # each column's distinct values (bytes: the body's)
    indices: list[np.ndarray] = []
    for name, none in (("method", ""), ("path", ""), ("body", b""), ("content_type", "")):
        if not trace.has(name):  # one value for every row: no body, no recorded type
            values.append([none])
            indices.append(np.zeros(n, np.int64))
            continue
        col = table.column(name)
        if col.null_count:  # a missing body or type: none
            col = pc.fill_null(col, none)
        # (combine_chunks copies even a lone chunk: a body's size again)
        flat = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        enc = pc.dictionary_encode(flat)
        indices.append(enc.indices.to_numpy().astype(np.int64))
        if name == "body":
            del enc  # its dictionary is a copy of each distinct body, in Arrow's memory
            pa.default_memory_pool().release_unused()
            values.append(_distinct_bodies(flat, indices[-1]))
        else:
            values.append(enc.dictionary.to_pylist())
    if math.prod(max(1, len(v)) for v in values) < 2**62:
        code = np.zeros(len(trace), np.int64)
        for v, i in zip(values, indices, strict=True):
            code = code * len(v) + i
    else:  # one number per (method, path, body, type) would overflow: the rows themselves
        code = np.unique(np.stack(indices, axis=1), axis=0, return_inverse=True)[1]
    _, first, raw_of_row = np.unique(code.reshape(-1), return_index=True, return_inverse=True)
    # per column the values checked so far, as sent (the body goes as it is)
    sent: list[dict[int, Any]] = [{}, _plain_paths(values[1]), {}, {}]
    checks = (wire_method, wire_target, None, wire_content_type)
    index: dict[Key, int] = {}
    key_of_raw = np.empty(first.size, np.int64)
    for raw in np.argsort(first, kind="stable").tolist():
        row = int(first[raw])
        wire = []
        for c, check in enumerate(checks):
            v = int(indices[c][row])
            if v not in sent[c]:
                value = values[c][v]
                sent[c][v] = (
                    value if check is None else _on_wire(trace, row, _COLUMNS[c], check, value)
                )
            wire.append(sent[c][v])
        key_of_raw[raw] = index.setdefault(tuple(wire), len(index))  # type: ignore[arg-type]
    return list(index), key_of_raw[raw_of_row.reshape(-1)]


def _distinct_bodies(bodies: pa.Array, index: np.ndarray) -> list[bytes]:
    """Each distinct body once, as Python bytes, in the order of ``index`` (a row's
    distinct-value number), taken from the trace's own column: the dictionary's copy,
    and the Python bytes made from it, held each distinct body three times at once."""
    _, first = np.unique(index, return_index=True)
    return [bodies[row].as_py() for row in first.tolist()]


# Characters a path may hold and go on the wire as it is (``wire_target``'s, less the
# "%" that must start an escape), after the "/" it must start with; a path of these
# alone needs no other look.
_PLAIN = r"^/[A-Za-z0-9\-._~!$&'()*+,;=:@/?]*$"


def _plain_paths(paths: list[str]) -> dict[int, str]:
    """The distinct paths that ``wire_target`` leaves as they are, found by Arrow at once
    (synthetic traces hold a path per request), by their index in ``paths``."""
    plain = pc.match_substring_regex(pa.array(paths, pa.string()), _PLAIN)
    return {i: paths[i] for i in np.flatnonzero(plain.to_numpy(zero_copy_only=False)).tolist()}


# The trace's columns a request key is made of, in the key's order.
_COLUMNS = ("method", "path", "body", "content_type")


def _on_wire(trace: Trace, row: int, column: str, check: Callable[[str], str], value: str) -> str:
    """``check(value)``; its ValueError becomes a TraceFormatError naming the trace row
    and the column."""
    try:
        return check(value)
    except ValueError as exc:
        source = trace.meta.get("source")
        origin = f", read from {source}" if isinstance(source, str) else ""
        session = trace.table.column("session")[row].as_py()
        raise TraceFormatError(
            f"trace row {row} (session {session}{origin}), column {column}: {value[:60]!r} "
            f"cannot be sent: {exc}"
        ) from None
