"""The scapy engine: scapy's own readers and dissectors turn a capture into Segments.

It is the reference for the fast engine (both must give the same Trace) and
reads whatever scapy supports. It builds a scapy packet per record, so it is
slow (thousands of packets per second); use it for odd captures, not big ones.
"""

from __future__ import annotations

import io
import socket
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from shrink.errors import CaptureFormatError
from shrink.ingest.capture.ip_fragments import Fragment, Key, defragment
from shrink.ingest.capture.pcap_decode import LINKTYPES
from shrink.ingest.capture.pcap_files import (
    MAX_NS,
    MAX_RECORD,
    PCAP_MAGICS,
    capture_format,
    classic_pcap,
    load_bytes,
)
from shrink.ingest.capture.pcap_walk import header_why
from shrink.ingest.capture.tcp_segments import DATAGRAM_HDR, NO_IP_ID, Segments, header_word
from shrink.ingest.capture_magic import CAPTURE_MAGICS, CLASSIC_MAGICS, joined

__all__ = ["scapy_segments"]

_IPV6_EXT = (0, 43, 60, 51)
# AF_INET6 of FreeBSD (28) and macOS (30) on the NULL link, in either writer's byte order.
_NULL_INET6 = (b"\x1c\0\0\0", b"\x1e\0\0\0", b"\0\0\0\x1c", b"\0\0\0\x1e")

# Where the ethertype is, and where a VLAN tag would start, on the links that have one:
# Ethernet, Linux cooked v1 (SLL) and v2 (SLL2).
_ETHERTYPE_AT = {1: (12, 14), 113: (14, 16), 276: (0, 20)}
_TAG_TYPES = (b"\x88\xa8", b"\x91\x00")


def _plain_tags(raw: bytes, linktype: int) -> bytes | None:
    """``raw`` with up to two VLAN tags marked 802.1Q (0x8100), as the fast engine takes
    them: scapy dissects 802.1ad (0x88A8) and the older QinQ 0x9100 otherwise, or not.
    None where a tag is left past those two (a third, or one cut short): the fast engine
    reads no IP there, and scapy would dissect on through any number of 802.1Q tags."""
    at = _ETHERTYPE_AT.get(linktype)
    if at is None:
        return raw
    et, nxt = at
    for _ in range(2):
        kind = raw[et : et + 2]
        if kind not in (*_TAG_TYPES, b"\x81\x00") or nxt + 4 > len(raw):
            break
        raw = raw[:et] + b"\x81\x00" + raw[et + 2 :]
        et, nxt = nxt + 2, nxt + 4
    return None if raw[et : et + 2] in (*_TAG_TYPES, b"\x81\x00") else raw


_BOUND: list[bool] = []


def _bind_mpls_pppoe() -> None:
    """MPLS (0x8847 and 0x8848) and PPPoE sessions after any link's ethertype and after a
    VLAN tag, as the fast engine reads them: scapy binds MPLS to Ethernet's 0x8847 only
    (in its contrib), PPPoE to Ethernet and the cooked links, not after a tag."""
    if _BOUND:
        return
    from scapy.contrib.mpls import MPLS
    from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Dot1Q, Ether
    from scapy.layers.ppp import PPPoE
    from scapy.packet import bind_layers

    for et in (0x8847, 0x8848):
        bind_layers(Ether, MPLS, type=et)
        bind_layers(Dot1Q, MPLS, type=et)
        bind_layers(CookedLinux, MPLS, proto=et)
        bind_layers(CookedLinuxV2, MPLS, proto=et)
    bind_layers(Dot1Q, PPPoE, type=0x8864)
    _BOUND.append(True)


def _read_path(layers: list[Any]) -> bool:
    """Whether the layers between the link header and IP are those the fast engine
    reads: VLAN tags, then one to three MPLS label entries (the last at the bottom of
    the stack) or a PPPoE session's PPP, or nothing more."""
    kinds = "".join(
        {"Dot1Q": "t", "MPLS": "m", "PPPoE": "p", "PPP": "q"}.get(type(x).__name__, "?")
        for x in layers
    )
    head = kinds.rstrip("mpq").rstrip("t")
    if head or kinds.count("t") > 2:
        return False
    rest = kinds.lstrip("t")
    if rest.startswith("m"):
        return rest == "m" * len(rest) and len(rest) <= 3 and bool(layers[-1].s)
    if rest.startswith("p"):
        return rest == "pq" and layers[-2].code == 0
    return rest == ""


def _first_ip(p: Any, skipped: Counter[str]) -> Any:
    """The first IP layer of the dissected ``p``, past the link layer, any VLAN tags,
    MPLS labels or PPPoE; None (the packet counted in ``skipped``) where there is none
    the fast engine reads."""
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Raw

    layer, passed = p, []
    while layer is not None and not isinstance(layer, (IP, IPv6)):
        nxt = layer.payload
        if not nxt or isinstance(nxt, Raw):
            kind = getattr(layer, "type", getattr(layer, "proto", None))
            ppp = type(layer).__name__ == "PPP"
            ip_kind = kind in ((0x0021, 0x0057) if ppp else (0x0800, 0x86DD))
            ip_kind = ip_kind and _read_path(passed[1:])
            skipped["truncated-header" if ip_kind else "non-ip"] += 1
            return None
        passed.append(layer)
        layer = nxt
    if layer is None or not _read_path(passed[1:]):
        skipped["non-ip"] += 1
        return None
    return layer


def _addr16(text: str, v4: bool) -> bytes:
    if v4:
        return bytes(10) + b"\xff\xff" + socket.inet_aton(text)
    return socket.inet_pton(socket.AF_INET6, text)


class _Collector:
    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self.skipped_pkts: list[int] = []
        self.rows: list[tuple[int, int, bytes, bytes, int, int, int, int, int, int]] = []
        self.payload: list[bytes] = []
        self.frags: list[Fragment] = []
        self.size = 0
        self.interfaces: list[int] = []  # per packet of a pcapng

    def add_or_skip(self, pkt_no: int, ts: int, raw: bytes, linktype: int) -> None:
        """Add the packet's TCP segment (or IP fragment), or note its number among the skipped."""
        before = len(self.rows) + len(self.frags)
        self.add(pkt_no, ts, raw, linktype)
        if len(self.rows) + len(self.frags) == before:
            self.skipped_pkts.append(pkt_no)

    def fragment(
        self, pkt_no: int, ts: int, key: Key, ip: bytes, start: int, ip_len: int, off: int
    ) -> None:
        """Keep an IP fragment whose payload is ``ip[start:ip_len]`` (as far as captured)."""
        more = bool(off & 1)
        self.frags.append(
            Fragment(key, pkt_no, ts, off & ~7, more, ip_len - start, ip[start:ip_len])
        )

    def add(self, pkt_no: int, ts: int, raw: bytes, linktype: int) -> None:
        from scapy.config import conf
        from scapy.layers.inet import IP, TCP
        from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
        from scapy.packet import Raw

        _bind_mpls_pppoe()
        cls = conf.l2types.get(linktype)
        if linktype not in LINKTYPES or cls is None:
            self.skipped["unsupported-link"] += 1
            return
        plain = _plain_tags(raw, linktype)
        if plain is None:  # (tags past what the fast engine takes)
            self.skipped["non-ip"] += 1
            return
        raw = plain
        if linktype == 0 and raw[:4] in _NULL_INET6:
            # FreeBSD/macOS AF_INET6 on the NULL link; scapy binds only 10 and 24.
            p = IPv6(raw[4:]) if len(raw) >= 44 else Raw(raw[4:])
        else:
            try:
                p = cls(raw)
            except Exception:  # scapy's dissectors raise anything on garbage
                self.skipped["malformed"] += 1
                return
        l3 = _first_ip(p, self.skipped)
        if l3 is None:
            return
        v4 = isinstance(l3, IP)
        if v4:
            if l3.version != 4 or l3.ihl < 5:
                self.skipped["malformed"] += 1
                return
            ip_len = l3.len if l3.len else len(l3.original)
            if ip_len < l3.ihl * 4:
                self.skipped["malformed"] += 1
                return
            if l3.frag or l3.flags.MF:
                key = (4, _addr16(l3.src, True), _addr16(l3.dst, True), l3.id, l3.proto)
                # The offset in bytes with more-fragments as its low bit, as IPv6 has it.
                off = l3.frag * 8 | int(bool(l3.flags.MF))
                self.fragment(pkt_no, ts, key, bytes(l3.original), l3.ihl * 4, ip_len, off)
                return
            proto = l3.proto
            hdr_len = l3.ihl * 4
            l4 = l3.payload
        else:
            ip_len = 40 + l3.plen
            hdr_len = 40
            proto = l3.nh
            l4 = l3.payload
            if not l3.plen and len(l3.original) > 40:
                # A zero payload length (BIG TCP's offloaded segments, as a zero IPv4
                # length): trust the record. scapy would give the payload no bytes.
                raw = bytes(l3.original)
                ip_len = len(raw)
                l4 = l3.guess_payload_class(raw[40:])(raw[40:])
            for _ in range(4):
                if proto not in _IPV6_EXT or isinstance(l4, Raw) or not l4:
                    break
                hdr_len += (l4.len + 2) * 4 if proto == 51 else (l4.len + 1) * 8
                proto = l4.nh
                l4 = l4.payload
            if proto == 44 or isinstance(l4, IPv6ExtHdrFragment):
                ip = bytes(l3.original)
                if len(ip) < hdr_len + 8:
                    self.skipped["truncated-header"] += 1
                    return
                if hdr_len + 8 > ip_len:
                    self.skipped["malformed"] += 1
                    return
                nh, _, off, ident = struct.unpack_from(">BBHI", ip, hdr_len)
                key = (6, _addr16(l3.src, False), _addr16(l3.dst, False), ident, nh)
                self.fragment(pkt_no, ts, key, ip, hdr_len + 8, ip_len, off)
                return
        if proto != 6:
            kind = {17: "udp", 1: "icmp", 58: "icmp"}.get(proto, "other-ip-protocol")
            self.skipped[kind] += 1
            return
        if not isinstance(l4, TCP):
            self.skipped["truncated-header"] += 1
            return
        seg = l4.original
        doff = l4.dataofs * 4
        if len(seg) < max(doff, 20):
            self.skipped["truncated-header"] += 1
            return
        wlen = ip_len - hdr_len - doff
        if doff < 20 or wlen < 0:
            self.skipped["malformed"] += 1
            return
        data = seg[doff : doff + wlen]
        ip_id = l3.id if v4 else NO_IP_ID
        self.rows.append(
            (
                pkt_no,
                ts,
                _addr16(l3.src, v4),
                _addr16(l3.dst, v4),
                l4.sport,
                l4.dport,
                l4.seq,
                int(l4.flags) & 0xFF,
                len(data),
                wlen,
                l4.ack,
                int(header_word(l4.window, ip_id, doff - 20)),
            )
        )
        self.payload.append(bytes(seg[20:doff]) + data)  # options, then the payload

    def segments(self, packets: int, truncated: int) -> Segments:
        if self.frags:  # reassembled TCP datagrams join the rows, in packet order
            res = defragment(self.frags)
            self.skipped.update(res.skipped)
            self.skipped_pkts = sorted(self.skipped_pkts + res.skipped_pkts)
            for pkt, ts, src, dst, sp, dp, seq, flags, data, wlen, ack in res.segments:
                row = (pkt, ts, src, dst, sp, dp, seq, flags, len(data), wlen, ack, DATAGRAM_HDR)
                self.rows.append(row)
                self.payload.append(data)
            order = sorted(range(len(self.rows)), key=lambda i: self.rows[i][0])
            self.rows = [self.rows[i] for i in order]
            self.payload = [self.payload[i] for i in order]
        buf = b"".join(self.payload)
        if not self.rows:
            out = Segments.empty(buf)
        else:
            pkt, ts, src, dst, sport, dport, seq, flags, cap, wlen, ack, hdr = zip(
                *self.rows, strict=True
            )
            caplen = np.asarray(cap, dtype=np.int64)
            hdr_ = np.asarray(hdr, dtype=np.int64)
            out = Segments(
                buf=buf,
                pkt=np.asarray(pkt, dtype=np.int64),
                ts=np.asarray(ts, dtype=np.int64),
                src=np.frombuffer(b"".join(src), dtype=np.uint8).reshape(-1, 16),
                dst=np.frombuffer(b"".join(dst), dtype=np.uint8).reshape(-1, 16),
                sport=np.asarray(sport, dtype=np.int64),
                dport=np.asarray(dport, dtype=np.int64),
                seq=np.asarray(seq, dtype=np.int64),
                flags=np.asarray(flags, dtype=np.int64),
                poff=np.cumsum(caplen + (hdr_ >> 33)) - caplen,  # (each after its options)
                caplen=caplen,
                wlen=np.asarray(wlen, dtype=np.int64),
                ack=np.asarray(ack, dtype=np.int64),
                hdr=hdr_,
            )
        out.packets = packets
        out.truncated = truncated
        out.skipped_pkts = np.asarray(self.skipped_pkts, dtype=np.int64)
        out.skipped = Counter({k: v for k, v in self.skipped.items() if v})
        return out


def scapy_segments(path: Path, *, strict: bool) -> tuple[Segments, str, str | None, list[int]]:
    """(segments, file format, damage, byte offsets of the file headers of captures
    joined after the first and read on) read with scapy's RawPcapReader/RawPcapNgReader."""
    data, gz_damage = load_bytes(path, strict=strict)
    fmt = capture_format(data, path)
    col = _Collector()
    packets = truncated = 0
    damage = variant_damage = None
    if fmt != "pcapng":
        raw = np.frombuffer(data, np.uint8)
        arr, _, fmt, variant_damage = classic_pcap(raw, raw.size, path, strict)
        if fmt != "pcap":  # a variant, copied as classic pcap
            data = arr.tobytes()
    joins: list[int] = []
    if fmt != "pcapng":
        packets, truncated, damage, joins = _read_pcap(data, path, strict, col)
    else:
        packets, truncated, damage, joins = _read_pcapng(data, path, strict, col)
    damage = damage or variant_damage
    if gz_damage and not damage:
        damage = f"{path}: {gz_damage}"
    seg = col.segments(packets, truncated)
    if fmt == "pcapng":
        seg.interfaces = np.asarray(col.interfaces, dtype=np.int64)
    return seg, fmt, damage, joins


def _read_pcap(
    data: bytes, path: Path, strict: bool, col: _Collector
) -> tuple[int, int, str | None, list[int]]:
    """(packets, truncated, damage, byte offsets of joined captures' file headers) of a
    classic pcap, its packets added to ``col``. A second capture's file header (``cat
    a.pcap b.pcap``) is read on through when it is the first's own (magic, snapshot
    length, link type), as the fast reader reads on; another stops the read, named as
    the fast reader names it. Before, scapy read it as an empty packet and then a
    "damaged record" 16 bytes on, and nothing after it."""
    from scapy.utils import RawPcapReader

    fh = io.BytesIO(data)
    reader = RawPcapReader(fh)
    snaplen = max(reader.snaplen, MAX_RECORD)
    endian, tick = PCAP_MAGICS[data[:4]]
    packets = truncated = 0
    joins: list[int] = []
    while True:
        pos = fh.tell()
        if data[pos : pos + 4] in CAPTURE_MAGICS:
            why = header_why(data, len(data), pos, endian)
            if why is None:
                joins.append(pos)
                fh.seek(pos + 24)
                continue
            return packets, truncated, _damage(path, data, pos, packets + 1, strict, why), joins
        try:
            raw, meta = reader._read_packet(size=snaplen)
        except EOFError:
            fh.seek(pos)
            break
        if meta.caplen > snaplen or len(raw) < meta.caplen:
            fh.seek(pos)
            break
        packets += 1
        truncated += meta.caplen < meta.wirelen
        ts = meta.sec * 1_000_000_000 + meta.usec * (1_000_000_000 // tick)
        col.add_or_skip(packets, ts, raw, reader.linktype & 0xFFFF)  # FCS bits above
    damage = None
    if fh.tell() != len(data):
        damage = _damage(path, data, fh.tell(), packets + 1, strict)
    return packets, truncated, damage, joins


def _read_pcapng(
    data: bytes, path: Path, strict: bool, col: _Collector
) -> tuple[int, int, str | None, list[int]]:
    """(packets, truncated, damage, byte offsets of later sections) of a pcapng file,
    its packets added to ``col``."""
    if _header_cut(data):  # (scapy refuses it, even read leniently)
        return 0, 0, _damage(path, data, 0, 1, strict), []
    fh = io.BytesIO(data)
    try:
        reader = _pcapng_reader(fh, len(data))
    except Exception as exc:  # scapy raises its own Scapy_Exception
        raise CaptureFormatError(f"unreadable pcapng ({exc})", path=path, offset=0) from exc
    packets = truncated = 0
    while True:
        pos = fh.tell()
        try:
            got = reader._read_packet(size=MAX_RECORD)
        except EOFError:
            got = None
        for at in reader.undeclared:  # blocks before this packet, numbered before it
            packets += 1
            if strict:
                raise CaptureFormatError(
                    "packet block names an interface its section never described",
                    path=path,
                    record=packets,
                    offset=at,
                )
            col.skipped["undeclared-interface"] += 1
            col.skipped_pkts.append(packets)
            col.interfaces.append(-1)
        reader.undeclared.clear()
        if got is None:
            break
        raw, meta = got
        ts = ((meta.tshigh << 32) | meta.tslow) * 1_000_000_000 // meta.tsresol
        ts += reader.offset_ns
        if not 0 <= ts <= MAX_NS:
            break
        packets += 1
        truncated += len(raw) < meta.wirelen
        col.interfaces.append(reader.ifid)
        col.add_or_skip(packets, ts, raw, meta.linktype)
    damage = None
    if reader.classic_at is not None:
        why = joined("a classic pcap's", "it is not pcapng")
        damage = _damage(path, data, reader.classic_at, packets + 1, strict, why)
    elif reader.cut_at is not None or fh.tell() != len(data):
        at = pos if reader.cut_at is None else reader.cut_at
        damage = _damage(path, data, at, packets + 1, strict)
    return packets, truncated, damage, reader.sections


def _pcapng_reader(fh: io.BytesIO, size: int) -> Any:
    """scapy's pcapng reader, but a whole packet block naming an interface its section
    never described is passed over and its offset noted in ``undeclared`` (as the
    fast reader counts it), where scapy's versions skip it unnoted or fail on it."""
    from scapy.utils import RawPcapNgReader

    class Reader(RawPcapNgReader):  # type: ignore[misc]
        def __init__(self, *args: Any) -> None:  # scapy's metaclass passes three
            self.undeclared: list[int] = []
            self.sections: list[int] = []  # later sections' offsets (pcapngs joined)
            self.classic_at: int | None = None  # a classic pcap joined after the pcapng
            self.offset_ns = 0  # the if_tsoffset of the last packet's interface
            self.ifid = -1  # the last packet's interface: section << 32 | its number
            self.cut_at: int | None = None  # where a block the file ends inside starts
            super().__init__(*args)

        def _read_block_idb(self, block: bytes, size: int) -> None:
            # scapy reads no if_tsoffset (option 14): seconds added to each packet's time.
            super()._read_block_idb(block, size)
            _, _, options = self.interfaces[-1]
            offset = self._read_options(block[8:]).get(14)
            offset = offset[0] if isinstance(offset, list) else offset
            if isinstance(offset, bytes) and len(offset) == 8:
                options["tsoffset"] = struct.unpack(self.endian + "q", offset)[0] * 10**9

        def _read_block(self, size: int = MAX_RECORD) -> Any:
            start = self.f.tell()
            head = self.f.read(12)
            self.f.seek(start)
            if head[:4] in CLASSIC_MAGICS:  # scapy read on to the end, found nothing
                self.classic_at = start
                raise EOFError
            if 0 < len(head) < 12 or (
                len(head) == 12
                and start + struct.unpack(self.endian + "I", head[4:8])[0] > size_of_file
            ):
                # A block cut short (the file ends inside it): scapy warns, reads what is
                # there and ends quietly; it is damage where the block starts.
                self.cut_at = start
                raise EOFError
            if len(head) == 12:
                btype, blen, ifid = struct.unpack(self.endian + "III", head)
                self.sections += [start] if btype == 0x0A0D0D0A and start else []
                if btype == 2:  # the obsolete block's interface id is 16 bits
                    ifid = struct.unpack(self.endian + "H", head[8:10])[0]
                ifid = 0 if btype == 3 else ifid  # a simple block's is the first
                whole = blen >= 12 and start + blen <= size_of_file
                if btype in (2, 3, 6) and whole and ifid >= len(self.interfaces):
                    self.undeclared.append(start)
                    self.f.seek(start + blen)
                    return None
                if btype in (2, 6) and ifid < len(self.interfaces):
                    self.offset_ns = self.interfaces[ifid][2].get("tsoffset", 0)
                if btype in (2, 3, 6):
                    self.ifid = len(self.sections) << 32 | ifid
            return super()._read_block(size=size)

    size_of_file = size
    return Reader(fh)


def _header_cut(data: bytes) -> bool:
    """Whether the file ends inside its first section header block: damage where it
    starts, no packet read, as the fast engine has it."""
    if len(data) < 12:
        return True
    bom = data[8:12]
    if bom not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
        return False  # (not one scapy reads: its own words)
    return len(data) < struct.unpack("<I" if bom[0] == 0x4D else ">I", data[4:8])[0]


def _damage(path: Path, data: bytes, offset: int, record: int, strict: bool, why: str = "") -> str:
    err = CaptureFormatError(
        why or f"damaged record ({len(data) - offset} bytes left unread)",
        path=path,
        record=record,
        offset=offset,
    )
    if strict:
        raise err
    return str(err)
