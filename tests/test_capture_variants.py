"""The pcap variants patched tcpdumps wrote: read as the classic file they hold.

Each variant puts 4, 8 or 12 more bytes after every record's header. The real
captures are converted by wireshark's own editcap (a writer shrink did not write) and
by the test's own insertion of the bytes (no editcap needed); both must read as the
classic original does, in both engines.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest
from helpers.pcap_synth import Conn, http_response, pcap_variant, write_capture

from shrink.errors import CaptureFormatError
from shrink.ingest.capture import pcap_files, pcap_variants, read_capture, read_segments
from shrink.ingest.detect import detect_format

pytestmark = pytest.mark.compute

# wireshark's name -> (ours, extra bytes a record, magic of a little-endian file)
VARIANTS = {
    "modpcap": ("pcap-modified", 8, b"\x34\xcd\xb2\xa1"),
    "suse6_3pcap": ("pcap-ss990915", 12, b"\x34\xcd\xb2\xa1"),
    "rh6_1pcap": ("pcap-ss990417", 8, b"\xd4\xc3\xb2\xa1"),
    "nokiapcap": ("pcap-nokia", 4, b"\xd4\xc3\xb2\xa1"),
}
ENGINES = ("fast", "scapy")


def _variant(classic: bytes, wireshark_name: str, filler: int = 0, byteorder: str = "<") -> bytes:
    _, extra, magic = VARIANTS[wireshark_name]
    return pcap_variant(
        classic, magic if byteorder == "<" else magic[::-1], extra, filler, byteorder
    )


def _same(a, b) -> None:
    assert len(a) == len(b) > 0
    for col in ("t", "path", "session"):
        assert np.array_equal(np.asarray(a.table[col]), np.asarray(b.table[col])), col


@pytest.fixture(scope="module")
def classic(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    ex = [
        (b"GET /a HTTP/1.1\r\nHost: f\r\n\r\n", http_response(2000)),
        (b"GET /b HTTP/1.1\r\nHost: f\r\n\r\n", http_response(3000, chunked=True)),
    ]
    conns = [Conn(ex, cport=30000), Conn(ex, cport=30001, start=0.3)]
    d = tmp_path_factory.mktemp("variants")
    return write_capture(d / "x.pcap", conns, fmt="pcap").read_bytes()


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_variant_reads_as_its_classic_file(tmp_path, classic, name, engine):
    (tmp_path / "c.pcap").write_bytes(classic)
    want = read_capture(tmp_path / "c.pcap", engine=engine)
    # The extra bytes' values do not matter; a big-endian machine wrote big-endian files.
    for filler, byteorder in ((0, "<"), (0xFF, "<"), (0, ">")):
        p = tmp_path / f"{name}-{filler}{byteorder}.pcap"
        p.write_bytes(_variant(classic, name, filler, byteorder))
        _same(read_capture(p, engine=engine, strict=True), want)
        _, facts = read_segments(p, engine=engine)
        assert facts["format"] == VARIANTS[name][0] and facts["damage"] is None
        assert detect_format(p) == "pcap"


@pytest.mark.parametrize("engine", ENGINES)
def test_real_captures_written_by_editcap_read_as_the_originals(tmp_path, real_dir, engine):
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap (wireshark-common) is not installed")
    originals = [
        p for p in sorted(real_dir.glob("*.pcap")) if p.read_bytes()[:4] == b"\xd4\xc3\xb2\xa1"
    ]
    assert len(originals) >= 5
    for src in originals:
        want = read_capture(src, engine=engine)
        for name, (ours, _, _) in VARIANTS.items():
            out = tmp_path / f"{src.stem}.{name}"
            subprocess.run([editcap, "-F", name, str(src), str(out)], check=True)
            got = read_capture(out, engine=engine)
            assert len(got) == len(want), (src.name, name)
            if len(want):
                _same(got, want)
            assert read_segments(out, engine=engine)[1]["format"] == ours


@pytest.mark.parametrize("held", [1 << 30, 100], ids=["in memory", "past MAX_HELD"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_variant_keeps_what_came_before_and_names_the_record(
    tmp_path, classic, engine, held, monkeypatch
):
    monkeypatch.setattr(pcap_files, "MAX_HELD", held)
    data = bytearray(_variant(classic, "modpcap"))
    offs, off = [], 24
    while off < len(data):  # the variant's own record offsets, 24-byte headers
        offs.append(off)
        off += 24 + struct.unpack_from("<I", data, off + 8)[0]
    bad = offs[3]
    struct.pack_into("<I", data, bad + 8, 0x7FFFFFF0)  # an impossible length
    p = tmp_path / "bad.pcap"
    p.write_bytes(bytes(data))
    with pytest.raises(CaptureFormatError) as err:
        read_capture(p, engine=engine, strict=True)
    assert err.value.record == 4 and err.value.offset == bad  # the file's own offset
    assert str(err.value).startswith(str(p))
    _, facts = read_segments(p, engine=engine)
    assert facts["format"] == "pcap-modified"
    assert "record 4" in facts["damage"] and f"byte offset {bad}" in facts["damage"]
    assert f"the {len(data) - bad:,} bytes from there on were not read" in facts["damage"]


def test_a_classic_file_damaged_at_its_first_record_is_not_taken_for_a_variant(tmp_path, classic):
    data = bytearray(classic)
    struct.pack_into("<I", data, 24 + 8, 0x7FFFFFF0)
    p = tmp_path / "bad.pcap"
    p.write_bytes(bytes(data))
    _, facts = read_segments(p)
    assert facts["format"] == "pcap" and "record 1" in facts["damage"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_variant_past_the_size_held_in_memory_is_converted_in_a_file_of_its_own(
    tmp_path, classic, engine, monkeypatch
):
    (tmp_path / "c.pcap").write_bytes(classic)
    want = read_capture(tmp_path / "c.pcap", engine=engine)
    # MAX_HELD made small: a variant past it was refused ("editcap -F pcap IN OUT").
    monkeypatch.setattr(pcap_files, "MAX_HELD", 100)
    for name in sorted(VARIANTS):
        p = tmp_path / f"{name}.pcap"
        p.write_bytes(_variant(classic, name))
        _same(read_capture(p, engine=engine, strict=True), want)
        assert read_segments(p, engine=engine)[1]["format"] == VARIANTS[name][0]
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(
        ["c.pcap", *(f"{name}.pcap" for name in VARIANTS)]
    )  # the converted copies had no name and are gone


def test_the_conversion_holds_a_window_of_the_file_not_the_file(classic, monkeypatch):
    """Records are converted a window at a time: every write but the file header is at
    most a window and one record, and together they are the classic file."""
    monkeypatch.setattr(pcap_variants, "WINDOW", 300)
    data = np.frombuffer(_variant(classic, "suse6_3pcap"), np.uint8)
    writes: list[bytes] = []
    records, end, why = pcap_variants._convert(
        data, data.size, "<", 262144, 12, lambda b: writes.append(bytes(b))
    )
    assert (records, end, why) == (len(_offsets(classic)), data.size, None)
    assert b"".join(writes) == classic
    longest = max(struct.unpack_from("<I", classic, off + 8)[0] for off in _offsets(classic))
    assert 3 < len(writes) < records + 1  # windows of several records
    assert max(len(w) for w in writes[1:]) <= 300 + 16 + longest


def _offsets(classic: bytes) -> list[int]:
    offs, off = [], 24
    while off < len(classic):
        offs.append(off)
        off += 16 + struct.unpack_from("<I", classic, off + 8)[0]
    return offs


def test_a_classic_file_is_not_copied(tmp_path, classic):
    same = np.frombuffer(classic, np.uint8)
    got = pcap_variants.as_classic(same, same.size, tmp_path / "c.pcap", False, limit=262144,
                                   held=0)  # fmt: skip
    assert got[0] is same and got[2] == "pcap"
