"""Write synthetic HTTP captures (pcap or pcapng) for tests and benchmarks.

Each connection is a list of (request bytes, response bytes) exchanges sent
over a proper TCP handshake; responses are cut into MSS-sized segments and
the receiver ACKs every second segment. Options bend the traffic the ways
real captures are bent: pipelining, reordered, retransmitted and overlapping
segments, a flow caught mid-stream, a snapshot length, VLAN tags, IPv6 and
the link types the reader supports.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Conn", "http_response", "pcap_variant", "write_capture"]

MSS = 1448


@dataclass
class Conn:
    """One TCP connection of a synthetic capture."""

    exchanges: Sequence[tuple[bytes, bytes | tuple[bytes, ...]]]
    client: str = "10.0.0.1"
    server: str = "10.0.0.2"
    cport: int = 40000
    sport: int = 80
    start: float = 0.0  # seconds from the capture start
    rtt: float = 0.001  # request -> response delay
    gap: float = 0.01  # pause between exchanges (keep-alive think)
    pipeline: bool = False
    handshake: bool = True
    fin: bool = True
    reorder: bool = False  # swap each pair of response segments
    retransmit: bool = False  # send every third response segment twice
    overlap: bool = False  # resend half of every fourth segment again with new bytes after it
    skip_first: int = 0  # drop this many bytes of the client stream (mid-stream capture)
    isn: int = 0  # added to both initial sequence numbers (port reuse needs a new ISN)
    rst: bool = False  # the server ends the connection with a reset instead of FIN
    fragment: int = 0  # cut IP packets with more TCP bytes than this into IP fragments
    fragment_reverse: bool = False  # and send each packet's fragments last first


def http_response(
    body: bytes | int,
    *,
    status: int = 200,
    chunked: bool = False,
    version: str = "1.1",
    length: bool = True,
    extra: str = "",
) -> bytes:
    """A response with ``body`` (or that many bytes), framed as asked."""
    if isinstance(body, int):
        body = (b"0123456789abcdef" * (body // 16 + 1))[:body]
    head = f"HTTP/{version} {status} X\r\nServer: synth\r\n{extra}"
    if chunked:
        parts = [body[i : i + 1000] for i in range(0, len(body), 1000)]
        data = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + data
    if length:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def _addr(text: str) -> tuple[bool, bytes]:
    if ":" in text:
        return True, socket.inet_pton(socket.AF_INET6, text)
    return False, socket.inet_aton(text)


class _Writer:
    def __init__(self, linktype: int, vlan: int | None, snaplen: int) -> None:
        self.linktype = linktype
        self.vlan = vlan
        self.snaplen = snaplen
        self.packets: list[tuple[float, bytes, int]] = []
        self.fragment = 0
        self.fragment_reverse = False
        self.ident = 0

    def l2(self, v6: bool) -> bytes:
        et = 0x86DD if v6 else 0x0800
        lt = self.linktype
        # A VLAN tag (TCI, then the real ethertype) opens the payload; the header's
        # own ethertype field says 802.1Q.
        tag = b"" if self.vlan is None else struct.pack(">HH", self.vlan, et)
        if tag:
            et = 0x8100
        if lt == 1:
            eth = b"\x00\x11\x22\x33\x44\x55\x00\x66\x77\x88\x99\xaa"
            return eth + struct.pack(">H", et) + tag
        if lt == 113:
            return struct.pack(">HHH8sH", 0, 1, 6, b"\x00" * 8, et) + tag
        if lt == 276:
            return struct.pack(">HHIHBB8s", et, 0, 1, 1, 0, 6, b"\x00" * 8) + tag
        if lt == 0:
            return struct.pack("<I", 30 if v6 else 2)
        return b""  # raw IP (101)

    def tcp(self, t: float, src: str, dst: str, sp: int, dp: int, seq: int, ack: int,
            flags: int, payload: bytes = b"") -> None:  # fmt: skip
        v6, s = _addr(src)
        _, d = _addr(dst)
        tcp = struct.pack(">HHIIBBHHH", sp, dp, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                          5 << 4, flags, 65535, 0, 0) + payload  # fmt: skip
        if self.fragment and len(tcp) > self.fragment:
            self.fragments(t, v6, s, d, tcp)
            return
        if v6:
            ip = struct.pack(">IHBB16s16s", 6 << 28, len(tcp), 6, 64, s, d)
        else:
            ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, s, d)
        frame = self.l2(v6) + ip + tcp
        self.packets.append((t, frame, len(frame)))

    def fragments(self, t: float, v6: bool, s: bytes, d: bytes, tcp: bytes) -> None:
        """The TCP segment in IP fragments of ``self.fragment`` bytes (rounded to 8)."""
        self.ident += 1
        size = max(8, self.fragment // 8 * 8)
        frames = []
        for off in range(0, len(tcp), size):
            part = tcp[off : off + size]
            more = int(off + size < len(tcp))
            if v6:
                fh = struct.pack(">BBHI", 6, 0, off | more, self.ident)
                ip = struct.pack(">IHBB16s16s", 6 << 28, 8 + len(part), 44, 64, s, d) + fh
            else:
                ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(part), self.ident & 0xFFFF,
                                 off // 8 | more << 13, 64, 6, 0, s, d)  # fmt: skip
            frames.append(self.l2(v6) + ip + part)
        for frame in reversed(frames) if self.fragment_reverse else frames:
            self.packets.append((t, frame, len(frame)))


def _segments(data: bytes) -> list[tuple[int, bytes]]:
    return [(i, data[i : i + MSS]) for i in range(0, len(data), MSS)] or []


def _emit_conn(w: _Writer, c: Conn) -> None:
    ct, st = (c.client, c.cport), (c.server, c.sport)
    cisn, sisn = 1000 + c.cport * 7 + c.isn, 5000 + c.cport * 13 + c.isn
    t = c.start
    A, S, P, F = 0x10, 0x02, 0x08, 0x01

    def cli(seq: int, ack: int, flags: int, data: bytes = b"") -> None:
        w.tcp(t, ct[0], st[0], ct[1], st[1], seq, ack, flags, data)

    def srv(seq: int, ack: int, flags: int, data: bytes = b"") -> None:
        w.tcp(t, st[0], ct[0], st[1], ct[1], seq, ack, flags, data)

    if c.handshake:
        cli(cisn, 0, S)
        t += c.rtt / 2
        srv(sisn, cisn + 1, S | A)
        t += c.rtt / 2
        cli(cisn + 1, sisn + 1, A)
    cseq, sseq = cisn + 1, sisn + 1
    skip = c.skip_first

    def send_request(req: bytes) -> None:
        nonlocal cseq, skip, t
        for off, part in _segments(req):
            if skip >= len(part):
                skip -= len(part)
            else:
                cli(cseq + off + skip, sseq, P | A, part[skip:])
                skip = 0
            t += 0.00001
        cseq += len(req)

    def send_response(resp: bytes | tuple[bytes, ...]) -> None:
        nonlocal sseq, t
        if isinstance(resp, tuple):  # parts sent apart (an interim 1xx, then the answer)
            for part in resp:
                send_response(part)
                t += c.rtt
            return
        segs = _segments(resp)
        order = list(range(len(segs)))
        if c.reorder:
            for i in range(0, len(order) - 1, 2):
                order[i], order[i + 1] = order[i + 1], order[i]
        for n, k in enumerate(order):
            off, part = segs[k]
            srv(sseq + off, cseq, A | (P if k == len(segs) - 1 else 0), part)
            if c.retransmit and n % 3 == 2:
                t += 0.0002
                srv(sseq + off, cseq, A, part)
            if c.overlap and n % 4 == 3 and len(part) > 10:
                t += 0.0001
                srv(sseq + off + len(part) // 2, cseq, A, part[len(part) // 2 :])
            t += 0.00005
            if n % 2 == 1:
                cli(cseq, sseq + off + len(part), A)
        sseq += len(resp)
        cli(cseq, sseq, A)

    if c.pipeline:
        for req, _ in c.exchanges:
            send_request(req)
        t += c.rtt
        for _, resp in c.exchanges:
            send_response(resp)
    else:
        for i, (req, resp) in enumerate(c.exchanges):
            send_request(req)
            t += c.rtt
            if resp:
                send_response(resp)
            if i + 1 < len(c.exchanges):
                t += c.gap
    if c.rst:
        t += 0.0001
        srv(sseq, cseq, 0x04 | A)
    elif c.fin:
        t += 0.0001
        cli(cseq, sseq, F | A)
        t += 0.0001
        srv(sseq, cseq + 1, F | A)
        cli(cseq + 1, sseq + 1, A)


def write_capture(
    path: str | Path,
    conns: Iterable[Conn],
    *,
    linktype: int = 1,
    vlan: int | None = None,
    snaplen: int = 65535,
    fmt: str = "pcap",
    base_time: float = 1_700_000_000.0,
    tsoffset: int = 0,
) -> Path:
    """Write the connections as one capture, packets in time order; returns the path.
    ``tsoffset`` (pcapng): the interface's if_tsoffset in seconds, taken off each
    packet's written time, so the packets' times are the same as without it."""
    w = _Writer(linktype, vlan, snaplen)
    for c in conns:
        w.fragment, w.fragment_reverse = c.fragment, c.fragment_reverse
        _emit_conn(w, c)
    w.packets.sort(key=lambda p: p[0])
    out = bytearray()
    if fmt == "pcap":
        out += struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)
        for t, frame, wire in w.packets:
            ts = round((base_time + t) * 1e6)
            cap = frame[:snaplen]
            out += struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(cap), wire) + cap
    elif fmt == "pcapng":
        shb_body = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
        out += struct.pack("<II", 0x0A0D0D0A, 12 + len(shb_body)) + shb_body
        out += struct.pack("<I", 12 + len(shb_body))
        opts = struct.pack("<HHB3x", 9, 1, 9)  # tsresol: ns
        if tsoffset:
            opts += struct.pack("<HHq", 14, 8, tsoffset)
        opts += struct.pack("<HH", 0, 0)
        idb = struct.pack("<HHI", linktype, 0, snaplen) + opts
        out += struct.pack("<II", 1, 12 + len(idb)) + idb + struct.pack("<I", 12 + len(idb))
        for t, frame, wire in w.packets:
            ts = round((base_time + t) * 1e9) - tsoffset * 10**9
            cap = frame[:snaplen]
            pad = b"\x00" * (-len(cap) % 4)
            body = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(cap), wire) + cap + pad
            out += struct.pack("<II", 6, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))
    else:
        raise ValueError(f"fmt == {fmt!r}, must be 'pcap' or 'pcapng'.")
    path = Path(path)
    path.write_bytes(bytes(out))
    return path


def pcap_variant(
    classic: bytes, magic: bytes, extra: int, filler: int = 0, byteorder: str = "<"
) -> bytes:
    """A classic little-endian pcap rewritten as a patched tcpdump's variant: ``magic``
    for the file's, ``extra`` bytes of ``filler`` after every record's header, and the
    headers' fields in ``byteorder`` ("<" or ">", which ``magic`` must match)."""
    head = struct.unpack_from("<HHiIII", classic, 4)
    parts = [magic, struct.pack(byteorder + "HHiIII", *head)]
    off = 24
    while off < len(classic):
        fields = struct.unpack_from("<4I", classic, off)
        body = classic[off + 16 : off + 16 + fields[2]]
        parts += [struct.pack(byteorder + "4I", *fields), bytes([filler]) * extra, body]
        off += 16 + fields[2]
    return b"".join(parts)
