"""IP fragments (IPv4, and the IPv6 Fragment header) are reassembled by both engines.

HTTP carried in fragmented IP packets must read as the same Trace as the
unfragmented capture; a datagram missing a fragment is counted as skipped
``ip-fragment`` packets, never crashed on.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path

import pytest
from helpers.captures import EXPECTED, mixed, rows_by_path, tshark_counts
from helpers.pcap_synth import Conn, write_capture

from shrink.ingest.capture import read_capture
from shrink.ingest.capture.ip_fragments import Defragmenter, Fragment, defragment
from shrink.ingest.capture.pcap_files import read_records

pytestmark = pytest.mark.compute


def _fragmented(size: int, reverse: bool = False) -> list[Conn]:
    return [dataclasses.replace(c, fragment=size, fragment_reverse=reverse) for c in mixed()]


def _records(path: Path) -> tuple[bytes, list[tuple[int, int]]]:
    """(file bytes, (start, end) of each record with its header) of a classic pcap."""
    data = path.read_bytes()
    recs = read_records(path, strict=True)
    return data, [
        (int(o) - 16, int(o + c)) for o, c in zip(recs.data_off, recs.caplen, strict=True)
    ]


@pytest.mark.parametrize(
    ("size", "reverse", "linktype", "fmt"),
    [
        (600, False, 1, "pcap"),
        (256, True, 1, "pcapng"),
        (1000, False, 113, "pcap"),
        (96, True, 101, "pcap"),
    ],
)
def test_fragmented_http_reads_as_the_unfragmented_trace(
    tmp_path: Path, size: int, reverse: bool, linktype: int, fmt: str
) -> None:
    clean = read_capture(write_capture(tmp_path / f"a.{fmt}", mixed(), linktype=linktype, fmt=fmt))
    p = write_capture(tmp_path / f"f.{fmt}", _fragmented(size, reverse), linktype=linktype, fmt=fmt)
    fast = read_capture(p, engine="fast")
    slow = read_capture(p, engine="scapy")
    assert fast.meta["packets"] > clean.meta["packets"]  # fragments were written
    for tr in (fast, slow):
        assert tr.same_rows(clean)
        assert rows_by_path(tr) == EXPECTED
        assert tr.meta["skipped"] == 0 and tr.meta["skipped_lines"] == []
        for k in ("requests", "responses", "tcp_segments", "missing_bytes"):
            assert tr.meta[k] == clean.meta[k], k
    if shutil.which("tshark") and linktype == 1:
        assert tshark_counts(p) == (11, 10)  # tshark reassembles IP fragments too


def test_fragments_made_by_scapy(tmp_path: Path) -> None:
    """Fragments cut by scapy's own ``fragment()`` (IPv4), not by our writer."""
    from scapy.layers.inet import IP, fragment
    from scapy.utils import rdpcap, wrpcap

    p = write_capture(tmp_path / "a.pcap", mixed())
    clean = read_capture(p)
    out = []
    for pkt in rdpcap(str(p)):
        if IP in pkt and len(pkt[IP]) > 700:
            for f in fragment(pkt[IP], fragsize=400):
                g = pkt.copy()
                g[IP] = f  # the same Ethernet header over each fragment
                g.time = pkt.time
                out.append(g)
        else:
            out.append(pkt)
    q = tmp_path / "s.pcap"
    wrpcap(str(q), out)
    assert len(out) > clean.meta["packets"]
    for engine in ("fast", "scapy"):
        tr = read_capture(q, engine=engine)
        assert tr.same_rows(clean), engine
        assert tr.meta["skipped"] == 0


def test_a_missing_fragment_is_counted_not_crashed_on(tmp_path: Path) -> None:
    p = write_capture(tmp_path / "f.pcap", _fragmented(500))
    data, recs = _records(p)
    # Records with more-fragments set: two per response segment (1468 bytes of TCP
    # in 496-byte fragments). Drop the middle fragment of the second segment of
    # the first response, so its stream has a hole (a lost first segment would not).
    frag = [i for i, (a, b) in enumerate(recs) if b - a - 16 >= 54 and data[a + 16 + 20] & 0x20]
    first = frag[2]
    drop = first + 1
    q = tmp_path / "g.pcap"
    q.write_bytes(data[:24] + b"".join(data[a:b] for i, (a, b) in enumerate(recs) if i != drop))
    left = read_capture(q, engine="fast")
    slow = read_capture(q, engine="scapy")
    assert left.same_rows(slow) and left.meta == {
        **slow.meta,
        "reader": left.meta["reader"],
        "link_types": left.meta["link_types"],
    }
    kinds = left.meta["skipped_kinds"]
    assert kinds.get("ip-fragment", 0) >= 1  # the fragments that came are counted
    assert left.meta["skipped"] == sum(kinds.values())
    assert first + 1 in left.meta["skipped_lines"]  # by packet number
    assert left.meta["missing_bytes"] > 0  # its bytes are a hole in the stream
    # A duplicated fragment changes nothing.
    d = tmp_path / "d.pcap"
    a, b = recs[first]
    d.write_bytes(data[: recs[first + 1][0]] + data[a:b] + data[recs[first + 1][0] :])
    clean = read_capture(p)
    for engine in ("fast", "scapy"):
        assert read_capture(d, engine=engine).same_rows(clean)


def _f(
    pkt: int, off: int, more: bool, data: bytes, ts: int = 0, key=(4, b"a", b"b", 1, 6)
) -> Fragment:
    return Fragment(key, pkt, ts, off, more, len(data), data)


def test_defragmenter_rules() -> None:
    d = Defragmenter()
    assert d.add(_f(1, 8, False, b"BBBBBBBB")) is None  # the last first: length known, a hole
    dg = d.add(_f(2, 0, True, b"AAAAAAAAaaaa"))  # overlaps: the lower offset wins
    assert dg is not None and dg.data == b"AAAAAAAAaaaaBBBB" and dg.pkt == 2 and dg.pkts == [1, 2]
    # A datagram left incomplete past the timeout is dropped; the identification is reused.
    assert d.add(_f(3, 0, True, b"x" * 8, ts=0)) is None
    assert d.add(_f(4, 8, False, b"y" * 8, ts=61 * 10**9)) is None
    assert d.finish() == [3, 4]
    # A fragment cut by the snapshot length: covered, but the captured bytes stop there.
    cut = Fragment((4, b"a", b"b", 2, 6), 5, 0, 0, True, 16, b"z" * 10)
    dg = Defragmenter().add(cut) or Defragmenter().add(cut)
    assert dg is None
    d = Defragmenter()
    d.add(cut)
    dg = d.add(_f(6, 16, False, b"w" * 8, key=(4, b"a", b"b", 2, 6)))
    assert dg is not None and dg.size == 24 and dg.data == b"z" * 10
    # A UDP datagram is counted under udp, one per fragment.
    udp = (4, b"a", b"b", 3, 17)
    res = defragment([_f(7, 0, True, b"u" * 8, key=udp), _f(8, 8, False, b"v", key=udp)])
    assert res.segments == [] and res.skipped == {"udp": 2} and res.skipped_pkts == [7, 8]
    # A TCP datagram: the segment's fields come from the reassembled header.
    tcp = (
        struct.pack(">HHIIBBHHH", 1234, 80, 99, 0, 5 << 4, 0x18, 0, 0, 0)
        + b"GET / HTTP/1.1\r\n\r\n"
    )
    key = (4, bytes(16), bytes(16), 4, 6)
    res = defragment([_f(9, 16, False, tcp[16:], key=key), _f(10, 0, True, tcp[:16], key=key)])
    (seg,) = res.segments
    assert (
        seg[0] == 10
        and seg[4:8] == (1234, 80, 99, 0x18)
        and seg[8] == tcp[20:]
        and seg[9] == len(tcp) - 20
    )
