"""The RunLog: one row per request sent by the replay engine (or the simulator).

=============  =======  ======================================================
column         type     meaning
=============  =======  ======================================================
intended       float64  when the schedule said to send it (monotonic seconds)
sent           float64  when the first byte went out (NaN: never sent)
first_byte     float64  first response byte (NaN: none)
done           float64  last response byte (NaN: not completed)
status         int32    HTTP status, 0 when there was no response
bytes          int64    reply bytes received (body), -1 unknown
cls            string   ``static`` or ``dynamic`` (from the trace)
session        int64    session id (from the trace)
target         string   replica address:port the request went to
error          string   "" when fine, else a short reason (timeout, reset, refused)
=============  =======  ======================================================

Latency is ``done - intended``: counted from the intended send time, never from
when the client got round to sending (coordinated omission).

A request is a **success** only when its response arrived whole (``done``
finite, no ``error``) with a 2xx or 3xx status, as wrk ("Non-2xx or 3xx
responses") and httperf ("Reply status") count. Every other request is a
failure of one class (:data:`FAILURE_CLASSES`): ``transport`` (no whole
response: refused, reset, timeout, cut, a malformed or 1xx-only answer),
``http_4xx`` or ``http_5xx``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink import files
from shrink.errors import TraceFormatError
from shrink.parquet_meta import META_KEY as META_KEY  # the run log writer streams with it
from shrink.parquet_meta import meta_of, write_with_meta
from shrink.parquet_read import memory_refused, read_bounded
from shrink.schemas import ParquetMeta

__all__ = ["FAILURE_CLASSES", "RUNLOG_SCHEMA", "RunLog"]

RUNLOG_SCHEMA = pa.schema(
    [
        pa.field("intended", pa.float64()),
        pa.field("sent", pa.float64()),
        pa.field("first_byte", pa.float64()),
        pa.field("done", pa.float64()),
        pa.field("status", pa.int32()),
        pa.field("bytes", pa.int64()),
        pa.field("cls", pa.string()),
        pa.field("session", pa.int64()),
        pa.field("target", pa.string()),
        pa.field("error", pa.string()),
    ]
)
RUNLOG_COLUMNS: tuple[str, ...] = tuple(RUNLOG_SCHEMA.names)
FAILURE_CLASSES: tuple[str, ...] = ("transport", "http_4xx", "http_5xx")


class RunLog:
    """Per-request measurements of one run, with provenance in ``meta``."""

    __slots__ = ("_table", "meta")

    def __init__(self, table: pa.Table, meta: Mapping[str, Any] | None = None) -> None:
        missing = [c for c in RUNLOG_COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(f"RunLog table lacks columns {missing}")
        extra = [c for c in table.column_names if c not in RUNLOG_COLUMNS]
        self._table = table.select([*RUNLOG_COLUMNS, *extra]).cast(
            pa.schema([*RUNLOG_SCHEMA, *(table.schema.field(c) for c in extra)])
        )
        self.meta: dict[str, Any] = dict(meta or {})

    @classmethod
    def from_columns(
        cls, columns: Mapping[str, Iterable[Any]], meta: Mapping[str, Any] | None = None
    ) -> RunLog:
        n = len(np.asarray(columns["intended"]))
        defaults: dict[str, Any] = {
            "sent": np.full(n, np.nan),
            "first_byte": np.full(n, np.nan),
            "done": np.full(n, np.nan),
            # a row with a response and no status given is taken as a plain 200
            "status": np.where(
                np.isfinite(np.asarray(columns.get("done", np.full(n, np.nan)), np.float64)),
                200,
                0,
            ).astype(np.int32),
            "bytes": np.full(n, -1, np.int64),
            "cls": ["static"] * n,
            "session": np.zeros(n, np.int64),
            "target": [""] * n,
            "error": [""] * n,
        }
        arrays = {}
        for f in RUNLOG_SCHEMA:
            vals = columns.get(f.name, defaults.get(f.name))
            arrays[f.name] = pa.array(
                vals if not isinstance(vals, np.ndarray) or vals.dtype != object else vals.tolist(),
                type=f.type,
            )
        extra = {k: pa.array(v) for k, v in columns.items() if k not in RUNLOG_COLUMNS}
        return cls(pa.table({**arrays, **extra}), meta)

    @classmethod
    def concat(cls, logs: Iterable[RunLog], meta: Mapping[str, Any] | None = None) -> RunLog:
        logs = list(logs)
        if not logs:
            return cls(RUNLOG_SCHEMA.empty_table(), meta)
        table = pa.concat_tables([lg.table for lg in logs], promote_options="default")
        return cls(table, meta if meta is not None else logs[0].meta)

    @property
    def table(self) -> pa.Table:
        return self._table

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        return f"RunLog({len(self)} requests)"

    def column(self, name: str) -> np.ndarray:
        col = self._table.column(name)
        if pa.types.is_string(col.type):
            return np.asarray(col.to_pylist(), dtype=object)
        return col.to_numpy(zero_copy_only=False)

    def _arrived(self) -> np.ndarray:
        """Requests whose response arrived whole (a finite ``done`` and no error)."""
        done = self._table.column("done").to_numpy(zero_copy_only=False)
        err = pc.equal(self._table.column("error"), "").to_numpy(zero_copy_only=False)
        return np.isfinite(done) & err

    def ok_mask(self) -> np.ndarray:
        """Successes: a whole response with a 2xx or 3xx status (see the module docstring)."""
        status = self._table.column("status").to_numpy(zero_copy_only=False)
        return self._arrived() & (status >= 200) & (status < 400)

    def failure_masks(self) -> dict[str, np.ndarray]:
        """Per failure class (:data:`FAILURE_CLASSES`), which requests failed so."""
        status = self._table.column("status").to_numpy(zero_copy_only=False)
        arrived = self._arrived() & (status >= 200) & (status < 600)
        return {
            "transport": ~arrived,
            "http_4xx": arrived & (status >= 400) & (status < 500),
            "http_5xx": arrived & (status >= 500),
        }

    def cut_off(self, kinds: tuple[str, ...] = ("cut", "unsent")) -> np.ndarray:
        """Requests the run's end cut off: in flight then (``cut``) or never sent
        (``unsent``); ``kinds`` picks which of the two."""
        err = self._table.column("error")
        return pc.is_in(err, value_set=pa.array(list(kinds), pa.string())).to_numpy(
            zero_copy_only=False
        )

    def failures(self, mask: np.ndarray | None = None) -> dict[str, int]:
        """Failure counts by class, over the requests ``mask`` selects (all by default)."""
        out = {}
        for name, m in self.failure_masks().items():
            out[name] = int(np.sum(m if mask is None else m & mask))
        return out

    def timed_out_answering(self, mask: np.ndarray | None = None) -> int:
        """How many requests (of those ``mask`` selects) timed out after their answer's
        first byte had come: the server was up and answering, too slowly."""
        timeout = pc.fill_null(pc.equal(self._table.column("error"), "timeout"), False)
        err = timeout.to_numpy(zero_copy_only=False)
        fb = self._table.column("first_byte").to_numpy(zero_copy_only=False)
        begun = err & np.isfinite(fb)
        return int(np.sum(begun if mask is None else begun & mask))

    def latencies(self, cls: str | None = None) -> np.ndarray:
        """Response times (done - intended, seconds) of completed requests, optionally one class."""
        mask = self.ok_mask()
        if cls is not None:
            mask &= pc.equal(self._table.column("cls"), cls).to_numpy(zero_copy_only=False)
        done = self._table.column("done").to_numpy(zero_copy_only=False)
        intended = self._table.column("intended").to_numpy(zero_copy_only=False)
        return (done - intended)[mask]

    def send_lag(self) -> np.ndarray:
        """How late each request went out against its schedule (sent - intended)."""
        sent = self._table.column("sent").to_numpy(zero_copy_only=False)
        intended = self._table.column("intended").to_numpy(zero_copy_only=False)
        lag = sent - intended
        return lag[np.isfinite(lag)]

    def window(self, start: float, end: float) -> RunLog:
        """Requests whose intended time falls in [start, end) (a measurement window)."""
        intended = self._table.column("intended").to_numpy(zero_copy_only=False)
        mask = (intended >= start) & (intended < end)
        return RunLog(self._table.filter(pa.array(mask)), self.meta)

    def write_parquet(self, path: str | Path) -> Path:
        return write_with_meta(self._table, self.meta, Path(path), ParquetMeta)

    @classmethod
    def read_parquet(cls, path: str | Path) -> RunLog:
        path = files.seekable_file(path, what="run log")
        try:
            table = read_bounded(path)
            # Parquet does not promise valid UTF-8 in string columns (the trace's reader
            # checks the same): a bad byte was a UnicodeDecodeError in column().
            table.validate(full=True)
        except FileNotFoundError:
            raise TraceFormatError("no such file", path=path) from None
        except MemoryError as exc:
            raise memory_refused(exc, path) from None
        except (pa.ArrowException, OSError, ValueError, TypeError, IndexError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise TraceFormatError(f"not a readable Parquet run log ({first})", path=path) from None
        meta = meta_of(table, path, "run log metadata", ParquetMeta)
        return cls(_checked(table.replace_schema_metadata(None), path), meta)


def _checked(table: pa.Table, path: Path) -> pa.Table:
    """A run log's columns as the writer writes them, else an error naming the column
    (or its first null row, where text is written): none is missing, each casts to
    its type, and the text columns (class, target, error) hold no null."""
    missing = [c for c in RUNLOG_COLUMNS if c not in table.column_names]
    if missing:
        raise TraceFormatError(f"not a run log: it lacks columns {missing}", path=path)
    for f in RUNLOG_SCHEMA:
        i = table.column_names.index(f.name)
        col = table.column(i)
        try:
            col = col.cast(f.type)
        except (pa.ArrowException, ValueError, OverflowError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise TraceFormatError(
                f"column {f.name!r} is of type {table.column(i).type}, which does not read "
                f"as {f.type} ({first})",
                path=path,
            ) from None
        if pa.types.is_string(f.type) and col.null_count:
            row = int(pc.index(pc.is_null(col), True).as_py())
            raise TraceFormatError(f"row {row}: column {f.name!r} is null", path=path)
        table = table.set_column(i, f, col)
    return table
