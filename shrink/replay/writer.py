"""Incremental RunLog writer: what was measured survives an interrupted run.

The engine appends one row per finished (or failed) request to plain Python
lists, cheap enough for the hot path; :meth:`RunLogWriter.maybe_flush` turns them
into a Parquet row group every ``flush_rows`` rows or ``flush_seconds`` seconds.
Strings that repeat (class, target, error) are kept as small integer codes until
the flush. :meth:`close` writes the rest and the footer; it is called from a
``finally`` so Ctrl-C, a crashed server or an engine error still leave a readable
file with every row measured so far.
"""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shrink.runlog import META_KEY, RUNLOG_SCHEMA, RunLog

__all__ = ["WRITER_SCHEMA", "RunLogWriter"]

# array typecodes of the columns, in WRITER_SCHEMA order
_TYPECODES = ("d", "d", "d", "d", "i", "q", "b", "q", "i", "i", "d")

# The RunLog columns plus ``dispatched``: when the engine handed the request to a
# connection (or began connecting for it). ``dispatched - intended`` is the
# generator's own lateness; ``sent`` also includes the server's TCP accept.
WRITER_SCHEMA = pa.schema([*RUNLOG_SCHEMA, pa.field("dispatched", pa.float64())])


class _Codes:
    """A string <-> small int table (the hot path stores ints)."""

    def __init__(self, initial: tuple[str, ...] = ()) -> None:
        self.names: list[str] = list(initial)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}

    def code(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.names)
            self.names.append(name)
        return i


class RunLogWriter:
    """Append-only RunLog rows, flushed to ``path`` as Parquet row groups.

    ``path=None`` keeps everything in memory (tests, in-process sweeps).
    """

    def __init__(
        self,
        path: str | Path | None,
        meta: dict[str, Any] | None = None,
        *,
        flush_rows: int = 65536,
        flush_seconds: float = 1.0,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.meta: dict[str, Any] = dict(meta or {})
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.cls = _Codes(("static", "dynamic"))
        self.targets = _Codes()
        self.errors = _Codes(("",))
        # Typed arrays, one per column: appends are cheap, and a flush copies
        # them out as memory rather than converting Python objects (which would
        # stall the event loop for milliseconds at high rates).
        self.cols_ = tuple(array(code) for code in _TYPECODES)
        self.appends = tuple(c.append for c in self.cols_)
        self._tables: list[pa.Table] = []  # kept for the in-memory RunLog
        self._writer: pq.ParquetWriter | None = None
        self._last_flush = time.monotonic()
        self.rows = 0
        self.closed = False
        self._schema = WRITER_SCHEMA
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def _open(self) -> None:
        """Open the file at the first flush, so ``meta`` may be completed until then."""
        self._schema = WRITER_SCHEMA.with_metadata(
            {META_KEY: json.dumps(self.meta, sort_keys=True, default=str).encode()}
        )
        if self.path is not None and self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self._schema, compression="zstd")

    def add(
        self,
        intended: float,
        sent: float,
        first_byte: float,
        done: float,
        status: int,
        nbytes: int,
        cls_code: int,
        session: int,
        target_code: int,
        error_code: int,
        dispatched: float = float("nan"),
    ) -> None:
        """One request's row (codes from :attr:`cls`, :attr:`targets`, :attr:`errors`)."""
        row = (
            intended, sent, first_byte, done, status, nbytes, cls_code, session,
            target_code, error_code, dispatched,
        )  # fmt: skip
        for append, value in zip(self.appends, row, strict=True):
            append(value)

    def pending(self) -> int:
        return len(self.cols_[0])

    def maybe_flush(self, now: float | None = None) -> None:
        """Flush if enough rows or time have accumulated (called off the hot path)."""
        n = self.pending()
        if not n:
            return
        now = time.monotonic() if now is None else now
        if n >= self.flush_rows or now - self._last_flush >= self.flush_seconds:
            self.flush()

    def _dict_column(self, codes: np.ndarray, names: list[str]) -> pa.Array:
        idx = pa.array(codes.astype(np.int32))
        return pa.DictionaryArray.from_arrays(idx, pa.array(names, pa.string())).cast(pa.string())

    def flush(self) -> None:
        """Write the pending rows as one row group."""
        n = self.pending()
        self._last_flush = time.monotonic()
        if not n:
            return
        if not self._tables:
            self._open()
        c = []
        for col in self.cols_:
            c.append(np.frombuffer(col, dtype=col.typecode).copy())
            del col[:]
        arrays = [
            pa.array(c[0], pa.float64()),
            pa.array(c[1], pa.float64()),
            pa.array(c[2], pa.float64()),
            pa.array(c[3], pa.float64()),
            pa.array(c[4], pa.int32()),
            pa.array(c[5], pa.int64()),
            self._dict_column(c[6], self.cls.names),
            pa.array(c[7], pa.int64()),
            self._dict_column(c[8], self.targets.names),
            self._dict_column(c[9], self.errors.names),
            pa.array(c[10], pa.float64()),
        ]
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        self.rows += n
        self._tables.append(table)
        if self._writer is not None:
            self._writer.write_table(table)

    def close(self) -> None:
        """Flush and write the footer; safe to call twice."""
        if self.closed:
            return
        try:
            self.flush()
            if not self._tables:
                self._open()  # an empty run still leaves a readable file
        finally:
            self.closed = True
            if self._writer is not None:
                self._writer.close()

    def runlog(self) -> RunLog:
        """Everything written so far as a RunLog (flushes first)."""
        if not self.closed:
            self.flush()
        if not self._tables:
            return RunLog(WRITER_SCHEMA.empty_table(), self.meta)
        table = pa.concat_tables(self._tables).replace_schema_metadata(None)
        return RunLog(table, self.meta)
