"""A Parquet file read with its decoded size checked first.

Parquet stores a value repeated in every row once (dictionary encoding), so a small
file can decode to far more than it holds: a 10 KB trace with one 1 MiB body (or one
1 MiB path) in 1,500 rows took 3.75 GB to read, and ten times the rows would have
taken the machine's memory before any check could run. The text and bytes columns are
read dictionary-encoded first; their decoded size, told from each distinct value's
length and the rows' indices, must fit in the memory this process can still take
(:func:`memory_left`) before any is decoded. No constant is involved: the bound is what
the machine says, read when the file is.

Before anything is read, the file's own metadata bounds what its columns decode to
(:func:`stored_size`): a fixed-width column takes its rows times its width whatever its
pages hold (a constant compresses to nothing), and a text or bytes column written without
a dictionary takes its pages' uncompressed size, decoded before any check after the read
could run. A nested column (a list, a struct) is refused by its name: no trace or run log
has one, and its values would decode in full, past both checks.

Before even the metadata is parsed, its length (the file's last 8 bytes: a 4-byte
little-endian length and ``PAR1``) bounds what parsing it and holding a chunk per row
group and column takes (:func:`check_footer`; the factor is measured, in
:mod:`shrink.defaults`): 20,000 one-row row groups took 1.4 GB before any check ran.
"""

from __future__ import annotations

import os
import resource
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shrink.defaults import FOOTER_READ_FACTOR
from shrink.errors import ThreadLimitError, TraceFormatError, thread_refused
from shrink.parquet_footer import FooterError, chunk_sizes, footer_bytes

__all__ = [
    "arrow_source",
    "check_footer",
    "decoded_size",
    "memory_left",
    "memory_refused",
    "read_bounded",
    "schema_of",
    "stored_size",
]

_MEMINFO = Path("/proc/meminfo")
_STATUS = Path("/proc/self/status")
_CGROUP = Path("/proc/self/cgroup")


def _variable_width(schema: pa.Schema) -> list[str]:
    """The columns whose values are text or bytes (a dictionary of them included)."""
    names = []
    for f in schema:
        typ = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        if any(
            test(typ)
            for test in (
                pa.types.is_string,
                pa.types.is_large_string,
                pa.types.is_binary,
                pa.types.is_large_binary,
            )
        ):
            names.append(f.name)
    return names


_WIDTH = {
    "BYTE_ARRAY": 4,
    "BOOLEAN": 1,
    "INT32": 4,
    "INT64": 8,
    "INT96": 12,
    "FLOAT": 4,
    "DOUBLE": 8,
}


def stored_size(meta: pq.FileMetaData, chunks: list[list[int]]) -> dict[str, int]:
    """Each column's least decoded size, from the file's metadata alone: its rows times
    its width (a value's offset for text and bytes), plus, for text and bytes, the
    uncompressed size of its pages (what a column without a dictionary decodes to), per
    row group and column as ``chunks`` gives it (:func:`shrink.parquet_footer.chunk_sizes`).
    The columns are flat (:func:`read_bounded` refuses a nested one first)."""
    if len(chunks) != meta.num_row_groups or any(len(g) != meta.num_columns for g in chunks):
        raise FooterError("its row groups' columns are not those of its schema")
    sizes: dict[str, int] = {}
    rows = max(meta.num_rows, 0)
    for j in range(meta.num_columns):
        leaf = meta.schema.column(j)
        if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":
            width = max(leaf.length, 0)
        else:
            width = _WIDTH.get(leaf.physical_type, 8)
        total = rows * width
        if leaf.physical_type == "BYTE_ARRAY":
            total += sum(group[j] for group in chunks)
        name = leaf.path.split(".", 1)[0]
        sizes[name] = sizes.get(name, 0) + total
    return sizes


def _nested(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if pa.types.is_nested(f.type)]


def decoded_size(column: pa.ChunkedArray) -> int:
    """The bytes a dictionary-encoded text or bytes column holds once decoded: each
    row's value length, from the distinct values' lengths (nothing is decoded)."""
    total = 0
    for chunk in column.chunks:
        if not pa.types.is_dictionary(chunk.type):  # decoded already
            total += int(pc.sum(pc.binary_length(chunk)).as_py() or 0)
            continue
        if len(chunk) == 0 or len(chunk.dictionary) == 0:
            continue
        lengths = pc.fill_null(pc.binary_length(chunk.dictionary), 0).cast(pa.int64())
        rows = pc.sum(pc.take(lengths, chunk.indices)).as_py()
        total += int(rows or 0)
    return total


def _meminfo_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left(
    status: Path, limit: int = resource.RLIMIT_AS, field: str = "VmSize:"
) -> int | None:
    """What ``ulimit -v`` leaves this process: the limit less the address space in use
    (``ulimit -d``: ``RLIMIT_DATA`` less ``VmData``)."""
    soft, _ = resource.getrlimit(limit)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in status.read_text().splitlines():
            if line.startswith(field):
                return max(0, soft - int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_left(cgroup: Path, root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What this process's cgroup v2 memory limit leaves (None without one)."""
    try:
        rel = next(
            line.split(":", 2)[2]
            for line in cgroup.read_text().splitlines()
            if line.startswith("0::")
        )
        folder = root / rel.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text().strip()))
    except (OSError, ValueError, StopIteration):
        return None


def memory_left(
    meminfo: Path = _MEMINFO, status: Path = _STATUS, cgroup: Path = _CGROUP
) -> int | None:
    """The bytes this process can still take: the least of the machine's available memory
    (MemAvailable), what ``ulimit -v`` and ``ulimit -d`` leave and what its cgroup's
    memory limit leaves; None where none of them can be read."""
    known = [
        n
        for n in (
            _meminfo_available(meminfo),
            _address_space_left(status),
            _address_space_left(status, resource.RLIMIT_DATA, "VmData:"),
            _cgroup_left(cgroup),
        )
        if n is not None
    ]
    return min(known) if known else None


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def _check_fits(
    sizes: dict[str, int], rows: int, left: int | None, path: Path, what: str, why: str
) -> None:
    total = sum(sizes.values())
    if left is None or total <= left:
        return
    worst = max(sizes, key=lambda n: sizes[n])
    raise TraceFormatError(
        f"{what} decode to {_mib(total)} ({worst!r}: {_mib(sizes[worst])}, {rows:,} rows), "
        f"more than the {_mib(left)} of memory this process has left; {why}",
        path=path,
    )


def _read(src: str | BinaryIO, meta: pq.FileMetaData, dictionary: list[str]) -> pa.Table:
    """The file's table, read on this thread (``dictionary``: columns read
    dictionary-encoded). pyarrow's thread pools hung for good when a worker thread could
    not be made (`ulimit -v`, a cgroup's pids.max): ``read_table`` waited on a scan
    that never ended. The footer already parsed is passed in, not parsed again."""
    with pq.ParquetFile(src, metadata=meta, read_dictionary=dictionary or None) as pf:
        return pf.read(use_threads=False)


@contextmanager
def arrow_source(path: Path) -> Iterator[str | BinaryIO]:
    """``path`` as pyarrow can open it: its name, or the file opened here when the name
    holds bytes that are not UTF-8 (Linux allows any). pyarrow encodes a name as UTF-8
    and refused it ("surrogates not allowed"): a trace shrink wrote could not be read.
    Under a locale that is not UTF-8 (en_US.ISO-8859-1) a name's bytes are decoded
    another way, and UTF-8 made other bytes of it: "t\xc3\xb6.parquet: no such file"."""
    name = str(path)
    try:
        same = name.encode("utf-8") == os.fsencode(name)
    except UnicodeEncodeError:
        same = False
    if not same:
        with open(path, "rb") as fh:
            yield fh
        return
    yield name


def schema_of(path: Path) -> pa.Schema:
    """The Parquet file's schema, as ``pyarrow.parquet.read_schema`` reads it (any name)."""
    with arrow_source(path) as src:
        return pq.read_schema(src)


def footer_length(path: Path) -> int | None:
    """The length of a Parquet file's footer, from its last 8 bytes; None when the file
    does not end as a Parquet file does, or says its footer is longer than the file
    (pyarrow then says what is wrong: the file is cut or corrupt, not too large)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 12:
                return None
            f.seek(-8, 2)
            tail = f.read(8)
    except OSError:
        return None
    if len(tail) != 8 or tail[4:] != b"PAR1":
        return None
    n = int(struct.unpack("<I", tail[:4])[0])
    return n if n <= size - 12 else None  # PAR1, the footer, its length, PAR1


def check_footer(path: Path, left: int | None = None) -> None:
    """A TraceFormatError naming ``path`` when reading its footer would take more memory
    than this process has left (``left``, default :func:`memory_left`): its length times
    :data:`~shrink.defaults.FOOTER_READ_FACTOR`, told before pyarrow parses it."""
    n = footer_length(path)
    left = memory_left() if left is None else left
    if n is None or left is None or n * FOOTER_READ_FACTOR <= left:
        return
    raise TraceFormatError(
        f"its footer (the file's metadata, {n:,} bytes) takes about {_mib(n * FOOTER_READ_FACTOR)}"
        f" to read, more than the {_mib(left)} of memory this process has left; a file "
        "of fewer row groups (larger ones) reads in less",
        path=path,
    )


def memory_refused(exc: MemoryError, path: Path) -> TraceFormatError:
    """The error for a read the process had too little memory for. A damaged page can
    claim a size no file has, and a real limit can refuse a page that fits on the
    machine: said as both, with what was left (not "not a readable Parquet file")."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    left = memory_left()
    room = f"; {_mib(left)} were left" if left is not None else ""
    return TraceFormatError(
        f"reading it needed more memory than this process could get ({first}{room}): "
        "a damaged file, or a limit (ulimit, a cgroup) to raise",
        path=path,
    )


def read_bounded(path: Path, *, left: int | None = None) -> pa.Table:
    """The Parquet file at ``path`` as a table, its columns as the file types them; a
    TraceFormatError naming the file and the largest column when its text and bytes
    columns would decode to more than ``left`` bytes (default: :func:`memory_left`).
    pyarrow's own errors propagate to the caller, which words them."""
    left = memory_left() if left is None else left
    check_footer(path, left)  # before pyarrow parses it
    try:
        with arrow_source(path) as src:
            return _read_bounded(src, path, left)
    except pa.ArrowException as exc:
        if thread_refused(exc):  # the system's limit: "not a readable trace" was untrue
            raise ThreadLimitError() from None
        raise


def _read_bounded(src: str | BinaryIO, path: Path, left: int | None) -> pa.Table:
    with pq.ParquetFile(src) as pf:  # the footer parsed once (20,000 row groups: 208 MiB)
        schema, meta = pf.schema_arrow, pf.metadata
    nested = _nested(schema)
    if nested:
        raise TraceFormatError(
            f"column {nested[0]!r} is nested ({schema.field(nested[0]).type}); a trace's "
            "and a run log's columns each hold one value a row",
            path=path,
        )
    shape = (meta.num_row_groups, meta.num_columns, len(meta.metadata or {}))
    if isinstance(src, str):
        with open(path, "rb") as fh:
            chunks = chunk_sizes(footer_bytes(fh), shape)
    else:
        chunks = chunk_sizes(footer_bytes(src), shape)
    _check_fits(
        stored_size(meta, chunks), meta.num_rows, left, path, "its columns",
        "a file's pages are stored compressed",
    )  # fmt: skip
    names = _variable_width(schema)
    table = _read(src, meta, names)
    if not names:
        return table
    sizes = {name: decoded_size(table.column(name)) for name in names}
    _check_fits(
        sizes, table.num_rows, left, path, "its text and bytes columns",
        "a value repeated in many rows is stored once in the file",
    )  # fmt: skip
    for name in names:  # each column decoded in turn, as the file types it
        want = schema.field(name).type
        i = table.schema.get_field_index(name)
        if table.schema.field(i).type != want:
            table = table.set_column(i, schema.field(name), table.column(i).cast(want))
    return table
