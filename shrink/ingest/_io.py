"""Reading text traces: lines in batches (gzip opened transparently), split on LF, or on
CR in a file whose lines end in CR alone (classic Mac OS)."""

from __future__ import annotations

import codecs
import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from shrink import files
from shrink.errors import TraceFormatError
from shrink.ingest.capture_magic import CAPTURE_MAGICS

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"


def without_boms(head: bytes) -> bytes:
    """``head`` without the UTF-8 byte order marks at its start: every one, as the JSON and
    TOML readers read past them (a tool that adds one to a file with one makes two; the
    second was read as part of the first line, a path '\\ufeff/a' refused)."""
    while head.startswith(UTF8_BOM):
        head = head[len(UTF8_BOM) :]
    return head


# The longest line a text trace may have (bytes): real log lines are at most a few KiB
# (a URL of 64 KiB is already past every server's limit). A file whose "line" runs on
# past this is not a log (binary, or all zeros), and holding it to find its end would
# take its size in memory before saying so. ``--max-line`` changes it.
MAX_LINE = 1 << 20
_CHUNK = 1 << 20
# Bytes that tell how the file's lines end (:func:`line_end`): a fixed amount, so that
# how the rest is read in chunks never changes the answer.
_LINE_END_PROBE = 1 << 16


@dataclass
class LineBatch:
    """Consecutive lines of a text trace, without their line end; ``first`` is the number
    of the first (1-based). ``terminated`` is False only for the file's last line when no
    line end follows it. ``damage``, on the last batch of a damaged gzip file read
    leniently, says where its data broke off and what was kept (the batch holds no line)."""

    first: int
    lines: list[bytes]
    terminated: bool = True
    damage: str | None = None


def line_batches(
    path: str | Path, *, max_line: int = MAX_LINE, strict: bool = False
) -> Iterator[LineBatch]:
    """The file's lines in batches of about 1 MiB, decompressed when it is gzip.

    Split as :func:`split_lines` splits (on LF, or on CR when the lines end in CR
    alone, see :func:`line_end`): only what one batch holds is in
    memory, so a reader that keeps its rows in compact columns reads a large log in
    memory that grows with its output, not with its text. A missing file, or a line
    longer than ``max_line`` bytes is a TraceFormatError naming the file (and the
    line): a gzip that inflates to a gigabyte without a line break fails in its first
    MiB. Damaged gzip data (a file cut short while copied or written, corrupt bytes)
    is one too with ``strict``; without, the whole lines inflated before it are read,
    and the last batch's ``damage`` says so.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            if fh.read(2) != GZIP_MAGIC:
                fh.seek(0)
                yield from _batches(_plain_chunks(fh), path, max_line, strict)
                return
            fh.seek(0)
            with gzip.open(fh) as gz:
                yield from _batches(_gunzipped_chunks(gz), path, max_line, strict)
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, not a trace file", path=path) from None


class _GzipDamage(Exception):
    """Gzip data that breaks off: cut short, corrupt, or followed by what is not gzip."""


class _NotGzipAfter(_GzipDamage):
    """Whole gzip data followed by bytes that are not gzip: what inflated is all there."""


def _plain_chunks(fh: BinaryIO) -> Iterator[bytes]:
    while chunk := fh.read(_CHUNK):
        yield chunk


def _gunzipped_chunks(gz: gzip.GzipFile) -> Iterator[bytes]:
    """The inflated bytes of ``gz`` in chunks of about ``_CHUNK``, every byte that inflates
    before damage, then :class:`_GzipDamage`.

    Read in pieces (``read1``): a ``read`` of 1 MiB that meets the damage raises and
    drops the bytes it had inflated, up to 1 MiB of whole lines.
    """
    parts: list[bytes] = []
    size = 0
    try:
        while piece := gz.read1(_CHUNK):
            parts.append(piece)
            size += len(piece)
            if size >= _CHUNK:
                yield b"".join(parts)
                parts, size = [], 0
    except (OSError, EOFError, zlib.error) as exc:
        if parts:
            yield b"".join(parts)
        if isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
            # a member read whole, then no gzip header where the next would start; but a
            # lone first byte of the gzip magic is the next member cut short, and the line
            # the whole one ended in may go on in it (as lines do across bgzip's members)
            if str(exc) == "Not a gzipped file (" + repr(b"\x1f") + ")":
                raise _GzipDamage(f"damaged gzip data ({exc}): cut short") from None
            raise _NotGzipAfter(
                f"its gzip data is followed by bytes that are not gzip ({exc})"
            ) from None
        raise _GzipDamage(f"damaged gzip data ({exc}): cut short or corrupt") from None
    if parts:
        yield b"".join(parts)


def _damaged(path: Path, why: str, line: int, cut: bool, strict: bool) -> LineBatch:
    """The last batch of a gzip file whose data broke off in ``line`` (``cut``: part of
    that line had inflated): it says so, or, with ``strict`` or no whole line before
    the damage, a TraceFormatError naming the file and the line."""
    reason = why
    if line == 1:
        raise TraceFormatError(f"{reason}, before its first whole line", path=path, line=1)
    if strict:
        raise TraceFormatError(
            f"{reason}; without --strict the {line - 1:,} lines before it are read",
            path=path,
            line=line,
        )
    kept = f"read the {line - 1:,} whole lines before it"
    dropped = f", not the line it cut (line {line})" if cut else ""
    return LineBatch(line, [], damage=f"{path}: {reason}: {kept}{dropped}")


def regular_file(path: str | Path) -> Path:
    """``path`` if it names a regular file; a one-line TraceFormatError naming it if not.

    Every reader reads a trace more than once (its head to tell the format, then the
    whole), which a pipe or a device cannot give: a FIFO would block until a writer
    came and then lose its first bytes to the format check, and /dev/zero never ends.
    """
    return files.regular_file(path, kind="a trace file", reason="a trace is read more than once")


def _too_long(path: Path, line: int, max_line: int) -> TraceFormatError:
    return TraceFormatError(
        f"a line longer than {max_line:,} bytes (no line break): not a text trace, "
        "or raise --max-line",
        path=path,
        line=line,
    )


# Starts of files that are text only once converted: read as text, each line was garbage
# (skipped one by one, or quoted as "the first data line" of an unknown format).
_UTF16 = "UTF-16 text: convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)"
_CONVERT_FIRST = (
    (re.compile(rb"\xff\xfe|\xfe\xff"), _UTF16),
    (re.compile(rb"\xfd7zXZ\x00"), "xz-compressed: decompress it first (xz -d)"),
    (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2-compressed: decompress it first (bunzip2)"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd-compressed: decompress it first (zstd -d)"),
    (re.compile(rb"PK\x03\x04"), "a zip archive: extract the trace from it first"),
)


def check_not_foreign(head: bytes, path: Path) -> None:
    """A one-line TraceFormatError when ``head`` (a file's first bytes) starts as UTF-16
    text or as a compressed file other than gzip: what to run to make it readable."""
    what = foreign(head, path)
    if what is not None:
        raise TraceFormatError(what, path=path)


def foreign(head: bytes, path: Path | None = None) -> str | None:
    """What to run first to read a file that starts with ``head`` (UTF-16 text, with
    or without a byte-order mark, a compressed file other than gzip, a zip archive),
    or None. ``head`` is what a gzipped ``path`` inflates to: the command then reads
    it through zcat (``iconv`` of the file itself read the gzip bytes as UTF-16)."""
    what = _foreign(head)
    if what is None or path is None or not _gzipped(path):
        return what
    what = re.sub(r"\(iconv ([^)]*)\)", r"(zcat FILE | iconv \1 > OUT)", what)
    what = re.sub(r"\(tail (-c \+\d+) FILE > OUT\)", r"(zcat FILE | tail \1 > OUT)", what)
    what = what if what.startswith("UTF-") else f", holding {what}"
    after = "" if "zcat" in what else ", once gunzipped (zcat FILE)"
    return f"gzip-compressed {what}".replace(" ,", ",") + after


def _gzipped(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


def _foreign(head: bytes) -> str | None:
    bare = without_boms(head)
    if bare != head and bare[:4] in CAPTURE_MAGICS:
        # (every mark: a text tool that adds one to a file with one makes two, and the
        # text readers read past them all)
        n = (len(head) - len(bare)) // len(UTF8_BOM)
        marks = (
            "a UTF-8 byte order mark (EF BB BF"
            if n == 1
            else f"{n} UTF-8 byte order marks (EF BB BF each"
        )
        return (
            f"a capture behind {marks}, which a text tool put in front of it): remove those "
            f"{3 * n} bytes first (tail -c +{3 * n + 1} FILE > OUT)"
        )
    if (wide := files.utf32(bare)) is not None:  # before UTF-16's mark, FF FE, its first half
        return wide
    what = next((what for magic, what in _CONVERT_FIRST if magic.match(head)), None)
    return what if what is not None else files.utf16_without_bom(bare)


def line_end(head: bytes) -> bytes:
    """How the lines of a file that starts with ``head`` end: CR when ``head`` holds a CR
    and no LF (a file saved on classic Mac OS, or by a tool that kept its line ends), else LF.

    Split on LF alone, such a file was one line: a log's every request skipped as one
    unreadable line, a session log refused at line 1. A CRLF file splits on LF (the
    readers drop the CR before it), and a CR inside a line of an LF file stays in it.
    """
    return b"\r" if b"\n" not in head and b"\r" in head else b"\n"


def _line_end_of(head: bytes) -> bytes:
    """:func:`line_end` of a file's first bytes ``head``: by its first 64 KiB, or, when
    those hold no line end (a first line past 64 KiB, a long URL), by its first line
    end and the byte after it (CR LF). Judged by 64 KiB alone, a file whose lines end
    in CR was one line, refused as longer than --max-line when its first was not."""
    probe = head[:_LINE_END_PROBE]
    if b"\n" not in probe and b"\r" not in probe:
        ends = [i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0]
        probe = head[: min(ends) + 2] if ends else probe
    return line_end(probe)


def _chunks(raw: Iterator[bytes], path: Path, max_line: int) -> tuple[bytes, Iterator[bytes]]:
    """(the file's line end, its bytes in chunks of ``_CHUNK``), without a UTF-8 byte
    order mark at the start. Damage in the first bytes comes after them, as in the rest.

    Editors on Windows save one: kept, it made line 1 of a session log not the
    ``#shrink-sessions`` line, and went into the first host or URL of other logs.
    """
    pieces: list[bytes] = []
    got = 0
    damage: _GzipDamage | None = None
    try:
        ended = False  # a line end was read: how the lines end is known from it
        while (got < _LINE_END_PROBE or (not ended and got <= max_line)) and (
            piece := next(raw, b"")
        ):
            pieces.append(piece)
            got += len(piece)
            ended = ended or b"\n" in piece or b"\r" in piece
    except _GzipDamage as exc:
        damage = exc
    head = b"".join(pieces)
    check_not_foreign(head, path)
    head = without_boms(head)

    def chunks() -> Iterator[bytes]:
        for at in range(0, len(head), _CHUNK):
            yield head[at : at + _CHUNK]
        if damage is not None:
            raise damage
        yield from raw

    return _line_end_of(head), chunks()


def _batches(raw: Iterator[bytes], path: Path, max_line: int, strict: bool) -> Iterator[LineBatch]:
    """The lines of the file's bytes ``raw``, a batch per chunk that ends at least one line."""
    parts: list[bytes] = []  # the line not yet ended, in the pieces it came in
    pending = 0  # its length
    number = 1  # the number of that line
    sep, chunks = _chunks(raw, path, max_line)
    try:
        for chunk in chunks:
            pieces = chunk.split(sep)
            if len(pieces) == 1:
                parts.append(chunk)
                pending += len(chunk)
                if pending - chunk.endswith(b"\r") > max_line:  # (the CR of a CR LF)
                    raise _too_long(path, number, max_line)
                continue
            tail = pieces.pop()
            if parts:
                pieces[0] = b"".join(parts) + pieces[0]
            # A CR before the LF is the line's end, not its text: a line of max_line
            # bytes was read when it ended in LF, refused when in CR LF.
            over = [i for i, p in enumerate(pieces) if len(p) - p.endswith(b"\r") > max_line]
            if over:
                raise _too_long(path, number + over[0], max_line)
            yield LineBatch(number, pieces)
            number += len(pieces)
            parts = [tail] if tail else []
            pending = len(tail)
            if pending - tail.endswith(b"\r") > max_line:
                raise _too_long(path, number, max_line)
    except _GzipDamage as exc:
        if parts and isinstance(exc, _NotGzipAfter):  # its last line, unended but whole
            yield LineBatch(number, [b"".join(parts)], terminated=False)
            number, parts = number + 1, []
        yield _damaged(path, str(exc), number, bool(parts), strict)
        return
    if parts:
        yield LineBatch(number, [b"".join(parts)], terminated=False)


def head_bytes(path: str | Path, size: int = 65536) -> bytes:
    """The first ``size`` bytes of the file (of its decompressed content when gzip)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic == GZIP_MAGIC:
                return _gunzip_head(fh, path, size)
            return fh.read(size)
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, not a trace file", path=path) from None


def _gunzip_head(fh: BinaryIO, path: Path, size: int) -> bytes:
    """Up to ``size`` bytes of the gzip data in ``fh``: what inflates before any damage.

    A truncated gzip still tells what it holds from its first bytes. Read whole, a cut
    stream shorter than ``size`` gave nothing, so a truncated gzip capture was called
    "empty" instead of being read up to the cut. Damage before the first byte inflates
    is a TraceFormatError: there is nothing to tell the format from. Read with ``read1``,
    as :func:`_gunzipped_chunks` reads: a ``read`` that meets the damage drops what it
    had inflated, so a log cut in its first 4 KiB was "damaged" with lines to read.
    """
    parts: list[bytes] = []
    got = 0
    with gzip.open(fh) as gz:
        try:
            while got < size and (piece := gz.read1(min(_HEAD_PIECE, size - got))):
                parts.append(piece)
                got += len(piece)
        except (OSError, EOFError, zlib.error) as exc:
            if not parts:
                raise TraceFormatError(f"damaged gzip data ({exc})", path=path) from None
            # The reader that reads the whole file names the damage (or keeps what precedes it).
    return b"".join(parts)


_HEAD_PIECE = 4096


def _percent(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeDecodeError):  # registered for decoding only
        raise err
    return "".join(f"%{b:02X}" for b in err.object[err.start : err.end]), err.end


codecs.register_error("shrink.percent", _percent)


def decode_line(raw: bytes) -> str:
    """UTF-8; a byte that is not (old logs mix encodings) reads as its ``%hh`` escape.

    A replay encodes text as UTF-8, so the Latin-1 reading of a raw 0xE9 went out as
    ``%C3%A9``, a file the server never had; ``%E9`` sends the byte the client sent, as
    the capture reader and the CLF reader's ``\\xhh`` escapes already did.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "shrink.percent")


def split_lines(data: bytes) -> list[bytes]:
    """Lines split on LF (CR, VT, FF stay inside a line), or on CR when the lines end in CR
    alone (:func:`line_end`); no empty last line for a final line end."""
    lines = data.split(_line_end_of(data))
    if lines and lines[-1] == b"":
        lines.pop()
    return lines
