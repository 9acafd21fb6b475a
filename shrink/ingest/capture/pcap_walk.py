"""Find every record of a classic pcap file without a Python step per record.

A pcap record says only how long it is, so record ``i + 1`` starts where
record ``i`` ends: a chain that looks inherently sequential, and a Python loop
over it costs ~0.4 us a record. Here the file is cut into blocks; in each
block a likely record start is found (a run of record headers with sane
lengths and times), and all the chains are then followed together, one numpy
gather per step for all blocks at once.

A guessed start is never trusted: block ``i``'s records are used only when the
chain of block ``i - 1`` lands exactly on its start, so by induction from the
file header every record used lies on the one true chain. A chain that
overshoots a (wrongly guessed) start is followed on with a plain loop until it
lands on a later block's start. The result is exactly what the plain loop
gives, which :func:`walk_plain` is kept for (and tested against); small files
(under 1 MB, or fewer than 16 blocks) are walked with it directly.

:func:`gather` then reads each record's header and the first bytes of its
frame (:data:`FRAME` names the fields the decoder's fast lane uses) in one
pass, as the file is far larger than the cache.
"""

from __future__ import annotations

import struct

import numpy as np

from shrink.ingest.capture_magic import CAPTURE_MAGICS, PCAPNG_MAGIC, joined

__all__ = ["FRAME", "HEADER", "gather", "header_dtype", "walk_chain", "walk_plain"]

HEADER = 16  # bytes of a classic pcap record header
_DEPTH = 3  # chained sane headers a block start must have
# Below this many chains a numpy step (~10 us) costs more than a plain step a chain.
_FEW = 16
# Each record of the longest block costs a numpy step over all blocks, and each
# block a window of positions tried and a Python step to join it: about a
# thousand records a block was fastest on a 200,000-packet web capture.
_PER_BLOCK = 1000


def header_dtype(endian: str) -> np.dtype:
    """A record header: seconds, sub-seconds, captured and wire lengths."""
    u4 = endian + "u4"
    return np.dtype([("sec", u4), ("sub", u4), ("incl", u4), ("orig", u4)])


def walk_plain(
    data: np.ndarray,
    n: int,
    endian: str,
    limit: int,
    start: int = 24,
    stop_at: int = -1,
    most: int = -1,
) -> tuple[list[int], int]:
    """(offsets of good records from ``start``, where the walk stopped), one record a step.

    It stops at the first record that is bad (longer than ``limit`` or running
    past the end) or whose header cannot be read, at or past ``stop_at`` (a
    later block's start) when that is not -1, or after ``most`` records.
    """
    unpack = struct.Struct(endian + "8xI").unpack_from
    off = start
    offs: list[int] = []
    append = offs.append
    stop = n + 1 if stop_at < 0 else stop_at
    left = most
    while off < stop and off + 12 <= n and left:
        incl = unpack(data, off)[0]
        if incl > limit or off + HEADER + incl > n:
            break
        append(off)
        off += HEADER + incl
        left -= 1
    return offs, off


def _starts(
    data: np.ndarray, n: int, endian: str, limit: int, tick: int, blocks: int, window: int
) -> np.ndarray:
    """A likely record start in each block but the first (where one is found), sorted.

    The windows of all blocks are read as one 2-D strided view, so the first
    tests (time and captured length) run over contiguous bytes without a
    gather; the few positions that pass must then chain _DEPTH sane headers.
    """
    size = n // blocks
    base = np.arange(1, blocks, dtype=np.int64) * size
    window = min(window, size, n - HEADER - int(base[-1]) + 1) if base.size else 0
    if window <= 0:
        return base[:0]
    u4 = np.ndarray((n - 3,), dtype=endian + "u4", buffer=data, strides=(1,))

    def field(k: int) -> np.ndarray:
        return np.lib.stride_tricks.as_strided(
            u4[int(base[0]) + k :], shape=(base.size, window), strides=(size, 1)
        )

    view = np.ndarray((n - HEADER + 1,), dtype=header_dtype(endian), buffer=data, strides=(1,))
    sec0 = int(view[24]["sec"])
    # Two tests over the windows, in 32-bit arithmetic: a sane captured length, and
    # seconds within 2**24 of the first record's (zero-filled payload, which passes
    # any length test, fails this one). Payload rarely passes both, so the rest is
    # tested on the survivors only.
    near = (field(0) - np.uint32((sec0 - (1 << 24)) % (1 << 32))) < np.uint32(1 << 25)
    bi, wi = np.nonzero(near & (field(8) <= limit))
    at = base[bi] + wi
    good = np.ones(at.size, dtype=bool)
    p = at
    for _ in range(_DEPTH):
        ok, p = _sane(view, p, n, limit, tick, sec0)
        good &= ok
    bi, at = bi[good], at[good]
    _, first = np.unique(bi, return_index=True)  # nonzero's order: by block, then position
    return at[first]


def walk_chain(
    data: np.ndarray, n: int, endian: str, limit: int, tick: int
) -> tuple[np.ndarray, int]:
    """(offsets of every good record, where the walk stopped), as :func:`walk_plain` from 24."""
    # The first records show how long records are, so how many blocks pay off.
    head = walk_plain(data, n, endian, limit, most=64)[0]
    if len(head) < 64 or n < 1 << 20:
        offs, stop = walk_plain(data, n, endian, limit)
        return np.asarray(offs, dtype=np.int64), stop
    avg = max((head[-1] - head[0]) // (len(head) - 1), HEADER)
    blocks = int(np.clip(n // (avg * _PER_BLOCK), 1, 8192))
    starts = np.r_[24, _starts(data, n, endian, limit, tick, blocks, min(4 * avg + 256, 16384))]
    nchain = starts.size
    if nchain < _FEW:  # too few blocks for numpy steps to beat plain ones
        offs, stop = walk_plain(data, n, endian, limit)
        return np.asarray(offs, dtype=np.int64), stop
    target = np.r_[starts[1:], n]
    last = n - 12  # the captured length is at offset + 8; clamped reads fail the tests
    incl_at = np.ndarray((n - 11,), dtype=endian + "u4", buffer=data, strides=(1,))[8:]

    # Follow every chain at once until it reaches the next block's start. When few
    # are left, a numpy step costs more than plain steps: leave the rest to the loop.
    # Each chain stays inside [its start, the next start), so sorting all positions
    # found puts them in chain order.
    p = starts.copy()
    live = np.arange(nchain)
    tgt = target.copy()
    found: list[np.ndarray] = []
    end = np.full(nchain, -1, dtype=np.int64)  # where each chain stopped
    while live.size >= _FEW:
        incl = incl_at[np.minimum(p, last)]
        nxt = p + HEADER + incl
        good = (incl <= limit) & (nxt <= n)
        done = nxt >= tgt
        if good.all():
            found.append(p)
        else:
            found.append(p[good])
            done |= ~good
        if done.any():
            end[live[done]] = np.where(good, nxt, p)[done]
            keep = ~done
            p, live, tgt = nxt[keep], live[keep], tgt[keep]
        else:
            p = nxt
    end[live] = p
    allpos = np.sort(np.concatenate(found)) if found else starts[:0]
    bounds = np.r_[np.searchsorted(allpos, starts), allpos.size]

    # Keep the chains the true chain runs into (from the file header on); between
    # them, or past a wrong guess, walk plainly until landing on a later start.
    parts: list[np.ndarray] = []
    i = 0
    while True:
        parts.append(allpos[bounds[i] : bounds[i + 1]])
        off = int(end[i])
        j = i + 1
        while True:
            while j < nchain and int(starts[j]) < off:
                j += 1
            if j < nchain and int(starts[j]) == off:
                break
            stop_at = int(starts[j]) if j < nchain else -1
            offs, off = walk_plain(data, n, endian, limit, off, stop_at)
            parts.append(np.asarray(offs, dtype=np.int64))
            if stop_at < 0 or off < stop_at:  # a bad record, or the end of the file
                return np.concatenate(parts), off
        i = j


def walk_joined(
    data: np.ndarray, n: int, endian: str, limit: int, tick: int
) -> tuple[np.ndarray, int, list[int]]:
    """:func:`walk_chain`, read on through the file header of a second capture joined
    after the first (``cat a.pcap.gz b.pcap.gz``, one gzip stream of both, or ``cat``
    of two pcaps) when it is the first's own: same magic (byte order, tick), link type
    and snapshot length, so its records read as the first's would. (offsets, where the
    walk stopped, the byte offset of each such header.) Another header stops the walk
    there, as damage the caller names."""
    good, stop = walk_chain(data, n, endian, limit, tick)
    joins: list[int] = []
    while True:
        # The header reads as an empty record (thiszone as its length) then a record of
        # impossible length, or as that bad record itself.
        at = stop
        if (
            good.size
            and int(good[-1]) + HEADER == stop
            and _same_header(data, n, int(good[-1]), endian)
        ):
            at = int(good[-1])
        if not _same_header(data, n, at, endian):
            return good, stop, joins
        joins.append(at)
        more, stop = walk_plain(data, n, endian, limit, start=at + 24)
        good = np.concatenate([good[good < at], np.asarray(more, dtype=np.int64)])


def header_why(data: bytes | np.ndarray, n: int, at: int, endian: str) -> str | None:
    """None where the capture file header at ``at`` is the file's own (read on through
    it, as :func:`walk_joined` does) or where none starts; else what to say there, and
    why it is not read on."""
    if bytes(data[at : at + 4]) not in CAPTURE_MAGICS:
        return None
    if bytes(data[at : at + 4]) == PCAPNG_MAGIC:
        return joined("a pcapng section's", "it is pcapng, not a classic pcap")
    if at + 24 > n:
        return f"a second capture's file header is cut short here ({n - at} of 24 bytes)"
    if _same_header(data, n, at, endian):
        return None
    fields = struct.Struct(endian + "16xII")
    (snap, link), (snap0, link0) = fields.unpack_from(data, at), fields.unpack_from(data, 0)
    if bytes(data[at : at + 4]) != bytes(data[:4]):
        differs = f"its magic {bytes(data[at : at + 4]).hex()}, not {bytes(data[:4]).hex()}"
    elif snap != snap0:
        differs = f"its snapshot length {snap}, not {snap0}"
    else:
        differs = f"its link type {link & 0xFFFF}, not {link0 & 0xFFFF}"
    return joined("a second capture's", differs)


def _same_header(data: bytes | np.ndarray, n: int, at: int, endian: str) -> bool:
    """Whether the 24 bytes at ``at`` are a pcap file header like the file's own: the
    same magic, snapshot length and link type (its low 16 bits)."""
    if at + 24 > n or bytes(data[at : at + 4]) != bytes(data[:4]):
        return False
    fields = struct.Struct(endian + "16xII")
    (snap, link), (snap0, link0) = fields.unpack_from(data, at), fields.unpack_from(data, 0)
    return snap == snap0 and link & 0xFFFF == link0 & 0xFFFF


def _sane(
    view: np.ndarray, p: np.ndarray, n: int, limit: int, tick: int, sec0: int
) -> tuple[np.ndarray, np.ndarray]:
    """(whether the record header at each offset ``p`` is sane, the offset after it).

    Sane: inside the file, a captured length within ``limit`` and the file, an original
    length under 2**24, sub-seconds below ``tick``, seconds within 2**24 of ``sec0``.
    """
    inside = p <= n - HEADER
    h = view[np.where(inside, p, 0)]
    incl = h["incl"].astype(np.int64)
    ok = (
        inside
        & (incl <= limit)
        & (p + HEADER + incl <= n)
        & (h["orig"] <= (1 << 24))
        & (h["sub"] < tick)
        & (np.abs(h["sec"].astype(np.int64) - sec0) < (1 << 24))
    )
    return ok, p + HEADER + incl


# Bytes searched at a time for a record start past damage: a window's headers are
# tested at once, and most damage is followed by a good record within the window.
_RESYNC_WINDOW = 1 << 20


def resync(data: np.ndarray, n: int, endian: str, limit: int, tick: int, start: int) -> int:
    """The first offset at or after ``start`` where records chain again, or ``n``.

    A record start must have a sane header (a captured length within ``limit`` and the
    file, sub-seconds below ``tick``, seconds within 2**24 of the first record's) and
    so must the ``_DEPTH`` records after it, unless the chain ends exactly at the
    file's end. Bytes of a damaged record rarely pass: the lenient reader reads on
    from here rather than dropping the rest of the file.
    """
    if n - HEADER < max(start, 24):
        return n
    view = np.ndarray((n - HEADER + 1,), dtype=header_dtype(endian), buffer=data, strides=(1,))
    sec0 = int(view[24]["sec"])

    def sane(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _sane(view, p, n, limit, tick, sec0)

    pos = start
    window = 4096  # growing: a good record is usually close, and many damages are cheap
    while pos <= n - HEADER:
        at = np.arange(pos, min(pos + window, n - HEADER + 1), dtype=np.int64)
        window = min(2 * window, _RESYNC_WINDOW)
        good, p = sane(at)
        ended = np.zeros(at.size, dtype=bool)
        for _ in range(_DEPTH):
            ended |= good & (p == n)
            ok, nxt = sane(p)
            good &= ended | ok
            p = np.where(ended, p, nxt)
        hit = np.flatnonzero(good)
        if hit.size:
            return int(at[hit[0]])
        pos = int(at[-1]) + 1
    return n


# The first bytes of an Ethernet frame carrying IPv4 without options and TCP:
# every field the fast lane of the decoder needs, named, in network byte order.
_FIELDS = (  # name, type, offset in the frame
    ("et", ">u2", 12),
    ("vhl", "u1", 14),
    ("tot", ">u2", 16),
    ("ipid", ">u2", 18),
    ("frag", ">u2", 20),
    ("proto", "u1", 23),
    ("src", ("u1", 4), 26),
    ("dst", ("u1", 4), 30),
    ("sport", ">u2", 34),
    ("dport", ">u2", 36),
    ("seq", ">u4", 38),
    ("ack", ">u4", 42),
    ("doff", "u1", 46),
    ("flags", "u1", 47),
    ("win", ">u2", 48),
)
FRAME = np.dtype(
    {
        "names": [f[0] for f in _FIELDS],
        "formats": [f[1] for f in _FIELDS],
        "offsets": [f[2] for f in _FIELDS],
        "itemsize": 52,
    }
)


def gather(data: np.ndarray, n: int, offs: np.ndarray, size: int) -> np.ndarray:
    """(len(offs), size) bytes at byte offsets ``offs``; bytes past ``n`` read as zeros.

    One gather for everything a later step needs: the file is far larger than
    the cache, so each pass over the records costs a trip to memory each. The
    items are plain bytes (a structured dtype with gaps would be copied field
    by field, several times slower); callers view them as a structured dtype.
    """
    item = np.dtype((np.void, size))
    last = n - size
    out = np.zeros(offs.size, dtype=item)
    if last >= 0:
        view = np.ndarray((last + 1,), dtype=item, buffer=data, strides=(1,))
        out = view[np.minimum(offs, last)]
    over = np.flatnonzero(offs > last)
    if over.size:  # the last few items run past the end: read them from a padded copy
        lo = int(offs[over].min())
        pad = np.zeros(n - lo + size, dtype=np.uint8)
        pad[: n - lo] = np.frombuffer(data, dtype=np.uint8, count=n - lo, offset=lo)
        view = np.ndarray((n - lo + 1,), dtype=item, buffer=pad, strides=(1,))
        out[over] = view[offs[over] - lo]
    return out.view(np.uint8).reshape(-1, size)
