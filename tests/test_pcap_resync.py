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
