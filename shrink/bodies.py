"""The bound on a recorded request body, and its check where a body enters.

A body enters as a Parquet trace's ``body`` column, a captured request's
Content-Length (or chunked) bytes, or a session log's ``contents=``. A replay holds
each distinct body several times over (the trace's column, the request's key, the
built request), so one body past every server's upload limit (300 MB, 14 MB on disk)
took gigabytes to replay. The check reads a column's value lengths from its offsets,
before any body becomes a Python object.

The bound, :data:`shrink.defaults.MAX_BODY`, and why it is 100 MiB: see
:mod:`shrink.defaults`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.defaults import MAX_BODY
from shrink.errors import TraceFormatError

__all__ = ["MAX_BODY", "body_lengths", "check_bodies", "largest_body", "too_large"]


def too_large(size: int, max_body: int) -> str:
    """What is wrong with a body of ``size`` bytes, and the option that allows it."""
    return (
        f"a body of {size:,} bytes, longer than --max-body ({max_body:,} bytes); "
        "raise it if the body is meant"
    )


def body_lengths(table: pa.Table) -> np.ndarray:
    """Each row's body length in bytes (0 without one), from the column's offsets: no
    body is copied."""
    if "body" not in table.column_names:
        return np.zeros(table.num_rows, np.int64)
    col = table.column("body")
    if col.num_chunks == 0:
        return np.zeros(0, np.int64)
    lengths = pc.fill_null(pc.binary_length(col), 0)
    return np.concatenate([c.to_numpy() for c in lengths.chunks]).astype(np.int64)


def largest_body(table: pa.Table) -> int:
    """The longest body of the table's rows, in bytes (0 without a body)."""
    lengths = body_lengths(table)
    return int(lengths.max()) if lengths.size else 0


def check_bodies(table: pa.Table, path: Path, max_body: int) -> None:
    """A TraceFormatError naming the file, the first row (and its session) whose body
    is longer than ``max_body`` bytes, and the column."""
    lengths = body_lengths(table)
    over = np.flatnonzero(lengths > max_body)
    if over.size:
        row = int(over[0])
        session = table.column("session")[row].as_py()
        raise TraceFormatError(
            f"row {row} (session {session}), column body: {too_large(int(lengths[row]), max_body)}",
            path=path,
        )
