"""Link, IP and TCP headers of every record at once, with numpy views over the file bytes.

Each header field is one vectorised gather over all packets; a packet drops
out (and is counted by kind) as soon as a test fails, so no Python code runs
per packet. Supported link types: Ethernet with 802.1Q/802.1ad tags, Linux
cooked capture v1 (SLL) and v2 (SLL2), raw IP, BSD loopback (NULL, host byte
order) and OpenBSD loopback (LOOP).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from shrink.ingest.pcap_files import RawRecords
from shrink.ingest.pcap_walk import FRAME, gather
from shrink.ingest.tcp_segments import Segments

__all__ = ["LINKTYPES", "decode_records"]

LINKTYPES = {
    0: "NULL",
    1: "ETHERNET",
    12: "RAW",
    14: "RAW",
    101: "RAW",
    108: "LOOP",
    113: "LINUX_SLL",
    228: "IPV4",
    229: "IPV6",
    276: "LINUX_SLL2",
}
_VLAN = (0x8100, 0x88A8, 0x9100)
_AF_INET6 = (10, 24, 28, 30)  # Linux, BSD, FreeBSD, macOS


class _Words:
    """8-byte little-endian words at any byte offset of the buffer, one gather each.

    An overlapping view (stride 1) makes ``W[o]`` the bytes ``o .. o+7``, so a
    whole header row (ports and sequence number, say) comes in one gather
    instead of one per byte: fewer passes over a buffer far larger than the
    cache. Offsets near the end are clamped and shifted, so bytes past the end
    read as zeros.
    """

    def __init__(self, b: np.ndarray, n: int) -> None:
        if n < 8:
            pad = np.zeros(8, dtype=np.uint8)
            pad[:n] = b[:n]
            b, n = pad, 8
        self.w = np.ndarray((n - 7,), dtype="<u8", buffer=b, strides=(1,))
        self.last = n - 8

    def __call__(self, off: np.ndarray) -> np.ndarray:
        idx = np.minimum(off, self.last)
        v = self.w[idx]
        if self.last < int(off.max(initial=0)):
            v = v >> ((off - idx) * 8).astype(np.uint64)
        return v


def _b(v: np.ndarray, k: int) -> np.ndarray:
    """Byte ``k`` (0-7) of words ``v``."""
    return ((v >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64)


def _be16(v: np.ndarray, k: int) -> np.ndarray:
    """Big-endian 16-bit field at byte ``k`` (0-6) of words ``v``."""
    return (_b(v, k) << 8) | _b(v, k + 1)


def _be32(v: np.ndarray, k: int) -> np.ndarray:
    return (_be16(v, k) << 16) | _be16(v, k + 2)


def _le32(v: np.ndarray, k: int) -> np.ndarray:
    return ((v >> np.uint64(8 * k)) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _link(word: _Words, recs: RawRecords, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(layer-3 offset, IP version 4/6 or 0) per packet; -1 for an unsupported link."""
    d = recs.data_off
    lt = recs.linktype
    n = d.size
    l3 = np.zeros(n, dtype=np.int64)
    ver = np.zeros(n, dtype=np.int64)
    ver[~np.isin(lt, list(LINKTYPES))] = -1

    def ethertype(sel: np.ndarray, et_off: np.ndarray) -> None:
        # Ethertype at et_off, payload after it; up to two VLAN tags.
        e = end[sel]
        v = word(et_off)
        et = np.where(et_off + 2 <= e, _be16(v, 0), -1)
        nxt = et_off + 2
        tag = np.isin(et, _VLAN) & (nxt + 4 <= e)
        if tag.any():
            et = np.where(tag, _be16(v, 4), et)
            nxt = np.where(tag, nxt + 4, nxt)
            tag2 = np.isin(et, _VLAN) & (nxt + 4 <= e)
            if tag2.any():
                et = np.where(tag2, _be16(word(nxt + 2), 0), et)
                nxt = np.where(tag2, nxt + 4, nxt)
        l3[sel] = nxt
        ver[sel] = np.where(et == 0x0800, 4, np.where(et == 0x86DD, 6, 0))

    eth = lt == 1
    if eth.any():
        ethertype(eth, d[eth] + 12)
    sll = lt == 113
    if sll.any():
        ethertype(sll, d[sll] + 14)
    sll2 = lt == 276
    if sll2.any():
        ethertype(sll2, d[sll2])
        l3[sll2] = d[sll2] + 20 + (l3[sll2] - d[sll2] - 2)
    raw = np.isin(lt, (12, 14, 101))
    if raw.any():
        l3[raw] = d[raw]
        v = np.where(d[raw] < end[raw], _b(word(d[raw]), 0) >> 4, 0)
        ver[raw] = np.where(np.isin(v, (4, 6)), v, 0)
    for code, fixed in ((228, 4), (229, 6)):
        sel = lt == code
        l3[sel] = d[sel]
        ver[sel] = fixed
    for code, fam_of in ((0, _le32), (108, lambda v, k: _be32(v, k))):
        sel = lt == code  # NULL: host byte order (little-endian writers); LOOP: network order
        if sel.any():
            ds = d[sel]
            fam = fam_of(word(ds), 0)
            l3[sel] = ds + 4
            v = np.where(fam == 2, 4, np.where(np.isin(fam, _AF_INET6), 6, 0))
            ver[sel] = np.where(ds + 4 <= end[sel], v, 0)
    return l3, ver


def _addresses(v_hi: np.ndarray, v_lo: np.ndarray) -> np.ndarray:
    """16-byte rows from two words each (bytes in memory order)."""
    return np.stack([v_hi, v_lo], 1).astype("<u8").view(np.uint8).reshape(-1, 16)


def _general(word: _Words, recs: RawRecords, skipped: Counter[str]) -> dict[str, np.ndarray]:
    """Any supported link, IPv4 or IPv6 (with extension headers): TCP fields per row."""
    n = len(recs)
    end = recs.data_off + recs.caplen
    l3, ver = _link(word, recs, end)
    skipped["unsupported-link"] += int(np.count_nonzero(ver < 0))
    skipped["non-ip"] += int(np.count_nonzero(ver == 0))
    idx = np.flatnonzero(ver > 0)
    if idx.size < n:
        l3, ver, end = l3[idx], ver[idx], end[idx]
    v4 = ver == 4
    short = l3 + np.where(v4, 20, 40) > end
    skipped["truncated-header"] += int(np.count_nonzero(short))
    if short.any():
        keep = ~short
        idx, l3, end, v4 = idx[keep], l3[keep], end[keep], v4[keep]

    # First two words of the IP header: IPv4 version/length/total/fragment and
    # protocol; IPv6 payload length and next header.
    w0 = word(l3)
    w1 = word(l3 + 8)
    vhl = _b(w0, 0)
    ihl = (vhl & 15) * 4
    tot4 = _be16(w0, 2)
    frag4 = _be16(w0, 6) & 0x3FFF
    proto = np.where(v4, _b(w1, 1), _b(w0, 6))
    plen6 = _be16(w0, 4)
    l4 = np.where(v4, l3 + ihl, l3 + 40)
    frag = v4 & (frag4 != 0)
    bad = v4 & ((vhl >> 4 != 4) | (ihl < 20))
    # IPv6 extension headers (hop-by-hop, routing, destination options, AH)
    for _ in range(4):
        ext = ~v4 & np.isin(proto, (0, 43, 60, 51)) & (l4 + 8 <= end)
        if not ext.any():
            break
        we = word(np.where(ext, l4, 0))
        hl = _b(we, 1)
        size = np.where(proto == 51, (hl + 2) * 4, (hl + 1) * 8)
        proto = np.where(ext, _b(we, 0), proto)
        l4 = np.where(ext, l4 + size, l4)
    frag |= ~v4 & (proto == 44)
    # A zero IPv4 total length comes from segmentation offload: trust the record.
    ip_end = np.where(v4, np.where(tot4 == 0, end, l3 + tot4), l3 + 40 + plen6)
    bad |= ip_end < l4
    skipped["malformed"] += int(np.count_nonzero(bad))
    skipped["ip-fragment"] += int(np.count_nonzero(frag & ~bad))
    rest = ~bad & ~frag
    tcp = rest & (proto == 6)
    skipped["udp"] += int(np.count_nonzero(rest & (proto == 17)))
    skipped["icmp"] += int(np.count_nonzero(rest & np.isin(proto, (1, 58))))
    skipped["other-ip-protocol"] += int(np.count_nonzero(rest & ~np.isin(proto, (6, 17, 1, 58))))
    if not tcp.all():
        idx, l3, l4, end, v4, ip_end, w1 = (a[tcp] for a in (idx, l3, l4, end, v4, ip_end, w1))

    # TCP: ports and sequence number in one word, data offset and flags in the next.
    short = l4 + 20 > end
    t0 = word(np.where(short, 0, l4))
    t1 = word(np.where(short, 0, l4 + 8))
    doff = np.where(short, 20, _b(t1, 4) >> 4) * 4
    short |= l4 + doff > end
    bad = ~short & ((doff < 20) | (l4 + doff > ip_end))
    skipped["truncated-header"] += int(np.count_nonzero(short))
    skipped["malformed"] += int(np.count_nonzero(bad))
    ok = ~short & ~bad
    if not ok.all():
        idx, l3, l4, end, v4, ip_end, doff, w1, t0, t1 = (
            a[ok] for a in (idx, l3, l4, end, v4, ip_end, doff, w1, t0, t1)
        )

    # Addresses as 16 bytes each (IPv4 mapped into ::ffff:0:0/96).
    def v4_addr(v: np.ndarray, k: int) -> np.ndarray:
        # ::ffff:a.b.c.d as two little-endian words: 0, then 00 00 ff ff a b c d
        a = (v >> np.uint64(8 * k)) & np.uint64(0xFFFFFFFF)
        return _addresses(np.zeros_like(a), (a << np.uint64(32)) | np.uint64(0xFFFF0000))

    def v6_addr(at: np.ndarray) -> np.ndarray:
        return _addresses(word(at), word(at + 8))

    if v4.all():
        src, dst = v4_addr(w1, 4), v4_addr(word(l3 + 16), 0)
    elif not v4.any():
        src, dst = v6_addr(l3 + 8), v6_addr(l3 + 24)
    else:
        m = idx.size
        src = np.empty((m, 16), dtype=np.uint8)
        dst = np.empty((m, 16), dtype=np.uint8)
        src[v4], dst[v4] = v4_addr(w1[v4], 4), v4_addr(word(l3[v4] + 16), 0)
        src[~v4], dst[~v4] = v6_addr(l3[~v4] + 8), v6_addr(l3[~v4] + 24)

    poff = l4 + doff
    wlen = ip_end - poff
    return {
        "idx": idx,
        "src": src,
        "dst": dst,
        "sport": _be16(t0, 0),
        "dport": _be16(t0, 2),
        "seq": _be32(t0, 4),
        "flags": _b(t1, 5),
        "poff": poff,
        "wlen": wlen,
        "caplen": np.clip(np.minimum(wlen, end - poff), 0, None),
    }


def _fast_lane(recs: RawRecords, frames: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(rows handled, their columns) for the common layout, from the FRAME rows.

    Ethernet without VLAN tag, IPv4 without options and not fragmented, TCP:
    bytes 12-51 of the frame hold every field, so each record costs one read of
    its first bytes (done with the record headers for classic pcap) and each
    field is a strided view of those rows.
    """
    d, cap = recs.data_off, recs.caplen
    rows = np.flatnonzero((recs.linktype == 1) & (cap >= 54))
    f = frames[rows].view(FRAME)[:, 0]  # rows copied as plain bytes, then named
    tot = f["tot"].astype(np.int64)
    doff = (f["doff"] >> 4).astype(np.int64) * 4
    ok = (
        (f["et"] == 0x0800)
        & (f["vhl"] == 0x45)
        & ((f["frag"] & 0x3FFF) == 0)
        & (f["proto"] == 6)
        & (doff >= 20)
        & (34 + doff <= cap[rows])
        & (14 + tot >= 34 + doff)
    )
    if not ok.all():
        rows, f, tot, doff = rows[ok], f[ok], tot[ok], doff[ok]
    src = np.zeros((rows.size, 16), dtype=np.uint8)
    src[:, 10:12] = 0xFF  # ::ffff:a.b.c.d
    dst = src.copy()
    src[:, 12:] = f["src"]
    dst[:, 12:] = f["dst"]
    poff = d[rows] + 34 + doff
    wlen = 14 + tot - 34 - doff
    return rows, {
        "idx": rows,
        "src": src,
        "dst": dst,
        "sport": f["sport"].astype(np.int64),
        "dport": f["dport"].astype(np.int64),
        "seq": f["seq"].astype(np.int64),
        "flags": f["flags"].astype(np.int64),
        "poff": poff,
        "wlen": wlen,
        "caplen": np.clip(np.minimum(wlen, d[rows] + cap[rows] - poff), 0, None),
    }


def _subset(recs: RawRecords, rows: np.ndarray) -> RawRecords:
    return RawRecords(
        buf=recs.buf,
        data_off=recs.data_off[rows],
        caplen=recs.caplen[rows],
        wirelen=recs.wirelen[rows],
        ts_ns=recs.ts_ns[rows],
        linktype=recs.linktype[rows],
        fmt=recs.fmt,
    )


def decode_records(recs: RawRecords) -> Segments:
    """TCP segments of every record; everything else counted in ``skipped`` by kind."""
    data = recs.buf
    word = _Words(np.frombuffer(data, dtype=np.uint8), len(data))
    n = len(recs)
    skipped: Counter[str] = Counter()
    frames = recs.frames
    if frames is None:
        buf = np.frombuffer(data, dtype=np.uint8)
        frames = gather(buf, len(data), recs.data_off, FRAME.itemsize)
    fast_rows, cols = _fast_lane(recs, frames)
    if fast_rows.size < n:  # everything else goes the general way
        rest = np.ones(n, dtype=bool)
        rest[fast_rows] = False
        rest_rows = np.flatnonzero(rest)
        more = _general(word, _subset(recs, rest_rows), skipped)
        more["idx"] = rest_rows[more["idx"]]
        order = np.argsort(np.concatenate([cols["idx"], more["idx"]]), kind="stable")
        cols = {k: np.concatenate([cols[k], more[k]])[order] for k in cols}
    idx = cols["idx"]
    dropped = np.ones(n, dtype=bool)
    dropped[idx] = False
    return Segments(
        buf=data,
        pkt=idx + 1,
        ts=recs.ts_ns[idx],
        src=cols["src"],
        dst=cols["dst"],
        sport=cols["sport"],
        dport=cols["dport"],
        seq=cols["seq"],
        flags=cols["flags"],
        poff=cols["poff"],
        caplen=cols["caplen"],
        wlen=cols["wlen"],
        packets=n,
        skipped=Counter({k: v for k, v in skipped.items() if v}),
        truncated=int(np.count_nonzero(recs.caplen < recs.wirelen)),
        skipped_pkts=np.flatnonzero(dropped) + 1,
    )
