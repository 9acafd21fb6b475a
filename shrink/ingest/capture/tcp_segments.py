"""TCP segments: the one table both capture engines produce and reassembly consumes.

Keeping the hand-over a plain columnar value is what makes the fast (numpy)
engine and the scapy engine comparable: from here on they run the same code,
so the same segments give the same Trace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["DATAGRAM_HDR", "NO_IP_ID", "SKIP_KINDS", "Segments", "header_word", "option_bytes"]

# Kinds of packets a capture reader skips, in the order reports list them.
SKIP_KINDS = (
    "unsupported-link",
    "undeclared-interface",  # a pcapng packet block naming no described interface
    "non-ip",
    "ip-fragment",  # a fragment of an IP datagram never completed
    "udp",
    "icmp",
    "other-ip-protocol",
    "truncated-header",
    "malformed",
)


NO_IP_ID = 1 << 16  # an IPv6 packet's, or a reassembled datagram's


def header_word(win: np.ndarray, ip_id: np.ndarray, olen: np.ndarray) -> np.ndarray:
    """:attr:`Segments.hdr`: window, IP ID (or :data:`NO_IP_ID`) and option length."""
    return (np.asarray(win, np.int64) | np.asarray(ip_id, np.int64) << 16
            | np.asarray(olen, np.int64) << 33)  # fmt: skip


# A TCP datagram reassembled from IP fragments: no window, IP ID or options kept.
DATAGRAM_HDR = NO_IP_ID << 16


def option_bytes(seg: Segments, i: int) -> bytes:
    """Segment ``i``'s TCP options (empty where the reader kept none)."""
    if seg.hdr is None:
        return b""
    olen, at = int(seg.hdr[i]) >> 33, int(seg.poff[i])
    return bytes(seg.buf[at - olen : at])


@dataclass
class Segments:
    """Every TCP segment of a capture, in capture order.

    ``src``/``dst`` are 16-byte addresses (IPv4 mapped into ``::ffff:0:0/96``);
    ``poff`` indexes the payload's first captured byte in ``buf``; ``caplen``
    is how much of the payload was captured and ``wlen`` how long it was on
    the wire (from the IP length), so snaplen-cut payload can be accounted for.
    """

    buf: bytes | np.ndarray  # joined payloads (scapy), or the file's bytes as numpy (fast)
    pkt: np.ndarray  # 1-based packet (frame) number
    ts: np.ndarray  # int64 ns
    src: np.ndarray  # (n, 16) uint8
    dst: np.ndarray
    sport: np.ndarray  # int64
    dport: np.ndarray
    seq: np.ndarray  # int64 (0 .. 2**32-1)
    flags: np.ndarray  # int64 TCP flag bits
    poff: np.ndarray
    caplen: np.ndarray
    wlen: np.ndarray
    packets: int = 0  # packets in the capture, TCP or not
    skipped: Counter[str] = field(default_factory=Counter)
    truncated: int = 0  # records shorter than on the wire (snaplen)
    skipped_pkts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Per packet of a pcapng (index: packet number - 1), the interface it was captured
    # on (section << 32 | interface number; -1 for none); None for a classic pcap.
    interfaces: np.ndarray | None = None
    # Per segment, its acknowledgment number (int64, 0 .. 2**32-1; read only where the
    # ACK flag is set); None where the reader did not keep them.
    ack: np.ndarray | None = None
    # Per segment, header fields a copy on another interface shares and a resend need
    # not (:func:`header_word`): the TCP window, the IPv4 ID (NO_IP_ID for IPv6 and a
    # reassembled datagram) and how many bytes of TCP options lie in ``buf`` just before
    # the payload (``poff``); None where the reader did not keep them.
    hdr: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.pkt.size)

    @classmethod
    def empty(cls, buf: bytes = b"") -> Segments:
        """No segments (a capture without TCP)."""
        z = np.zeros(0, dtype=np.int64)
        a = np.zeros((0, 16), dtype=np.uint8)
        return cls(buf, z, z, a, a, z, z, z, z, z, z, z)
