"""IP fragment reassembly (IPv4 and the IPv6 Fragment header), shared by both engines.

Fragments are rare in captures of web traffic, so this runs in Python, one
step per fragment, in capture order; both engines feed it the same fragments
and so get the same datagrams. A datagram is keyed by (version, source,
destination, identification, protocol) and is complete when a last fragment
(more-fragments clear) has fixed its length and the fragments seen cover every
byte up to it. Where fragments overlap, the one with the lower offset wins
(the earlier capture on a tie), as TCP reassembly lets the first copy of a
byte win. A datagram still incomplete after ``TIMEOUT_NS`` (a stack gives up
after 30-60 s) or at the end of the capture is dropped, and its fragments
counted as skipped ``ip-fragment`` packets.

A fragment cut by the snapshot length still counts for coverage (its length
on the wire is known); the datagram's captured bytes then stop at the first
byte the capture lacks, as a cut TCP segment's do.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "Datagram",
    "Defragmented",
    "Defragmenter",
    "Fragment",
    "Key",
    "defragment",
    "tcp_of_datagram",
]

TIMEOUT_NS = 60 * 1_000_000_000

Key = tuple[int, bytes, bytes, int, int]  # version, src16, dst16, identification, protocol


@dataclass
class Fragment:
    """One fragment: where its payload goes in the datagram and what of it was captured."""

    key: Key
    pkt: int  # 1-based packet number
    ts: int  # ns
    offset: int  # byte offset of this payload in the datagram
    more: bool  # more fragments follow
    size: int  # payload length on the wire
    data: bytes  # payload bytes captured (at most ``size``)


@dataclass
class Datagram:
    """A reassembled IP payload, dated by the fragment that completed it."""

    key: Key
    pkt: int
    ts: int
    size: int  # payload length on the wire
    data: bytes  # captured payload bytes, up to the first byte the capture lacks
    pkts: list[int] = field(default_factory=list)  # packet numbers of all its fragments


class Defragmenter:
    """Feed fragments in capture order; each completed datagram is returned once."""

    def __init__(self) -> None:
        self.pending: dict[Key, list[Fragment]] = {}
        self.dropped: list[int] = []  # packet numbers of fragments never completed

    def add(self, f: Fragment) -> Datagram | None:
        frags = self.pending.get(f.key)
        if frags is not None and f.ts - frags[0].ts > TIMEOUT_NS:
            self.dropped += [g.pkt for g in frags]  # timed out: the identification is reused
            frags = None
        if frags is None:
            frags = self.pending[f.key] = []
        frags.append(f)
        ends = [g.offset + g.size for g in frags if not g.more]
        if not ends:
            return None
        total = ends[0]  # the first last fragment fixes the length
        covered = 0
        for g in sorted(frags, key=lambda g: g.offset):
            if covered >= total:
                break
            if g.offset > covered:
                return None  # a hole
            covered = max(covered, g.offset + g.size)
        if covered < total:
            return None
        del self.pending[f.key]
        return Datagram(f.key, f.pkt, f.ts, total, _join(frags, total), [g.pkt for g in frags])

    def finish(self) -> list[int]:
        """Packet numbers of every fragment of a datagram never completed, sorted."""
        for frags in self.pending.values():
            self.dropped += [g.pkt for g in frags]
        self.pending.clear()
        return sorted(self.dropped)


def _join(frags: list[Fragment], total: int) -> bytes:
    parts: list[bytes] = []
    have = 0  # bytes of the datagram placed so far
    for g in sorted(frags, key=lambda g: g.offset):  # stable: the earlier capture on a tie
        if g.offset > have:
            break  # a byte before this one was never captured
        end = min(g.offset + g.size, total)
        if end <= have:
            continue
        take = g.data[have - g.offset : end - g.offset]
        parts.append(take)
        have += len(take)
        if have < end:
            break  # this fragment was cut by the snapshot length
    return b"".join(parts)


def tcp_of_datagram(
    dg: Datagram,
) -> tuple[str, tuple[int, int, int, int, int, int, int, int] | None]:
    """("tcp", (sport, dport, seq, flags, header length, payload wire length, captured, ack))
    for a TCP datagram, else (skip kind, None), as the decoders count skipped packets."""
    proto = dg.key[4]
    if proto != 6:
        return {17: "udp", 1: "icmp", 58: "icmp"}.get(proto, "other-ip-protocol"), None
    d = dg.data
    if len(d) < 20:  # the same order of tests as the decoders of whole packets
        return "truncated-header", None
    sport, dport, seq, ack, doff, flags = struct.unpack_from(">HHIIBB", d)
    hl = (doff >> 4) * 4
    if len(d) < hl:
        return "truncated-header", None
    if hl < 20 or hl > dg.size:
        return "malformed", None
    wlen = dg.size - hl
    return "tcp", (sport, dport, seq, flags, hl, wlen, min(len(d) - hl, wlen), ack)


@dataclass
class Defragmented:
    """What the fragments of a capture gave: TCP segments, and what was skipped."""

    # (packet, time, src16, dst16, sport, dport, seq, flags, payload captured, wire length,
    # acknowledgment number)
    segments: list[tuple[int, int, bytes, bytes, int, int, int, int, bytes, int, int]]
    skipped: Counter[str]
    skipped_pkts: list[int]  # fragments of datagrams that are not TCP, or never completed


def defragment(frags: Iterable[Fragment]) -> Defragmented:
    """Reassemble the fragments (in capture order) and decode the TCP datagrams.

    A datagram that is skipped (not TCP, a bad TCP header) counts each of its
    fragments under that kind, as if each were a packet skipped for it.
    """
    dfr = Defragmenter()
    out = Defragmented([], Counter(), [])
    for f in frags:
        dg = dfr.add(f)
        if dg is None:
            continue
        kind, tcp = tcp_of_datagram(dg)
        if tcp is None:
            out.skipped[kind] += len(dg.pkts)
            out.skipped_pkts += dg.pkts
            continue
        sport, dport, seq, flags, hl, wlen, cap, ack = tcp
        _, src, dst, _, _ = dg.key
        data = dg.data[hl : hl + cap]
        out.segments.append((dg.pkt, dg.ts, src, dst, sport, dport, seq, flags, data, wlen, ack))
    dropped = dfr.finish()
    if dropped:
        out.skipped["ip-fragment"] += len(dropped)
        out.skipped_pkts += dropped
    out.skipped_pkts.sort()
    return out
