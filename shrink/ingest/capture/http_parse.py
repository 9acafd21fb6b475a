"""HTTP/1.x messages in reassembled TCP streams: requests and responses, paired in order.

HTTP is recognised from content, on any port: a stream is a client stream
when it holds a request line (``METHOD target HTTP/1.x``), a server stream
when it holds a status line. Message framing follows RFC 9112: a request has
a body only with Content-Length or chunked Transfer-Encoding; a response has
none after HEAD or with status 1xx/204/304, else it is chunked, or
Content-Length long, or runs to the end of the connection (complete only when
the server closed with FIN: a reset or the end of the capture may have cut it). Responses answer
requests in order (keep-alive and pipelining); interim 1xx responses answer
nothing. A 101 (Switching Protocols), or a 2xx to CONNECT, ends at its header
block and the connection leaves HTTP: what the client sent after the request it
answers went through a tunnel or in another protocol and is left out, counted
(``tunnel-requests``). A response that arrived before the request it would answer belongs
to a request the capture missed (a flow that starts mid-stream) and is
counted, not paired.

Only header blocks and chunk-size lines are looked at (copied out of the
capture buffer through small windows); a response's body is skipped by its length,
never copied. A request's body is copied (a chunked one without its chunk lines): the
replay sends it, as a session log's ``contents=`` is sent.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable

import numpy as np

from shrink.bodies import MAX_BODY, too_large
from shrink.errors import TraceFormatError
from shrink.ingest.capture.http_message import (
    CHUNK_WINDOW,
    DETECT_WINDOW,
    HEADER_WINDOW,
    MAX_HEADER,
    NUL_TARGET,
    REQ_LINE,
    SEARCH_OVERLAP,
    SEARCH_WINDOW,
    STATUS_LINE,
    HttpResult,
    body_framing,
    cookie_value,
    find_request,
    find_response,
    header_end,
    header_values,
    target_text,
)
from shrink.ingest.capture.http_plain import REQ_PLAIN, RESP_PLAIN, plain_requests, plain_responses
from shrink.ingest.capture.tcp_reassembly import Connection, Streams
from shrink.wire import wire_content_type

__all__ = ["HttpResult", "find_request", "find_response", "parse_http"]


class _Parser:
    """Walks streams through windows: only header blocks and chunk lines are copied."""

    def __init__(
        self, st: Streams, cookie: bytes | None, out: HttpResult, max_body: int = MAX_BODY
    ) -> None:
        self.st = st
        self.max_body = max_body
        self.conn: Connection | None = None  # whose requests are being read
        self.win = st.window
        self.cookie = cookie
        self.out = out
        self.counts: Counter[str] = Counter()
        self.gaps = bool(st.gap_start.size)
        self.methods: dict[bytes, str] = {}

    def search(self, finder: Callable[[bytes, int, int], int], p: int, end: int) -> int:
        """Stream offset of the next message start at or after ``p`` (-1 if none)."""
        st = self.st
        while p < end:
            i = bisect_right(st._starts, p) - 1
            if self.gaps and st._src[i] < 0:  # a capture gap's zeros: no message starts there
                p = st._starts[i] + st._len[i]
                continue
            stop = min(end, p + SEARCH_WINDOW)
            w = self.win(p, stop)
            q = finder(w, 0, len(w))
            if q >= 0:
                return p + q
            if stop == end:
                return -1
            p = stop - SEARCH_OVERLAP  # a start line may straddle two windows
        return -1

    def header(
        self, rx: re.Pattern[bytes], p: int, end: int
    ) -> tuple[bytes, re.Match[bytes] | None, int, int]:
        """(window, start-line match, header end in the window, body offset in the stream).

        The header end is -1 when the block is not complete before ``end``.
        """
        lim = min(end, p + MAX_HEADER)
        # Most header blocks sit inside one segment: first look to the piece's end.
        st = self.st
        i = bisect_right(st._starts, p) - 1
        a = p - st._starts[i]
        src = st._src[i]
        b = min(st._len[i], lim - st._starts[i])
        w = bytes(st._mv[src + a : src + b]) if src >= 0 else bytes(b - a)
        m = rx.match(w)
        h, at = header_end(w) if m is not None else (-1, -1)
        size = max(HEADER_WINDOW, 2 * len(w))
        while h < 0 and len(w) < lim - p and (m is not None or b"\n" not in w):
            w = self.win(p, min(lim, p + size))
            m = rx.match(w)
            h, at = header_end(w) if m is not None else (-1, -1)
            size *= 8  # a long header block (or start line): look further
        if m is None:
            return w, None, -1, -1
        return w, m, h, (p + at if h >= 0 else -1)

    def head(
        self, rx: re.Pattern[bytes], w: bytes, p: int, end: int
    ) -> tuple[bytes, re.Match[bytes] | None, int, int]:
        """:meth:`header`, trying first the window ``w`` the caller already holds."""
        m = rx.match(w)
        h, at = header_end(w) if m is not None else (-1, -1)
        if h >= 0:
            return w, m, h, p + at
        return self.header(rx, p, end)

    def unusable(
        self,
        m: re.Match[bytes] | None,
        h: int,
        p: int,
        body: int,
        end: int,
        find: Callable[[bytes, int, int], int],
        what: str,
    ) -> int | None:
        """None if the ``what`` (request or response) header block at ``p`` can be read;
        else where to read on (-1: stop), the reason counted: no start line (resync at
        the next one), a block cut by ``end``, a block in a capture gap (one byte on)."""
        if m is None:
            q = self.search(find, p + 1, end)
            if q >= 0:
                self.counts["http-resync"] += 1
            return q
        if h < 0:
            self.counts[f"incomplete-{what}-header"] += 1
            return -1
        if self.gaps and self.st.has_gap(p, body):
            self.counts[f"{what}-header-in-gap"] += 1
            return p + 1
        return None

    def chunked(self, p: int, end: int, keep: list[bytes] | None = None) -> tuple[int, int, bool]:
        """Walk a chunked body from ``p``: (decoded bytes, end offset, complete); the
        chunks' data appended to ``keep`` when given."""
        win = self.win
        body = 0
        first = True
        while True:
            w = win(p, min(end, p + CHUNK_WINDOW))
            i = 0
            if not first:  # the CRLF that ends the previous chunk's data
                i = 2 if w.startswith(b"\r\n") else 1 if w.startswith(b"\n") else 0
            first = False
            nl = w.find(b"\n", i)
            if nl < 0:
                return body, end, False
            try:
                size = int(w[i:nl].split(b";", 1)[0].strip(), 16)
            except ValueError:
                return body, p + i, False
            p += nl + 1
            if size == 0:  # trailer section up to an empty line
                w = win(p, min(end, p + MAX_HEADER))
                if w.startswith(b"\r\n"):
                    return body, p + 2, True
                if w.startswith(b"\n"):
                    return body, p + 1, True
                k, at = header_end(w)
                return (body, p + at, True) if k >= 0 else (body, end, False)
            if keep is not None:
                keep.append(win(p, min(p + size, end)))
            if p + size > end:
                return body + (end - p), end, False
            body += size
            p += size

    def requests(self, c: Connection, d: int) -> tuple[list[int], list[str]]:
        """Append every complete request of stream ``d``; (offsets, methods)."""
        out, methods = self.out, self.methods
        self.conn = c
        p, end = c.span[d]
        offs: list[int] = []
        meths: list[str] = []
        paths: list[str] = []
        cookies: list[str | None] = []
        bodies: list[bytes] = []
        types: list[str | None] = []
        st = self.st
        quick = None
        if self.cookie is None and not (self.gaps and st.has_gap(p, end)):
            quick = plain_requests(st, p, end, methods)
        if quick is not None:
            offs, meths, paths = quick
            bodies = [b""] * len(offs)
            types = [None] * len(offs)
            p = end
        starts, srcs, lens, mv = st._starts, st._src, st._len, st._mv
        plain = REQ_PLAIN.match
        gaps, cookie = self.gaps, self.cookie
        while p < end:
            # Fast path, inlined (it runs per message): the header block inside
            # the piece that holds its first byte.
            i = bisect_right(starts, p) - 1
            s0 = starts[i]
            b = lens[i] if lens[i] < end - s0 else end - s0
            src = srcs[i]
            w = mv[src + p - s0 : src + b].tobytes() if src >= 0 else b""
            m = plain(w)
            if m is not None and not (gaps and st.has_gap(p, p + m.end())):
                # No body: the next request starts where this header block ends.
                g, path = m.group(1, 2)
                meth = methods.get(g)
                if meth is None:
                    meth = methods[g] = g.decode("ascii")
                offs.append(p)
                meths.append(meth)
                paths.append(target_text(path))
                bodies.append(b"")
                types.append(None)
                if cookie is not None:
                    cookies.append(cookie_value(w[: m.end() - 4], cookie, b"cookie"))
                p += m.end()
                continue
            w, m, h, body = self.head(REQ_LINE, w, p, end)
            if m is None and NUL_TARGET.match(w):  # (the replay could not send it)
                self.counts["request-target-nul"] += 1
            q = self.unusable(m, h, p, body, end, find_request, "request")
            if q is not None:
                if q < 0:
                    break
                p = q
                continue
            assert m is not None
            low = w[m.end() - 1 : h].lower()
            nxt, sent, typ = body, b"", None
            if b"\ncontent-length:" in low or b"\ntransfer-encoding:" in low:
                nxt, sent = self.request_body(low, body, end, len(offs) + 1)
                typ = self.content_type(w[m.end() - 1 : h], low)
            g = m.group(1)
            meth = methods.get(g)
            if meth is None:
                meth = methods[g] = g.decode("ascii")
            offs.append(p)
            meths.append(meth)
            paths.append(target_text(m.group(2)))
            bodies.append(sent)
            types.append(typ)
            if self.cookie is not None:
                cookies.append(cookie_value(w[:h], self.cookie, b"cookie"))
            p = nxt
        k = len(offs)
        out.req_off += offs
        out.method += meths
        out.path += paths
        out.req_body += bodies
        out.req_type += types
        out.cookie += cookies if self.cookie is not None else [None] * k
        return offs, meths

    def request_body(self, low: bytes, body: int, end: int, nth: int) -> tuple[int, bytes]:
        """(where the next request starts, the body's bytes) of a request whose header
        block ``low`` (lower case) frames a body starting at ``body``, the ``nth`` of
        its connection. A body the capture cut short, or with a hole in it, is kept as
        far as it goes, holes as zeros, and counted. One longer than ``max_body`` is a
        TraceFormatError (without the file's name) before it is copied."""
        chunked, length = body_framing(low)
        if chunked:
            size, nxt, complete = self.chunked(body, end)
            self.bound(size, nth)
            parts: list[bytes] = []
            self.chunked(body, end, parts)
            sent = b"".join(parts)
        else:
            nxt = body + max(length, 0)
            complete = nxt <= end
            self.bound(min(nxt, end) - body, nth)
            sent = self.win(body, min(nxt, end))
        if not complete or (self.gaps and self.st.has_gap(body, min(nxt, end))):
            self.counts["request-body-incomplete"] += 1
        return nxt, sent

    def bound(self, size: int, nth: int) -> None:
        """A TraceFormatError naming the connection (by its first packet) and the request
        when a body of ``size`` bytes is longer than ``max_body``."""
        if size > self.max_body and self.conn is not None:
            raise TraceFormatError(
                f"the connection first seen in packet {self.conn.first_pkt}, its request "
                f"{nth}, field body: {too_large(size, self.max_body)}"
            )

    def content_type(self, block: bytes, low: bytes) -> str | None:
        """The Content-Type a request with a body sent (``block`` its header lines,
        ``low`` the same lower-cased), as the replay sends it again: its bytes one
        character each. None when it sent none, or one that cannot go on the wire again
        (a control character, which could smuggle a header; longer than
        :data:`~shrink.wire.MAX_CONTENT_TYPE`): that one is counted."""
        values = header_values(block, low, b"content-type")
        if len(set(values)) > 1:
            # a type sent twice, unlike: which one the server took is its own choice
            # (nginx and PHP take the first); the first goes again, and is counted
            self.counts["request-content-type-repeated"] += 1
        raw = values[0] if values else None
        if not raw:
            return None
        try:
            return wire_content_type(raw.decode("latin-1"))
        except ValueError:
            self.counts["request-content-type-dropped"] += 1
            return None

    def responses(
        self, c: Connection, d: int, base: int, reqs: tuple[list[int], list[int]], meths: list[str]
    ) -> tuple[int, int, int]:
        """Pair responses of stream ``d`` with the requests at ``base``... (``reqs``: their
        times and stream offsets); (seen, orphans, the rank of the request whose answer
        made the connection a tunnel, else -1).

        A response answers the next request unanswered when the server's segment that
        carried its first byte acknowledged some of that request's bytes (TCP's ACK),
        else (no ACK known) when it was captured at or after the request's first packet;
        an earlier one answers a request the capture missed. Where the two disagree
        (one direction's packets stamped by a clock apart) the ACK is followed; a response
        it pairs though stamped before the request is counted (``ack-against-time``)."""
        st, out, counts = self.st, self.out, self.counts
        starts, ts, srcs, lens, mv = st._starts, st._ts, st._src, st._len, st._mv
        t_req, req_off = reqs
        acks = st._acks
        plain = RESP_PLAIN.match
        p, end = c.span[d]
        if self.cookie is None and not (self.gaps and st.has_gap(p, end)):
            quick = plain_responses(st, p, end, t_req, meths, req_off)
            if quick is not None:
                offs, status, size, last, skew = quick
                if skew:
                    counts["ack-against-time"] += skew
                k = len(offs)
                out.status[base : base + k] = status
                out.first_off[base : base + k] = offs
                out.last_off[base : base + k] = last
                out.body[base : base + k] = size
                return k, 0, -1
        seen = orphans = 0
        ri = 0
        nreq = len(t_req)
        while p < end:
            # Fast path, inlined (it runs per message): the header block inside
            # the piece that holds its first byte, in one match when it is plain.
            i = bisect_right(starts, p) - 1
            s0 = starts[i]
            b = lens[i] if lens[i] < end - s0 else end - s0
            src = srcs[i]
            w = mv[src + p - s0 : src + b].tobytes() if src >= 0 else b""
            framing: tuple[bool, int] | None = None  # (chunked, Content-Length) when known
            m = plain(w)
            if m is not None:
                h = m.end() - 4
                body = p + h + 4
                length = m.group(2)
                framing = (False, -1 if length is None else int(length))
            else:
                w, m, h, body = self.head(STATUS_LINE, w, p, end)
            q = self.unusable(m, h, p, body, end, find_response, "response")
            if q is not None:
                if q < 0:
                    break
                p = q
                continue
            assert m is not None
            status = int(m.group(1))
            if 100 <= status < 200 and status != 101:
                seen += 1
                p = body
                continue
            t_first = ts[i]  # (p has not moved since i was found)
            # A response older than the next request answers one the capture missed.
            req = ri if ri < nreq and t_req[ri] <= t_first else -1
            if ri < nreq and acks is not None and acks[i] >= 0:
                by_ack = ri if acks[i] > req_off[ri] else -1
                # Said as a response stamped before the request it answers: counted only
                # so (one the ACK makes an orphan, though after the request, is not that).
                counts["ack-against-time"] += by_ack > req
                req = by_ack
            meth = meths[req] if req >= 0 else ""
            complete = True
            # A 101, or a 2xx to CONNECT, ends at its header block: the connection then
            # carries another protocol or a tunnel (RFC 9112 6.3), not a body to the close.
            tunnel = status == 101 or (meth == "CONNECT" and 200 <= status < 300)
            if meth == "HEAD" or status in (204, 304) or tunnel:
                size, nxt = 0, body
            else:
                chunked, length = framing or body_framing(w[m.end() - 1 : h].lower())
                if chunked:
                    size, nxt, complete = self.chunked(body, end)
                elif length >= 0:
                    nxt = min(body + length, end)
                    size, complete = nxt - body, body + length <= end
                else:  # delimited by the connection's close: complete only with a FIN
                    size, nxt, complete = end - body, end, c.fin[d]
            # Like tshark, count a response only when all of it was captured;
            # one with a hole still answers its request (times and status are known).
            if complete and not (self.gaps and st.has_gap(body, nxt)):
                seen += 1
            else:
                counts["response-incomplete"] += 1
            if req < 0:
                orphans += 1
            else:
                i = base + req
                out.status[i] = status
                out.first_off[i] = p
                out.last_off[i] = max(nxt, body) - 1
                out.body[i] = size
                if self.cookie is not None:
                    out.set_cookie[i] = cookie_value(w[:h], self.cookie, b"set-cookie")
                ri += 1
            if tunnel:  # the connection leaves HTTP
                return seen, orphans, req
            p = nxt
        return seen, orphans, -1

    def client_dir(self, c: Connection) -> int:
        """The direction that sends requests, or -1 when the connection is not HTTP."""
        looks = []
        for d in (0, 1):
            s, e = c.span[d]
            # The usual case: the stream starts with a start line (cheap to check).
            head = self.st.piece_rest(s, e)
            looks.append((REQ_LINE.match(head) is not None, STATUS_LINE.match(head) is not None))
        if not any(any(x) for x in looks):  # a flow caught mid-stream, or not HTTP
            looks = []
            for d in (0, 1):
                s, e = c.span[d]
                w = self.win(s, min(e, s + DETECT_WINDOW))
                looks.append((find_request(w, 0, len(w)) >= 0, find_response(w, 0, len(w)) >= 0))
        if c.opener >= 0 and (looks[c.opener][0] or looks[1 - c.opener][1]):
            return c.opener
        for d in (0, 1):
            if looks[d][0] or looks[1 - d][1]:
                return d
        return -1


def _first_sent(starts: list[int], ts: memoryview, start: list[int], end: list[int]) -> list[int]:
    """The capture time of each request's first packet: the earliest of the packets that
    carried its bytes ``[start, end)``. A request whose later segment was captured before
    its first (reordered, or the first lost and sent again) was sent by then. ``starts``
    and ``ts``: the pieces' starts and times (this runs per connection: in Python, as a
    numpy call for a few requests costs more than it saves)."""
    out = []
    for s, e in zip(start, end, strict=True):
        a = bisect_right(starts, s) - 1
        b = bisect_right(starts, max(e - 1, s), a) - 1
        out.append(ts[a] if b <= a else min(ts[a : b + 1]))
    return out


def parse_http(st: Streams, *, cookie: str | None = None, max_body: int = MAX_BODY) -> HttpResult:
    """Every HTTP exchange of every connection, in connection order then request order;
    a request body longer than ``max_body`` bytes is a TraceFormatError."""
    res = HttpResult()
    parser = _Parser(st, None if cookie is None else cookie.encode("latin-1"), res, max_body)
    starts = st.piece_start
    ts = memoryview(np.ascontiguousarray(st.piece_ts, dtype=np.int64))
    t_all: list[int] = []
    for c in st.conns:
        cd = parser.client_dir(c)
        if cd < 0:
            res.counts["non-http-connection"] += 1
            res.counts["non-http-packets"] += c.packets
            continue
        res.http_conns += 1
        res.http_conn_ids.add(c.index)
        (caddr, _), (saddr, sport) = c.ep[cd], c.ep[1 - cd]
        base = len(res.conn)
        offs, meths = parser.requests(c, cd)
        k = len(offs)
        res.conn += [c.index] * k
        res.client += [caddr] * k
        res.server += [saddr] * k
        res.sport += [sport] * k
        res.status += [0] * k
        res.first_off += [-1] * k
        res.last_off += [-1] * k
        res.body += [-1] * k
        res.set_cookie += [None] * k
        # (the earliest: a response captured before the packet with the request's first
        # byte, sent again after the first copy went by, answered it all the same)
        t_req = _first_sent(st._starts, ts, offs, [*offs[1:], c.span[cd][1]][:k])
        seen, orphans, tunnel = parser.responses(c, 1 - cd, base, (t_req, offs), meths)
        if 0 <= tunnel < k - 1:  # what the client sent past it went through the tunnel
            res.counts["tunnel-requests"] += k - 1 - tunnel
            k = tunnel + 1
            res.truncate(base + k)
        t_all += t_req[:k]
        res.requests += k
        res.responses += seen
        res.orphan_responses += orphans
    res.counts.update(parser.counts)
    # Times of all responses at once.
    first = np.asarray(res.first_off, dtype=np.int64)
    last = np.asarray(res.last_off, dtype=np.int64)
    res.t_req = np.asarray(t_all, dtype=np.int64)
    at = np.searchsorted(starts, np.maximum(first, 0), side="right") - 1
    res.t_first = np.where(first >= 0, st.piece_ts[at] if at.size else at, -1)
    at = np.searchsorted(starts, np.maximum(last, 0), side="right") - 1
    res.t_last = np.where(last >= 0, st.piece_done[at] if at.size else at, -1)
    return res
