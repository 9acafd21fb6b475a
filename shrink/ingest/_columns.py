"""A text reader's rows, kept compact: Python lists for one batch of lines, Arrow arrays after.

A Python object per field of every row costs 50-100 bytes where the Arrow column
holds the value in 4-8 (plus the text of a string): a 200 MB log read into lists
took 1.4 GB. A reader appends a batch's fields to :attr:`Columns.lists` and calls
:meth:`Columns.flush` after each batch of lines (:func:`shrink.ingest._io.line_batches`),
or when :meth:`Columns.full`, so that only one batch is ever held as Python objects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.classify import Classifier

__all__ = ["Columns", "Distinct", "classify_paths", "release", "session_columns", "session_keys"]

BATCH_ROWS = 65_536  # rows held as Python objects at most, for a reader that asks (full)


class Columns:
    """Named columns of one type each, filled row by row through :attr:`lists`."""

    def __init__(self, types: dict[str, pa.DataType]) -> None:
        self.types = types
        self.lists: dict[str, list[Any]] = {name: [] for name in types}
        self._chunks: dict[str, list[pa.Array]] = {name: [] for name in types}
        self.rows = 0  # rows flushed so far

    def flush(self) -> None:
        """Move the rows gathered since the last flush into Arrow arrays (lists emptied)."""
        for name, values in self.lists.items():
            if values:
                self._chunks[name].append(pa.array(values, self.types[name]))
        self.rows += len(next(iter(self.lists.values()), []))
        for values in self.lists.values():
            values.clear()

    def full(self) -> bool:
        """Whether BATCH_ROWS rows wait to be flushed."""
        return len(next(iter(self.lists.values()), [])) >= BATCH_ROWS

    def array(self, name: str) -> pa.Array:
        """Every row of column ``name`` (flushed first), as one array; handed over once."""
        self.flush()
        chunks = self._chunks.pop(name)
        if not chunks:
            return pa.array([], self.types[name])
        whole = pa.concat_arrays(chunks)
        del chunks
        release()
        return whole

    def discard(self, name: str) -> None:
        """Drop column ``name`` unread (a column the trace turned out not to need)."""
        self.flush()
        self._chunks.pop(name)

    def numpy(self, name: str) -> np.ndarray:
        return self.array(name).to_numpy(zero_copy_only=False)


def classify_paths(paths: pa.Array, classifier: Classifier | None) -> pa.Array:
    """The class of each path; each distinct path is classified once."""
    distinct = pc.unique(paths)
    classify = (classifier or Classifier()).classify
    classes = pa.array([classify(p) for p in distinct.to_pylist()], pa.string())
    return pc.take(classes, pc.index_in(paths, value_set=distinct))


def release() -> None:
    """Give the memory of the arrays freed so far back to the system.

    Arrow's default pool (mimalloc) keeps freed pages for later allocations of their
    size: the small buffers of the batches and the row-length intermediates of one
    column cannot hold the next column, so without this each column's freed
    intermediates stayed resident and the peak was their sum, 3-4 times the trace.
    """
    pa.default_memory_pool().release_unused()


class Distinct:
    """The distinct values of a text field, numbered in order of first appearance.

    A reader keeps such a field as int32 codes: a column of a few distinct values (a
    method, a client) then takes 4 bytes a row until the trace's column is built from
    the codes, once, in the trace's order, instead of a string column per batch, their
    concatenation and its reordered copy.
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def code(self, value: str) -> int:
        return self.index.setdefault(value, len(self.index))

    def decode(self, codes: pa.Array) -> pa.Array:
        """The values the codes stand for, as a string column."""
        return pa.array(list(self.index), pa.string()).take(codes)


def session_keys(key: np.ndarray, s: Any) -> np.ndarray:
    """The key of each session of ``s`` (each row's ``key`` given in file order): a
    session is the requests of one key, so what the key names (a client) is the
    session's, and need not be kept row by row."""
    first = np.flatnonzero(s.session[1:] != s.session[:-1]) + 1
    return key[s.order[np.r_[0, first]]]


def _in_order(order: np.ndarray) -> bool:
    """Whether the permutation ``order`` leaves the rows where they are (a log already in
    session order, as a recorded-session log usually is): then no column is reordered."""
    return bool(np.all(order[1:] > order[:-1]))


def session_columns(
    rows: Columns,
    s: Any,
    classifier: Any,
    rt: np.ndarray | None = None,
    *,
    methods: Distinct,
    clients: pa.Array,
) -> dict[str, Any]:
    """A trace's columns from the rows read, in the session order ``s`` (a
    :func:`shrink.ingest.sessionize.sessionize` result) gives; ``rt`` where the log
    records response times. ``rows`` holds the method as ``methods`` codes; ``clients``
    is the client of each session (:func:`session_keys`). Each column is built on its
    own, its rows released before the next, so that one extra column is alive at most.
    """
    in_order = _in_order(s.order)
    o = None if in_order else pa.array(s.order)
    out: dict[str, Any] = {
        "session": s.session,
        "burst": s.burst,
        "t": s.t,
        "think": s.think,
        "client": clients.take(pa.array(s.session)),
    }
    for name in ("method", "path", "bytes", "status"):
        column = rows.array(name)
        if o is not None:
            column = column.take(o)  # the rows in file order are freed here
            release()
        out[name] = methods.decode(column) if name == "method" else column
    out["cls"] = classify_paths(out["path"], classifier)
    if rt is not None:
        out["rt"] = rt if in_order else rt[s.order]
    return out
