"""Capture file containers: gzip, classic pcap and pcapng, read into flat record arrays.

The fast path never builds a Python object per packet. The file is read into
memory (past :data:`MAX_HELD`, copied to a file of shrink's own and mapped from it;
decompressed if it is gzip), the classic-pcap
record chain is followed for
all blocks of the file at once (:mod:`shrink.ingest.capture.pcap_walk`; pcapng blocks
in a loop), and every record's header and first frame bytes are then read in
one numpy gather. Packet bytes stay where they are; later stages index into
the same buffer.

A damaged file (truncated record, impossible record length, bad block) stops
the walk at the first bad record: strict readers raise
:class:`~shrink.errors.CaptureFormatError` with the record number and byte
offset, lenient readers keep every record before it and say where it stopped.
A pcapng packet block whole but naming an interface its section never described
is no damage to the file: lenient readers skip that packet and count it
(``undeclared-interface``), strict ones refuse it at its byte offset.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from shrink.errors import CaptureFormatError
from shrink.files import os_why
from shrink.ingest._io import foreign
from shrink.ingest.capture.own_files import own_mapping
from shrink.ingest.capture.pcap_variants import as_classic
from shrink.ingest.capture.pcap_walk import (
    FRAME,
    HEADER,
    gather,
    header_dtype,
    header_why,
    resync,
    walk_joined,
    walk_plain,
)
from shrink.ingest.capture.pcapng_resync import PcapngPackets, pcapng_resync
from shrink.ingest.capture_magic import (
    MODIFIED_MAGICS,
    PCAP_MAGICS,
    PCAPNG_MAGIC,
    header_at,
    joined,
)

__all__ = [
    "MAX_HELD",
    "MAX_NS",
    "NO_INTERFACE",
    "PCAPNG_MAGIC",
    "PCAP_MAGICS",
    "RawRecords",
    "capture_format",
    "load_buffer",
    "load_bytes",
    "read_records",
]

GZIP_MAGIC = b"\x1f\x8b"
# The largest record tshark accepts; a longer one is garbage, not a packet.
MAX_RECORD = 262_144
MAX_NS = (1 << 63) - 1  # times are int64 nanoseconds
# Link type of a pcapng packet block naming an interface its section never described:
# no link type is negative, so the decoder skips it by this alone.
NO_INTERFACE = -1
# A gzip capture is inflated into memory; a larger one is read far cheaper gunzipped
# (mapped from disk), so past this it is refused, not held.
MAX_INFLATED = 1 << 30
# A plain capture up to this size is read into memory; past it, copied into a file of
# shrink's own (unlinked: no one else can cut it) and that copy mapped, so the memory
# stays the page cache's. The capture itself is never mapped: a mapping shows the file
# as it is now, and cut while it was read (a capture rotated, a copy redone) the bytes
# past its new end fault and the kernel kills the reader (SIGBUS) with no word of which
# file. Read or copied, a cut shows as a short read, an error naming the file. The cost:
# the memory, as a gzip capture's, or a copy on disk (bench/RESULTS.md, "capture").
MAX_HELD = MAX_INFLATED
_INFLATE_CHUNK = 1 << 24
_COPY_CHUNK = 1 << 26


@dataclass
class RawRecords:
    """Packet records of a capture as parallel arrays over one byte buffer.

    ``data_off[i]`` is where packet ``i``'s captured bytes start in ``buf``,
    ``caplen[i]`` how many were captured and ``wirelen[i]`` how long it was
    on the wire; ``ts_ns`` is the capture time in integer nanoseconds (so the
    two engines agree to the bit). ``damage`` describes where a lenient read
    stopped, or is None.
    """

    buf: np.ndarray  # uint8, read-only: the file's bytes (read, or mapped) or inflated gzip
    data_off: np.ndarray
    caplen: np.ndarray
    wirelen: np.ndarray
    ts_ns: np.ndarray
    linktype: np.ndarray
    fmt: str
    damage: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # Per record, (n, k) uint8 rows holding from byte ``frame_at`` on the first
    # FRAME.itemsize bytes of its data (past the record: whatever follows, zeros
    # past the file), when the reader gathered them with the record headers.
    frames: np.ndarray | None = None
    frame_at: int = 0

    def __len__(self) -> int:
        return int(self.data_off.size)


def load_bytes(path: Path, *, strict: bool) -> tuple[bytes, str | None]:
    """The file's bytes, gunzipped when it is gzip; a truncated gzip keeps what inflates."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CaptureFormatError("no such file", path=path) from None
    except OSError as exc:
        raise CaptureFormatError(f"cannot read ({os_why(exc, path)})", path=path) from exc
    if not raw.startswith(GZIP_MAGIC):
        return raw, None
    out, damage = _inflate(raw, path)
    if damage is None:
        return out, None
    msg = f"gzip stream is damaged ({damage}); {len(out)} bytes inflated"
    if strict or not out:
        raise CaptureFormatError(msg, path=path, offset=len(raw))
    return out, msg


def _inflate(raw: bytes, path: Path) -> tuple[bytes, str | None]:
    """(inflated bytes, what stopped the inflating early or None) of gzip ``raw``,
    member after member, in chunks, never past :data:`MAX_INFLATED` bytes.

    A gzip capture is held in memory whole, and gzip packs zeros about 1000:1: 4 MB
    of it inflated to 4 GB and ended in a MemoryError (or the OOM killer) before any
    record was read.
    """
    out = bytearray()
    rest = raw
    while rest[:2] == GZIP_MAGIC:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        tail = rest
        try:
            while tail and not d.eof:
                out += d.decompress(tail, _INFLATE_CHUNK)
                tail = d.unconsumed_tail
                if len(out) >= 24 and len(out) <= _INFLATE_CHUNK:
                    # What it holds is told by its first bytes: 300 MB of text gunzipped
                    # took 675 MB of memory before its magic said it was no capture.
                    capture_format(bytes(out[:24]), path)
                if len(out) > MAX_INFLATED:
                    raise CaptureFormatError(
                        f"gzip data inflates past {MAX_INFLATED >> 20:,} MiB: gunzip it first "
                        "(a plain capture is mapped from disk, not held in memory)",
                        path=path,
                    )
        except zlib.error as exc:
            return bytes(out), str(exc)
        if not d.eof:
            return bytes(out), "compressed data ends before the end of its stream"
        rest = d.unused_data
    if rest.strip(b"\0"):
        return bytes(out), "trailing bytes that are not gzip data"
    return bytes(out), None


def _copy(fh: BinaryIO, dst: BinaryIO, path: Path, size: int) -> None:
    """The file's first ``size`` bytes into ``dst``, in the kernel where it can (a reflink
    on a file system that shares blocks); a source that ends sooner was cut (see
    :func:`_read_whole`)."""
    src, out, got = fh.fileno(), dst.fileno(), 0
    try:
        while got < size:
            n = os.copy_file_range(src, out, min(_COPY_CHUNK, size - got), got, got)
            if not n:
                break
            got += n
    except OSError as exc:  # no copy_file_range between these files: through a buffer
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        buf = bytearray(_COPY_CHUNK)
        fh.seek(got)
        dst.seek(got)
        while got < size:
            n = fh.readinto(memoryview(buf)[: min(_COPY_CHUNK, size - got)])
            if not n:
                break
            dst.write(memoryview(buf)[:n])
            got += n
        dst.flush()
    if got < size:
        raise CaptureFormatError(_cut_message(got, size), path=path)


def _cut_message(got: int, size: int) -> str:
    return (
        f"the file was cut while it was read ({got:,} of its {size:,} bytes): read it "
        "when nothing writes it (copy it first)"
    )


def _private_copy(fh: BinaryIO, path: Path, size: int) -> mmap.mmap:
    """A mapping of a copy of the capture that only this process holds
    (:func:`~shrink.ingest.capture.own_files.own_mapping`)."""
    return own_mapping(
        path,
        lambda dst: _copy(fh, dst, path, size),
        what=f"a capture over {MAX_HELD >> 20:,} MiB is read from a copy of its own, and no "
        f"copy of its {size:,} bytes",
        remedy="free the space, or split the capture (editcap -c)",
    )


def load_buffer(path: Path, *, strict: bool) -> tuple[np.ndarray, int, str | None]:
    """(buffer, data length, damage): the capture's bytes as a read-only uint8 array.

    A plain file is read into memory (:func:`_read_whole`), one past
    :data:`MAX_HELD` copied and its copy memory-mapped (:func:`_private_copy`); a gzip
    file is inflated into memory. Readers index only inside ``[0, n)``.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(24)
            size = os.fstat(fh.fileno()).st_size
            if head[:2] != GZIP_MAGIC and size > 0:
                # Checked before the file is read or mapped (the map reads it all in): 2 GB
                # of zeros was 2 GB of memory before the magic said it was no capture.
                capture_format(head, path, size)
                if size <= MAX_HELD:
                    return _read_whole(fh, path, size), size, None
                mm = _private_copy(fh, path, size)
                return np.frombuffer(mm, dtype=np.uint8), size, None
    except FileNotFoundError:
        raise CaptureFormatError("no such file", path=path) from None
    except OSError as exc:
        raise CaptureFormatError(f"cannot read ({os_why(exc, path)})", path=path) from exc
    data, damage = load_bytes(path, strict=strict)
    return np.frombuffer(data, dtype=np.uint8), len(data), damage


def _read_whole(fh: BinaryIO, path: Path, size: int) -> np.ndarray:
    """The file's ``size`` bytes (its size when opened), read into a read-only array.

    A file that ends sooner was cut while it was read (rotated, copied again): an error
    naming it, not a capture read up to wherever the cut fell.
    """
    buf = np.empty(size, dtype=np.uint8)
    view = memoryview(buf)
    fh.seek(0)
    got = 0
    while got < size and (n := fh.readinto(view[got:])):
        got += n
    if got < size:
        raise CaptureFormatError(_cut_message(got, size), path=path)
    buf.flags.writeable = False
    return buf


def capture_format(data: bytes | np.ndarray, path: Path, n: int | None = None) -> str:
    """``"pcap"`` or ``"pcapng"`` from the magic number, else a clear error."""
    n = len(data) if n is None else n
    head = bytes(data[: min(4, n)])
    if head in PCAP_MAGICS or head in MODIFIED_MAGICS:
        if n < 24:
            raise CaptureFormatError(
                f"pcap file header is cut short ({n} of 24 bytes)", path=path, offset=0
            )
        return "pcap"
    if head == PCAPNG_MAGIC:
        return "pcapng"
    # read with --format pcap, a bzip2/xz/zstd capture was only 'bad magic 425a6839'
    if (what := foreign(bytes(data[: min(64, n)]), path)) is not None:
        raise CaptureFormatError(what, path=path, offset=0)
    raise CaptureFormatError(
        f"not a pcap or pcapng capture (bad magic {head.hex() or 'empty file'})",
        path=path,
        offset=0,
    )


def _damaged(
    msg: str, path: Path, record: int, offset: int, strict: bool
) -> tuple[str, CaptureFormatError]:
    err = CaptureFormatError(msg, path=path, record=record, offset=offset)
    if strict:
        raise err
    return str(err), err


def _walk_pcap(
    data: np.ndarray, n: int, path: Path, strict: bool
) -> tuple[np.ndarray, np.ndarray, str | None, list[int]]:
    """(record offsets, captured lengths, damage, byte offsets of the file headers of
    captures joined after the first and read on) of a classic pcap file.

    The records are found by :func:`~shrink.ingest.capture.pcap_walk.walk_joined`, which
    stops at the first bad record, reported from that record's header.
    """
    endian, tick = PCAP_MAGICS[bytes(data[:4])]
    snaplen = struct.unpack_from(endian + "I", data, 16)[0]
    limit = max(snaplen, MAX_RECORD)
    good, stop, joins = walk_joined(data, n, endian, limit, tick)
    tail = [stop]
    if stop + 12 <= n:  # a bad record: where its length says it ends, as the message needs
        tail.append(stop + 16 + struct.unpack_from(endian + "I", data, stop + 8)[0])
    every = np.concatenate([good, np.asarray(tail, dtype=np.int64)])
    o, off = every[:-1], int(every[-1])
    incl = np.diff(every) - 16
    before = np.searchsorted(o, joins).astype(np.int64) - 1  # a joined header's record ends
    np.add.at(incl, before[before >= 0], -24)  # at it (none: -1 cut the file's last short)
    bad = np.flatnonzero((incl > limit) | (o + 16 + incl > n))
    damage = None
    if bad.size or (off != n and (not o.size or o[-1] + 16 + incl[-1] <= n)):
        k = int(bad[0]) if bad.size else o.size
        at = int(o[k]) if k < o.size else (int(o[-1] + 16 + incl[-1]) if o.size else 24)
        if (j := header_at(data, o, incl, k)) is not None:
            k, at = j, int(o[j])
        if why := header_why(data, n, at, endian):  # a joined capture's header (or cut short)
            msg = why
        elif k < o.size and incl[k] > limit:
            msg = f"record length {int(incl[k])} exceeds the snapshot length {snaplen} (garbage?)"
        elif k < o.size:
            msg = f"record cut short ({n - at - 16} of {int(incl[k])} bytes)"
        else:
            msg = f"record header cut short ({n - at} of 16 bytes)"
        o, incl = o[:k], incl[:k]
        damage, _ = _damaged(msg, path, k + 1, at, strict)
        o, incl, damage = _read_on(data, n, endian, limit, tick, o, incl, at, damage)
    return o, incl, damage, joins


def _read_on(
    data: np.ndarray,
    n: int,
    endian: str,
    limit: int,
    tick: int,
    o: np.ndarray,
    incl: np.ndarray,
    at: int,
    damage: str,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Past a damaged record at ``at`` (lenient reading), the records after it: the walk
    resumes where records chain again (:func:`resync`). ``damage`` then also says how
    many bytes were skipped, where, and how many records were read after them."""
    parts, sizes = [o], [incl]
    skips: list[str] = []
    after = 0
    while at < n:
        nxt = resync(data, n, endian, limit, tick, at + 1)
        skips.append(f"{nxt - at:,} bytes at byte offset {at:,}")
        if nxt >= n:
            break
        offs, stop = walk_plain(data, n, endian, limit, start=nxt)
        more = np.asarray(offs, dtype=np.int64)
        parts.append(more)
        sizes.append(np.diff(np.r_[more, stop]) - 16)
        after += more.size
        at = stop
    damage += _read_on_words(skips, after, "records")
    return np.concatenate(parts), np.concatenate(sizes), damage


def _read_on_words(skips: list[str], after: int, what: str) -> str:
    """What a lenient read past damage skipped and read after it, for the message."""
    if not after:
        return f"; no {what[:-1]} could be read after it"
    more = f" and {len(skips) - 5:,} more places" if len(skips) > 5 else ""
    listed = "; ".join(skips[:5]) + more
    return f"; skipped {listed}, and read {after:,} more {what} after the damage"


def _read_pcap(data: np.ndarray, n: int, path: Path, strict: bool) -> RawRecords:
    endian, tick = PCAP_MAGICS[bytes(data[:4])]
    # The link type is the low 16 bits: above them a writer may say its frames end in
    # an FCS (the P flag, bit 26, and the FCS length, bits 28-31), as tshark reads them.
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0xFFFF
    o, caplen, damage, joins = _walk_pcap(data, n, path, strict)
    # One gather reads every record's header and its frame's first bytes (for the
    # decoder): the file is far larger than the cache, so each pass costs a trip to
    # memory per record.
    items = gather(data, n, o, HEADER + FRAME.itemsize)
    head = items[:, :HEADER].copy().view(header_dtype(endian))[:, 0]
    sec, sub, wirelen = (head[k].astype(np.int64) for k in ("sec", "sub", "orig"))
    ts = sec * 1_000_000_000 + sub * (1_000_000_000 // tick)
    return RawRecords(
        buf=data,
        data_off=o + 16,
        caplen=caplen,
        wirelen=wirelen,
        ts_ns=ts,
        linktype=np.full(o.size, linktype, dtype=np.int64),
        fmt="pcap",
        damage=damage,
        frames=items,
        frame_at=HEADER,
        notes={"joined_at": joins} if joins else {},
    )


def _if_options(opts: bytes, endian: str) -> tuple[int, int]:
    """(ticks per second, offset in ns) from an interface's if_tsresol and if_tsoffset
    options: microseconds and 0 when absent; the first of each counts, as in scapy."""
    tick, offset = 0, None
    p = 0
    while p + 4 <= len(opts):
        code, ln = struct.unpack_from(endian + "HH", opts, p)
        if code == 0 or p + 4 + ln > len(opts):
            break
        if code == 9 and ln == 1 and not tick:
            v = opts[p + 4]
            tick = (2 if v & 0x80 else 10) ** (v & 0x7F)
        elif code == 14 and ln == 8 and offset is None:  # seconds added to every time
            offset = struct.unpack_from(endian + "q", opts, p + 4)[0] * 1_000_000_000
        p += 4 + ln + (-ln % 4)
    return tick or 1_000_000, offset or 0


def _block_header(data: np.ndarray, n: int, off: int, endian: str) -> tuple[str, int, int] | str:
    """(byte order, type, length) of the block at ``off``, or what is wrong with it.

    A section header sets the byte order of every block up to the next one.
    """
    if off + 12 > n:
        return f"block header cut short ({n - off} bytes left)"
    if bytes(data[off : off + 4]) in PCAP_MAGICS or bytes(data[off : off + 4]) in MODIFIED_MAGICS:
        return joined("a classic pcap's", "it is not pcapng")
    if bytes(data[off : off + 4]) == PCAPNG_MAGIC:
        bom = bytes(data[off + 8 : off + 12])
        if bom not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
            return "section header has a bad byte-order magic"
        endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
    btype, blen = struct.unpack_from(endian + "II", data, off)
    if blen < 12 or blen % 4 or off + blen > n:
        return f"block of type {btype:#x} has a bad length {blen} ({n - off} bytes left)"
    if struct.unpack_from(endian + "I", data, off + blen - 4)[0] != blen:
        return f"block of type {btype:#x} has mismatched lengths"
    if blen < {1: 20, 6: 32, 2: 32, 3: 16}.get(btype, 12):
        return f"block of type {btype:#x} is too short ({blen} bytes)"
    return endian, btype, blen


def _packet_block(
    data: np.ndarray,
    off: int,
    btype: int,
    blen: int,
    endian: str,
    ifaces: list[tuple[int, int, int, int]],
    out: PcapngPackets,
    strict: bool,
) -> str | None:
    """Add the packet of an enhanced (6), obsolete (2) or simple (3) packet block to
    ``out``; what is wrong with the block when the walk stops at it.

    A block naming an interface its section never described is whole, so a lenient
    walk goes on past it: it becomes a record of link type :data:`NO_INTERFACE`, which
    the decoder skips and counts, and every later packet keeps its number. A strict
    walk stops at it.
    """
    body = off + 8
    if btype == 3:  # simple packet: no timestamp, first interface
        wire = struct.unpack_from(endian + "I", data, body)[0]
        if not ifaces:
            if strict:
                return "simple packet block before any interface description block"
            out.add(body + 4, 0, wire, out.last_ts(), NO_INTERFACE)
            return None
        lt, snap, _, _ = ifaces[0]
        out.add(body + 4, min(wire, snap or wire, blen - 16), wire, out.last_ts(), lt, 0)
        return None
    ifid, hi, lo, cap, wire = struct.unpack_from(endian + "5I", data, body)
    ifid = ifid if btype == 6 else struct.unpack_from(endian + "H", data, body)[0]
    if 20 + cap > blen - 12:
        return f"packet block's captured length {cap} overruns its block ({blen} bytes)"
    if ifid >= len(ifaces):
        if strict:
            return (
                f"packet block names interface {ifid}, but its section describes "
                f"{len(ifaces)} (no interface description block for it)"
            )
        out.add(body + 20, cap, wire, out.last_ts(), NO_INTERFACE)
        return None
    lt, _, tick, offset = ifaces[ifid]
    ts = ((hi << 32) | lo) * 1_000_000_000 // tick + offset
    if not 0 <= ts <= MAX_NS:
        return "packet time before 1970 or past the year 2262 (bad if_tsresol or if_tsoffset?)"
    out.add(body + 20, cap, wire, ts, lt, ifid)
    return None


def _read_pcapng(data: np.ndarray, n: int, path: Path, strict: bool) -> RawRecords:
    """Walk pcapng blocks: section headers, interfaces, packets (enhanced, simple, obsolete)."""
    off = 0
    endian = "<"
    ifaces: list[tuple[int, int, int, int]] = []  # linktype, snaplen, ticks/s, offset ns
    out = PcapngPackets()
    damage = None
    skipped_blocks, sections = 0, []
    skips: list[str] = []  # lenient: the damaged stretches read past
    before = 0  # packets read before the first damage
    while off < n:
        head = _block_header(data, n, off, endian)
        problem = head if isinstance(head, str) else None
        if not isinstance(head, str):
            endian, btype, blen = head
            if btype == 0x0A0D0D0A:  # a section: in one file, or a pcapng joined after one
                ifaces = []
                sections += [off] if off else []
                out.section = len(sections)
            elif btype == 1:  # interface description
                lt, snap = struct.unpack_from(endian + "HxxI", data, off + 8)
                opts = bytes(data[off + 16 : off + blen - 4])
                ifaces.append((lt, snap, *_if_options(opts, endian)))
            elif btype in (6, 2, 3):  # 2: older writers' packet block (16-bit interface id)
                problem = _packet_block(data, off, btype, blen, endian, ifaces, out, strict)
            else:
                skipped_blocks += 1
        if problem is None:
            off += blen
            continue
        if damage is None:
            damage, _ = _damaged(problem, path, len(out.offs) + 1, off, strict)
            before = len(out.offs)
        # Read on where blocks chain again: a damaged block mid-file dropped the rest
        # of the file (the classic pcap reader already read on past a bad record).
        # A packet block whose lengths hold is whole: the next block follows it.
        nxt = pcapng_resync(data, n, endian, off + 4) if isinstance(head, str) else off + blen
        skips.append(f"{nxt - off:,} bytes at byte offset {off:,}")
        off = nxt
    if skips:
        damage = f"{damage}{_read_on_words(skips, len(out.offs) - before, 'packets')}"
    return RawRecords(
        buf=data,
        data_off=np.asarray(out.offs, dtype=np.int64),
        caplen=np.asarray(out.caps, dtype=np.int64),
        wirelen=np.asarray(out.wires, dtype=np.int64),
        ts_ns=np.asarray(out.tss, dtype=np.int64),
        linktype=np.asarray(out.lts, dtype=np.int64),
        fmt="pcapng",
        damage=damage,
        notes={
            "pcapng_other_blocks": skipped_blocks,
            "joined_at": sections,
            "interfaces": np.asarray(out.ifs, dtype=np.int64),
        },
    )


def read_records(path: Path, *, strict: bool) -> RawRecords:
    """Every packet record of a pcap/pcapng (optionally gzip) file, without decoding."""
    data, n, gz_damage = load_buffer(path, strict=strict)
    fmt = capture_format(data, path, n)
    if fmt == "pcapng":
        recs = _read_pcapng(data, n, path, strict)
    else:
        data, n, fmt, damage = classic_pcap(data, n, path, strict)
        recs = _read_pcap(data, n, path, strict)
        recs.fmt, recs.damage = fmt, recs.damage or damage
    if gz_damage and not recs.damage:
        recs.damage = f"{path}: {gz_damage}"
    return recs


def classic_pcap(
    data: np.ndarray, n: int, path: Path, strict: bool
) -> tuple[np.ndarray, int, str, str | None]:
    """The pcap in ``data`` as classic pcap, whichever variant an old tcpdump wrote
    (:mod:`~shrink.ingest.capture.pcap_variants`): (bytes, length, variant, damage)."""
    magic = bytes(data[:4])
    endian = MODIFIED_MAGICS.get(magic) or PCAP_MAGICS[magic][0]
    snaplen = struct.unpack_from(endian + "I", data, 16)[0]
    return as_classic(data, n, path, strict, limit=max(snaplen, MAX_RECORD), held=MAX_HELD)
