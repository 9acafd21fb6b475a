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


def _shb(bom: bytes = b"\x4d\x3c\x2b\x1a") -> bytes:
    return struct.pack("<II", 0x0A0D0D0A, 28) + bom + struct.pack("<HHqI", 1, 0, -1, 28)


_IDB = struct.pack("<IIHHII", 1, 20, 1, 0, 65535, 20)
_CUSTOM = struct.pack("<III", 0xBAD, 12, 12)


@pytest.mark.parametrize(
    ("damage", "most"),
    [
        # section headers with a bad byte-order magic: the resync took them, the reader
        # did not, and the resync ran again 4 bytes on (10,000 of them: 3 s for 280 KB)
        (b"\xff" * 4 + _shb(b"XXXX") * 300, 1),
        # a bad word after every four good blocks: one vectorised look per damage
        ((b"\xff" * 4 + _CUSTOM * 4) * 300, 0),
    ],
)
def test_a_crafted_pcapng_needs_no_look_per_damage(tmp_path: Path, monkeypatch, damage, most):
    from shrink.ingest.capture import pcap_files, pcapng_resync

    looks = {"resync": 0, "vectorised": 0}
    resync, sane = pcapng_resync.pcapng_resync, pcapng_resync._sane

    def counted_resync(*args):
        looks["resync"] += 1
        return resync(*args)

    def counted_sane(*args):
        looks["vectorised"] += 1
        return sane(*args)

    monkeypatch.setattr(pcap_files, "pcapng_resync", counted_resync)
    monkeypatch.setattr(pcapng_resync, "_sane", counted_sane)
    path = tmp_path / "crafted.pcapng"
    path.write_bytes(_shb() + _IDB + damage)
    recs = pcap_files.read_records(path, strict=False)
    assert recs.damage is not None and "byte offset 48" in recs.damage
    assert looks["vectorised"] <= most * (1 + pcapng_resync._DEPTH)


def test_the_near_words_are_tried_as_the_vectorised_look_tries_them(monkeypatch):
    """The one-by-one try of the words nearest the damage finds what the vectorised look
    finds, on random words with block types and lengths sprinkled in."""
    import numpy as np

    from shrink.ingest.capture import pcapng_resync as rs

    rng = np.random.default_rng(7)
    for _ in range(40):
        words = rng.integers(0, 2**32, 600, dtype=np.uint64).astype(np.uint32)
        at = rng.integers(0, 590, 120)
        words[at] = rng.choice([1, 3, 6, 0xBAD, 0x0A0D0D0A], at.size)
        words[at + 1] = rng.choice([12, 16, 20, 28, 32, 36], at.size)
        words[at + 2] = rng.choice([0x1A2B3C4D, 7], at.size)
        for a in at:
            end = a + int(words[a + 1]) // 4 - 1
            if end < words.size and rng.random() < 0.8:
                words[end] = words[a + 1]
        data = np.frombuffer(words.astype("<u4").tobytes(), dtype=np.uint8)
        n = data.size
        for start in range(0, 400, 4):
            near = rs.pcapng_resync(data, n, "<", start)
            monkeypatch.setattr(rs, "_NEAR", 0)
            assert rs.pcapng_resync(data, n, "<", start) == near
            monkeypatch.undo()
