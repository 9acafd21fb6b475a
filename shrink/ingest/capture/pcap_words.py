"""Fields of packet headers at any byte offsets of a capture buffer, one gather each.

Helpers of :mod:`shrink.ingest.capture.pcap_decode`: 8-byte words at arbitrary
offsets, bytes and big-endian fields of them, and 16-byte addresses.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Words", "addresses", "b", "be16", "be32", "ip_addresses", "le32"]


class Words:
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


def b(v: np.ndarray, k: int) -> np.ndarray:
    """Byte ``k`` (0-7) of words ``v``."""
    return ((v >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64)


def be16(v: np.ndarray, k: int) -> np.ndarray:
    """Big-endian 16-bit field at byte ``k`` (0-6) of words ``v``."""
    return (b(v, k) << 8) | b(v, k + 1)


def be32(v: np.ndarray, k: int) -> np.ndarray:
    return (be16(v, k) << 16) | be16(v, k + 2)


def le32(v: np.ndarray, k: int) -> np.ndarray:
    return ((v >> np.uint64(8 * k)) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def addresses(v_hi: np.ndarray, v_lo: np.ndarray) -> np.ndarray:
    """16-byte rows from two words each (bytes in memory order)."""
    return np.stack([v_hi, v_lo], 1).astype("<u8").view(np.uint8).reshape(-1, 16)


def _v4_addr(v: np.ndarray, k: int) -> np.ndarray:
    """::ffff:a.b.c.d from the 4 bytes at byte ``k`` of words ``v``."""
    # As two little-endian words: 0, then 00 00 ff ff a b c d
    a = (v >> np.uint64(8 * k)) & np.uint64(0xFFFFFFFF)
    return addresses(np.zeros_like(a), (a << np.uint64(32)) | np.uint64(0xFFFF0000))


def ip_addresses(
    word: Words, l3: np.ndarray, v4: np.ndarray, w1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) as 16 bytes each (IPv4 mapped into ::ffff:0:0/96).

    ``w1`` is the IP header's second word (the IPv4 source is in it).
    """
    if v4.all():
        return _v4_addr(w1, 4), _v4_addr(word(l3 + 16), 0)
    if not v4.any():
        return addresses(word(l3 + 8), word(l3 + 16)), addresses(word(l3 + 24), word(l3 + 32))
    m = l3.size
    src = np.empty((m, 16), dtype=np.uint8)
    dst = np.empty((m, 16), dtype=np.uint8)
    src[v4], dst[v4] = _v4_addr(w1[v4], 4), _v4_addr(word(l3[v4] + 16), 0)
    s6, d6 = l3[~v4] + 8, l3[~v4] + 24
    src[~v4] = addresses(word(s6), word(s6 + 8))
    dst[~v4] = addresses(word(d6), word(d6 + 8))
    return src, dst
