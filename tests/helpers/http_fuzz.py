"""A differential fuzz of the two replay engines' response parsers.

The same bytes of a server, delivered in the same reads, go to the Python engine's
connection (shrink/replay/_conn.py, driven through its asyncio callbacks) and to the
native core's parser (``shrink_core.parse_stream``: the engine's parser, read buffer,
out-of-step rule and end of a connection). Both must record the same thing for each
request -- success with the same status and body bytes, or the same named failure --
and leave the connection open or closed alike.

Seeds are answers of the servers shrink drives (lighttpd static files, PHP through
nginx and php-fpm, chunked with and without trailers, 304, 204, HEAD, 100-continue,
bodies up to the close), mutated and cut into reads of random sizes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shrink.replay._conn import _Conn, _Req

# (outcome, status, body bytes) a request; outcome "ok" or a failure's name
Row = tuple[str, int, int]
# each request's row, and whether the connection was left open
Result = tuple[list[Row], bool]

_DATE = b"Date: Sat, 28 Nov 2026 22:30:00 GMT\r\n"
_LIGHTTPD = (
    b'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: "1835613497"\r\n'
    b"Last-Modified: Tue, 03 Nov 2026 10:00:00 GMT\r\nContent-Length: 24\r\n"
    b"Accept-Ranges: bytes\r\n"
    + _DATE
    + b"Server: lighttpd/1.4.76\r\n\r\n"
    + b"<html>hello world</html>"
)
_PHP_HEAD = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.24.0\r\n" + _DATE
    + b"Content-Type: text/html; charset=UTF-8\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\nX-Powered-By: PHP/8.3.6\r\n\r\n"
)  # fmt: skip
_PHP = _PHP_HEAD + b"1a\r\n<p>rows: 3, total: 42</p>\n\r\n0\r\n\r\n"
_PHP_TWO = _PHP_HEAD + b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n"
_TRAILER = _PHP_HEAD + b"4\r\nabcd\r\n0\r\nX-Checksum: 99\r\nX-Other: y\r\n\r\n"
_NOT_MODIFIED = (
    b"HTTP/1.1 304 Not Modified\r\nETag: \"1835613497\"\r\n" + _DATE
    + b"Server: lighttpd/1.4.76\r\n\r\n"
)  # fmt: skip
_NO_CONTENT = b"HTTP/1.1 204 No Content\r\nServer: nginx/1.24.0\r\n" + _DATE + b"\r\n"
_HEAD_ANSWER = _LIGHTTPD[: _LIGHTTPD.index(b"\r\n\r\n") + 4]
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n" + _LIGHTTPD
_UNTIL_CLOSE = (
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nX-Powered-By: PHP/8.3.6\r\n\r\n"
    b"body up to the close\n"
)
_CLOSE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy!"
_KEEP_10 = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"
_NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 9\r\n"
    + _DATE + b"Server: lighttpd/1.4.76\r\n\r\nnot found"
)  # fmt: skip
# RFC 9112 section 6.3's framing rules, as servers may send them
_SAME_LENGTHS = _LIGHTTPD.replace(
    b"Content-Length: 24\r\n", b"Content-Length: 24\r\nContent-Length: 24, 24\r\n"
)
_GZIP_CHUNKED = _TRAILER.replace(b"chunked", b"gzip, chunked")
# not chunked at the end: a body up to the close
_CHUNKED_GZIP = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
)
_TE_AND_LENGTH = (
    b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\n"
)  # Transfer-Encoding wins, and the connection is not reused
_EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + _NOT_FOUND
# Connection is a list of tokens (RFC 9110 7.6.1): "closed" is not "close"
_CLOSED = _NOT_FOUND.replace(b"Content-Length", b"Connection: Upgrade, closed\r\nContent-Length")

# (server answers, one a request; head_only of each request; how the server ends)
Seed = tuple[tuple[bytes, ...], tuple[bool, ...], str]
SEEDS: list[Seed] = [
    ((_LIGHTTPD,), (False,), "hold"),
    ((_PHP,), (False,), "hold"),
    ((_PHP_TWO,), (False,), "eof"),
    ((_TRAILER,), (False,), "hold"),
    ((_NOT_MODIFIED,), (False,), "hold"),
    ((_NO_CONTENT,), (False,), "eof"),
    ((_HEAD_ANSWER,), (True,), "hold"),
    ((_CONTINUE,), (False,), "hold"),
    ((_UNTIL_CLOSE,), (False,), "eof"),
    ((_UNTIL_CLOSE,), (False,), "reset"),
    ((_CLOSE,), (False,), "eof"),
    ((_KEEP_10,), (False,), "hold"),
    ((_NOT_FOUND,), (False,), "reset"),
    # a second request on the same connection: the parser's state across answers
    ((_LIGHTTPD, _PHP), (False, False), "hold"),
    ((_PHP, _NOT_MODIFIED), (False, False), "eof"),
    ((_HEAD_ANSWER, _TRAILER), (True, False), "hold"),
    ((_NO_CONTENT, _LIGHTTPD), (False, True), "eof"),
    ((_PHP_TWO, _UNTIL_CLOSE), (False, False), "eof"),
    ((_NOT_FOUND, _PHP_TWO), (False, False), "reset"),
    ((_LIGHTTPD,), (False, False), "eof"),  # closed as the second is sent: retried
    ((_SAME_LENGTHS, _GZIP_CHUNKED), (False, False), "hold"),
    ((_CHUNKED_GZIP,), (False,), "eof"),
    ((_TE_AND_LENGTH,), (False,), "hold"),
    ((_EARLY_HINTS, _SAME_LENGTHS), (False, True), "hold"),
    ((_CLOSED, _LIGHTTPD), (False, False), "hold"),
]
ENDS = ("eof", "reset", "hold")


# --------------------------------------------------------------------- mutations
_NUMBERS = [
    b"0", b"00", b"1", b"-1", b"+1", b"0x1a", b"1_0", b" 7 ", b"\t3", b"ff", b"FF", b"g",
    b"9" * 19, b"9" * 25, b"7fffffffffffffff", b"7ffffffffffffffd", b"10000000000000000",
    b"99", b"100", b"199", b"200", b"204", b"304", b"599", b"600", b"1e3", b"",
    b"0" * 4400 + b"24", b"0" * 4400 + b"1" * 30,
]  # fmt: skip
_CRLF_GAMES = [b"\n", b"\r", b"\r\n", b"\r\n\r\n", b"\n\r\n", b"\r\r\n", b" \r\n", b"\r\n "]
_INSERTS = [
    b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n", b"Connection: close\r\n",
    b"Connection: keep-alive\r\n", b"HTTP/1.1 100 Continue\r\n\r\n", b"0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b";", b":", b" ", b"\x00", b"\xff",
    b"HTTP/1.1 103 Early Hints\r\n\r\n", b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
]  # fmt: skip
# framing headers a server may send after its status line (RFC 9112 section 6.3)
_FRAMING = [
    b"Content-Length: 5, 7", b"Content-Length: 24, 24", b"Content-Length: 24", b"Content-Length: 0",
    b"Content-Length: 7,", b"Content-Length: 5", b"Transfer-Encoding: chunked, gzip",
    b"Transfer-Encoding: gzip, chunked", b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked",
    b"transfer-encoding: Chunked ;x=1", b"Transfer-Encoding: chunked,", b"Transfer-Encoding:",
    b"Connection: close", b"Connection: keep-alive",
    # Connection as tokens (RFC 9110 7.6.1), not substrings
    b"Connection: closed", b"Connection: Upgrade, Close", b"Connection: keep-alive,close",
    b"Connection: not-close", b"Connection: keep-alives",
    # whitespace before a colon: an invalid message (RFC 9112 5.1)
    b"Content-Length : 5", b"Content-Length\t: 24", b"Transfer-Encoding : chunked",
    b"X-Cache : hit",
    # chunked applied twice (RFC 9112 6.1)
    b"Transfer-Encoding: chunked, chunked", b"Transfer-Encoding: chunked, gzip, chunked",
]  # fmt: skip


def _splice(out: bytearray, rnd: random.Random) -> None:
    other = b"".join(rnd.choice(SEEDS)[0])
    a = rnd.randrange(len(other))
    piece = other[a : a + rnd.randint(1, 80)]
    pos = rnd.randrange(len(out) + 1)
    if rnd.random() < 0.5:
        out[pos:] = piece
    else:
        out[pos:pos] = piece


def _crlf(out: bytearray, rnd: random.Random) -> None:
    spots = [m.start() for m in re.finditer(rb"\r\n", bytes(out))]
    if not spots:
        return
    a = rnd.choice(spots)
    out[a : a + 2] = rnd.choice(_CRLF_GAMES)


def _digits(out: bytearray, rnd: random.Random) -> None:
    runs = [m.span() for m in re.finditer(rb"[0-9a-fA-F]+", bytes(out))]
    if not runs:
        return
    a, b = rnd.choice(runs)
    if rnd.random() < 0.3:
        n = int(out[a:b], 16) if rnd.random() < 0.5 else len(out[a:b])
        new = format(max(0, n + rnd.choice((-2, -1, 1, 2))), rnd.choice(("x", "d"))).encode()
    else:
        new = rnd.choice(_NUMBERS)
    out[a:b] = new


def _flip(out: bytearray, rnd: random.Random) -> None:
    for _ in range(rnd.randint(1, 4)):
        if out:
            i = rnd.randrange(len(out))
            out[i] ^= 1 << rnd.randrange(8)


def _insert(out: bytearray, rnd: random.Random) -> None:
    pos = rnd.randrange(len(out) + 1)
    if rnd.random() < 0.5:
        out[pos:pos] = rnd.choice(_INSERTS)
    else:
        out[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 6)))


def _delete(out: bytearray, rnd: random.Random) -> None:
    pos = rnd.randrange(len(out) + 1)
    del out[pos : pos + rnd.choice((1, 1, 2, 4, 16, 64))]


def _repeat(out: bytearray, rnd: random.Random) -> None:
    """A piece repeated: long heads, chunk lines and trailers (the 64 KiB bounds)."""
    if out:
        a = rnd.randrange(len(out))
        piece = bytes(out[a : a + rnd.randint(1, 24)])
        out[a:a] = piece * rnd.choice((2, 100, 3000, 6000))


def _framing(out: bytearray, rnd: random.Random) -> None:
    """A framing header after a status line: added, or in place of the next line."""
    spots = [m.end() for m in re.finditer(rb"HTTP/1\.[01] [^\r]*\r\n", bytes(out))]
    if spots:
        a = rnd.choice(spots)
        b = a if rnd.random() < 0.5 else max(a, bytes(out).find(b"\r\n", a) + 2)
        out[a:b] = rnd.choice(_FRAMING) + b"\r\n"


_MUTATIONS: list[Callable[[bytearray, random.Random], None]] = [
    _flip, _insert, _delete, _splice, _crlf, _crlf, _digits, _digits, _repeat, _framing, _framing,
]  # fmt: skip


def mutate(data: bytes, rnd: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rnd.choice((0, 1, 1, 2, 3))):
        rnd.choice(_MUTATIONS)(out, rnd)
    return bytes(out)


def fragments(data: bytes, rnd: random.Random) -> list[bytes]:
    """``data`` cut as reads: whole, byte by byte, or in random sizes."""
    mode = rnd.randrange(4)
    if mode == 0 or not data:
        return [data]
    # a long answer in bigger reads: a 64 KiB head byte by byte is 64 Ki reads
    top = max(1 if mode == 1 else 8 if mode == 2 else 64, len(data) // 256)
    out, i = [], 0
    while i < len(data):
        n = rnd.randint(1, top)
        out.append(data[i : i + n])
        i += n
    return out


@dataclass
class Case:
    """What a server sends for each request, as reads; the requests' head_only; its end."""

    answers: list[list[bytes]]
    head_only: tuple[bool, ...]
    end: str

    @property
    def reads(self) -> list[bytes]:
        return [r for answer in self.answers for r in answer]

    def whole(self) -> Case:
        """The same bytes, each answer in one read."""
        return Case([[b"".join(a)] for a in self.answers], self.head_only, self.end)


def make_case(rnd: random.Random) -> Case:
    """A seed's answers, each mutated, cut into reads (a read never spans two answers,
    so that a second request is sent between them), and how the server ends."""
    parts, head_only, end = rnd.choice(SEEDS)
    if rnd.random() < 0.2:
        end = rnd.choice(ENDS)
    return Case([fragments(mutate(p, rnd), rnd) for p in parts], head_only, end)


# ------------------------------------------------------------------------ engines
class Transport:
    """A transport that sends nowhere: a connection's replies are fed to it by hand."""

    def __init__(self, conn: _Conn | None = None) -> None:
        self.conn = conn

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


@dataclass
class _Engine:
    head_only: list[bool]
    conns: set[_Conn] = field(default_factory=set)
    t0: float = 0.0
    rows: list[Row] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key_of_row = [0] * len(self.head_only)
        self.req_bytes = [[b"GET / HTTP/1.1\r\n\r\n"]]

    def record(self, req: _Req, status: int, nbytes: int, done: float, error: str) -> None:
        self.rows.append((error or "ok", status, nbytes))


class _Owner:
    def __init__(self, eng: _Engine) -> None:
        self.e = eng

    def finished(self, conn: _Conn, req: _Req) -> None:
        nxt = req.row + 1
        if conn.alive and nxt < len(self.e.head_only):
            conn.submit(_Req(nxt, 0, 0, 0.0))

    def lost_idle(self, conn: _Conn) -> None:
        pass

    def retry(self, conn: _Conn, req: _Req) -> None:
        self.e.rows.append(("retry", 0, -1))


def python_stream(case: Case) -> Result:
    """What the Python engine records for ``case``."""
    eng = _Engine(list(case.head_only))
    conn = _Conn(eng, _Owner(eng), 0)  # type: ignore[arg-type]
    conn.connection_made(Transport(conn))  # type: ignore[arg-type]
    conn.submit(_Req(0, 0, 0, 0.0))
    for data in case.reads:
        if not conn.alive:
            break  # closed: asyncio delivers nothing more
        if data:
            conn.data_received(data)
    if conn.alive:
        if case.end == "hold":
            conn.expire(float("inf"), 1.0)
            return eng.rows, conn.alive
        conn.connection_lost(ConnectionResetError() if case.end == "reset" else None)
    return eng.rows, False


def native_stream(core: Any, case: Case) -> Result:
    rows, open_ = core.parse_stream(case.reads, list(case.head_only), case.end)
    return [tuple(r) for r in rows], open_


# What the native core says of its framing rules (RFC 9112 section 6.3, field lines as
# 5.1 says, chunked once as 6.1 says, Connection as tokens): a core built before them (an
# installed one older than native/src, until ``make setup``) would differ from the Python
# engine.
FRAMING = "rfc9112-fields"


def native_core() -> Any:
    """The native core when it is built with the test hook and frames answers as the
    Python engine does (RFC 9112 section 6.3), else None."""
    try:
        import shrink_core
    except ImportError:
        return None
    if not hasattr(shrink_core, "parse_stream"):
        return None
    return shrink_core if getattr(shrink_core, "FRAMING", "") == FRAMING else None


def kind(py: Result, native: Result) -> str:
    """What differs, named: the first request whose rows differ, and how."""
    for i, (a, b) in enumerate(zip(py[0], native[0], strict=False)):
        if a != b:
            if a[0] != b[0]:
                return f"req{i}: python {a[0]} / native {b[0]}"
            return f"req{i}: {'status' if a[1] != b[1] else 'nbytes'} ({a[0]})"
    if len(py[0]) != len(native[0]):
        return f"rows: python {len(py[0])} / native {len(native[0])}"
    return "connection left open" if py[1] != native[1] else ""


# ----------------------------------------------------- RFC 9112 section 6.3 oracle
_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])( [^\x00-\x08\x0a-\x1f\x7f]*)?")
_NAME = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_FIELD = re.compile(_NAME + rb"([ \t]*):([^\x00-\x08\x0a-\x1f\x7f]*)")
# a head whose field lines are clean but for whitespace before a colon (RFC 9112 5.1)
BLANK = "blank"


class _Head(NamedTuple):
    status: int
    fields: dict[bytes, list[bytes]]
    end: int
    http10: bool


def _final_head(data: bytes) -> _Head | str | None:
    """The first final answer's head in ``data`` after plain interim answers; BLANK when
    a head up to it has whitespace before a field's colon; None unless every head up to
    it is clean."""
    at = 0
    while True:
        i = data.find(b"\r\n\r\n", at)
        if i < 0 or i + 4 > 65536:
            return None
        status_line, *lines = data[at:i].split(b"\r\n")
        m = _STATUS.fullmatch(status_line)
        if m is None:
            return None
        fields: dict[bytes, list[bytes]] = {}
        blank = False
        for line in lines:
            f = _FIELD.fullmatch(line)
            if f is None:
                return None
            blank = blank or bool(f[1])
            name = line[: line.index(b":")].rstrip(b" \t").lower()
            fields.setdefault(name, []).append(f[2].strip(b" \t"))
        if blank:
            return BLANK
        status, at = int(m[2]), i + 4
        if not 100 <= status < 200:
            return _Head(status, fields, at, m[1] == b"0")
        if status == 101 or fields.keys() & {b"content-length", b"transfer-encoding"}:
            return None


def _bad(r: Result) -> bool:
    return r[0][0][0] == "bad-response" and not r[1]


Rule = tuple[str, Callable[[Result], bool]]


def rfc_expect(case: Case) -> Rule | None:
    """What RFC 9112 (sections 5.1, 6.1 and 6.3) and RFC 9110 7.6.1 ask of the first
    request's answer, where its head is clean and its framing is one of the rules this
    fuzz judges: (the rule's name, a check of what an engine recorded). None where no
    such rule applies."""
    data = b"".join(case.answers[0])
    got = _final_head(data)
    if got == BLANK:
        return "whitespace before a field's colon (RFC 9112 5.1)", _bad
    if not isinstance(got, _Head) or case.head_only[0] or got.status in (204, 304):
        return None
    fields = got.fields
    lengths = [v.strip(b" \t") for f in fields.get(b"content-length", []) for v in f.split(b",")]
    # digits that fit 63 bits (RFC 9110 8.6 lets a recipient refuse a longer one)
    lengths = [v.lstrip(b"0") or b"0" for v in lengths]  # 1*DIGIT: leading zeros are allowed
    valid = all(v.isdigit() and len(v) < 20 and int(v) < 1 << 63 for v in lengths)
    codings = fields.get(b"transfer-encoding")
    if codings is None:
        if not valid or len({int(v) for v in lengths}) > 1:
            return "differing or invalid Content-Length", _bad
        return _connection(case, got, lengths)
    names = [c.split(b";")[0].strip(b" \t").lower() for f in codings for c in f.split(b",")]
    names = [n for n in names if n]
    if names.count(b"chunked") > 1:
        return "chunked more than once (RFC 9112 6.1)", _bad
    if not valid or len({int(v) for v in lengths}) > 1:
        return None  # an error or not: the RFC leaves it open
    if lengths:
        return "Transfer-Encoding with Content-Length", lambda r: len(r[0]) == 1 and not r[1]
    if names and names[-1] == b"chunked":
        return None
    rest = len(b"".join(case.reads)) - got.end
    want = ("timeout", 0, -1) if case.end == "hold" else ("ok", got.status, rest)
    return "chunked not the final coding", lambda r: r[0][0] == want


def _connection(case: Case, head: _Head, lengths: list[bytes]) -> Rule | None:
    """RFC 9110 7.6.1: Connection is a list of tokens. With "close" among them the
    connection is not reused; without it, a one-request answer of exactly its
    Content-Length from a server that holds the connection leaves it open (HTTP/1.1,
    or HTTP/1.0 with a "keep-alive" token) and closed otherwise (HTTP/1.0)."""
    values = head.fields.get(b"connection")
    if values is None:
        return None
    tokens = {t.strip(b" \t").lower() for v in values for t in v.split(b",")}
    if b"close" in tokens:
        return "Connection: close among its tokens (RFC 9110 7.6.1)", lambda r: not r[1]
    rest = len(b"".join(case.reads)) - head.end
    if len(case.head_only) > 1 or case.end != "hold" or not lengths or int(lengths[0]) != rest:
        return None
    want = ([("ok", head.status, rest)], not head.http10 or b"keep-alive" in tokens)
    return "Connection without a close token (RFC 9110 7.6.1)", lambda r: r == want
