"""Link, IP and TCP headers of every record at once, with numpy views over the file bytes.

Each header field is one vectorised gather over all packets; a packet drops
out (and is counted by kind) as soon as a test fails, so no Python code runs
per packet (IP fragments aside: rare, they are reassembled in Python by
:mod:`shrink.ingest.capture.ip_fragments`, and each TCP datagram so made is decoded
from a buffer appended to the file's). Supported link types: Ethernet with
802.1Q/802.1ad tags, Linux cooked capture v1 (SLL) and v2 (SLL2), raw IP, BSD
loopback (NULL, host byte order) and OpenBSD loopback (LOOP); on the first three, an
MPLS label stack (1-3 entries) or a PPPoE session before IP.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from shrink.ingest.capture.ip_fragments import Fragment, defragment
from shrink.ingest.capture.pcap_files import NO_INTERFACE, RawRecords
from shrink.ingest.capture.pcap_walk import FRAME, gather
from shrink.ingest.capture.pcap_words import Words, b, be16, be32, ip_addresses, le32
from shrink.ingest.capture.tcp_segments import DATAGRAM_HDR, NO_IP_ID, Segments, header_word

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


def _mpls_pppoe(
    word: Words, et: np.ndarray, nxt: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(ethertype, payload offset) past an MPLS label stack or a PPPoE session header.

    MPLS (0x8847, 0x8848): one to three label entries, the last with its bottom-of-stack
    bit, then IPv4 or IPv6 by the first nibble (anything else, a pseudowire's Ethernet
    say, or a deeper stack, stays unread). PPPoE session (0x8864): PPP protocol 0x0021
    is IPv4, 0x0057 IPv6. The ethertype becomes 0x0800 or 0x86DD where IP follows, 0
    where it does not."""
    mpls = np.isin(et, (0x8847, 0x8848))
    if mpls.any():
        inside = mpls.copy()
        bottom = np.zeros_like(mpls)
        for _ in range(3):
            entry = inside & (nxt + 4 <= e)
            last = entry & ((b(word(nxt), 2) & 1) == 1)
            nxt = np.where(entry, nxt + 4, nxt)
            bottom |= last
            inside = entry & ~last
        nibble = np.where(bottom & (nxt < e), b(word(nxt), 0) >> 4, 0)
        ip = np.where(nibble == 4, 0x0800, np.where(nibble == 6, 0x86DD, 0))
        et = np.where(mpls, ip, et)
    ppp = et == 0x8864
    if ppp.any():
        proto = np.where(ppp & (nxt + 8 <= e), be16(word(nxt), 6), 0)
        ip = np.where(proto == 0x0021, 0x0800, np.where(proto == 0x0057, 0x86DD, 0))
        code = b(word(nxt), 1)  # 0 in a session frame
        et = np.where(ppp, np.where(code == 0, ip, 0), et)
        nxt = np.where(ppp, nxt + 8, nxt)
    return et, nxt


def _link(word: Words, recs: RawRecords, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(layer-3 offset, IP version 4/6 or 0) per packet; -1 for an unsupported link."""
    d = recs.data_off
    lt = recs.linktype
    n = d.size
    l3 = np.zeros(n, dtype=np.int64)
    ver = np.zeros(n, dtype=np.int64)
    ver[~np.isin(lt, list(LINKTYPES))] = -1

    def ethertype(sel: np.ndarray, et_off: np.ndarray, payload: np.ndarray) -> None:
        # Ethertype at et_off, the payload at ``payload``; up to two VLAN tags (TCI and
        # the next ethertype) open the payload. SLL2 puts its ethertype first and the
        # payload 20 bytes on, so a tag is not always right after the ethertype.
        e = end[sel]
        et = np.where(et_off + 2 <= e, be16(word(et_off), 0), -1)
        nxt = payload
        for _ in range(2):
            tag = np.isin(et, _VLAN) & (nxt + 4 <= e)
            if not tag.any():
                break
            et = np.where(tag, be16(word(nxt + 2), 0), et)
            nxt = np.where(tag, nxt + 4, nxt)
        et, nxt = _mpls_pppoe(word, et, nxt, e)
        l3[sel] = nxt
        ver[sel] = np.where(et == 0x0800, 4, np.where(et == 0x86DD, 6, 0))

    for code, et_at, header in ((1, 12, 14), (113, 14, 16), (276, 0, 20)):
        sel = lt == code  # Ethernet, Linux cooked v1 (SLL) and v2 (SLL2)
        if sel.any():
            ethertype(sel, d[sel] + et_at, d[sel] + header)
    raw = np.isin(lt, (12, 14, 101))
    if raw.any():
        l3[raw] = d[raw]
        v = np.where(d[raw] < end[raw], b(word(d[raw]), 0) >> 4, 0)
        ver[raw] = np.where(np.isin(v, (4, 6)), v, 0)
    for code, fixed in ((228, 4), (229, 6)):
        sel = lt == code
        l3[sel] = d[sel]
        ver[sel] = fixed
    for code in (0, 108):
        sel = lt == code  # NULL: the writer's byte order; LOOP: network order
        if sel.any():
            ds = d[sel]
            fam = be32(word(ds), 0) if code == 108 else le32(word(ds), 0)
            if code == 0:
                # A big-endian writer's family reads past 16 bits little-endian (as
                # Wireshark tells them apart): every such packet was skipped as non-IP.
                fam = np.where(fam > 0xFFFF, be32(word(ds), 0), fam)
            l3[sel] = ds + 4
            v = np.where(fam == 2, 4, np.where(np.isin(fam, _AF_INET6), 6, 0))
            ver[sel] = np.where(ds + 4 <= end[sel], v, 0)
    return l3, ver


def _fragments(
    word: Words, buf: np.ndarray, at: dict[str, np.ndarray], skipped: Counter[str]
) -> list[Fragment]:
    """The IP fragments described by ``at`` (per row: packet number, time, IP header
    offsets and words, as :func:`_general` has them), for
    :func:`~shrink.ingest.capture.ip_fragments.defragment`. Fragments are rare: a Python
    object each is fine."""
    l3, l4, v4, end, ip_end, w0, w1, proto = (
        at[k] for k in ("l3", "l4", "v4", "end", "ip_end", "w0", "w1", "proto")
    )
    # IPv4: identification, offset and more-fragments in the header; IPv6: in the
    # Fragment header at l4 (next header, offset and M flag, identification).
    wf = word(np.where(v4, 0, l4))
    f4 = be16(w0, 6)
    fo6 = be16(wf, 2)
    ident = np.where(v4, be16(w0, 4), be32(wf, 4))
    offset = np.where(v4, (f4 & 0x1FFF) * 8, (fo6 >> 3) * 8)
    more = np.where(v4, f4 & 0x2000, fo6 & 1) != 0
    proto = np.where(v4, proto, b(wf, 0))
    start = np.where(v4, l4, l4 + 8)
    short = ~v4 & (l4 + 8 > end)
    bad = ~short & (start > ip_end)
    skipped["truncated-header"] += int(np.count_nonzero(short))
    skipped["malformed"] += int(np.count_nonzero(bad))
    ok = np.flatnonzero(~short & ~bad)
    src, dst = ip_addresses(word, l3[ok], v4[ok], w1[ok])
    size = ip_end[ok] - start[ok]
    cap = np.clip(np.minimum(ip_end[ok], end[ok]) - start[ok], 0, None)
    mv = memoryview(buf).cast("B")
    pkt, ts = at["pkt"][ok].tolist(), at["ts"][ok].tolist()
    out = []
    for i, k in enumerate(ok.tolist()):
        a = int(start[k])
        key = (4 if v4[k] else 6, src[i].tobytes(), dst[i].tobytes(), int(ident[k]), int(proto[k]))
        data = bytes(mv[a : a + int(cap[i])])
        out.append(Fragment(key, pkt[i], ts[i], int(offset[k]), bool(more[k]), int(size[i]), data))
    return out


def _general(
    word: Words, recs: RawRecords, skipped: Counter[str], pkt: np.ndarray, frags: list[Fragment]
) -> dict[str, np.ndarray]:
    """Any supported link, IPv4 or IPv6 (with extension headers): TCP fields per row.

    ``pkt`` is each record's packet number; IP fragments are added to ``frags``.
    """
    n = len(recs)
    end = recs.data_off + recs.caplen
    l3, ver = _link(word, recs, end)
    undeclared = recs.linktype == NO_INTERFACE
    skipped["undeclared-interface"] += int(np.count_nonzero(undeclared))
    skipped["unsupported-link"] += int(np.count_nonzero((ver < 0) & ~undeclared))
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
    vhl = b(w0, 0)
    ihl = (vhl & 15) * 4
    tot4 = be16(w0, 2)
    frag4 = be16(w0, 6) & 0x3FFF
    proto = np.where(v4, b(w1, 1), b(w0, 6))
    plen6 = be16(w0, 4)
    l4 = np.where(v4, l3 + ihl, l3 + 40)
    frag = v4 & (frag4 != 0)
    bad = v4 & ((vhl >> 4 != 4) | (ihl < 20))
    # IPv6 extension headers (hop-by-hop, routing, destination options, AH)
    for _ in range(4):
        ext = ~v4 & np.isin(proto, (0, 43, 60, 51)) & (l4 + 8 <= end)
        if not ext.any():
            break
        we = word(np.where(ext, l4, 0))
        hl = b(we, 1)
        size = np.where(proto == 51, (hl + 2) * 4, (hl + 1) * 8)
        proto = np.where(ext, b(we, 0), proto)
        l4 = np.where(ext, l4 + size, l4)
    frag |= ~v4 & (proto == 44)
    # A zero IPv4 total length comes from segmentation offload, a zero IPv6 payload
    # length from the same (BIG TCP) or a jumbogram: trust the record.
    ip_end = np.where(np.where(v4, tot4, plen6) == 0, end, l3 + np.where(v4, tot4, 40 + plen6))
    bad |= ip_end < l4
    skipped["malformed"] += int(np.count_nonzero(bad))
    fr = np.flatnonzero(frag & ~bad)
    if fr.size:
        cols = {"l3": l3, "l4": l4, "v4": v4, "end": end, "ip_end": ip_end, "w0": w0, "w1": w1}
        at = {k: v[fr] for k, v in cols.items()}
        at.update(proto=proto[fr], pkt=pkt[idx[fr]], ts=recs.ts_ns[idx[fr]])
        frags += _fragments(word, recs.buf, at, skipped)
    rest = ~bad & ~frag
    tcp = rest & (proto == 6)
    skipped["udp"] += int(np.count_nonzero(rest & (proto == 17)))
    skipped["icmp"] += int(np.count_nonzero(rest & np.isin(proto, (1, 58))))
    skipped["other-ip-protocol"] += int(np.count_nonzero(rest & ~np.isin(proto, (6, 17, 1, 58))))
    if not tcp.all():
        idx, l3, l4, end, v4, ip_end, w0, w1 = (
            a[tcp] for a in (idx, l3, l4, end, v4, ip_end, w0, w1)
        )

    # TCP: ports and sequence number in one word, data offset and flags in the next.
    short = l4 + 20 > end
    t0 = word(np.where(short, 0, l4))
    t1 = word(np.where(short, 0, l4 + 8))
    doff = np.where(short, 20, b(t1, 4) >> 4) * 4
    short |= l4 + doff > end
    bad = ~short & ((doff < 20) | (l4 + doff > ip_end))
    skipped["truncated-header"] += int(np.count_nonzero(short))
    skipped["malformed"] += int(np.count_nonzero(bad))
    ok = ~short & ~bad
    if not ok.all():
        idx, l3, l4, end, v4, ip_end, doff, w0, w1, t0, t1 = (
            a[ok] for a in (idx, l3, l4, end, v4, ip_end, doff, w0, w1, t0, t1)
        )

    src, dst = ip_addresses(word, l3, v4, w1)

    poff = l4 + doff
    wlen = ip_end - poff
    return {
        "idx": idx,
        "src": src,
        "dst": dst,
        "sport": be16(t0, 0),
        "dport": be16(t0, 2),
        "seq": be32(t0, 4),
        "ack": be32(t1, 0),
        "flags": b(t1, 5),
        "hdr": header_word(be16(t1, 6), np.where(v4, be16(w0, 4), NO_IP_ID), doff - 20),
        "poff": poff,
        "wlen": wlen,
        "caplen": np.clip(np.minimum(wlen, end - poff), 0, None),
    }


def _frame_dtype(at: int, width: int) -> np.dtype:
    """FRAME's fields ``at`` bytes into rows ``width`` bytes wide."""
    names = FRAME.names or ()
    return np.dtype(
        {
            "names": list(names),
            "formats": [FRAME.fields[k][0] for k in names],
            "offsets": [FRAME.fields[k][1] + at for k in names],
            "itemsize": width,
        }
    )


def _fast_lane(
    recs: RawRecords, frames: np.ndarray, at: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(rows handled, their columns) for the common layout, from the FRAME rows.

    Ethernet without VLAN tag, IPv4 without options and not fragmented, TCP:
    bytes 12-51 of the frame hold every field, so each record costs one read of
    its first bytes (done with the record headers for classic pcap) and each
    field is a strided view of those rows.
    """
    d, cap = recs.data_off, recs.caplen
    rows = np.flatnonzero((recs.linktype == 1) & (cap >= 54))
    named = _frame_dtype(at, frames.shape[1])
    # Plain bytes named in place when every row is taken, else the rows copied first.
    f = (frames if rows.size == len(recs) else frames[rows]).view(named)[:, 0]
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
        "ack": f["ack"].astype(np.int64),
        "flags": f["flags"].astype(np.int64),
        "hdr": header_word(f["win"], f["ipid"], doff - 20),
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


def _with_datagrams(
    data: np.ndarray, cols: dict[str, np.ndarray], frags: list[Fragment], skipped: Counter[str]
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """(buffer, columns, packet numbers used) with the reassembled TCP datagrams added.

    Their payloads do not lie in the file, so they go after it in a new buffer
    (a copy of the file: only captures with fragments pay for it).
    """
    res = defragment(frags)
    skipped.update(res.skipped)
    used = np.setdiff1d([f.pkt for f in frags], res.skipped_pkts)
    if not res.segments:
        return data, cols, used
    pkt, ts, src, dst, sport, dport, seq, flags, payload, wlen, ack = zip(
        *res.segments, strict=True
    )
    base = len(data)
    cap = np.array([len(p) for p in payload], dtype=np.int64)
    extra = {
        "idx": np.array(pkt, dtype=np.int64) - 1,
        "ts": np.array(ts, dtype=np.int64),
        "src": np.frombuffer(b"".join(src), dtype=np.uint8).reshape(-1, 16),
        "dst": np.frombuffer(b"".join(dst), dtype=np.uint8).reshape(-1, 16),
        "sport": np.array(sport, dtype=np.int64),
        "dport": np.array(dport, dtype=np.int64),
        "seq": np.array(seq, dtype=np.int64),
        "ack": np.array(ack, dtype=np.int64),
        "flags": np.array(flags, dtype=np.int64),
        "hdr": np.full(cap.size, DATAGRAM_HDR, dtype=np.int64),
        "poff": base + np.cumsum(cap) - cap,
        "wlen": np.array(wlen, dtype=np.int64),
        "caplen": cap,
    }
    order = np.argsort(np.concatenate([cols["idx"], extra["idx"]]), kind="stable")
    cols = {k: np.concatenate([cols[k], extra[k]])[order] for k in cols}
    joined = np.concatenate(
        [np.frombuffer(data, dtype=np.uint8), np.frombuffer(b"".join(payload), dtype=np.uint8)]
    )
    return joined, cols, used


def decode_records(recs: RawRecords) -> Segments:
    """TCP segments of every record; everything else counted in ``skipped`` by kind.

    IP fragments are reassembled (:mod:`shrink.ingest.capture.ip_fragments`); a TCP
    datagram so made is a segment dated and numbered by its last fragment.
    """
    data = recs.buf
    word = Words(np.frombuffer(data, dtype=np.uint8), len(data))
    n = len(recs)
    skipped: Counter[str] = Counter()
    frames, at = recs.frames, recs.frame_at
    if frames is None:
        buf = np.frombuffer(data, dtype=np.uint8)
        frames, at = gather(buf, len(data), recs.data_off, FRAME.itemsize), 0
    fast_rows, cols = _fast_lane(recs, frames, at)
    frags: list[Fragment] = []
    if fast_rows.size < n:  # everything else goes the general way
        rest = np.ones(n, dtype=bool)
        rest[fast_rows] = False
        rest_rows = np.flatnonzero(rest)
        more = _general(word, _subset(recs, rest_rows), skipped, rest_rows + 1, frags)
        more["idx"] = rest_rows[more["idx"]]
        order = np.argsort(np.concatenate([cols["idx"], more["idx"]]), kind="stable")
        cols = {k: np.concatenate([cols[k], more[k]])[order] for k in cols}
    cols["ts"] = recs.ts_ns[cols["idx"]]
    used = cols["idx"][:0]
    if frags:
        data, cols, used = _with_datagrams(data, cols, frags, skipped)
    idx = cols["idx"]
    dropped = np.ones(n, dtype=bool)
    dropped[idx] = False
    dropped[used - 1] = False
    return Segments(
        buf=data,  # the file's bytes (numpy), as Streams takes any buffer
        pkt=idx + 1,
        ts=cols["ts"],
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
        interfaces=recs.notes.get("interfaces"),
        ack=cols["ack"],
        hdr=cols["hdr"],
    )
