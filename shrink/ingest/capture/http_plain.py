"""The plain keep-alive stream, parsed with the least work per message.

Most streams of a web capture are plain: every request a header block without
body, every response a header block with one Content-Length, each starting a
TCP segment that holds the whole block, no hole in the stream, responses in
the order of their requests. For such a stream a message costs one bisect and
one regular-expression match over the capture buffer (no copy), and the
pairing of responses with requests is checked for all of them at once.

Each function returns None as soon as the stream is not plain (a message the
match refuses, an interim or body-less status, a HEAD or CONNECT request,
a response cut short, a response before its request); the caller then parses
the stream the careful way from its start. So where these give an answer it
is the careful parser's answer, only sooner.
"""

from __future__ import annotations

import re
from bisect import bisect_right

import numpy as np

from shrink.ingest.capture.http_message import target_text
from shrink.ingest.capture.tcp_reassembly import Streams

__all__ = ["REQ_PLAIN", "RESP_PLAIN", "plain_requests", "plain_responses"]

# The common message in one match: a start line and CRLF header lines up to the
# empty line, with no Transfer-Encoding and at most one plain Content-Length
# (its digits captured). Anything else (a bare LF, a second Content-Length,
# chunking, a header block longer than the piece) fails to match and takes the
# careful path, so where these match they give what the careful path gives.
# Quantifiers are possessive (``*+``, ``++``): what follows each run can never be
# found by giving part of it back (a run of non-CRLF bytes is followed by CR; an
# ordinary header line is neither empty nor a length line), so nothing is lost,
# and the engine keeps no backtracking state: a fifth faster.
_OTHER_LINE = rb"(?:(?!(?i:content-length|transfer-encoding):)[^\r\n]++\r\n)*+"
_LENGTH_LINE = rb"(?:(?i:content-length):[ \t]*+([0-9]++)[ \t]*+\r\n" + _OTHER_LINE + rb")?"
REQ_PLAIN = re.compile(
    rb"([A-Z][A-Z0-9_-]{0,19}) ([^ \r\n\x00]++) HTTP/1\.[01]\r\n" + _OTHER_LINE + rb"\r\n"
)
RESP_PLAIN = re.compile(
    rb"HTTP/1\.[01] ([0-9]{3})(?:[ \t][^\r\n]*+)?\r\n" + _OTHER_LINE + _LENGTH_LINE + rb"\r\n"
)


def plain_requests(
    st: Streams, p: int, end: int, methods: dict[bytes, str]
) -> tuple[list[int], list[str], list[str]] | None:
    """(offsets, methods, paths) of the requests in ``[p, end)``, or None if not plain."""
    starts, srcs, lens, mv = st._starts, st._src, st._len, st._mv
    match = REQ_PLAIN.match
    offs: list[int] = []
    heads: list[tuple[bytes, bytes]] = []
    last = len(starts) - 1
    i = bisect_right(starts, p) - 1
    while p < end:
        s0, src, ln = starts[i], srcs[i], lens[i]
        if src < 0:
            return None
        at = src + p - s0
        m = match(mv, at, src + (ln if ln < end - s0 else end - s0))
        if m is None:
            return None
        offs.append(p)
        heads.append(m.group(1, 2))
        p += m.end() - at
        if p >= s0 + ln:  # usually a request fills its segment: the next piece is next
            i = i + 1 if i < last and starts[i + 1] == p else bisect_right(starts, p, i) - 1
    meths = []
    for g, _ in heads:
        meth = methods.get(g)
        if meth is None:
            meth = methods[g] = g.decode("ascii")
        meths.append(meth)
    return offs, meths, [target_text(path) for _, path in heads]


def plain_responses(
    st: Streams, p: int, end: int, t_req: list[int], meths: list[str], req_off: list[int]
) -> tuple[list[int], list[int], list[int], list[int], int] | None:
    """(offsets, statuses, body lengths, last byte offsets, how many were paired by
    TCP's ACK against their times) of the responses in ``[p, end)``, each answering
    the request of the same rank, or None if the stream is not plain."""
    starts, srcs, lens, mv = st._starts, st._src, st._len, st._mv
    match = RESP_PLAIN.match
    # Per response only what finds the next one; the rest is checked after, at once.
    offs: list[int] = []
    codes: list[bytes] = []
    size: list[int] = []
    piece: list[int] = []  # the piece each response starts in (its time)
    i = 0
    while p < end:
        i = bisect_right(starts, p, i) - 1
        s0, src = starts[i], srcs[i]
        if src < 0:
            return None
        at = src + p - s0
        m = match(mv, at, src + (lens[i] if lens[i] < end - s0 else end - s0))
        if m is None:
            return None
        code, length = m.group(1, 2)
        if length is None:
            return None  # delimited by the close, or no body: the careful way
        n = int(length)
        offs.append(p)
        codes.append(code)
        size.append(n)
        piece.append(i)
        p += m.end() - at + n
    r = len(offs)
    if p > end or r > len(t_req):
        return None  # the last response was cut short, or more responses than requests
    status = list(map(int, codes))
    if r and (min(status) < 200 or 204 in status or 304 in status):
        return None  # interim, or a status that has no body whatever its length says
    skew = 0
    if r:
        # A response after the request it would answer: where the server's segment
        # acknowledged some of the request's bytes (TCP's ACK), else by the times.
        by_time = np.asarray(t_req[:r]) <= st.piece_ts[piece]
        ack = st.piece_ack[piece] if st.piece_ack.size else np.full(r, -1)
        ok = np.where(ack >= 0, ack > np.asarray(req_off[:r]), by_time)
        if not ok.all():
            return None  # a response before the request it would answer
        skew = int(np.count_nonzero(~by_time))
    if "HEAD" in meths[:r] or "CONNECT" in meths[:r]:
        return None
    # Each response runs up to the next one (the last to where the walk stopped).
    last = [o - 1 for o in offs[1:]]
    last.append(p - 1)
    return offs, status, size, last if r else [], skew
