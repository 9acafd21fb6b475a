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
from shrink.ingest.tcp_segments import Segments, mapped_v4

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


def _u8(b: np.ndarray, off: np.ndarray) -> np.ndarray:
    return b[off].astype(np.int64)


def _be16(b: np.ndarray, off: np.ndarray) -> np.ndarray:
    return (b[off].astype(np.int64) << 8) | b[off + 1]


def _be32(b: np.ndarray, off: np.ndarray) -> np.ndarray:
    return (_be16(b, off) << 16) | _be16(b, off + 2)


def _le32(b: np.ndarray, off: np.ndarray) -> np.ndarray:
    v = b[off].astype(np.int64) | (b[off + 1].astype(np.int64) << 8)
    return v | (b[off + 2].astype(np.int64) << 16) | (b[off + 3].astype(np.int64) << 24)


def _link(b: np.ndarray, recs: RawRecords, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(layer-3 offset, IP version 4/6 or 0) per packet."""
    d = recs.data_off
    lt = recs.linktype
    n = d.size
    l3 = np.zeros(n, dtype=np.int64)
    ver = np.zeros(n, dtype=np.int64)
    ok_link = np.isin(lt, list(LINKTYPES))
    ver[~ok_link] = -1  # unsupported link type

    def ethertype(sel: np.ndarray, et_off: np.ndarray) -> None:
        # Ethertype at et_off, payload after it; up to two VLAN tags.
        et = np.where(et_off + 2 <= end[sel], _be16(b, np.minimum(et_off, b.size - 2)), -1)
        nxt = et_off + 2
        for _ in range(2):
            tag = np.isin(et, _VLAN) & (nxt + 4 <= end[sel])
            et = np.where(tag, _be16(b, np.minimum(nxt + 2, b.size - 2)), et)
            nxt = np.where(tag, nxt + 4, nxt)
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
        v = np.where(d[raw] < end[raw], _u8(b, np.minimum(d[raw], b.size - 1)) >> 4, 0)
        ver[raw] = np.where(np.isin(v, (4, 6)), v, 0)
    for code, fixed in ((228, 4), (229, 6)):
        sel = lt == code
        l3[sel] = d[sel]
        ver[sel] = fixed
    null = lt == 0
    if null.any():
        dn = d[null]
        fam = _le32(b, np.minimum(dn, b.size - 4))
        l3[null] = dn + 4
        ver[null] = np.where(fam == 2, 4, np.where(np.isin(fam, _AF_INET6), 6, 0))
        ver[null & (d + 4 > end)] = 0
    loop = lt == 108
    if loop.any():
        dl = d[loop]
        fam = _be32(b, np.minimum(dl, b.size - 4))
        l3[loop] = dl + 4
        ver[loop] = np.where(fam == 2, 4, np.where(np.isin(fam, _AF_INET6), 6, 0))
    return l3, ver


def decode_records(recs: RawRecords) -> Segments:
    """TCP segments of every record; everything else counted in ``skipped`` by kind."""
    data = recs.buf
    # The buffer is padded, so gathers a few bytes past a short packet stay in
    # bounds; the ``end`` tests below make sure padded bytes are never used.
    b = np.frombuffer(data, dtype=np.uint8)
    skipped: Counter[str] = Counter()
    n = len(recs)
    end = recs.data_off + recs.caplen
    truncated = int(np.count_nonzero(recs.caplen < recs.wirelen))
    l3, ver = _link(b, recs, end)
    skipped["unsupported-link"] += int(np.count_nonzero(ver < 0))
    skipped["non-ip"] += int(np.count_nonzero(ver == 0))
    idx = np.flatnonzero(ver > 0)
    l3 = l3[idx]
    ver = ver[idx]
    end = end[idx]
    v4 = ver == 4
    need = np.where(v4, 20, 40)
    short = l3 + need > end
    skipped["truncated-header"] += int(np.count_nonzero(short))
    keep = ~short
    idx, l3, ver, end, v4 = idx[keep], l3[keep], ver[keep], end[keep], v4[keep]

    # IPv4
    vhl = _u8(b, l3)
    ihl = (vhl & 15) * 4
    tot4 = _be16(b, l3 + 2)
    frag4 = _be16(b, l3 + 6) & 0x3FFF
    proto = np.where(v4, _u8(b, l3 + 9), _u8(b, l3 + 6))
    # IPv6: payload length and extension headers (hop-by-hop, routing, destination, AH)
    plen6 = _be16(b, l3 + 4)
    l4 = np.where(v4, l3 + ihl, l3 + 40)
    frag = v4 & (frag4 != 0)
    bad = v4 & ((vhl >> 4 != 4) | (ihl < 20))
    for _ in range(4):
        ext = ~v4 & np.isin(proto, (0, 43, 60, 51)) & (l4 + 8 <= end)
        if not ext.any():
            break
        hl = _u8(b, np.where(ext, l4 + 1, 0))
        size = np.where(proto == 51, (hl + 2) * 4, (hl + 1) * 8)
        nxt = _u8(b, np.where(ext, l4, 0))
        proto = np.where(ext, nxt, proto)
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
    idx, l3, l4, end, v4, ip_end = idx[tcp], l3[tcp], l4[tcp], end[tcp], v4[tcp], ip_end[tcp]
    short = l4 + 20 > end
    doff = np.where(short, 20, _u8(b, np.where(short, 0, l4 + 12)) >> 4) * 4
    short |= l4 + doff > end
    bad = ~short & ((doff < 20) | (l4 + doff > ip_end))
    skipped["truncated-header"] += int(np.count_nonzero(short))
    skipped["malformed"] += int(np.count_nonzero(bad))
    ok = ~short & ~bad
    idx, l3, l4, end, v4, ip_end, doff = (a[ok] for a in (idx, l3, l4, end, v4, ip_end, doff))

    # Addresses as 16 bytes each (IPv4 mapped) with one gather per family.
    m = idx.size
    src = np.empty((m, 16), dtype=np.uint8)
    dst = np.empty((m, 16), dtype=np.uint8)
    a4 = l3[v4]
    src[v4] = mapped_v4(b[(a4 + 12)[:, None] + np.arange(4)])
    dst[v4] = mapped_v4(b[(a4 + 16)[:, None] + np.arange(4)])
    a6 = l3[~v4]
    src[~v4] = b[(a6 + 8)[:, None] + np.arange(16)]
    dst[~v4] = b[(a6 + 24)[:, None] + np.arange(16)]

    poff = l4 + doff
    wlen = ip_end - poff
    caplen = np.clip(np.minimum(wlen, end - poff), 0, None)
    skipped = Counter({k: v for k, v in skipped.items() if v})
    return Segments(
        buf=data,
        pkt=idx + 1,
        ts=recs.ts_ns[idx],
        src=src,
        dst=dst,
        sport=_be16(b, l4),
        dport=_be16(b, l4 + 2),
        seq=_be32(b, l4 + 4),
        flags=_u8(b, l4 + 13),
        poff=poff,
        caplen=caplen,
        wlen=wlen,
        packets=n,
        skipped=skipped,
        truncated=truncated,
    )
