"""Sessions, bursts and think times from HTTP exchanges, laid out as Trace columns.

A session is what load balancing keeps together: a client address until it
has been idle longer than ``idle_gap``, a TCP connection, or the value of a
cookie (linked to the request whose response set it). Inside a session, a
request that starts while an earlier one is still outstanding, or within
``burst_gap`` of the last response, joins that burst (a page and its embedded
objects); the think time is the gap from a burst's last response byte to the
next burst's first request.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import numpy as np

from shrink.classify import Classifier
from shrink.errors import ParameterError
from shrink.ingest.capture.http_parse import HttpResult

__all__ = [
    "BROWSER_CONNECTIONS",
    "address_text",
    "connections_at_once",
    "parse_sessions",
    "sessionize",
]


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def parse_sessions(spec: str) -> tuple[str, str | None]:
    """``"client"``, ``"connection"`` or ``"cookie:NAME"`` -> (mode, cookie name)."""
    if spec in ("client", "connection"):
        return spec, None
    if spec.startswith("cookie:") and len(spec) > len("cookie:"):
        name = spec.split(":", 1)[1]
        if not _TOKEN.fullmatch(name):
            # No cookie could have it: a space, '=' or ';' (or a character outside
            # latin-1, which was an internal error) matched nothing and said nothing.
            raise ParameterError(
                f"sessions == {spec!r}: a cookie's name is ASCII letters, digits and "
                "!#$%&'*+-.^_`|~ (RFC 6265)."
            )
        return "cookie", name
    raise ParameterError(f"sessions == {spec!r}, must be 'client', 'connection' or 'cookie:NAME'.")


def address_text(addr16: bytes) -> str:
    """A 16-byte address as text; IPv4-mapped addresses as dotted quads."""
    a = ipaddress.IPv6Address(addr16)
    return str(a.ipv4_mapped) if a.ipv4_mapped is not None else str(a)


def _group_cummax(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each new ``group`` (rows sorted by group).

    Values are non-negative microseconds; each group is lifted above the one
    before it so one accumulate serves all groups.
    """
    if values.size == 0:
        return values
    span = int(values.max()) + 1
    gid = np.cumsum(np.r_[True, group[1:] != group[:-1]]) - 1
    if int(gid[-1]) < (1 << 62) // span:
        lift = gid * span
        return np.maximum.accumulate(values + lift) - lift
    out = values.copy()  # a very long capture with very many groups: per group
    for g in np.unique(gid).tolist():
        sel = gid == g
        out[sel] = np.maximum.accumulate(values[sel])
    return out


def _keys(http: HttpResult, mode: str) -> np.ndarray:
    """An integer session key per request."""
    if mode == "connection":
        return np.asarray(http.conn, dtype=np.int64)
    codes: dict[object, int] = {}
    if mode == "client":
        return np.asarray([codes.setdefault(c, len(codes)) for c in http.client], dtype=np.int64)
    # cookie: the cookie sent, else the one the response set, else the client address
    keys = [
        ("cookie", ck) if ck is not None else ("cookie", sc) if sc is not None else ("ip", cl)
        for ck, sc, cl in zip(http.cookie, http.set_cookie, http.client, strict=True)
    ]
    return np.asarray([codes.setdefault(k, len(codes)) for k in keys], dtype=np.int64)


# A browser opens at most 6 HTTP/1.1 connections to a host name at once (Chrome,
# Firefox); host names may share a server's address (a CDN's), so a session is taken for
# several users only past twice that (a browser loading espn.com had 7 to one address).
BROWSER_CONNECTIONS = 12


def connections_at_once(
    session: np.ndarray, server: np.ndarray, conn: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Per session (0..max), the most of its connections to one server (``server``: a code
    per request) open at once: a connection is open from its first request's send to its
    last response byte (``start``/``end`` per request, any unit)."""
    if not session.size:
        return np.zeros(0, dtype=np.int64)
    n_sess = int(session.max()) + 1
    # Connections never span servers: a (session, connection) pair is in one group.
    group = session * (int(server.max()) + 1) + server
    pair = group * (int(conn.max()) + 1) + conn
    pairs, inv = np.unique(pair, return_inverse=True)
    lo = np.full(pairs.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.zeros(pairs.size, dtype=np.int64)
    np.minimum.at(lo, inv, start)
    np.maximum.at(hi, inv, end)
    owner = pairs // (int(conn.max()) + 1)  # the group
    # Events per group in time order, an open before a close at the same instant (an
    # unanswered request's connection is open for an instant: one).
    ev_sess = np.r_[owner, owner]
    ev_time = np.r_[lo, hi]
    ev_step = np.r_[np.ones(pairs.size, np.int64), -np.ones(pairs.size, np.int64)]
    o = np.lexsort((-ev_step, ev_time, ev_sess))
    level = np.cumsum(ev_step[o])  # each group's events sum to 0: no carry-over
    most = np.zeros(n_sess, dtype=np.int64)
    np.maximum.at(most, ev_sess[o] // (int(server.max()) + 1), level)
    return most


def sessionize(
    http: HttpResult,
    *,
    mode: str,
    idle_gap: float,
    burst_gap: float,
    classifier: Classifier,
) -> dict[str, Any]:
    """Trace columns (plus server, conn, ttfb, answered) from the parsed requests."""
    n = len(http)
    t_req = http.t_req
    answered = http.t_last >= 0
    end = np.where(answered, http.t_last, t_req)
    t0 = int(t_req.min()) if n else 0
    # Decisions in integer microseconds from the first request.
    us_req = (t_req - t0) // 1000
    us_end = np.maximum((end - t0) // 1000, us_req)
    conn = np.asarray(http.conn, dtype=np.int64)
    idx = np.arange(n)
    key = _keys(http, mode)
    # Sessions: same key, and not idle (since the key's last activity) past idle_gap.
    o = np.lexsort((idx, conn, us_req, key))
    k = key[o]
    first = np.r_[True, k[1:] != k[:-1]] if n else np.zeros(0, dtype=bool)
    act = _group_cummax(k, us_end[o])
    prev = np.r_[np.int64(0), act[:-1]] if n else act
    new = first | ((us_req[o] - prev > idle_gap * 1e6) if mode != "connection" else False)
    sess_o = np.cumsum(new) - 1
    sess = np.empty(n, dtype=np.int64)
    sess[o] = sess_o
    # Number sessions by their first request's time (then connection, then order).
    starts = o[new]
    rank = np.empty(starts.size, dtype=np.int64)
    rank[np.lexsort((starts, conn[starts], us_req[starts]))] = np.arange(starts.size)
    sess = rank[sess]
    # Rows: by session, then time. A request joins the burst while the session has
    # a request outstanding (or within burst_gap of the last response).
    rows = np.lexsort((idx, conn, us_req, sess))
    s_r = sess[rows]
    first = np.r_[True, s_r[1:] != s_r[:-1]] if n else np.zeros(0, dtype=bool)
    busy = _group_cummax(s_r, us_end[rows])
    prev = np.r_[np.int64(0), busy[:-1]] if n else busy
    new_burst = first | (us_req[rows] > prev + burst_gap * 1e6)
    bstart = np.flatnonzero(new_burst)
    bid = np.cumsum(new_burst) - 1
    session_first_burst = np.maximum.accumulate(np.where(first, bid, 0)) if n else bid
    burst = bid - session_first_burst
    t_start = t_req[rows][bstart]
    b_end = np.maximum.reduceat(end[rows], bstart) if n else end
    next_same = np.r_[s_r[bstart][1:] == s_r[bstart][:-1], False] if n else new_burst
    think_b = np.where(next_same, np.maximum(0.0, (np.r_[t_start[1:], 0] - b_end) / 1e9), 0.0)
    req_rows = rows
    # A response stamped before its request (the two directions stamped by clocks
    # apart, paired by TCP's ACK; clock steps, reordered captures) gives no response
    # time or time to first byte: unknown, as the trace checker wants.
    rt = np.where(answered & (http.t_last >= t_req), (http.t_last - t_req) / 1e9, np.nan)
    ttfb = np.where(
        (http.t_first >= 0) & (http.t_first >= t_req), (http.t_first - t_req) / 1e9, np.nan
    )
    names: dict[bytes, str] = {}
    servers: dict[tuple[bytes, int], str] = {}

    def text(a: bytes) -> str:
        s = names.get(a)
        if s is None:
            s = names[a] = address_text(a)
        return s

    def server(a: bytes, port: int) -> str:
        s = servers.get((a, port))
        if s is None:
            t = text(a)
            s = servers[(a, port)] = (f"[{t}]" if ":" in t else t) + f":{port}"
        return s

    codes: dict[tuple[bytes, int], int] = {}
    srv_code = np.asarray(
        [codes.setdefault(k, len(codes)) for k in zip(http.server, http.sport, strict=True)],
        dtype=np.int64,
    )
    at_once = connections_at_once(sess, srv_code, conn, us_req, us_end)
    in_order = bool(np.all(req_rows == np.arange(n)))  # often: then no reordering lists
    order = [] if in_order else req_rows.tolist()
    paths = list(http.path) if in_order else [http.path[i] for i in order]
    # Client and server are the connection's: named once per connection, then taken.
    conns, first_req = np.unique(conn, return_index=True)
    at = np.searchsorted(conns, conn[rows])
    client = np.array([text(http.client[i]) for i in first_req.tolist()] or [""], dtype=object)
    server_of = [server(http.server[i], http.sport[i]) for i in first_req.tolist()]
    srv = np.array(server_of or [""], dtype=object)
    cols: dict[str, Any] = {}
    if any(http.req_body):  # a request had a body: sent as the capture holds it
        cols["body"] = list(http.req_body) if in_order else [http.req_body[i] for i in order]
    if any(http.req_type):  # a body's type: sent again, where the default was form data
        types = http.req_type
        cols["content_type"] = list(types) if in_order else [types[i] for i in order]
    return {
        **cols,
        "session": sess[rows],
        "burst": burst.astype(np.int32),
        "t": (t_start[bid] - t0) / 1e9,
        "think": think_b[bid],
        "method": list(http.method) if in_order else [http.method[i] for i in order],
        "path": paths,
        "cls": classifier.classify_many(paths).tolist(),
        "bytes": np.asarray(http.body, dtype=np.int64)[rows],
        "status": np.asarray(http.status, dtype=np.int32)[rows],
        "rt": rt[rows],
        "client": client[at].tolist(),
        "server": srv[at].tolist(),
        "conn": conn[rows],
        "ttfb": ttfb[rows],
        "answered": answered[rows],
        "_connections_at_once": at_once,  # per session, not a column: read_capture takes it
    }
