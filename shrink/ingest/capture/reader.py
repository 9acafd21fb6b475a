"""Packet captures (pcap, pcapng, gzip) -> a Trace of HTTP requests with measured times.

Pipeline, one module per step::

    pcap_files     file bytes -> record arrays (gzip, pcap, pcapng; damage detection)
    pcap_walk      classic pcap record chain for all blocks at once, header gathers
    pcap_decode    records -> TCP segments (numpy over all headers at once)   [fast engine]
    pcap_scapy     file -> TCP segments with scapy's readers and dissectors  [scapy engine]
    ip_fragments   IPv4/IPv6 fragments -> datagrams (both engines)
    tcp_reassembly segments -> connections, ordered byte streams, timing tables
    http_parse     streams -> requests and responses, paired in order
    http_sessions  exchanges -> sessions, bursts, think times -> Trace columns
    (tests/helpers/pcap_synth.py writes synthetic HTTP captures for the tests and bench)

``engine="auto"`` is the fast engine for every file it reads (classic pcap in
either byte order and time resolution, and pcapng); ``"scapy"`` gives the same
rows, slower, and is what the tests compare the fast engine against.

Meta: ``reader``, ``source``, ``format``, ``link_types``, ``packets``,
``skipped`` (packets not used: not TCP over IP, or in a connection that is not
HTTP, or a fragment of an IP datagram never completed (``ip-fragment``), or a
pcapng packet block naming an interface never described (``undeclared-interface``); by
kind in ``skipped_kinds``, numbers in ``skipped_lines``),
``truncated`` (records cut by the snapshot length), ``missing_bytes`` (stream
bytes never captured), ``differing_resends`` (TCP segments that sent bytes already
captured again with other bytes: the first copy is read, as a receiver keeps it),
``seen_twice`` (segments captured again on another interface of a pcapng, read
once), ``skew_seen`` (responses paired with their requests by TCP's ACK where the
times said otherwise: one direction's packets stamped by a clock apart),
``requests`` and ``responses`` (counted as tshark counts them: a response is counted
when all of it was captured), ``unanswered``, ``orphan_responses``,
``http_anomalies``, ``cookie_requests`` (by cookie: the requests that sent it or
were answered with it), ``most_connections_at_once`` (the most connections of one
session to one server open at once) and ``crowded_sessions`` (sessions with more
than twice what a browser opens, 12: several users behind one address?) and, for a
damaged file read leniently, ``damage`` (where reading stopped).

Per request: ``t`` is the first request packet's time (of the burst's first
request, as every Trace keeps it), seconds from the capture's first request;
``rt`` runs from the first request packet to the last response byte (NaN if
no response came); ``ttfb`` to the first response byte; ``bytes`` is the
response body as on the wire after de-chunking, before content-decoding (-1
if no response); ``status`` 0 if none; ``answered`` says whether a response
was seen. ``path`` is the request-target: UTF-8, or with its bytes past ASCII
percent-encoded where it is not UTF-8, so that the replay sends the bytes captured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from shrink.bodies import MAX_BODY
from shrink.checks import check_int, check_scalar, parse_duration
from shrink.classify import Classifier
from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest.capture.http_parse import parse_http
from shrink.ingest.capture.http_sessions import BROWSER_CONNECTIONS, parse_sessions, sessionize
from shrink.ingest.capture.pcap_decode import LINKTYPES, decode_records
from shrink.ingest.capture.pcap_files import NO_INTERFACE, read_records
from shrink.ingest.capture.seen_twice import drop_copies
from shrink.ingest.capture.tcp_reassembly import reassemble
from shrink.ingest.capture.tcp_segments import Segments
from shrink.trace import Trace

__all__ = ["read_capture", "read_segments"]

Engine = Literal["auto", "fast", "scapy"]


def read_segments(
    path: str | Path, *, strict: bool = False, engine: Engine = "auto"
) -> tuple[Segments, dict[str, Any]]:
    """The TCP segments of a capture and facts about the file (format, link types, damage)."""
    path = Path(path)
    if engine not in ("auto", "fast", "scapy"):
        raise ParameterError(f"engine == {engine!r}, must be 'auto', 'fast' or 'scapy'.")
    if engine == "scapy":
        from shrink.ingest.capture.pcap_scapy import scapy_segments

        seg, fmt, damage, joins = scapy_segments(path, strict=strict)
        facts = {"format": fmt, "damage": damage, "reader": "capture-scapy"}
        return seg, {**facts, "joined_at": joins}
    recs = read_records(path, strict=strict)
    seg = decode_records(recs)
    types = set(recs.linktype.tolist()) - {NO_INTERFACE}
    links = sorted({LINKTYPES.get(int(x), str(int(x))) for x in types})
    return seg, {
        "format": recs.fmt,
        "damage": recs.damage,
        "reader": "capture-fast",
        "link_types": links,
        "joined_at": recs.notes.get("joined_at", []),
    }


def read_capture(
    path: str | Path,
    *,
    strict: bool = False,
    sessions: str = "client",
    idle_gap: float | str = 1800.0,
    burst_gap: float | str = 0.5,
    engine: Engine = "auto",
    classifier: Classifier | None = None,
    max_body: int = MAX_BODY,
) -> Trace:
    """Read a pcap/pcapng capture (optionally gzip) into a Trace of its HTTP requests.

    ``sessions`` is ``"client"`` (client address, split after ``idle_gap``
    seconds idle), ``"connection"`` or ``"cookie:NAME"``. ``burst_gap`` is how
    long after the last response a request still joins the burst. ``engine``
    ``"fast"`` (numpy, the default for ``"auto"``) or ``"scapy"``; both give the
    same rows. ``strict`` raises :class:`~shrink.errors.CaptureFormatError` on a
    damaged file; otherwise everything before the damage is kept and
    ``meta["damage"]`` says where reading stopped. Non-HTTP traffic is counted
    by kind in ``meta["skipped_kinds"]`` (total in ``meta["skipped"]``).
    A request body longer than ``max_body`` bytes is an error naming its connection.
    """
    path = Path(path)
    mode, cookie = parse_sessions(sessions)
    idle_gap = parse_duration(idle_gap, "idle_gap")
    if isinstance(burst_gap, str) or check_scalar(burst_gap, "burst_gap", low=0) > 0:
        burst_gap = parse_duration(burst_gap, "burst_gap")  # 0 is allowed: no gap
    max_body = check_int(max_body, "max_body", low=1)
    seg, facts = read_segments(path, strict=strict, engine=engine)
    segments = len(seg)
    seg, seen_twice = drop_copies(seg)
    streams = reassemble(seg)
    try:
        http = parse_http(streams, cookie=cookie, max_body=max_body)
    except TraceFormatError as exc:  # the parser knows the connection, not the file
        raise TraceFormatError(exc.reason, path=path) from None
    skew = http.counts.pop("ack-against-time", 0)
    targets = np.fromiter((p.startswith("/") for p in http.path), dtype=bool, count=len(http))
    if not targets.all():
        # A request for no path of the server's (a proxy's absolute URI, "*", HOST:PORT):
        # the replay sends paths only, so it is left out before the sessions are made.
        http.counts["request-target-not-path"] += int((~targets).sum())
        http.keep(targets)
    cols = sessionize(
        http,
        mode=mode,
        idle_gap=idle_gap,
        burst_gap=burst_gap,
        classifier=classifier or Classifier(),
    )
    at_once = cols.pop("_connections_at_once")
    skipped_kinds = dict(sorted(seg.skipped.items()))
    for k in ("non-http-packets",):
        if http.counts.get(k):
            skipped_kinds[k] = http.counts[k]
    # Packet numbers skipped: not TCP over IP, or in a connection that is not HTTP.
    non_http = [c.index for c in streams.conns if c.index not in http.http_conn_ids]
    in_non_http = seg.pkt[np.isin(streams.seg_conn, non_http)] if non_http else seg.pkt[:0]
    skipped_pkts = np.union1d(seg.skipped_pkts, in_non_http)
    answered = cols["answered"]
    meta: dict[str, Any] = {
        "reader": facts["reader"],
        "source": path.name,
        "format": facts["format"],
        "mode": "session",
        "sessions": sessions,
        "idle_gap": idle_gap,
        "burst_gap": burst_gap,
        "packets": seg.packets,
        "tcp_segments": segments,
        "connections": len(streams.conns),
        "http_connections": http.http_conns,
        "non_http_connections": http.counts.get("non-http-connection", 0),
        "skipped": int(sum(skipped_kinds.values())),
        "skipped_kinds": skipped_kinds,
        "skipped_lines": skipped_pkts[:100].tolist(),  # packet numbers (1-based), the first 100
        "truncated": seg.truncated,
        "missing_bytes": streams.gap_bytes,
        "differing_resends": streams.differing_resends,
        "requests": http.requests,
        "responses": http.responses,
        "orphan_responses": http.orphan_responses,
        "unanswered": int(len(answered) - int(answered.sum())),
        "http_anomalies": {
            k: v for k, v in sorted(http.counts.items()) if not k.startswith("non-http")
        },
    }
    if mode == "cookie":  # requests that sent the cookie or were answered with it
        meta["cookie_requests"] = sum(
            a is not None or b is not None
            for a, b in zip(http.cookie, http.set_cookie, strict=True)
        )
    if at_once.size:
        # More connections at once than a browser opens: several users behind one
        # address (a proxy, a NAT, a load generator), taken as one session.
        meta["most_connections_at_once"] = int(at_once.max())
        meta["crowded_sessions"] = int((at_once > BROWSER_CONNECTIONS).sum())
    if seen_twice:  # the same segment captured on two interfaces: read once
        meta["seen_twice"] = seen_twice
    if skew:  # responses paired by TCP's ACK where their times said otherwise
        meta["skew_seen"] = skew
    if facts.get("link_types"):
        meta["link_types"] = facts["link_types"]
    if facts.get("joined_at"):
        # Captures joined into one file (`cat a.pcap.gz b.pcap.gz`), read on as one: the
        # byte offset of each later capture's file header.
        meta["joined_captures_at"] = facts["joined_at"]
    if facts["damage"]:
        meta["damage"] = facts["damage"]
    return Trace.from_columns(cols, meta)
