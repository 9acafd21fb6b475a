"""The Trace: sessions -> bursts -> requests, columnar, with its provenance.

One row per request, in session order then burst order then the order of the
requests inside the burst (a Parquet file whose rows interleave sessions, sorted
by time, is read grouped: rows stably sorted by session, then burst). The columns
are fixed by DESIGN.md:

=========  ========  =========================================================
column     type      meaning
=========  ========  =========================================================
session    int64     session (user equivalent) id; load is balanced by session
burst      int32     burst index inside the session (0, 1, ...); a burst is a
                     page request and its embedded requests
t          float64   intended send time of the burst's first request, seconds
                     from trace start (same value on every row of the burst)
think      float64   think time after the burst, seconds (same on every row)
method     string    HTTP method
path       string    request target (path and query)
cls        string    ``static`` or ``dynamic``
bytes      int64     reply size in bytes, -1 unknown
status     int32     recorded HTTP status, 0 unknown
rt         float64   recorded response time in seconds, NaN unknown
client     string    client identity (address, user id), "" unknown
=========  ========  =========================================================

Optional columns a reader may add (kept through sampling and Parquet):
``body`` (binary: the request body's bytes as recorded, for wsesslog ``contents=``; a
trace written with a string body reads as its UTF-8), ``content_type`` (string: the
Content-Type header the request carried, as sent; null or "" none), ``server``, ``conn``
(connection id), ``ttfb`` (recorded time to first response byte, seconds),
``answered`` (bool: a response was seen).

Provenance (source file, reader, sampler, alpha, seed, parent id ...) lives in
``Trace.meta`` and is written to the Parquet schema metadata under ``shrink``.
"""

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink import files
from shrink._version import __version__
from shrink.atomic import atomic_file
from shrink.bodies import MAX_BODY, check_bodies
from shrink.checks import MAX_SECONDS
from shrink.errors import TraceFormatError
from shrink.jsonout import dumps
from shrink.parquet_meta import meta_of, write_with_meta
from shrink.parquet_read import check_footer, memory_refused, read_bounded, schema_of

__all__ = [
    "COLUMNS",
    "EXTRA_COLUMNS",
    "SCHEMA",
    "WRITE_BATCH",
    "Trace",
    "TraceInfo",
    "check_values",
]

SCHEMA = pa.schema(
    [
        pa.field("session", pa.int64(), nullable=False),
        pa.field("burst", pa.int32(), nullable=False),
        pa.field("t", pa.float64(), nullable=False),
        pa.field("think", pa.float64(), nullable=False),
        pa.field("method", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("cls", pa.string(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("status", pa.int32(), nullable=False),
        pa.field("rt", pa.float64(), nullable=False),
        pa.field("client", pa.string(), nullable=False),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)

EXTRA_COLUMNS: dict[str, pa.DataType] = {
    "body": pa.binary(),
    "content_type": pa.string(),
    "server": pa.string(),
    "conn": pa.int64(),
    "ttfb": pa.float64(),
    "answered": pa.bool_(),
}

_DEFAULTS: dict[str, Any] = {
    "burst": 0,
    "think": 0.0,
    "method": "GET",
    "cls": "static",
    "bytes": -1,
    "status": 0,
    "rt": float("nan"),
    "client": "",
}


def _shrink_version() -> str:
    return __version__


@dataclass(frozen=True)
class TraceInfo:
    """Summary statistics of a trace (``shrink trace info``)."""

    sessions: int
    requests: int
    bursts: int
    duration: float
    request_rate: float
    dynamic_fraction: float
    static_fraction: float
    bytes_quantiles: dict[str, float]
    think_quantiles: dict[str, float]
    requests_per_session: dict[str, float]
    unknown_bytes: int
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "shrink.trace-info/1",
            "sessions": self.sessions,
            "requests": self.requests,
            "bursts": self.bursts,
            "duration": self.duration,
            "request_rate": self.request_rate,
            "dynamic_fraction": self.dynamic_fraction,
            "static_fraction": self.static_fraction,
            "bytes_quantiles": self.bytes_quantiles,
            "think_quantiles": self.think_quantiles,
            "requests_per_session": self.requests_per_session,
            "unknown_bytes": self.unknown_bytes,
            "meta": self.meta,
        }


_QUANTILES = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
# Rows a writer turns into Python objects at once (write_jsonl, the wsesslog writer): the
# whole of a 20 M-request trace took 10-13 GB before a byte was written.
WRITE_BATCH = 65_536


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    qs = np.quantile(values, _QUANTILES)
    names = ("min", "p25", "p50", "p75", "p90", "p99", "max")
    out = {n: float(q) for n, q in zip(names, qs, strict=True)}
    out["mean"] = float(values.mean())
    return out


class Trace:
    """An immutable, columnar trace backed by a :class:`pyarrow.Table`.

    Build one with :meth:`from_columns` (plain Python/numpy columns; missing
    optional columns get their defaults) or :meth:`from_table`; read one with
    :meth:`read_parquet`. Selections (:meth:`take`, :meth:`filter`) return new
    traces that keep the provenance.
    """

    __slots__ = ("_fingerprint", "_table", "meta")

    def __init__(self, table: pa.Table, meta: Mapping[str, Any] | None = None) -> None:
        self._table = _conform(table)
        self.meta: dict[str, Any] = dict(meta or {})
        self._fingerprint: str | None = None

    # construction -------------------------------------------------------
    @classmethod
    def from_columns(
        cls, columns: Mapping[str, Iterable[Any]], meta: Mapping[str, Any] | None = None
    ) -> Trace:
        """Build a trace from columns; ``session``, ``t`` and ``path`` are required."""
        missing = {"session", "t", "path"} - set(columns)
        if missing:
            raise ValueError(f"Trace.from_columns: missing required columns {sorted(missing)}")
        n = len(np.asarray(columns["session"]))
        arrays: dict[str, pa.Array] = {}
        for name in COLUMNS:
            typ = SCHEMA.field(name).type
            if name in columns:
                arrays[name] = pa.array(_as_list_or_np(columns[name]), type=typ)
            else:
                # Built in Arrow: a list of n Python strings took 8n bytes more.
                arrays[name] = pa.repeat(pa.scalar(_DEFAULTS[name], typ), n)
        for name, typ in EXTRA_COLUMNS.items():
            if name in columns:
                arrays[name] = pa.array(_as_list_or_np(columns[name]), type=typ)
        unknown = set(columns) - set(COLUMNS) - set(EXTRA_COLUMNS)
        if unknown:
            raise ValueError(f"Trace.from_columns: unknown columns {sorted(unknown)}")
        return cls(pa.table(arrays), meta)

    @classmethod
    def from_table(cls, table: pa.Table, meta: Mapping[str, Any] | None = None) -> Trace:
        return cls(table, meta)

    @classmethod
    def empty(cls, meta: Mapping[str, Any] | None = None) -> Trace:
        return cls(SCHEMA.empty_table(), meta)

    # access ----------------------------------------------------------------
    @property
    def table(self) -> pa.Table:
        """The Arrow table (immutable; share freely)."""
        return self._table

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        return f"Trace({len(self)} requests, {self.n_sessions} sessions)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self.same_rows(other) and self.meta == other.meta

    def same_rows(self, other: Trace) -> bool:
        """Same columns and values (NaN equal to NaN), whatever the provenance."""
        return (
            self._table.schema.equals(other._table.schema)
            and len(self) == len(other)
            and self.fingerprint() == other.fingerprint()
        )

    __hash__ = None  # type: ignore[assignment]

    def column(self, name: str) -> np.ndarray:
        """One column as a numpy array (strings and bytes come back as an object array)."""
        col = self._table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_binary(col.type):
            return np.asarray(col.to_pylist(), dtype=object)
        return col.to_numpy()

    def has(self, name: str) -> bool:
        return name in self._table.column_names

    @property
    def n_sessions(self) -> int:
        if len(self) == 0:
            return 0
        return int(np.unique(self._table.column("session").to_numpy()).size)

    def session_starts(self) -> tuple[np.ndarray, np.ndarray]:
        """(session ids, start time) in order of first appearance."""
        s = self._table.column("session").to_numpy()
        t = self._table.column("t").to_numpy()
        if s.size == 0:
            return s, t
        first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        return s[first], t[first]

    # selection ---------------------------------------------------------------
    def take(self, indices: np.ndarray | Iterable[int], **meta: Any) -> Trace:
        """Rows at ``indices`` (in that order); ``meta`` updates the provenance."""
        idx = pa.array(np.asarray(indices, dtype=np.int64))
        return Trace(self._table.take(idx), {**self.meta, **meta})

    def filter(self, mask: np.ndarray, **meta: Any) -> Trace:
        """Rows where ``mask`` is true; ``meta`` updates the provenance."""
        return Trace(
            self._table.filter(pa.array(np.asarray(mask, dtype=bool))), {**self.meta, **meta}
        )

    def with_column(self, name: str, values: Iterable[Any]) -> Trace:
        """A copy with one column replaced (or an optional column added)."""
        typ = SCHEMA.field(name).type if name in COLUMNS else EXTRA_COLUMNS[name]
        arr = pa.array(_as_list_or_np(values), type=typ)
        if name in self._table.column_names:
            i = self._table.column_names.index(name)
            table = self._table.set_column(i, name, arr)
        else:
            table = self._table.append_column(name, arr)
        return Trace(table, self.meta)

    def with_meta(self, **meta: Any) -> Trace:
        return Trace(self._table, {**self.meta, **meta})

    # identity ---------------------------------------------------------------
    def fingerprint(self) -> str:
        """A short content hash of the rows (not the metadata): a parent's identity, a curve's."""
        if self._fingerprint is None:  # hashed once: a sweep records it after every level
            h = hashlib.sha256()
            for name in self._table.column_names:
                col = self._table.column(name).combine_chunks()
                for buf in col.buffers():
                    if buf is not None:
                        h.update(memoryview(buf))  # no copy: hashing 1M rows stays cheap
                h.update(name.encode())
            h.update(str(len(self)).encode())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    # I/O ---------------------------------------------------------------------
    def write_parquet(self, path: str | Path) -> Path:
        """Write Parquet with provenance in the schema metadata; same inputs give same bytes."""
        meta = {"shrink_version": _shrink_version(), **self.meta}
        return write_with_meta(self._table, meta, Path(path))

    @classmethod
    def read_parquet(cls, path: str | Path, *, max_body: int = MAX_BODY) -> Trace:
        """The trace in ``path``; a body longer than ``max_body`` bytes is an error naming
        its row, told from the column's offsets before any body is copied."""
        path = Path(path)
        table = _read_table(path, "trace")
        meta = meta_of(table, path, "trace's metadata")
        missing = [c for c in COLUMNS if c not in table.column_names]
        if missing:
            raise TraceFormatError(f"Parquet file lacks trace columns {missing}", path=path)
        table = _typed_columns(table, path)
        try:
            trace = cls(table.replace_schema_metadata(None), meta)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise TraceFormatError(
                f"a column has the wrong type: {_first_line(exc)}", path=path
            ) from None
        check_values(trace._table, path)
        check_bodies(trace._table, path, max_body)
        grouped = _grouped(trace._table)
        return trace if grouped is trace._table else cls(grouped, meta)

    def write_jsonl(self, path: str | Path) -> Path:
        """JSON Lines, one request per line (NaN rt written as null; a body that is not
        UTF-8 as ``body_base64``)."""
        path = Path(path)
        with atomic_file(path, "w", encoding="utf-8") as fh:
            # A batch at a time: the whole table as Python dicts took over 13 GB for
            # a trace of 20 M requests (a 34 MB Parquet file) before a byte was written.
            for batch in self._table.to_batches(max_chunksize=WRITE_BATCH):
                for row in batch.to_pylist():
                    rt = row.get("rt")
                    if rt is not None and rt != rt:  # NaN
                        row["rt"] = None
                    if isinstance(body := row.get("body"), bytes):  # JSON holds text only
                        try:
                            row["body"] = body.decode("utf-8")
                        except UnicodeDecodeError:
                            row["body_base64"] = base64.b64encode(row.pop("body")).decode()
                    fh.write(dumps(row, separators=(",", ":")) + "\n")
        return path

    # statistics ----------------------------------------------------------------
    def info(self) -> TraceInfo:
        n = len(self)
        if n == 0:
            return TraceInfo(0, 0, 0, 0.0, 0.0, 0.0, 0.0, {}, {}, {}, 0, dict(self.meta))
        s = self._table.column("session").to_numpy()
        b = self._table.column("burst").to_numpy()
        t = self._table.column("t").to_numpy()
        think = self._table.column("think").to_numpy()
        cls_col = self._table.column("cls")
        dynamic = int(pc.sum(pc.equal(cls_col, "dynamic")).as_py() or 0)
        nbytes = self._table.column("bytes").to_numpy()
        burst_start = np.r_[True, (s[1:] != s[:-1]) | (b[1:] != b[:-1])]
        _, per_session = np.unique(s, return_counts=True)
        duration = float(t.max() - t.min()) if n else 0.0
        known = nbytes[nbytes >= 0]
        return TraceInfo(
            sessions=int(per_session.size),
            requests=n,
            bursts=int(burst_start.sum()),
            duration=duration,
            request_rate=n / duration if duration > 0 else float("nan"),
            dynamic_fraction=dynamic / n,
            static_fraction=1.0 - dynamic / n,
            bytes_quantiles=_quantiles(known.astype(np.float64)),
            think_quantiles=_quantiles(think[burst_start]),
            requests_per_session=_quantiles(per_session.astype(np.float64)),
            unknown_bytes=int(n - known.size),
            meta=dict(self.meta),
        )


def _read_table(path: Path, what: str) -> pa.Table:
    """A Parquet file as a table; anything pyarrow cannot read is one line naming the file."""
    files.seekable_file(path, what=what)
    try:
        _parquet_magic(path, what)
        check_footer(path)  # read_schema parses the footer too
        _unique_names(schema_of(path).names, path)
        table = read_bounded(path)
        # Parquet does not promise valid UTF-8 in string columns; a bad byte would
        # otherwise surface as a UnicodeDecodeError wherever a column is first read.
        table.validate(full=True)
        return table
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except MemoryError as exc:
        raise memory_refused(exc, path) from None
    except (pa.ArrowException, OSError, ValueError, TypeError, IndexError) as exc:
        # pyarrow's messages are long and multi-line: the first line says what broke.
        raise TraceFormatError(
            f"not a readable Parquet {what} ({_first_line(exc)})", path=path
        ) from None


def _parquet_magic(path: Path, what: str) -> None:
    """A file that is no Parquet at all (a log, a capture) is told what reads it: pyarrow
    said "Parquet magic bytes not found in footer. Either the file is corrupted or ..."."""
    with path.open("rb") as fh:
        head = fh.read(4)
    if not head:
        raise TraceFormatError(f"the file is empty: not a Parquet {what}", path=path)
    if head[:2] == b"\x1f\x8b":
        raise TraceFormatError(
            f"gzip-compressed: gunzip it first (a Parquet {what} is read by seeking)", path=path
        )
    if head != b"PAR1":
        raise TraceFormatError(
            f"not a Parquet {what} (it does not start with PAR1); a log or a capture is "
            "read by 'shrink ingest FILE -o TRACE.parquet' first",
            path=path,
        )


def _unique_names(names: list[str], path: Path) -> None:
    """A column named twice is refused by its name: pyarrow's own message ("Multiple
    matches for FieldRef.Name(path) in session: int64 not null ...") quoted the schema."""
    twice = sorted(n for n, k in Counter(names).items() if k > 1)
    if twice:
        raise TraceFormatError(
            f"column(s) {', '.join(map(repr, twice))} appear more than once; a trace "
            "names each column once",
            path=path,
        )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _kind(typ: pa.DataType) -> str:
    """The kind of value a trace column holds, in words."""
    if pa.types.is_integer(typ):
        return "an integer"
    if pa.types.is_floating(typ):
        return "a number"
    if pa.types.is_boolean(typ):
        return "a boolean"
    if pa.types.is_binary(typ):
        return "bytes or a string"
    return "a string"


def _fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether a Parquet column of type ``got`` holds the values of a ``want`` column:
    the same kind (an integer column may hold a float's values), never a string's
    digits for a number nor a number for a string."""
    if pa.types.is_dictionary(got):
        got = got.value_type
    if pa.types.is_integer(want):
        return pa.types.is_integer(got)
    if pa.types.is_floating(want):
        return pa.types.is_integer(got) or pa.types.is_floating(got)
    if pa.types.is_boolean(want):
        return pa.types.is_boolean(got)
    text = pa.types.is_string(got) or pa.types.is_large_string(got)
    if pa.types.is_binary(want):  # a body: its bytes, or (a trace written before) its text
        return text or pa.types.is_binary(got) or pa.types.is_large_binary(got)
    return text


def _typed_columns(table: pa.Table, path: Path) -> pa.Table:
    """Each known column checked by name against its type, and cast to it: a column of
    the wrong kind or with a value its type cannot hold names the column (and the row)."""
    wanted = {**{f.name: f.type for f in SCHEMA}, **EXTRA_COLUMNS}
    for i, name in enumerate(table.column_names):
        want = wanted.get(name)
        if want is None:
            continue
        col = table.column(i)
        if not _fits(col.type, want):
            raise TraceFormatError(
                f"column {name!r} is of type {col.type}, must be {_kind(want)}", path=path
            )
        if col.type == want:
            continue
        try:
            cast = col.cast(want)
        except (pa.ArrowException, ValueError, OverflowError) as exc:
            raise TraceFormatError(
                f"column {name!r}: a value does not fit {want} ({_first_line(exc)})", path=path
            ) from None
        table = table.set_column(i, pa.field(name, want), cast)
    return table


def check_values(table: pa.Table, path: Path) -> None:
    """Values later stages rely on: no nulls, finite non-negative times (names the row)."""
    for name in table.column_names:
        col = table.column(name)
        if col.null_count and name in COLUMNS:
            row = int(pc.index(pc.is_null(col), True).as_py())
            raise TraceFormatError(f"row {row}: column {name!r} is null", path=path)
    for name in ("t", "think"):
        values = table.column(name).to_numpy()
        bad = ~np.isfinite(values) | (values < 0) | (values > MAX_SECONDS)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = float(values[row])
            raise TraceFormatError(
                f"row {row}: {name} == {value!r}, must be a finite number of seconds in "
                f"[0, {MAX_SECONDS:.0f}]",
                path=path,
            )
    for name, low, high in (("session", 0, None), ("burst", 0, None), ("bytes", -1, None),
                            ("status", 0, 999)):  # fmt: skip
        values = table.column(name).to_numpy()
        bad = (values < low) | (values > high if high is not None else False)
        if np.any(bad):
            row = int(np.flatnonzero(bad)[0])
            span = f">= {low}" if high is None else f"in [{low}, {high}]"
            unknown = " (-1: unknown)" if name == "bytes" else ""
            raise TraceFormatError(
                f"row {row}: {name} == {int(values[row])}, must be {span}{unknown}", path=path
            )
    for name in ("rt", "ttfb"):
        if name not in table.column_names:
            continue
        secs = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
        bad = np.isinf(secs) | (secs < 0) | (secs > MAX_SECONDS)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TraceFormatError(
                f"row {row}: {name} == {float(secs[row])!r}, must be seconds in "
                f"[0, {MAX_SECONDS:.0f}] (NaN: unknown)",
                path=path,
            )
    if "conn" in table.column_names:
        conn = table.column("conn")
        negative = pc.less(conn, 0)
        if pc.any(negative).as_py():
            row = int(pc.index(negative, True).as_py())
            raise TraceFormatError(
                f"row {row}: conn == {conn[row].as_py()}, must be a connection number >= 0",
                path=path,
            )


def _grouped(table: pa.Table) -> pa.Table:
    """``table`` with each session's rows together and its bursts in order, as every stage
    reads a trace (the schedule starts a session at its first row and a burst where the
    index changes). A file sorted by time (another tool's) was replayed as thousands of
    one-burst sessions, without a word; the samplers already grouped such a trace. The
    order is a stable sort by (session, burst), and a grouped table is left as it is."""
    session = table.column("session").to_numpy()
    if session.size < 2:
        return table
    burst = table.column("burst").to_numpy()
    same = session[1:] == session[:-1]
    runs = session[np.r_[0, np.flatnonzero(~same) + 1]]  # the session of each run of rows
    if np.unique(runs).size == runs.size and not np.any(same & (burst[1:] < burst[:-1])):
        return table
    return table.take(pa.array(np.lexsort((burst, session))))


def _as_list_or_np(values: Iterable[Any]) -> Any:
    if isinstance(values, (np.ndarray, pa.Array, pa.ChunkedArray, list)):
        return values
    return list(values)


def _conform(table: pa.Table) -> pa.Table:
    """Cast to the trace schema (plus known optional columns), in canonical column order."""
    names = table.column_names
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ValueError(f"table lacks trace columns {missing}")
    arrays = []
    fields = []
    for f in SCHEMA:
        col = table.column(f.name)
        if col.type != f.type:
            col = col.cast(f.type)
        arrays.append(col)
        fields.append(f)
    for name, typ in EXTRA_COLUMNS.items():
        if name in names:
            col = table.column(name)
            arrays.append(col if col.type == typ else col.cast(typ))
            fields.append(pa.field(name, typ))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
