"""Reading text traces: whole file as bytes (gzip opened transparently), lines split on LF only."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from shrink.errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, decompressed when it is gzip; a missing file is a TraceFormatError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, not a trace file", path=path) from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"damaged gzip data ({exc})", path=path) from exc
    return data


def head_bytes(path: str | Path, size: int = 65536) -> bytes:
    """The first ``size`` bytes of the file (of its decompressed content when gzip)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic == GZIP_MAGIC:
                try:
                    with gzip.open(fh) as gz:
                        return gz.read(size)
                except (OSError, EOFError, zlib.error):
                    # A truncated gzip still tells us what it holds from its first bytes.
                    return b""
            return fh.read(size)
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, not a trace file", path=path) from None


def decode_line(raw: bytes) -> str:
    """UTF-8, falling back to Latin-1 so that any byte sequence gives text (old logs mix both)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def split_lines(data: bytes) -> list[bytes]:
    """Lines split on LF only (CR, VT, FF stay inside a line); no empty last line for a final LF."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines
