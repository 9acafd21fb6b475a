"""The stored size of each column chunk of a Parquet file, read from its footer's bytes.

pyarrow builds a column chunk's metadata (``FileMetaData.row_group(i).column(j)``)
outside the code that turns its C++ exceptions into Python ones: a chunk whose size
statistics do not fit its column (a level histogram of the wrong length, say) ends the
process with SIGABRT ("terminate called after throwing an instance of
'parquet::ParquetException'"), where reading the same file with ``read_table`` raises
an OSError. So the bound on what a file's columns decode to reads each chunk's
``total_uncompressed_size`` here, from the footer's Thrift compact encoding, and never
asks pyarrow for a chunk; a footer this cannot walk is an error the caller words.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["FooterError", "chunk_sizes", "footer_bytes"]

# Thrift compact protocol types
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_DEPTH = 64  # nesting the Parquet format never reaches; deeper is a damaged footer
# The bytes walked one at a time (values' headers and numbers; not text, which is
# skipped whole) a footer may hold per column chunk, per schema column and per
# key-value pair: a column chunk's full metadata (offsets, statistics' headers,
# encodings, size statistics) takes about 100. The walk takes about a microsecond a
# byte: a footer of 4 MB of empty values in a field pyarrow skips (0.09 s) took 4.8 s,
# one at the memory bound (250 MB here) would take minutes.
_PER_CHUNK, _BASE = 2048, 65536


class FooterError(ValueError):
    """A footer that does not walk as Thrift's compact encoding of FileMetaData."""


class _Walk:
    __slots__ = ("b", "i", "left")

    def __init__(self, b: bytes, steps: int | None = None) -> None:
        self.b = b
        self.i = 0
        self.left = len(b) if steps is None else steps

    def byte(self) -> int:
        if self.i >= len(self.b):
            raise FooterError("the footer ends inside a value")
        self.left -= 1
        if self.left < 0:
            raise FooterError(
                f"its footer holds more values than its row groups, columns and "
                f"key-value pairs need (past {self.i:,} of its {len(self.b):,} bytes)"
            )
        self.i += 1
        return self.b[self.i - 1]

    def varint(self) -> int:
        out = shift = 0
        while True:
            x = self.byte()
            out |= (x & 0x7F) << shift
            if not x & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise FooterError("a number of more than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> Iterator[tuple[int, int]]:
        """The next field's (id, type) of a struct, (0, 0) at its end."""
        last = 0
        while True:
            h = self.byte()
            if h == 0:
                yield 0, 0
                return
            delta, t = h >> 4, h & 0x0F
            last = last + delta if delta else self.zigzag()
            yield last, t

    def list_head(self) -> tuple[int, int]:
        h = self.byte()
        n = h >> 4
        if n == 15:
            n = self.varint()
        if n > len(self.b) - self.i + 1:  # an element takes at least a byte (a bool)
            raise FooterError(f"a list of {n} elements in {len(self.b) - self.i} bytes")
        return n, h & 0x0F

    def skip(self, t: int, depth: int = 0) -> None:
        if depth > _DEPTH:
            raise FooterError("values nested too deep")
        if t in (_TRUE, _FALSE):
            return
        if t == _BYTE:
            self.byte()
        elif t in (_I16, _I32, _I64):
            self.varint()
        elif t == _DOUBLE:
            self.take(8)
        elif t == _BINARY:
            self.take(self.varint())
        elif t in (_LIST, _SET):
            n, et = self.list_head()
            for _ in range(n):
                self.skip_element(et, depth + 1)
        elif t == _MAP:
            n = self.varint()
            if n:
                kv = self.byte()
                for _ in range(n):
                    self.skip_element(kv >> 4, depth + 1)
                    self.skip_element(kv & 0x0F, depth + 1)
        elif t == _STRUCT:
            for fid, ft in self.fields():
                if fid == 0 and ft == 0:
                    break
                self.skip(ft, depth + 1)
        else:
            raise FooterError(f"a value of unknown type {t}")

    def skip_element(self, t: int, depth: int) -> None:
        if t in (_TRUE, _FALSE):  # a bool in a list or map is a byte of its own
            self.byte()
        else:
            self.skip(t, depth)

    def take(self, n: int) -> None:
        if n > len(self.b) - self.i:
            raise FooterError("the footer ends inside a value")
        self.i += n


def _struct_field(w: _Walk, want: int, want_type: int, read: object) -> object:
    """Walk a struct, returning ``read(w)`` of field ``want`` (None if absent)."""
    got = None
    for fid, ft in w.fields():
        if fid == 0 and ft == 0:
            break
        if fid == want and ft == want_type:
            got = read(w)  # type: ignore[operator]
        else:
            w.skip(ft, 1)
    return got


def _chunk_size(w: _Walk) -> int | None:
    """A ColumnChunk's meta_data (3).total_uncompressed_size (6)."""
    return _struct_field(w, 3, _STRUCT, lambda w: _struct_field(w, 6, _I64, _Walk.zigzag))  # type: ignore[return-value]


def _row_group(w: _Walk) -> list[int]:
    def columns(w: _Walk) -> list[int]:
        n, et = w.list_head()
        if et != _STRUCT:
            raise FooterError("a row group's columns are not structs")
        return [max(_chunk_size(w) or 0, 0) for _ in range(n)]

    return _struct_field(w, 1, _LIST, columns) or []  # type: ignore[return-value]


def chunk_sizes(footer: bytes, shape: tuple[int, int, int] | None = None) -> list[list[int]]:
    """Per row group, each column chunk's ``total_uncompressed_size`` (0 where absent).
    ``shape``: the row groups, columns and key-value pairs pyarrow read in the footer,
    which bound the bytes walked one at a time (a FooterError past them)."""
    steps = None
    if shape is not None:
        groups, columns, pairs = (max(n, 0) for n in shape)
        steps = _BASE + _PER_CHUNK * ((groups + 2) * (columns + 1) + pairs)
    w = _Walk(footer, steps)

    def groups(w: _Walk) -> list[list[int]]:
        n, et = w.list_head()
        if et != _STRUCT:
            raise FooterError("the row groups are not structs")
        return [_row_group(w) for _ in range(n)]

    return _struct_field(w, 4, _LIST, groups) or []  # type: ignore[return-value]


def footer_bytes(f: BinaryIO) -> bytes:
    """The footer of the Parquet file open in ``f`` (seekable), without its length and
    magic; the caller has bounded its length (:func:`shrink.parquet_read.check_footer`)."""
    f.seek(0, 2)
    size = f.tell()
    if size < 12:
        raise FooterError("the file is too short to hold a footer")
    f.seek(size - 8)
    tail = f.read(8)
    n = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or n > size - 12:
        raise FooterError("no Parquet footer at the file's end")
    f.seek(size - 8 - n)
    return f.read(n)
