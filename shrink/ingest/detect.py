"""Tell a trace file's format from its content (``--format auto``).

Binary: pcap (either byte order, micro- or nanosecond, and the variants patched
tcpdumps wrote) and pcapng by their magic numbers, also inside gzip; a Parquet
trace by ``PAR1``. Text (plain or gzip), from its first lines:

* ``#shrink-sessions`` on line 1, or a ``# fields:`` line: ``specweb``;
* most of the first 20 data lines are Common/Combined Log Format lines: ``clf``;
* the first data line has 3 or more TAB- or comma-separated columns and the
  first is a number: ``specweb``;
* the first data line's first word starts with ``/`` or ``http`` or the line
  carries ``think=``, ``method=`` or ``contents=``: ``wsesslog``.

Access logs of formats shrink does not read (W3C extended / IIS, AWS load
balancer, JSON lines) are a TraceFormatError naming the format; anything else is
a TraceFormatError asking for an explicit format.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from shrink.errors import TraceFormatError
from shrink.ingest._io import (
    GZIP_MAGIC,
    MAX_LINE,
    check_not_foreign,
    decode_line,
    head_bytes,
    line_batches,
    line_end,
    regular_file,
    split_lines,
    without_boms,
)
from shrink.ingest.capture_magic import CAPTURE_MAGICS
from shrink.ingest.clf import CLF_LINE
from shrink.ingest.specweb import MAGIC

__all__ = ["detect_format", "is_capture"]

PARQUET_MAGIC = b"PAR1"
_WSESSLOG_ARG = re.compile(r"(^|\s)(think|method|contents)=")
_SAMPLE = 20
_HEAD = 65536  # bytes read to tell the format; more only when no line ends in them


def is_capture(head: bytes) -> bool:
    """Whether these first bytes are a pcap or pcapng file."""
    return head[:4] in CAPTURE_MAGICS


def detect_format(path: str | Path, *, max_line: int = MAX_LINE) -> str:
    """``wsesslog``, ``specweb``, ``clf``, ``pcap`` or ``parquet`` from the file's content.

    ``max_line``: the longest line a text trace may have, as its reader is told.
    """
    path = regular_file(path)
    head = head_bytes(path, _HEAD)
    if is_capture(head):
        return "pcap"
    if head[:4] == PARQUET_MAGIC:
        return "parquet"
    check_not_foreign(head, path)
    lines = _first_lines(path, head, max_line)
    texts = [decode_line(raw).rstrip("\r") for raw in lines]
    if not any(t.strip() for t in texts):
        raise TraceFormatError("the file is empty: cannot tell its format", path=path)
    if texts[0].startswith(MAGIC) or any(t.lower().startswith("# fields:") for t in texts):
        return "specweb"
    data = [t for t in texts if t.strip() and not t.startswith("#")]
    if not data:
        # Only comments: httperf reads that as a session log with no sessions.
        return "wsesslog"
    sample = data[:_SAMPLE]
    if sum(1 for t in sample if CLF_LINE.match(t)) * 2 >= len(sample):
        return "clf"
    first = data[0]
    foreign = _foreign_log(texts, first)
    if foreign:
        advice = (
            "ingest the Parquet trace it was exported from, or export that as wsesslog"
            if foreign == OWN_JSONL
            else 'convert it to Combined Log Format: host - - [time] "request" status bytes'
        )
        raise TraceFormatError(
            f"{foreign}, a format shrink does not read (first data line {first[:80]!r}); " + advice,
            path=path,
        )
    for delimiter in ("\t", ","):
        if delimiter in first:
            try:
                cols = next(csv.reader([first])) if delimiter == "," else first.split("\t")
            except csv.Error:
                continue
            if len(cols) >= 3 and _is_number(cols[0]):
                return "specweb"
    word = first.split()[0]
    if word.startswith("/") or word.lower().startswith("http") or _WSESSLOG_ARG.search(first):
        return "wsesslog"
    with path.open("rb") as fh:
        what = "gzip-compressed text" if fh.read(2) == GZIP_MAGIC else "text"
    raise TraceFormatError(
        f"cannot tell the format of this {what} (first data line {first[:80]!r}); "
        "pass --format wsesslog|specweb|clf|pcap",
        path=path,
    )


# Access logs of other formats that users have: told apart by name, because read as
# what they resemble they gave a misleading error (an ALB log's "http" as the first word
# made it a session log with an "unknown argument").
_ISO_STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z"
_ALB = re.compile(rf"^(?:https?|h2|grpcs|ws|wss) {_ISO_STAMP} \S+ \S+ \S+ ")
_ELB = re.compile(rf"^{_ISO_STAMP} \S+ \S+ \S+ [-\d.]+ [-\d.]+ [-\d.]+ ")


# shrink export --format jsonl: written for other tools, not read back.
OWN_JSONL = "a JSON-lines trace (shrink export --format jsonl writes it for other tools)"


def _foreign_log(texts: list[str], first: str) -> str | None:
    """The name of a known access-log format shrink does not read, if the lines are one."""
    if any(t.startswith("#Fields:") for t in texts):
        return "a W3C extended log (IIS, '#Fields:' header)"
    if _ALB.match(first):
        return "an AWS Application Load Balancer access log"
    if _ELB.match(first):
        return "an AWS Classic Load Balancer access log"
    if first.lstrip().startswith("{"):
        try:
            row = json.loads(first)
        except ValueError:
            return None
        if isinstance(row, dict) and {"session", "burst", "t", "path"} <= row.keys():
            return OWN_JSONL
        if isinstance(row, dict):
            return "a JSON-lines log"
    return None


def _first_lines(path: Path, head: bytes, max_line: int) -> list[bytes]:
    """The whole lines among the file's first bytes ``head``, as the readers split them."""
    if len(head) == _HEAD and line_end(head) not in head:
        # A first line past 64 KiB is read to its end as the reader reads it: only that
        # line is held, and a "line" past ``max_line`` (binary, zeros) is refused at the
        # bound, naming it. It was refused at 64 KiB, a long URL's log with it.
        return next(line_batches(path, max_line=max_line)).lines
    lines = split_lines(without_boms(head))  # as the readers read it
    if len(head) == _HEAD and lines:
        lines.pop()  # the last line may be cut
    return lines


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
