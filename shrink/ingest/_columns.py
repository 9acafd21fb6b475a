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

__all__ = ["Columns", "classify_paths"]

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
        return pa.concat_arrays(chunks) if chunks else pa.array([], self.types[name])

    def numpy(self, name: str) -> np.ndarray:
        return self.array(name).to_numpy(zero_copy_only=False)


def classify_paths(paths: pa.Array, classifier: Classifier | None) -> pa.Array:
    """The class of each path; each distinct path is classified once."""
    distinct = pc.unique(paths)
    classify = (classifier or Classifier()).classify
    classes = pa.array([classify(p) for p in distinct.to_pylist()], pa.string())
    return pc.take(classes, pc.index_in(paths, value_set=distinct))


def session_columns(
    rows: Columns, s: Any, classifier: Any, rt: np.ndarray | None = None
) -> dict[str, Any]:
    """A trace's columns from the rows read, in the session order ``s`` (a
    :func:`shrink.ingest.sessionize.sessionize` result) gives; ``rt`` where the log
    records response times."""
    o = pa.array(s.order)
    paths = rows.array("path").take(o)
    out = {
        "session": s.session,
        "burst": s.burst,
        "t": s.t,
        "think": s.think,
        "method": rows.array("method").take(o),
        "path": paths,
        "cls": classify_paths(paths, classifier),
        "bytes": rows.array("bytes").take(o),
        "status": rows.array("status").take(o),
    }
    if rt is not None:
        out["rt"] = rt[s.order]
    out["client"] = rows.array("client").take(o)
    return out

