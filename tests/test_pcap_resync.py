"""The lenient pcap reader reads on past a corrupt record mid-file (it resynchronises
and says what it skipped); --strict names the record and its byte offset."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from shrink.errors import CaptureFormatError
from shrink.ingest.capture.reader import read_capture

pytestmark = pytest.mark.compute


def _offsets(data: bytes) -> list[int]:
    out, off = [], 24
    while off + 16 <= len(data):
        out.append(off)
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    return out


@pytest.mark.parametrize("name", ["ppa1e_hauntedbrowser.pcap", "zeek_http_bro.org.pcap"])
@pytest.mark.parametrize("garbage", [0xFFFFFFFF, 3])  # past any snapshot length; too short
def test_a_corrupt_record_mid_file_is_skipped_not_the_rest(tmp_path: Path, real_dir, name, garbage):
    data = bytearray((real_dir / name).read_bytes())
    assert data[:4] == b"\xd4\xc3\xb2\xa1"  # little-endian classic pcap, as _offsets reads
    whole = read_capture(real_dir / name)
    offs = _offsets(bytes(data))
    k = len(offs) // 2
    struct.pack_into("<I", data, offs[k] + 8, garbage)
    bad = tmp_path / name
    bad.write_bytes(bytes(data))
    got = read_capture(bad)
    # At most the damaged record and the one the bad length ran into are lost.
    assert got.meta["packets"] >= whole.meta["packets"] - 2
    assert len(got) >= len(whole) - 2
    assert "more records after the damage" in got.meta["damage"]
    with pytest.raises(CaptureFormatError) as err:
        read_capture(bad, strict=True)
    assert err.value.record is not None and err.value.offset is not None
    assert offs[k] <= err.value.offset <= offs[k + 1]  # where the chain broke


def _blocks(data: bytes) -> list[int]:
    out, off = [], 0
    while off + 12 <= len(data):
        out.append(off)
        off += struct.unpack_from("<I", data, off + 4)[0]
    return out


@pytest.mark.parametrize("garbage", [0x7FFFFFF0, 13, 8])  # past the file; unaligned; too short
def test_a_corrupt_pcapng_block_mid_file_is_skipped_not_the_rest(tmp_path: Path, real_dir, garbage):
    """The pcapng reader stopped at a damaged block mid-file and dropped the rest: 16 of
    ppa_http_espn.pcapng's 61 requests, with a warning; it reads on now, as the classic
    pcap reader does."""
    name = "ppa_http_espn.pcapng"
    data = bytearray((real_dir / name).read_bytes())
    assert data[8:12] == b"\x4d\x3c\x2b\x1a"  # little-endian, as _blocks reads
    whole = read_capture(real_dir / name)
    offs = _blocks(bytes(data))
    k = len(offs) // 2
    struct.pack_into("<I", data, offs[k] + 4, garbage)
    bad = tmp_path / name
    bad.write_bytes(bytes(data))
    got = read_capture(bad)
    assert got.meta["packets"] >= whole.meta["packets"] - 2
    assert len(got) >= len(whole) - 1
    assert f"skipped {offs[k + 1] - offs[k]} bytes at byte offset {offs[k]:,}" in got.meta["damage"]
    assert "more packets after the damage" in got.meta["damage"]
    with pytest.raises(CaptureFormatError) as err:
        read_capture(bad, strict=True)
    assert err.value.offset == offs[k]


def test_a_pcapng_damaged_to_its_end_says_nothing_was_read_after(tmp_path: Path, real_dir):
    data = bytearray((real_dir / "ppa_http_espn.pcapng").read_bytes())
    offs = _blocks(bytes(data))
    k = len(offs) // 2
    data[offs[k] :] = b"\xee" * (len(data) - offs[k])
    bad = tmp_path / "cut.pcapng"
    bad.write_bytes(bytes(data))
    got = read_capture(bad)
    assert got.meta["damage"].endswith("; no packet could be read after it")
