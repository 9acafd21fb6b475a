"""A pcapng file that ends inside a block (a capture copied or written cut short):
both engines keep the packets before it and name the record and byte offset where
the damage starts, or, strict, refuse the file there.

scapy's pcapng reader warns on a block cut short and ends as at a clean end of file,
so the scapy engine said nothing of the damage the fast engine reported.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.captures import mixed
from helpers.pcap_synth import write_capture

from shrink.errors import CaptureFormatError
from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute


@pytest.mark.parametrize("left", [86, 2])  # of the last block: into its body; its header
def test_a_pcapng_cut_inside_a_block_is_damage_to_both_engines(tmp_path: Path, left: int) -> None:
    whole = write_capture(tmp_path / "a.pcapng", mixed(), fmt="pcapng")
    data = whole.read_bytes()
    p = tmp_path / "cut.pcapng"
    last = int.from_bytes(data[-4:], "little")  # the last block's length, as it ends
    p.write_bytes(data[: len(data) - last + left])
    fast = read_capture(p, engine="fast")
    slow = read_capture(p, engine="scapy")
    assert fast.same_rows(slow)
    where = fast.meta["damage"].split(":")[0]  # the file, the record and its byte offset
    assert ", record " in where and ", byte offset " in where
    assert slow.meta.get("damage", "").split(":")[0] == where
    for engine in ("fast", "scapy"):
        with pytest.raises(CaptureFormatError, match="byte offset"):
            read_capture(p, engine=engine, strict=True)


@pytest.mark.parametrize("left", [4, 11, 12, 27])
def test_a_pcapng_cut_inside_its_section_header_is_damage_to_both_engines(
    tmp_path: Path, left: int
) -> None:
    """Cut inside the first block (the section header): the fast engine reads no packet
    and names the damage at byte 0; scapy's reader refused the file, read leniently."""
    data = write_capture(tmp_path / "a.pcapng", mixed(), fmt="pcapng").read_bytes()
    p = tmp_path / "cut.pcapng"
    p.write_bytes(data[:left])
    fast = read_capture(p, engine="fast")
    slow = read_capture(p, engine="scapy")
    assert len(fast) == len(slow) == 0
    where = fast.meta["damage"].split(":")[0]
    assert where.endswith(", record 1, byte offset 0")
    assert slow.meta.get("damage", "").split(":")[0] == where
    for engine in ("fast", "scapy"):
        with pytest.raises(CaptureFormatError, match="byte offset 0"):
            read_capture(p, engine=engine, strict=True)
