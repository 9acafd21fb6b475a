"""HTTP/1.x message syntax: start lines, header fields, body framing, found in bytes.

The pieces :mod:`shrink.ingest.capture.http_parse` (the careful parser) and
:mod:`shrink.ingest.capture.http_plain` (the plain-stream shortcut) share: the request
and status line patterns, searches for the next start line, header values,
cookies and how a header block says its body is framed (RFC 9112), and
:class:`HttpResult`, the columns the parser fills.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CHUNK_WINDOW",
    "DETECT_WINDOW",
    "HEADER_WINDOW",
    "MAX_HEADER",
    "METHOD_TAIL",
    "NUL_TARGET",
    "REQ_LINE",
    "SEARCH_OVERLAP",
    "SEARCH_WINDOW",
    "STATUS_LINE",
    "HttpResult",
    "body_framing",
    "cookie_value",
    "find_request",
    "find_response",
    "header_end",
    "header_value",
    "header_values",
    "target_text",
]

REQ_LINE = re.compile(rb"([A-Z][A-Z0-9_-]{0,19}) ([^ \r\n\x00]+) HTTP/1\.[01]\r?\n")
STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?:[ \t][^\r\n]*)?\r?\n")
# A request line whose target holds a NUL: no request line can carry one (left out).
NUL_TARGET = re.compile(rb"[A-Z][A-Z0-9_-]{0,19} [^ \r\n]*\x00[^ \r\n]* HTTP/1\.[01]\r?\n")
METHOD_TAIL = re.compile(rb"[A-Z][A-Z0-9_-]{0,19} [^ \r\n\x00]+\Z")
_HIGH_BYTE = re.compile("[\x80-\xff]")
MAX_HEADER = 64 * 1024
DETECT_WINDOW = 64 * 1024
HEADER_WINDOW = 512  # first look at a header block; widened up to MAX_HEADER
CHUNK_WINDOW = 256
SEARCH_WINDOW = 256 * 1024
SEARCH_OVERLAP = 8 * 1024


@dataclass
class HttpResult:
    """Every request found, as columns (one entry per request, connection order).

    Offsets index ``Streams.data``; times (ns) are filled in by :func:`parse_http`.
    A response that never came leaves status 0, body -1 and offsets -1.
    """

    conn: list[int] = field(default_factory=list)
    client: list[bytes] = field(default_factory=list)
    server: list[bytes] = field(default_factory=list)
    sport: list[int] = field(default_factory=list)
    method: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    req_off: list[int] = field(default_factory=list)
    req_body: list[bytes] = field(default_factory=list)  # as sent (chunks joined); b"": none
    req_type: list[str | None] = field(default_factory=list)  # a body's Content-Type as sent
    status: list[int] = field(default_factory=list)
    first_off: list[int] = field(default_factory=list)
    last_off: list[int] = field(default_factory=list)
    body: list[int] = field(default_factory=list)
    cookie: list[str | None] = field(default_factory=list)
    set_cookie: list[str | None] = field(default_factory=list)
    t_req: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    t_first: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    t_last: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    requests: int = 0
    responses: int = 0
    orphan_responses: int = 0
    http_conns: int = 0
    http_conn_ids: set[int] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.conn)

    def keep(self, mask: np.ndarray) -> None:
        """Keep the requests where ``mask`` is true (after their times are filled in)."""
        at = np.flatnonzero(mask).tolist()
        for name in (
            "conn", "client", "server", "sport", "method", "path", "req_off", "req_body",
            "req_type", "status", "first_off", "last_off", "body", "cookie", "set_cookie",
        ):  # fmt: skip
            column = getattr(self, name)
            setattr(self, name, [column[i] for i in at])
        self.t_req = self.t_req[mask]
        self.t_first = self.t_first[mask]
        self.t_last = self.t_last[mask]

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` requests (before their times are filled in)."""
        for name in (
            "conn", "client", "server", "sport", "method", "path", "req_off", "req_body",
            "req_type", "status", "first_off", "last_off", "body", "cookie", "set_cookie",
        ):  # fmt: skip
            del getattr(self, name)[n:]


def find_request(data: bytes, p: int, end: int) -> int:
    """Offset of the next request line at or after ``p`` (-1 if none).

    A literal search for `` HTTP/1.`` (fast, in C) finds candidates; the
    request line is then matched from the start of its token run.
    """
    q = p
    while True:
        h = data.find(b" HTTP/1.", q, end)
        if h < 0:
            return -1
        ls = max(data.rfind(b"\n", p, h) + 1, p, h - MAX_HEADER)
        m = METHOD_TAIL.search(data, ls, h)
        if m is not None and REQ_LINE.match(data, m.start(), end):
            return m.start()
        q = h + 1


def find_response(data: bytes, p: int, end: int) -> int:
    """Offset of the next status line at or after ``p`` (-1 if none)."""
    q = p
    while True:
        h = data.find(b"HTTP/1.", q, end)
        if h < 0:
            return -1
        if STATUS_LINE.match(data, h, end):
            return h
        q = h + 1


def header_end(w: bytes) -> tuple[int, int]:
    """(end of the header lines, start of the body) in ``w``, which starts at a start
    line (or a trailer section); (-1, -1) when ``w`` holds no empty line yet.

    The block ends at its first empty line, CRLF or a bare LF (RFC 9112 lets a
    recipient take LF alone as a line end): whichever comes first, so a bare-LF block
    is not run on to a later CRLF CRLF (the next message's on the connection, or a
    blank line in a body), losing the messages in between.
    """
    crlf = w.find(b"\n\r\n")
    lf = w.find(b"\n\n", 0, len(w) if crlf < 0 else crlf + 2)  # only an earlier one counts
    if crlf < 0 and lf < 0:
        return -1, -1
    k, body = (crlf, crlf + 3) if lf < 0 or 0 <= crlf < lf else (lf, lf + 2)
    return (k - 1 if k and w[k - 1] == 13 else k), body  # 13: the CR of a CRLF


def target_text(raw: bytes) -> str:
    """A request-target as the trace's path, such that the replay sends its bytes.

    The replay percent-encodes a path's non-ASCII text as UTF-8
    (:func:`shrink.wire.wire_target`). So a raw UTF-8 target (``/café``, which some
    clients send unescaped) is decoded as UTF-8: read as Latin-1 it went out as other
    bytes (``/caf%C3%83%C2%A9``). One that is not UTF-8 has its bytes past ASCII
    percent-encoded (``/caf%E9``): no text would go out as those bytes, the escapes do.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return _HIGH_BYTE.sub(lambda m: f"%{ord(m[0]):02X}", raw.decode("latin-1"))


def header_value(block: bytes, low: bytes, name: bytes) -> bytes | None:
    """A header's value (first occurrence); ``low`` is ``block.lower()``."""
    i = low.find(b"\n" + name + b":")
    if i < 0:
        return None
    i += len(name) + 2
    j = block.find(b"\n", i)
    return block[i : j if j >= 0 else len(block)].strip()


def header_values(block: bytes, low: bytes, name: bytes) -> list[bytes]:
    """Every value a header ``name`` has in ``block`` (``low`` its lower case), in
    order. A value folded over several lines (obs-fold: a line that starts with a space
    or a tab goes on the one before) is unfolded, each fold one space, as RFC 9112 5.2
    asks of a recipient that does not refuse it: the server read it so."""
    key, values, i = b"\n" + name + b":", [], low.find(b"\n" + name + b":")
    while i >= 0:
        i += len(key)
        j = block.find(b"\n", i)
        lines = [block[i : j if j >= 0 else len(block)].strip()]
        while 0 <= j < len(block) - 1 and block[j + 1] in b" \t":
            k = block.find(b"\n", j + 1)
            lines.append(block[j + 1 : k if k >= 0 else len(block)].strip())
            j = k
        values.append(b" ".join(x for x in lines if x))
        i = low.find(key, j) if j >= 0 else -1
    return values


def cookie_value(block: bytes, name: bytes, header: bytes) -> str | None:
    low = block.lower()
    v = header_value(block, low, header)
    if v is None:
        return None
    for part in v.split(b";"):
        k, _, val = part.strip().partition(b"=")
        if k == name:
            return val.decode("latin-1")
    return None


def body_framing(low: bytes) -> tuple[bool, int]:
    """(chunked, Content-Length or -1) from a lower-cased header block."""
    i = low.find(b"\ntransfer-encoding:")
    if i >= 0 and b"chunked" in low[i : low.find(b"\n", i + 1) % (len(low) + 1)]:
        return True, -1
    i = low.find(b"\ncontent-length:")
    if i < 0:
        return False, -1
    j = low.find(b"\n", i + 16)
    try:
        return False, int(low[i + 16 : j if j >= 0 else len(low)].split(b",")[0])
    except ValueError:
        return False, -1
