"""HTTP/1.x messages in reassembled TCP streams: requests and responses, paired in order.

HTTP is recognised from content, on any port: a stream is a client stream
when it holds a request line (``METHOD target HTTP/1.x``), a server stream
when it holds a status line. Message framing follows RFC 9112: a request has
a body only with Content-Length or chunked Transfer-Encoding; a response has
none after HEAD or with status 1xx/204/304, else it is chunked, or
Content-Length long, or runs to the end of the connection. Responses answer
requests in order (keep-alive and pipelining); interim 1xx responses answer
nothing. A response that arrived before the request it would answer belongs
to a request the capture missed (a flow that starts mid-stream) and is
counted, not paired.

Only header blocks and chunk-size lines are looked at; bodies are skipped by
their length, never copied.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from shrink.ingest.tcp_reassembly import Connection, Streams

__all__ = ["Exchange", "HttpResult", "parse_http"]

_REQ = re.compile(rb"([A-Z][A-Z0-9_-]{0,19}) ([^ \r\n]+) HTTP/1\.[01]\r?\n")
_RESP = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?:[ \t][^\r\n]*)?\r?\n")
_METHOD_TAIL = re.compile(rb"[A-Z][A-Z0-9_-]{0,19} [^ \r\n]+\Z")
MAX_HEADER = 64 * 1024
DETECT_WINDOW = 64 * 1024


@dataclass
class Exchange:
    """One request and, when it came, its response (times in ns, body in wire bytes)."""

    conn: int
    client: bytes
    server: bytes
    sport: int
    method: str
    path: str
    t_req: int
    status: int = 0
    t_first: int = -1
    t_last: int = -1
    body: int = -1
    complete: bool = False
    cookie: str | None = None
    set_cookie: str | None = None


@dataclass
class HttpResult:
    exchanges: list[Exchange]
    requests: int = 0
    responses: int = 0
    orphan_responses: int = 0
    http_conns: int = 0
    counts: Counter[str] = field(default_factory=Counter)


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
        m = _METHOD_TAIL.search(data, ls, h)
        if m is not None and _REQ.match(data, m.start(), end):
            return m.start()
        q = h + 1


def find_response(data: bytes, p: int, end: int) -> int:
    """Offset of the next status line at or after ``p`` (-1 if none)."""
    q = p
    while True:
        h = data.find(b"HTTP/1.", q, end)
        if h < 0:
            return -1
        if _RESP.match(data, h, end):
            return h
        q = h + 1


def _header_end(data: bytes, p: int, end: int) -> tuple[int, int]:
    """(end of the header block, start of the body) or (-1, -1) when not complete."""
    lim = min(end, p + MAX_HEADER)
    h = data.find(b"\r\n\r\n", p, lim)
    if h >= 0:
        return h, h + 4
    h = data.find(b"\n\n", p, lim)
    if h >= 0:
        return h, h + 2
    return -1, -1


def _field(block: bytes, low: bytes, name: bytes) -> bytes | None:
    """A header's value (first occurrence); ``low`` is ``block.lower()``."""
    i = low.find(b"\n" + name + b":")
    if i < 0:
        return None
    i += len(name) + 2
    j = block.find(b"\n", i)
    return block[i : j if j >= 0 else len(block)].strip()


def _framing(block: bytes) -> tuple[bool, int]:
    """(chunked, content length or -1) from a header block."""
    low = block.lower()
    te = _field(block, low, b"transfer-encoding")
    if te is not None and b"chunked" in te.lower():
        return True, -1
    cl = _field(block, low, b"content-length")
    if cl is not None:
        try:
            return False, int(cl.split(b",")[0])
        except ValueError:
            return False, -1
    return False, -1


def _chunked(data: bytes, p: int, end: int) -> tuple[int, int, bool]:
    """Walk a chunked body from ``p``: (decoded bytes, end offset, complete)."""
    body = 0
    while True:
        nl = data.find(b"\n", p, min(end, p + 1024))
        if nl < 0:
            return body, end, False
        try:
            size = int(data[p:nl].split(b";", 1)[0].strip(), 16)
        except ValueError:
            return body, p, False
        p = nl + 1
        if size == 0:
            while True:  # trailer section up to an empty line
                nl = data.find(b"\n", p, end)
                if nl < 0:
                    return body, end, False
                line = data[p:nl]
                p = nl + 1
                if line in (b"", b"\r"):
                    return body, p, True
        if p + size > end:
            return body + (end - p), end, False
        body += size
        p += size
        if data.startswith(b"\r\n", p):
            p += 2
        elif data.startswith(b"\n", p):
            p += 1


def _cookie(block: bytes, name: bytes, header: bytes) -> str | None:
    low = block.lower()
    v = _field(block, low, header)
    if v is None:
        return None
    for part in v.split(b";"):
        k, _, val = part.strip().partition(b"=")
        if k == name:
            return val.decode("latin-1")
    return None


class _Parser:
    def __init__(self, st: Streams, cookie: bytes | None) -> None:
        self.st = st
        self.data = st.data
        self.cookie = cookie
        self.counts: Counter[str] = Counter()

    def requests(self, c: Connection, d: int) -> list[tuple[str, str, int, str | None]]:
        """(method, target, stream offset, cookie) of every complete request header."""
        data = self.data
        p, end = c.span[d]
        out = []
        while p < end:
            m = _REQ.match(data, p, end)
            if m is None:
                q = find_request(data, p + 1, end)
                if q < 0:
                    break
                self.counts["http-resync"] += 1
                p = q
                continue
            h, body = _header_end(data, p, end)
            if h < 0:
                self.counts["incomplete-request-header"] += 1
                break
            if self.st.has_gap(p, body):
                self.counts["request-header-in-gap"] += 1
                p += 1
                continue
            block = data[p:h]
            chunked, length = _framing(block)
            if chunked:
                _, nxt, _ = _chunked(data, body, end)
            else:
                nxt = body + max(length, 0)
            ck = None if self.cookie is None else _cookie(block, self.cookie, b"cookie")
            out.append((m.group(1).decode("ascii"), m.group(2).decode("latin-1"), p, ck))
            p = nxt
        return out

    def responses(self, c: Connection, d: int, reqs: list[Exchange]) -> tuple[int, int]:
        """Fill responses into ``reqs`` in order; (responses seen, orphan responses)."""
        data, st = self.data, self.st
        p, end = c.span[d]
        seen = orphans = 0
        ri = 0
        while p < end:
            m = _RESP.match(data, p, end)
            if m is None:
                q = find_response(data, p + 1, end)
                if q < 0:
                    break
                self.counts["http-resync"] += 1
                p = q
                continue
            h, body = _header_end(data, p, end)
            if h < 0:
                self.counts["incomplete-response-header"] += 1
                break
            if st.has_gap(p, body):
                self.counts["response-header-in-gap"] += 1
                p += 1
                continue
            status = int(m.group(1))
            t_first = st.time_at(p)
            # A response older than the next request answers one the capture missed.
            req = reqs[ri] if ri < len(reqs) and reqs[ri].t_req <= t_first else None
            block = data[p:h]
            if 100 <= status < 200 and status != 101:
                seen += 1
                p = body
                continue
            head = req is not None and req.method == "HEAD"
            complete = True
            if head or status in (204, 304) or status == 101:
                size, nxt = 0, body
            else:
                chunked, length = _framing(block)
                if chunked:
                    size, nxt, complete = _chunked(data, body, end)
                elif length >= 0:
                    nxt = min(body + length, end)
                    size, complete = nxt - body, body + length <= end
                else:  # delimited by the connection's close
                    size, nxt = end - body, end
            # Like tshark, count a response only when all of it was captured;
            # one with a hole still answers its request (times and status are known).
            if complete and not st.has_gap(body, nxt):
                seen += 1
            else:
                self.counts["response-incomplete"] += 1
            if req is None:
                orphans += 1
            else:
                req.status = status
                req.t_first = t_first
                req.t_last = st.done_at(max(nxt, body) - 1)
                req.body = size
                req.complete = complete
                if self.cookie is not None:
                    req.set_cookie = _cookie(block, self.cookie, b"set-cookie")
                ri += 1
            if status == 101 or (req is not None and req.method == "CONNECT" and status < 300):
                break  # the connection leaves HTTP
            p = nxt
        return seen, orphans

    def client_dir(self, c: Connection) -> int:
        """The direction that sends requests, or -1 when the connection is not HTTP."""
        data = self.data
        looks = []
        for d in (0, 1):
            s, e = c.span[d]
            w = min(e, s + DETECT_WINDOW)
            looks.append((find_request(data, s, w) >= 0, find_response(data, s, w) >= 0))
        if c.opener >= 0 and (looks[c.opener][0] or looks[1 - c.opener][1]):
            return c.opener
        for d in (0, 1):
            if looks[d][0] or looks[1 - d][1]:
                return d
        return -1


def parse_http(st: Streams, *, cookie: str | None = None) -> HttpResult:
    """Every HTTP exchange of every connection, in connection order then request order."""
    parser = _Parser(st, None if cookie is None else cookie.encode("latin-1"))
    res = HttpResult([])
    for c in st.conns:
        cd = parser.client_dir(c)
        if cd < 0:
            res.counts["non-http-connection"] += 1
            res.counts["non-http-packets"] += c.packets
            continue
        res.http_conns += 1
        (caddr, _), (saddr, sport) = c.ep[cd], c.ep[1 - cd]
        reqs = [
            Exchange(c.index, caddr, saddr, sport, meth, path, st.time_at(off), cookie=ck)
            for meth, path, off, ck in parser.requests(c, cd)
        ]
        seen, orphans = parser.responses(c, 1 - cd, reqs)
        res.requests += len(reqs)
        res.responses += seen
        res.orphan_responses += orphans
        res.exchanges.extend(reqs)
    res.counts.update(parser.counts)
    return res
