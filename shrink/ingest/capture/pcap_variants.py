"""The pcap variants that patched tcpdumps wrote, read as classic pcap.

Some patched libpcaps of the late 1990s put more bytes after each record's 16-byte
header. Wireshark reads them under these names, and ``editcap -F NAME`` writes each:

==================  ==========  =====  ============================================
variant             magic       extra  written by
==================  ==========  =====  ============================================
``pcap-modified``   a1b2cd34    8      Kuznetzov's patch (ifindex, protocol, type)
``pcap-ss990915``   a1b2cd34    12     SuSE 6.3 (the same 8, then CPU and padding)
``pcap-ss990417``   a1b2c3d4    8      RedHat 6.1 (Kuznetzov's records, classic magic)
``pcap-nokia``      a1b2c3d4    4      Nokia IPSO
==================  ==========  =====  ============================================

The magic number alone does not tell them apart. As wireshark does, the first
records are walked under each header size, and the first size under which they
chain is taken: each record's captured length within the snapshot length and the
wire length, its microseconds under a million, and the next record where its length
says. A file with the classic magic stays classic whenever its first records chain
as classic records, whatever their fields hold: a damaged classic file is read as
before, never as a variant by accident.

A variant's records are then copied without their extra bytes behind a classic
file header, a window of the file at a time, whatever its size: into memory, or past
the size a capture is read into memory at, into a file of shrink's own that is then
mapped. Both engines read that copy. A record whose length is impossible ends the
copy: strict reading raises an error naming it and its byte offset in the file;
lenient reading keeps the records before it and says how many bytes it left.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shrink.errors import CaptureFormatError
from shrink.ingest.capture.own_files import own_mapping
from shrink.ingest.capture.pcap_walk import HEADER
from shrink.ingest.capture_magic import MODIFIED_MAGICS, PCAP_MAGICS

__all__ = ["as_classic"]

# (name, extra bytes after the classic header), in the order they are tried.
_MODIFIED = (("pcap-modified", 8), ("pcap-ss990915", 12))
_CLASSIC = (("pcap-ss990417", 8), ("pcap-nokia", 4))
_CLASSIC_USEC = {">": b"\xa1\xb2\xc3\xd4", "<": b"\xd4\xc3\xb2\xa1"}
_PROBE = 8  # records walked to tell the variant (fewer when the file ends first)
WINDOW = 1 << 24  # bytes of the file converted at once (and one record more)


def _chains(data: np.ndarray, n: int, endian: str, limit: int, extra: int, plausible: bool) -> bool:
    """Whether the first records chain under a header of ``HEADER + extra`` bytes."""
    unpack = struct.Struct(endian + "4I").unpack_from
    size = HEADER + extra
    off = 24
    for k in range(_PROBE):
        if off == n:
            return k > 0
        if off + size > n:
            return False
        _, usec, incl, orig = unpack(data, off)
        if incl > limit or off + size + incl > n:
            return False
        if plausible and (usec >= 1_000_000 or incl > orig):
            return False
        off += size + incl
    return True


def _variant(data: np.ndarray, n: int, limit: int) -> tuple[str, int, str]:
    """(name, extra bytes a record, byte order) of the pcap in ``data``."""
    magic = bytes(data[:4])
    if magic in MODIFIED_MAGICS:
        endian = MODIFIED_MAGICS[magic]
        for plausible in (True, False):
            for name, extra in _MODIFIED:
                if _chains(data, n, endian, limit, extra, plausible):
                    return name, extra, endian
        return *_MODIFIED[0], endian
    endian, tick = PCAP_MAGICS[magic]
    if tick == 1_000_000 and not _chains(data, n, endian, limit, 0, plausible=False):
        for name, extra in _CLASSIC:
            if _chains(data, n, endian, limit, extra, plausible=True):
                return name, extra, endian
    return "pcap", 0, endian


def _convert(
    data: np.ndarray, n: int, endian: str, limit: int, extra: int, write: Callable[[Any], object]
) -> tuple[int, int, str | None]:
    """Write the variant's records to ``write`` as classic records, behind a classic file
    header, a window of the file at a time: (records written, where the copy stopped,
    why it stopped before the end of the file, or None).

    The memory the conversion takes is a window's bytes and offsets, whatever the
    file's size: the whole file's offsets (8 bytes a record) and a second copy of the
    whole file made it grow with the file.
    """
    unpack = struct.Struct(endian + "I").unpack_from
    size = HEADER + extra
    snaplen = unpack(data, 16)[0]
    head = np.array(data[:24], dtype=np.uint8)
    head[:4] = np.frombuffer(_CLASSIC_USEC[endian], dtype=np.uint8)
    write(head)
    records, off, why = 0, 24, None
    while off < n and why is None:
        lo = off
        offs: list[int] = []
        while off < n and off - lo < WINDOW:
            if off + size > n:
                why = f"record header cut short ({n - off} of {size} bytes)"
                break
            incl = unpack(data, off + 8)[0]
            if incl > limit:
                why = f"record length {incl} exceeds the snapshot length {snaplen} (garbage?)"
                break
            if off + size + incl > n:
                why = f"record cut short ({n - off - size} of {incl} bytes)"
                break
            offs.append(off)
            off += size + incl
        if offs:
            keep = np.ones(off - lo, dtype=bool)
            extra_at = np.asarray(offs, dtype=np.int64)[:, None] - lo + HEADER
            keep[(extra_at + np.arange(extra)).ravel()] = False
            write(np.asarray(data[lo:off], dtype=np.uint8)[keep])
            records += len(offs)
    return records, off, why


def as_classic(
    data: np.ndarray,
    n: int,
    path: Path,
    strict: bool,
    *,
    limit: int,
    held: int,
) -> tuple[np.ndarray, int, str, str | None]:
    """(classic pcap bytes, their length, the variant's name, damage) of a pcap file.

    A classic file comes back as it is (name ``"pcap"``); a variant's records are
    copied without their extra bytes, a window at a time (:func:`_convert`): into
    memory when the file is at most ``held`` bytes, else into a file of shrink's own,
    mapped (:func:`~shrink.ingest.capture.own_files.own_mapping`). ``limit``: the
    longest record read.
    """
    name, extra, endian = _variant(data, n, limit)
    if not extra:
        return data, n, name, None
    copied: list[tuple[int, int, str | None]] = []

    def fill(write: Callable[[Any], object]) -> None:
        copied.append(_convert(data, n, endian, limit, extra, write))
        records, end, why = copied[-1]
        if why is not None and strict:  # before the copy is mapped
            raise CaptureFormatError(why, path=path, record=records + 1, offset=end)

    if n <= held:
        # The copy is never longer than the file; the pages past its end are never touched.
        buf, at = np.empty(n, dtype=np.uint8), [0]

        def put(chunk: np.ndarray) -> None:
            buf[at[0] : at[0] + chunk.size] = chunk
            at[0] += chunk.size

        fill(put)
        out = buf[: at[0]]
    else:
        out = np.frombuffer(
            own_mapping(
                path,
                lambda fh: fill(fh.write),
                what=f"a {name} capture over {held >> 20:,} MiB is converted to classic pcap "
                "in a file of its own, and no such file",
                remedy="free the space, or convert it first: editcap -F pcap IN OUT",
            ),
            dtype=np.uint8,
        )
    records, end, why = copied[-1]
    damage = None
    if why is not None:
        err = CaptureFormatError(why, path=path, record=records + 1, offset=end)
        damage = f"{err}; the {n - end:,} bytes from there on were not read"
    out.flags.writeable = False
    return out, int(out.size), name, damage
