"""The same TCP segment captured on two interfaces of one pcapng: one copy.

A capture on Linux's ``any`` (a bridge and its port, both ends of a veth) or two
captures merged by mergecap hold each packet of a connection once per interface it
crossed. Read as they were, the second copies were TCP resends: the counts of a
connection's segments doubled, and a copy cut otherwise, or one arriving after the
request's answer, could read as a resend with other bytes or a request sent again.
A segment whose every field (addresses, ports, sequence and acknowledgment numbers,
flags, window, IPv4 ID, TCP options, length on the wire and captured bytes) equals one
captured on another interface within
:data:`WINDOW_NS` before it is dropped here, and counted. One interface's smaller
snapshot length cuts its copy short: a copy whose captured bytes are the start of the
other's (cut: captured shorter than on the wire) is a copy too, and the longer is kept,
at the first copy's time. A resend on another interface (multipath, a route that
changed) differs in one of them (its timestamp option, its IP ID, the ACK of what came
since) and stays a resend; it was dropped as a copy while only the first fields counted.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shrink.ingest.capture.tcp_segments import Segments, option_bytes

__all__ = ["WINDOW_NS", "drop_copies"]

WINDOW_NS = 100_000_000  # 0.1 s: a copy on another interface comes within microseconds

_ROWS = ("pkt", "ts", "src", "dst", "sport", "dport", "seq", "flags", "poff", "caplen", "wlen")


def drop_copies(seg: Segments) -> tuple[Segments, int]:
    """(``seg`` without the copies of a segment seen on another interface, how many
    were dropped). Only a pcapng whose packets name two interfaces or more has any;
    a resend on the same interface is a resend and stays."""
    if seg.interfaces is None or not len(seg):
        return seg, 0
    iface = seg.interfaces[seg.pkt - 1]
    if np.unique(iface[iface >= 0]).size < 2:
        return seg, 0
    keep = np.ones(len(seg), dtype=bool)
    ts_out = seg.ts.copy()
    seen: dict[tuple, tuple[int, int, int, bytes]] = {}  # first time, interface, row, bytes
    ts, poff, caplen = seg.ts.tolist(), seg.poff.tolist(), seg.caplen.tolist()
    n = len(seg)
    ack = seg.ack.tolist() if seg.ack is not None else [0] * n
    hdr = seg.hdr.tolist() if seg.hdr is not None else [0] * n
    fields = list(
        zip(seg.sport.tolist(), seg.dport.tolist(), seg.seq.tolist(), seg.flags.tolist(),
            seg.wlen.tolist(), ack, hdr, strict=True)
    )  # fmt: skip
    ifs = iface.tolist()
    for i in np.argsort(seg.ts, kind="stable").tolist():
        a = poff[i]
        key = (seg.src[i].tobytes(), seg.dst[i].tobytes(), fields[i], option_bytes(seg, i))
        data = bytes(seg.buf[a : a + caplen[i]])
        before = seen.get(key)
        if before is not None and before[1] != ifs[i] >= 0 and ts[i] - before[0] <= WINDOW_NS:
            t0, _, row, had = before
            if had.startswith(data):  # the same bytes, or cut shorter by a snapshot length
                keep[i] = False
                continue
            if data.startswith(had):  # the first copy was the one cut shorter: keep this
                keep[row] = False
                ts_out[i] = t0
                seen[key] = (t0, ifs[i], i, data)
                continue
        seen[key] = (ts[i], ifs[i], i, data)
    dropped = int(np.count_nonzero(~keep))
    if not dropped:
        return seg, 0
    rows = {k: getattr(seg, k)[keep] for k in _ROWS}
    rows["ts"] = ts_out[keep]
    for k in ("ack", "hdr"):
        if getattr(seg, k) is not None:
            rows[k] = getattr(seg, k)[keep]
    return dataclasses.replace(seg, **rows), dropped
