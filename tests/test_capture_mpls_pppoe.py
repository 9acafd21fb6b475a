"""MPLS label stacks (0x8847, 0x8848; one to three entries) and PPPoE session frames
(0x8864; PPP protocol 0x0021 IPv4, 0x0057 IPv6) are read by both engines alike, on
Ethernet and on Linux cooked captures (SLL, SLL2), as tshark reads them.

Before, each such frame was skipped as ``non-ip``: "no HTTP request read: skipped 105
packets (not HTTP or unreadable: non-ip 105)". Frames of kinds still not read (a
fourth label, a pseudowire's Ethernet behind the stack, a PPPoE discovery frame, PPP
carrying something else) are skipped as ``non-ip``, counted and said, by both engines.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from helpers.captures import EXPECTED, mixed, rows_by_path, tshark_counts
from helpers.pcap_synth import write_capture

from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute

# linktype: (offset of the ethertype, offset where the payload starts)
_AT = {1: (12, 14), 113: (14, 16), 276: (0, 20)}


def _mpls(labels: int, ethertype: int, payload: bytes, first: bytes = b"") -> tuple[int, bytes]:
    entries = b"".join(
        struct.pack(">I", (100 + i) << 12 | (i == labels - 1) << 8 | 64) for i in range(labels)
    )
    return ethertype, entries + first + payload


def _pppoe(code: int, proto: int | None, inner: int, payload: bytes) -> tuple[int, bytes]:
    ppp = proto if proto is not None else (0x0021 if inner == 0x0800 else 0x0057)
    head = struct.pack(">BBHHH", 0x11, code, 0x1234, len(payload) + 2, ppp)
    return 0x8864, head + payload


def _wrapped(src: Path, dst: Path, linktype: int, wrap) -> None:
    """Every frame of the classic pcap ``src`` with its IP packet put behind ``wrap``'s
    header (``wrap(inner ethertype, IP packet)`` gives the new ethertype and payload)."""
    data = src.read_bytes()
    et, at = _AT[linktype]
    out = bytearray(data[:24])
    i = 24
    while i < len(data):
        sec, usec, cap, _ = struct.unpack_from("<IIII", data, i)
        raw = data[i + 16 : i + 16 + cap]
        i += 16 + cap
        kind, payload = wrap(int.from_bytes(raw[et : et + 2], "big"), raw[at:])
        frame = raw[:et] + kind.to_bytes(2, "big") + raw[et + 2 : at] + payload
        out += struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame
    dst.write_bytes(bytes(out))


READ = {
    "mpls-1": lambda et, p: _mpls(1, 0x8847, p),
    "mpls-3": lambda et, p: _mpls(3, 0x8847, p),
    "mpls-multicast-2": lambda et, p: _mpls(2, 0x8848, p),
    "pppoe": lambda et, p: _pppoe(0, None, et, p),
}
NOT_READ = {
    "mpls-4": lambda et, p: _mpls(4, 0x8847, p),
    "mpls-pseudowire": lambda et, p: _mpls(1, 0x8847, p, b"\x02" * 12 + b"\x08\x00"),
    "pppoe-discovery": lambda et, p: _pppoe(0x07, None, et, p),
    "ppp-other-protocol": lambda et, p: _pppoe(0, 0x0281, et, p),
}


@pytest.mark.parametrize("linktype", [1, 113, 276])
@pytest.mark.parametrize("kind", list(READ))
def test_mpls_and_pppoe_frames_are_read_alike_by_both_engines(
    tmp_path: Path, linktype: int, kind: str
) -> None:
    src = write_capture(tmp_path / "a.pcap", mixed(), linktype=linktype)
    _wrapped(src, tmp_path / "w.pcap", linktype, READ[kind])
    clean = read_capture(src)
    for engine in ("fast", "scapy"):
        tr = read_capture(tmp_path / "w.pcap", engine=engine)
        assert rows_by_path(tr) == EXPECTED, (engine, tr.meta["skipped_kinds"])
        assert tr.same_rows(clean), engine
        assert tr.meta["skipped"] == 0, (engine, tr.meta["skipped_kinds"])


@pytest.mark.parametrize("linktype", [1, 113, 276])
@pytest.mark.parametrize("kind", list(NOT_READ))
def test_frames_of_kinds_still_not_read_are_counted_alike(
    tmp_path: Path, linktype: int, kind: str
) -> None:
    src = write_capture(tmp_path / "a.pcap", mixed(), linktype=linktype)
    _wrapped(src, tmp_path / "w.pcap", linktype, NOT_READ[kind])
    fast, slow = (read_capture(tmp_path / "w.pcap", engine=e) for e in ("fast", "scapy"))
    assert slow.same_rows(fast) and len(fast.table) == 0
    assert slow.meta["skipped_kinds"] == fast.meta["skipped_kinds"] == {"non-ip": 105}


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
@pytest.mark.parametrize("kind", list(READ))
def test_tshark_reads_the_same_requests(tmp_path: Path, kind: str) -> None:
    src = write_capture(tmp_path / "a.pcap", mixed(), linktype=1)
    _wrapped(src, tmp_path / "w.pcap", 1, READ[kind])
    assert tshark_counts(tmp_path / "w.pcap") == tshark_counts(src)
