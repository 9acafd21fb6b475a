"""TCP reassembly: segments -> connections with one ordered byte stream per direction.

Everything is vectorised over all segments of the capture:

* flows are keyed by (address, port, address, port); a new client SYN with a
  new initial sequence number on a 4-tuple already seen starts a new
  connection (port reuse);
* each direction's sequence numbers are made relative to its SYN (or, for a
  flow that starts mid-stream, to its lowest captured sequence number), with
  32-bit wrap-around;
* segments are sorted by relative offset; a running maximum of covered bytes
  drops retransmissions and trims overlapping segments (the first capture of a
  byte wins, so its time is the earliest);
* bytes the capture never saw (a lost segment, or payload cut by the snapshot
  length) are filled with zeros of the right length and listed as gaps, so a
  body that runs across them still has the right size, and a header that runs
  across them is known to be damaged.

All streams are joined into one ``bytes`` object; a piece table maps every
stream offset back to the capture time of the packet that carried it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from shrink.ingest.capture.tcp_segments import Segments

__all__ = ["Connection", "Streams", "reassemble"]

SYN, ACK, FIN, RST = 0x02, 0x10, 0x01, 0x04
# A hole wider than this is not filled (garbage sequence numbers, or a jump).
MAX_GAP = 1 << 24
_GROUP = np.int64(1) << 40


@dataclass
class Connection:
    """One TCP connection: endpoints, who opened it and where its two streams lie."""

    index: int
    ep: tuple[tuple[bytes, int], tuple[bytes, int]]  # (addr16, port) for directions 0 and 1
    opener: int  # direction that sent the SYN (0/1), or -1 when the capture missed it
    span: tuple[tuple[int, int], tuple[int, int]]  # [start, end) stream offsets per direction
    packets: int
    first_pkt: int
    fin: tuple[bool, bool] = (False, False)  # each direction closed with FIN (not RST, not cut)


def _ints(a: np.ndarray) -> memoryview:
    """Python ints by index over an int64 array, without a copy."""
    return memoryview(np.ascontiguousarray(a, dtype=np.int64)).cast("B").cast("q")


@dataclass
class Streams:
    """Reassembled byte streams of all connections, as pieces of the capture buffer.

    The streams are virtual: stream offset ``o`` lies in piece ``i`` (the last
    with ``piece_start[i] <= o``), whose bytes are ``buf[piece_src[i]:][:piece_len[i]]``
    or zeros where ``piece_src[i] < 0`` (a hole). Nothing is copied until a
    reader asks for a :meth:`window`, so HTTP parsing touches headers and chunk
    lines and skips bodies by their length.
    """

    buf: object  # anything with the buffer protocol: bytes, numpy uint8
    conns: list[Connection]
    piece_start: np.ndarray  # stream offset where each piece starts (sorted)
    piece_src: np.ndarray  # offset of the piece's bytes in ``buf``, -1 for a hole
    piece_len: np.ndarray
    piece_ts: np.ndarray  # capture time (ns) of the packet that carried the piece
    piece_done: np.ndarray  # time the piece could be delivered in order (running max)
    gap_start: np.ndarray  # holes, [start, end) in stream offsets
    gap_end: np.ndarray
    gap_bytes: int
    seg_conn: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Segments that resent bytes already captured, with other bytes (the first copy kept)
    differing_resends: int = 0
    # Per piece, how far the other direction's stream was acknowledged by the segment
    # that carried it (a stream offset: every byte before it was received), -1 unknown
    piece_ack: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        # Per-message look-ups run in Python: bisect on a list beats a numpy call
        # (and a list of the starts beats a memoryview of them, by 0.3 us a bisect);
        # the other columns are read a few times a message, where a memoryview
        # over the array (nothing to build) costs what a list does.
        self._starts: list[int] = self.piece_start.tolist()
        self._src = _ints(self.piece_src)
        self._len = _ints(self.piece_len)
        self._mv = memoryview(self.buf).cast("B") if self._starts else memoryview(b"")

    @property
    def _acks(self) -> memoryview | None:
        """``piece_ack`` by index, None where no piece has one."""
        if "_acks_mv" not in self.__dict__:
            known = self.piece_ack.size == self.piece_start.size and bool(
                (self.piece_ack >= 0).any()
            )
            self.__dict__["_acks_mv"] = _ints(self.piece_ack) if known else None
        return self.__dict__["_acks_mv"]

    @property
    def _ts(self) -> list[int]:
        # Made on first use: the plain-stream parser takes times from the array.
        if "_ts_list" not in self.__dict__:
            self.__dict__["_ts_list"] = self.piece_ts.tolist()
        return self.__dict__["_ts_list"]

    def window(self, p: int, stop: int) -> bytes:
        """Stream bytes ``[p, stop)`` (``stop`` no further than the stream's end)."""
        if p >= stop:
            return b""
        starts, src, lens, mv = self._starts, self._src, self._len, self._mv
        i = bisect_right(starts, p) - 1
        s0 = starts[i]
        a = p - s0
        b = min(lens[i], stop - s0)
        if b >= stop - s0:  # the usual case: one piece holds it all
            return bytes(mv[src[i] + a : src[i] + b]) if src[i] >= 0 else bytes(b - a)
        parts = []
        while p < stop:
            s0 = starts[i]
            a = p - s0
            b = min(lens[i], stop - s0)
            parts.append(mv[src[i] + a : src[i] + b] if src[i] >= 0 else bytes(b - a))
            p = s0 + b
            i += 1
        return b"".join(parts)

    def piece_rest(self, p: int, stop: int) -> bytes:
        """Stream bytes from ``p`` to the end of its piece (or ``stop``): no join needed."""
        if p >= stop:
            return b""
        i = bisect_right(self._starts, p) - 1
        a = p - self._starts[i]
        b = min(self._len[i], stop - self._starts[i])
        src = self._src[i]
        return bytes(self._mv[src + a : src + b]) if src >= 0 else bytes(b - a)

    @property
    def data(self) -> bytes:
        """All streams joined (for inspection and tests; the parser uses windows)."""
        end = int(self.piece_start[-1] + self.piece_len[-1]) if self._starts else 0
        return self.window(0, end) if end else b""

    def time_at(self, offset: int) -> int:
        """Capture time of the packet that carried byte ``offset``."""
        return self._ts[bisect_right(self._starts, offset) - 1]

    def done_at(self, offset: int) -> int:
        """Earliest time byte ``offset`` and all bytes before it had arrived."""
        return int(self.piece_done[bisect_right(self._starts, offset) - 1])

    def has_gap(self, start: int, end: int) -> bool:
        """Whether any captured hole overlaps ``data[start:end]``."""
        if not self.gap_start.size or end <= start:
            return False
        i = int(np.searchsorted(self.gap_end, start, side="right"))
        return i < self.gap_start.size and int(self.gap_start[i]) < end


def _first_in_group(group: np.ndarray, values: np.ndarray, n: int, fill: int) -> np.ndarray:
    """Per group, the first value in capture order (``fill`` where none)."""
    out = np.full(n, fill, dtype=np.int64)
    if group.size:
        # The first row of each group is its smallest row number (no sort needed).
        first = np.full(n, group.size, dtype=np.int64)
        np.minimum.at(first, group, np.arange(group.size))
        seen = first < group.size
        out[seen] = values[first[seen]]
    return out


def _stream_order(g: np.ndarray, off: np.ndarray, ngroups: int) -> np.ndarray:
    """Stable order by (stream, offset): ties keep capture order.

    Segments mostly arrive in order, so a stable sort by stream alone (a radix
    sort when stream numbers fit 16 bits) usually leaves offsets sorted already;
    only when they are not is the full key sorted.
    """
    if ngroups <= 1 << 16:
        order = np.argsort(g.astype(np.uint16), kind="stable")
        gs, os = g[order], off[order]
        if bool(np.all((gs[1:] != gs[:-1]) | (os[1:] >= os[:-1]))):
            return order
    return np.argsort(g * _GROUP + off, kind="stable")


def _group_running_max(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each new ``group`` (sorted groups).

    Only groups where a value goes down need it; those are lifted onto disjoint
    ranges (group rank times the value span) so one ``maximum.accumulate`` does
    them all at once instead of a pass over the whole array per group.
    """
    out = values.copy()
    if values.size < 2:
        return out
    back = np.flatnonzero((group[1:] == group[:-1]) & (values[1:] < values[:-1]))
    if not back.size:
        return out
    sel = np.flatnonzero(np.isin(group, np.unique(group[back + 1])))
    v = values[sel]
    low = int(v.min())
    span = int(v.max()) - low + 1
    grp = group[sel]
    rank = np.cumsum(np.r_[0, grp[1:] != grp[:-1]])
    if span * (int(rank[-1]) + 1) < (1 << 62):
        lift = rank * span
        out[sel] = np.maximum.accumulate(v - low + lift) - lift + low
    else:  # a span too wide to lift without overflow: one group at a time
        edges = np.r_[0, np.flatnonzero(grp[1:] != grp[:-1]) + 1, grp.size]
        for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
            out[sel[a:b]] = np.maximum.accumulate(v[a:b])
    return out


_MIX = np.array(
    [
        0x9E3779B97F4A7C15,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD,
    ],
    dtype=np.uint64,
)


def _flow_key(seg: Segments, rows: np.ndarray) -> list[bytes]:
    """36-byte (address, port, address, port) keys of some rows, as bytes."""
    sp, dp = seg.sport[rows], seg.dport[rows]
    ports = np.stack([sp >> 8, sp & 255, dp >> 8, dp & 255], 1).astype(np.uint8)
    fwd = np.concatenate([seg.src[rows], ports[:, :2], seg.dst[rows], ports[:, 2:]], axis=1)
    return [bytes(r) for r in fwd]


def _directions(seg: Segments) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct direction, direction index of every row).

    Sorting 64-bit hashes of (src, sport, dst, dport) is much cheaper than
    sorting 36-byte keys; a hash collision (checked) falls back to the latter.
    """
    src = np.ascontiguousarray(seg.src).view(np.uint64)
    dst = np.ascontiguousarray(seg.dst).view(np.uint64)
    ports = ((seg.sport << 16) | seg.dport).astype(np.uint64)
    h = src[:, 0] * _MIX[0] ^ src[:, 1] * _MIX[1] ^ dst[:, 0] * _MIX[2]
    h ^= dst[:, 1] * _MIX[3] ^ ports * _MIX[4]
    h ^= h >> np.uint64(29)
    # return_inverse alone lets numpy use quicksort; first rows come from minimum.at
    uh, inv = np.unique(h, return_inverse=True)
    inv = inv.ravel()
    first = np.full(uh.size, len(seg), dtype=np.int64)
    np.minimum.at(first, inv, np.arange(len(seg)))
    rep = first[inv]
    # Every row must carry its representative's key. A word equal in all rows (the
    # zero upper halves of IPv4-mapped addresses) needs no gather to say so.
    words = (src[:, 0], src[:, 1], dst[:, 0], dst[:, 1], ports)
    same = all(bool((w == w[0]).all() or (w == w[rep]).all()) for w in words)
    if not same:
        keys = np.asarray(_flow_key(seg, np.arange(len(seg))), dtype=np.dtype((np.void, 36)))
        _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        inv = inv.ravel()
    return first, inv


def _realms(seg: Segments, dir_inv: np.ndarray, tuple_of: np.ndarray) -> np.ndarray | None:
    """Per segment, the interface (a rank) that keeps its connection apart from another
    with the same 4-tuple, else -1; None where nothing is kept apart.

    Two network namespaces (or hosts) with the same addresses and ports, captured on
    two interfaces of one pcapng, are two connections: a direction seen on two
    interfaces whose streams start at sequence numbers further apart than
    :data:`MAX_GAP` (its SYN's, else its first data's) is two streams, and its 4-tuple
    is split by interface. One connection seen on two interfaces (its copies dropped
    before, or each direction on its own interface) starts where it starts on both."""
    if seg.interfaces is None:
        return None
    names, rank = np.unique(seg.interfaces[seg.pkt - 1], return_inverse=True)
    rank = rank.ravel()
    if np.count_nonzero(names >= 0) < 2:
        return None
    syn = (seg.flags & SYN) != 0
    opens = np.flatnonzero(syn | (seg.wlen > 0))
    group = dir_inv[opens] * names.size + rank[opens]
    u, first = np.unique(group, return_index=True)  # first of each in capture order
    ref = (seg.seq + syn)[opens[first]].tolist()
    dirs = (u // names.size).tolist()
    split: set[int] = set()
    for i in range(1, len(dirs)):  # a direction's interfaces are neighbours in ``u``
        x = (ref[i] - ref[i - 1]) & 0xFFFFFFFF
        if dirs[i] == dirs[i - 1] and min(x, (1 << 32) - x) > MAX_GAP:
            split.add(int(tuple_of[dirs[i]]))
    if not split:
        return None
    tup = tuple_of[dir_inv]
    return np.where(np.isin(tup, list(split)), rank, -1)


def _conn_ids(seg: Segments) -> tuple[np.ndarray, np.ndarray]:
    """(connection id, direction bit) per segment."""
    n = len(seg)
    first_row, dir_inv = _directions(seg)
    # Pair each direction with its reverse (few unique directions: a Python loop is fine).
    ub = _flow_key(seg, first_row)
    canon: dict[bytes, int] = {}
    tuple_of = np.empty(len(ub), dtype=np.int64)
    rev_bit = np.empty(len(ub), dtype=np.int64)
    for i, k in enumerate(ub):
        rev = k[18:] + k[:18]
        c = min(k, rev)
        tuple_of[i] = canon.setdefault(c, len(canon))
        rev_bit[i] = 0 if k == c else 1
    tup = tuple_of[dir_inv]
    dbit = rev_bit[dir_inv]
    realm = _realms(seg, dir_inv, tuple_of)
    if realm is not None:  # one 4-tuple, other streams on other interfaces: kept apart
        _, inv = np.unique(tup * (int(realm.max()) + 2) + realm + 1, return_inverse=True)
        tup = inv.ravel()
    # A second client SYN with another ISN on the same 4-tuple opens a new connection.
    syn_only = np.flatnonzero((seg.flags & (SYN | ACK)) == SYN)
    last: dict[int, int] = {}
    cuts_t: list[int] = []
    cuts_i: list[int] = []
    syn_tup = tup[syn_only].tolist()
    syn_seq = seg.seq[syn_only].tolist()
    for i, t, s in zip(syn_only.tolist(), syn_tup, syn_seq, strict=True):
        prev = last.get(t)
        if prev is not None and prev != s:
            cuts_t.append(t)
            cuts_i.append(i)
        last[t] = s
    if cuts_t:
        ck = np.sort(np.asarray(cuts_t, dtype=np.int64) * (n + 1) + np.asarray(cuts_i))
        pk = tup * (n + 1) + np.arange(n)
        epoch = np.searchsorted(ck, pk, side="right") - np.searchsorted(ck, tup * (n + 1))
        ckey = tup * (int(epoch.max(initial=0)) + 1) + epoch
        _, inv = np.unique(ckey, return_inverse=True)
        ckey = inv.ravel()
    else:
        ckey = tup  # already dense: 0 .. tuples-1
    # Number connections by their first packet so ids read in capture order.
    first = np.full(int(ckey.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, ckey, np.arange(n))
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[ckey], dbit


def reassemble(seg: Segments) -> Streams:
    """Connections and their two reassembled streams from all TCP segments."""
    n = len(seg)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Streams(b"", [], z, z, z, z, z, z, z, 0)
    conn, dbit = _conn_ids(seg)
    nconn = int(conn.max()) + 1
    gid = conn * 2 + dbit
    ngroups = nconn * 2
    flags = seg.flags
    syn = (flags & SYN) != 0

    # Relative offsets: SYN-anchored where the SYN was seen, else lowest sequence seen.
    dseq = seg.seq + syn
    si = np.flatnonzero(syn)
    syn_ref = _first_in_group(gid[si], dseq[si], ngroups, -1)
    di = np.flatnonzero(seg.wlen > 0)
    dat_ref = _first_in_group(gid[di], dseq[di], ngroups, 0)
    has_syn = syn_ref >= 0
    ref = np.where(has_syn, syn_ref, dat_ref)
    g = gid[di]
    d = ((dseq[di] - ref[g] + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    low = np.zeros(ngroups, dtype=np.int64)
    np.minimum.at(low, g, d)
    low[has_syn] = 0
    off = d - low[g]
    keep = off >= 0  # data before a seen SYN's ISN is nonsense: drop it
    if not keep.all():
        di, g, off = di[keep], g[keep], off[keep]

    order = _stream_order(g, off, ngroups)
    di, g, off = di[order], g[order], off[order]
    wlen = seg.wlen[di]
    cap = seg.caplen[di]
    ts = seg.ts[di]
    start = g * _GROUP + off
    end = start + wlen
    first = np.r_[True, g[1:] != g[:-1]]
    cover = np.maximum.accumulate(end)
    prev = np.r_[np.int64(0), cover[:-1]]
    prev = np.where(first, start, prev)
    new_start = np.maximum(start, prev)
    kept = end > new_start
    gap = np.where(kept & (start > prev), np.minimum(start - prev, MAX_GAP), 0)
    cap_end = start + cap
    real_len = np.where(kept, np.clip(np.minimum(end, cap_end) - new_start, 0, None), 0)
    real_src = seg.poff[di] + (new_start - start)
    trunc_len = np.where(kept, np.clip(end - np.maximum(new_start, cap_end), 0, None), 0)

    # Three candidate pieces per segment: hole before it, captured bytes, cut tail.
    # Without holes or cut tails (the usual capture) the captured bytes are all.
    pseg = np.arange(di.size)  # the segment (stream order) each piece came from
    if gap.any() or trunc_len.any():
        plen = np.stack([gap, real_len, trunc_len], 1).ravel()
        psrc = np.stack([np.full_like(gap, -1), real_src, np.full_like(gap, -1)], 1).ravel()
        pts = np.repeat(ts, 3)
        pgid = np.repeat(g, 3)
        pseg = np.stack([np.full_like(gap, -1), pseg, pseg], 1).ravel()
        seg_pos = (np.cumsum(plen) - plen)[1::3]  # stream offset of each segment's new bytes
    else:
        plen, psrc, pts, pgid = real_len, real_src, ts, g
        seg_pos = np.cumsum(plen) - plen
    # Captured bytes sent again; not a keep-alive probe (one byte, any, before the next).
    resent = np.flatnonzero((start < np.minimum(prev, cap_end)) & ((wlen != 1) | (end != prev)))
    nz = plen > 0
    plen, psrc, pts, pgid, pseg = plen[nz], psrc[nz], pts[nz], pgid[nz], pseg[nz]
    pstart = np.cumsum(plen) - plen
    filler = psrc < 0
    gap_start, gap_end = pstart[filler], (pstart + plen)[filler]

    # In-order delivery time: running max of piece times inside each stream.
    pdone = _group_running_max(pgid, pts)

    # Stream spans per group.
    gs = np.zeros(ngroups, dtype=np.int64)
    ge = np.zeros(ngroups, dtype=np.int64)
    if pgid.size:
        fidx = np.flatnonzero(np.r_[True, pgid[1:] != pgid[:-1]])  # pieces are by stream
        ug = pgid[fidx]
        lidx = np.r_[fidx[1:], pgid.size] - 1
        gs[ug] = pstart[fidx]
        ge[ug] = pstart[lidx] + plen[lidx]

    piece_ack = _piece_acks(seg, di, pseg, pgid, (gid, ref, low, off), (gs, first))
    counts = np.bincount(conn, minlength=nconn)
    first_pkt = np.full(nconn, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_pkt, conn, seg.pkt)
    first_row = np.full(nconn, n, dtype=np.int64)
    np.minimum.at(first_row, conn, np.arange(n))
    # Who opened: the sender of the first SYN, else the receiver of the first SYN-ACK.
    opener = np.full(nconn, -1, dtype=np.int64)
    for kind, flip in (((SYN | ACK), 1), (SYN, 0)):
        rows = np.flatnonzero((flags & (SYN | ACK)) == kind)
        if rows.size:
            c, at = np.unique(conn[rows], return_index=True)
            opener[c] = np.abs(flip - dbit[rows[at]])
    fin_seen = np.zeros(ngroups, dtype=bool)
    fin_seen[gid[(flags & FIN) != 0]] = True
    conns = []
    keys = _flow_key(seg, first_row)
    for c in range(nconn):
        r = int(first_row[c])
        k = keys[c]
        a, b = (k[:16], (k[16] << 8) | k[17]), (k[18:34], (k[34] << 8) | k[35])
        ep = (a, b) if dbit[r] == 0 else (b, a)
        conns.append(
            Connection(
                index=c,
                ep=ep,
                opener=int(opener[c]),
                fin=(bool(fin_seen[2 * c]), bool(fin_seen[2 * c + 1])),
                span=((int(gs[2 * c]), int(ge[2 * c])), (int(gs[2 * c + 1]), int(ge[2 * c + 1]))),
                packets=int(counts[c]),
                first_pkt=int(first_pkt[c]),
            )
        )
    st = Streams(
        buf=seg.buf,
        conns=conns,
        piece_start=pstart,
        piece_src=psrc,
        piece_len=plen,
        piece_ts=pts,
        piece_done=pdone,
        gap_start=gap_start,
        gap_end=gap_end,
        gap_bytes=int(plen[filler].sum()),
        seg_conn=conn,
        piece_ack=piece_ack,
    )
    if resent.size:
        at = {"start": start, "new": new_start, "kept": kept, "prev": prev,
              "cap_end": cap_end, "src": seg.poff[di], "pos": seg_pos}  # fmt: skip
        st.differing_resends = _differing(st, resent, at)
    return st


def _piece_acks(
    seg: Segments,
    di: np.ndarray,
    pseg: np.ndarray,
    pgid: np.ndarray,
    rel: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    spans: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Per piece, the stream offset in the other direction up to which the segment that
    carried it acknowledged (TCP's ACK number: every byte before it was received), or -1
    where unknown (no ACK flag, a hole, a reader that kept no ACKs, a direction with no
    data). ``rel``: (group per segment, sequence reference and lowest offset per group,
    offset of each data segment in stream order); ``spans``: (each group's first stream
    offset, whether each data segment is its group's first)."""
    out = np.full(pgid.size, -1, dtype=np.int64)
    if seg.ack is None or not pgid.size:
        return out
    gid, ref, low, off = rel
    gs, first = spans
    ngroups = ref.size
    base = np.full(ngroups, -1, dtype=np.int64)  # offset of each group's first piece
    base[gid[di[first]]] = off[first]
    has = pseg >= 0
    rows = di[pseg[has]]
    other = gid[rows] ^ 1
    a = ((seg.ack[rows] - ref[other] + (1 << 31)) & 0xFFFFFFFF) - (1 << 31) - low[other]
    known = ((seg.flags[rows] & ACK) != 0) & (base[other] >= 0)
    out[np.flatnonzero(has)[known]] = (gs[other] + a - base[other])[known]
    return out


def _differing(st: Streams, rows: np.ndarray, at: dict[str, np.ndarray]) -> int:
    """How many of the segments ``rows`` (in stream order) resent captured bytes with
    other bytes than the copy taken first: the stream keeps the first copy, as a
    receiver that has it already does, and the disagreement is counted.

    ``at`` holds per segment (stream order, group in the high bits of offsets):
    ``start``, ``new`` (where its new bytes start), ``kept``, ``prev`` (how far the
    stream was covered before it), ``cap_end``, ``src`` (its bytes in the buffer) and
    ``pos`` (the stream offset of its new bytes)."""
    own = np.flatnonzero(at["kept"])
    if not own.size:
        return 0
    keys = at["new"][own]
    lo = own[np.maximum(np.searchsorted(keys, at["start"][rows], side="right") - 1, 0)]
    x1 = np.minimum(at["prev"][rows], at["cap_end"][rows])
    hi = own[np.maximum(np.searchsorted(keys, x1 - 1, side="right") - 1, 0)]
    pos = at["pos"][lo] + at["start"][rows] - at["new"][lo]
    end = at["pos"][hi] + x1 - at["new"][hi]
    mv = memoryview(st.buf).cast("B")
    n = 0
    for p, q, x0, x1v, src in zip(
        pos.tolist(), end.tolist(), at["start"][rows].tolist(), x1.tolist(),
        at["src"][rows].tolist(), strict=True,
    ):  # fmt: skip
        # Both ends must map into captured bytes of one run (no hole, no clipped gap).
        if q - p != x1v - x0 or st.has_gap(p, q):
            continue
        n += st.window(p, q) != mv[src : src + q - p].tobytes()
    return n
