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
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shrink.classify import Classifier
from shrink.errors import ParameterError
from shrink.ingest.http_parse import Exchange

__all__ = ["address_text", "parse_sessions", "sessionize"]


def parse_sessions(spec: str) -> tuple[str, str | None]:
    """``"client"``, ``"connection"`` or ``"cookie:NAME"`` -> (mode, cookie name)."""
    if spec in ("client", "connection"):
        return spec, None
    if spec.startswith("cookie:") and len(spec) > len("cookie:"):
        return "cookie", spec.split(":", 1)[1]
    raise ParameterError(f"sessions == {spec!r}, must be 'client', 'connection' or 'cookie:NAME'.")


def address_text(addr16: bytes) -> str:
    """A 16-byte address as text; IPv4-mapped addresses as dotted quads."""
    a = ipaddress.IPv6Address(addr16)
    return str(a.ipv4_mapped) if a.ipv4_mapped is not None else str(a)


def _keys(ex: Sequence[Exchange], mode: str) -> list[Any]:
    if mode == "connection":
        return [e.conn for e in ex]
    if mode == "client":
        return [e.client for e in ex]
    # cookie: the cookie sent, else the one the response set, else the client address
    return [
        ("cookie", e.cookie)
        if e.cookie is not None
        else ("cookie", e.set_cookie)
        if e.set_cookie is not None
        else ("client", e.client)
        for e in ex
    ]


def sessionize(
    ex: Sequence[Exchange],
    *,
    mode: str,
    idle_gap: float,
    burst_gap: float,
    classifier: Classifier,
) -> dict[str, Any]:
    """Trace columns (plus server, conn, ttfb, answered) from exchanges."""
    n = len(ex)
    order = sorted(range(n), key=lambda i: (ex[i].t_req, ex[i].conn, i))
    ex = [ex[i] for i in order]
    keys = _keys(ex, mode)
    idle_ns = idle_gap * 1e9
    burst_ns = burst_gap * 1e9
    # Session of each request: same key, not idle for longer than idle_gap.
    open_s: dict[Any, tuple[int, int]] = {}  # key -> (session, last activity ns)
    sess = np.empty(n, dtype=np.int64)
    nsess = 0
    for i, (e, k) in enumerate(zip(ex, keys, strict=True)):
        end = e.t_last if e.t_last >= 0 else e.t_req
        cur = open_s.get(k)
        if cur is None or (mode != "connection" and e.t_req - cur[1] > idle_ns):
            cur = (nsess, end)
            nsess += 1
        open_s[k] = (cur[0], max(cur[1], end))
        sess[i] = cur[0]
    # Rows in session order, then time order inside the session.
    rows = np.lexsort((np.arange(n), sess))
    t0 = min((e.t_req for e in ex), default=0)
    burst = np.zeros(n, dtype=np.int64)
    t = np.zeros(n)
    think = np.zeros(n)
    b = -1
    prev_s = -1
    burst_end = 0
    burst_rows: list[int] = []

    def close(next_t: int | None) -> None:
        th = 0.0 if next_t is None else max(0.0, (next_t - burst_end) / 1e9)
        for r in burst_rows:
            think[r] = th

    for r in rows.tolist():
        e = ex[r]
        end = e.t_last if e.t_last >= 0 else e.t_req
        if sess[r] != prev_s:
            if burst_rows:
                close(None)
            prev_s, b = int(sess[r]), 0
            burst_rows, burst_start, burst_end = [], e.t_req, end
        elif e.t_req > burst_end + burst_ns:
            close(e.t_req)
            b += 1
            burst_rows, burst_start, burst_end = [], e.t_req, end
        burst_rows.append(r)
        burst_end = max(burst_end, end)
        burst[r] = b
        t[r] = (burst_start - t0) / 1e9
    if burst_rows:
        close(None)
    names: dict[bytes, str] = {}

    def text(a: bytes) -> str:
        s = names.get(a)
        if s is None:
            s = names[a] = address_text(a)
        return s

    ex_rows = [ex[r] for r in rows.tolist()]
    nan = math.nan
    paths = [e.path for e in ex_rows]
    return {
        "session": sess[rows],
        "burst": burst[rows].astype(np.int32),
        "t": t[rows],
        "think": think[rows],
        "method": [e.method for e in ex_rows],
        "path": paths,
        "cls": classifier.classify_many(paths).tolist(),
        "bytes": np.asarray([e.body if e.t_last >= 0 else -1 for e in ex_rows], dtype=np.int64),
        "status": np.asarray([e.status for e in ex_rows], dtype=np.int32),
        "rt": np.asarray([(e.t_last - e.t_req) / 1e9 if e.t_last >= 0 else nan for e in ex_rows]),
        "client": [text(e.client) for e in ex_rows],
        "server": [
            (f"[{text(e.server)}]" if ":" in text(e.server) else text(e.server)) + f":{e.sport}"
            for e in ex_rows
        ],
        "conn": np.asarray([e.conn for e in ex_rows], dtype=np.int64),
        "ttfb": np.asarray(
            [(e.t_first - e.t_req) / 1e9 if e.t_first >= 0 else nan for e in ex_rows]
        ),
        "answered": np.asarray([e.t_last >= 0 for e in ex_rows], dtype=bool),
    }
