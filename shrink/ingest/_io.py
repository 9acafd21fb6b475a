"""Reading text traces: whole file as bytes (gzip opened transparently), lines split on LF only."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from shrink.errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"


# The longest line a text trace may have (bytes): real log lines are at most a few KiB
# (a URL of 64 KiB is already past every server's limit). A file whose "line" runs on
# past this is not a log (binary, or all zeros), and reading it whole would take its
# size in memory before saying so. ``--max-line`` changes it.
MAX_LINE = 1 << 20
_CHUNK = 1 << 20


def read_bytes(path: str | Path, *, max_line: int = MAX_LINE) -> bytes:
    """The file's bytes, decompressed when it is gzip; a missing file is a TraceFormatError.

    Read in chunks, each line's length checked on the way: a line longer than
    ``max_line`` bytes stops the reading at once, with an error naming the file and
    the line (a gzip that inflates to a gigabyte without a line break fails in the
    first MiB, not after filling the memory).
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            if fh.read(2) != GZIP_MAGIC:
                fh.seek(0)
                return _bounded(fh, path, max_line)
            fh.seek(0)
            try:
                with gzip.open(fh) as gz:
                    return _bounded(gz, path, max_line)
            except (OSError, EOFError, zlib.error) as exc:
                raise TraceFormatError(f"damaged gzip data ({exc})", path=path) from exc
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, not a trace file", path=path) from None


def _bounded(stream: BinaryIO, path: Path, max_line: int) -> bytes:
    """All of ``stream``, refused at the first line longer than ``max_line`` bytes."""
    chunks: list[bytes] = []
    run = 0  # bytes since the last line break
    lines = 0  # line breaks so far
    while chunk := stream.read(_CHUNK):
        breaks = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
        ends = np.r_[breaks, len(chunk)]
        lengths = np.diff(np.r_[-1, ends]) - 1
        lengths[0] += run
        over = np.flatnonzero(lengths > max_line)
        if over.size:
            line = lines + int(over[0]) + 1
            raise TraceFormatError(
                f"a line longer than {max_line:,} bytes (no line break): not a text trace, "
                "or raise --max-line",
                path=path,
                line=line,
            )
        run = int(lengths[-1])
        lines += breaks.size
        chunks.append(chunk)
    return b"".join(chunks)


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
