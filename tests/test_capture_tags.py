"""VLAN tags of every kind the fast engine takes (802.1Q 0x8100, 802.1ad 0x88A8 and
the older QinQ 0x9100, up to two) read the same with the scapy engine, on Ethernet
and on Linux cooked captures (SLL, SLL2).

scapy dissects 0x9100 as no tag at all, so its engine skipped every such packet as
not IP while the fast engine read them: the two engines, meant to give the same
rows, disagreed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from helpers.captures import EXPECTED, mixed, rows_by_path
from helpers.pcap_synth import write_capture

from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute

# linktype: (offset of the ethertype, offset where a tag goes)
_AT = {1: (12, 14), 113: (14, 16), 276: (0, 20)}


def _tagged(src: Path, dst: Path, linktype: int, outer: tuple[int, ...]) -> None:
    """Every frame of the classic pcap ``src`` with tags of ethertypes ``outer``
    (outermost first), written to ``dst``."""
    data = src.read_bytes()
    et, at = _AT[linktype]
    out = bytearray(data[:24])
    i = 24
    while i < len(data):
        sec, usec, cap, _ = struct.unpack_from("<IIII", data, i)
        raw = data[i + 16 : i + 16 + cap]
        i += 16 + cap
        kinds = [*outer[1:], int.from_bytes(raw[et : et + 2], "big")]
        tags = b"".join(b"\x00\x05" + k.to_bytes(2, "big") for k in kinds)
        frame = raw[:et] + outer[0].to_bytes(2, "big") + raw[et + 2 : at] + tags + raw[at:]
        out += struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame
    dst.write_bytes(bytes(out))


@pytest.mark.parametrize("linktype", [1, 113, 276])
@pytest.mark.parametrize("outer", [(0x9100,), (0x9100, 0x8100), (0x88A8, 0x8100), (0x8100,)])
def test_tagged_frames_read_alike_by_both_engines(
    tmp_path: Path, linktype: int, outer: tuple[int, ...]
) -> None:
    src = write_capture(tmp_path / "a.pcap", mixed(), linktype=linktype)
    _tagged(src, tmp_path / "t.pcap", linktype, outer)
    clean = read_capture(src)
    for engine in ("fast", "scapy"):
        tr = read_capture(tmp_path / "t.pcap", engine=engine)
        assert rows_by_path(tr) == EXPECTED, engine
        assert tr.same_rows(clean), engine
        assert tr.meta["skipped"] == 0, (engine, tr.meta["skipped_kinds"])


@pytest.mark.parametrize("linktype", [1, 113, 276])
@pytest.mark.parametrize("outer", [(0x8100, 0x8100, 0x8100), (0x9100, 0x9100, 0x8100)])
def test_a_third_tag_is_read_alike_by_both_engines(
    tmp_path: Path, linktype: int, outer: tuple[int, ...]
) -> None:
    """The fast engine takes two tags and reads no IP behind a third; scapy dissects on
    through any number of 802.1Q tags, so its engine read every such packet the fast
    engine skipped."""
    src = write_capture(tmp_path / "a.pcap", mixed(), linktype=linktype)
    _tagged(src, tmp_path / "t.pcap", linktype, outer)
    fast, slow = (read_capture(tmp_path / "t.pcap", engine=e) for e in ("fast", "scapy"))
    assert slow.same_rows(fast)
    assert slow.meta["skipped_kinds"] == fast.meta["skipped_kinds"] == {"non-ip": 105}
