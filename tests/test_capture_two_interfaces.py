"""One connection captured on two interfaces of a pcapng (a capture on Linux's ``any``:
a bridge and its port, both ends of a veth; or two captures merged by mergecap): each
segment seen twice is read once, and the copies are counted and said.

Before, the second copies went into the connection's stream as TCP resends, said
nowhere: nothing told the capture held its packets twice.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from helpers.captures import EXPECTED, mixed, req, rows_by_path
from helpers.pcap_synth import Conn, http_response, write_capture
from typer.testing import CliRunner

from shrink.cli import app
from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute


def _block(kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _two_interfaces(
    src: Path, dst: Path, copies: list[tuple[int, int]], snap: tuple[int, int] = (65535, 65535)
) -> Path:
    """The classic pcap ``src`` as a pcapng of two Ethernet interfaces, each packet
    written once per ``(interface, delay in µs)`` of ``copies``, in time order, cut to
    each interface's snapshot length ``snap``."""
    data = src.read_bytes()
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += b"".join(_block(1, struct.pack("<HHI", 1, 0, s)) for s in snap)
    i = 24
    while i < len(data):
        sec, usec, cap, wire = struct.unpack_from("<IIII", data, i)
        raw = data[i + 16 : i + 16 + cap]
        i += 16 + cap
        for ifid, delay in copies:
            t = sec * 1_000_000 + usec + delay
            part = raw[: snap[ifid]]
            head = struct.pack("<5I", ifid, t >> 32, t & 0xFFFFFFFF, len(part), wire)
            out += _block(6, head + part)
    dst.write_bytes(out)
    return dst


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_segment_seen_on_two_interfaces_is_read_once_and_counted(
    tmp_path: Path, engine: str
) -> None:
    src = write_capture(tmp_path / "a.pcap", mixed())
    both = _two_interfaces(src, tmp_path / "any.pcapng", [(0, 0), (1, 30)])
    clean = read_capture(src)
    tr = read_capture(both, engine=engine)
    assert rows_by_path(tr) == EXPECTED and tr.same_rows(clean)
    assert tr.meta["seen_twice"] == 105 and tr.meta["tcp_segments"] == 210, tr.meta
    assert tr.meta["differing_resends"] == 0


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_copies_on_one_interface_or_far_apart_are_resends_not_seen_twice(
    tmp_path: Path, engine: str
) -> None:
    """A resend on the same interface, or a copy 0.3 s later, stays a resend."""
    src = write_capture(tmp_path / "a.pcap", mixed())
    for copies in ([(0, 0), (0, 30)], [(0, 0), (1, 300_000)]):
        tr = read_capture(_two_interfaces(src, tmp_path / "c.pcapng", copies), engine=engine)
        assert rows_by_path(tr) == EXPECTED
        assert "seen_twice" not in tr.meta, (copies, tr.meta)


def test_ingest_and_trace_info_say_how_many_were_seen_twice(tmp_path: Path) -> None:
    src = write_capture(tmp_path / "a.pcap", mixed())
    both = _two_interfaces(src, tmp_path / "any.pcapng", [(0, 0), (1, 30)])
    out = tmp_path / "o.parquet"
    r = CliRunner().invoke(app, ["ingest", str(both), "-o", str(out)], terminal_width=250)
    assert r.exit_code == 0, r.output
    assert "note: 105 TCP segments captured again on another interface" in r.stdout, r.stdout
    r = CliRunner().invoke(app, ["trace", "info", str(out)], terminal_width=250)
    assert r.exit_code == 0 and "seen_twice" in r.stdout and "105" in r.stdout, r.stdout
    r = CliRunner().invoke(app, ["ingest", str(both), "-o", str(out), "--json"])
    assert '"seen_twice": 105' in r.stdout, r.stdout


@pytest.mark.parametrize("engine", ["fast", "scapy"])
@pytest.mark.parametrize("cut_first", [True, False])
def test_a_copy_cut_shorter_by_one_interfaces_snapshot_length_is_a_copy(
    tmp_path: Path, engine: str, cut_first: bool
) -> None:
    """Interface 1 captures 80 bytes of each frame: its copy of a segment with more is
    the start of interface 0's. Before, it was a resend (and, captured first, its cut
    tail a hole in the stream that the whole copy after it did not fill)."""
    src = write_capture(tmp_path / "a.pcap", mixed())
    copies = [(1, 0), (0, 30)] if cut_first else [(0, 0), (1, 30)]
    both = _two_interfaces(src, tmp_path / "cut.pcapng", copies, snap=(65535, 80))
    clean = read_capture(src)
    tr = read_capture(both, engine=engine)
    assert rows_by_path(tr) == EXPECTED and tr.same_rows(clean)
    assert tr.meta["seen_twice"] == 105, tr.meta
    assert (tr.meta["missing_bytes"], tr.meta["differing_resends"]) == (0, 0), tr.meta


def _on_interfaces(srcs: list[Path], dst: Path) -> Path:
    """The classic pcaps ``srcs`` as one pcapng, capture ``i``'s packets on interface
    ``i``, in time order (two network namespaces captured at once)."""
    recs = []
    for ifid, src in enumerate(srcs):
        data = src.read_bytes()
        i = 24
        while i < len(data):
            sec, usec, cap, wire = struct.unpack_from("<IIII", data, i)
            recs.append((sec * 1_000_000 + usec, ifid, cap, wire, data[i + 16 : i + 16 + cap]))
            i += 16 + cap
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += _block(1, struct.pack("<HHI", 1, 0, 65535)) * len(srcs)
    for t, ifid, cap, wire, raw in sorted(recs, key=lambda r: (r[0], r[1])):
        out += _block(6, struct.pack("<5I", ifid, t >> 32, t & 0xFFFFFFFF, cap, wire) + raw)
    dst.write_bytes(out)
    return dst


@pytest.mark.parametrize("engine", ["fast", "scapy"])
@pytest.mark.parametrize("syn", [True, False])
def test_one_four_tuple_on_two_interfaces_with_other_streams_is_two_connections(
    tmp_path: Path, engine: str, syn: bool
) -> None:
    """Two network namespaces with the same addresses and ports, captured at once on two
    interfaces: two connections (other initial sequence numbers), each with its own
    requests and answers. Before, one connection: its streams were the two namespaces'
    bytes side by side, read as resends and holes."""
    ns = []
    for k, (name, isn) in enumerate((("a", 0), ("b", 50_000_000))):
        ex = [(req(f"/{name}{i}"), http_response(100 * (i + 1) + k)) for i in range(3)]
        conn = Conn(ex, cport=40001, isn=isn, start=0.001 * k, handshake=syn)
        ns.append(write_capture(tmp_path / f"{name}.pcap", [conn]))
    both = _on_interfaces(ns, tmp_path / "ns.pcapng")
    tr = read_capture(both, engine=engine)
    assert rows_by_path(tr) == {
        "/a0": (200, 100), "/a1": (200, 200), "/a2": (200, 300),
        "/b0": (200, 101), "/b1": (200, 201), "/b2": (200, 301),
    }, tr.meta  # fmt: skip
    assert tr.meta["connections"] == 2, tr.meta
    assert (tr.meta["unanswered"], tr.meta["orphan_responses"]) == (0, 0), tr.meta
    assert (tr.meta["missing_bytes"], tr.meta["differing_resends"]) == (0, 0), tr.meta
    assert "seen_twice" not in tr.meta


def _copy_changed(src: Path, dst: Path, change) -> Path:
    """``src`` as a pcapng of two interfaces: each frame on interface 0 as it is, then
    30 µs later on interface 1 as ``change(interface, frame)`` makes it on each."""
    data, i = src.read_bytes(), 24
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += b"".join(_block(1, struct.pack("<HHI", 1, 0, 65535)) for _ in range(2))
    while i < len(data):
        sec, usec, cap, _ = struct.unpack_from("<IIII", data, i)
        raw = data[i + 16 : i + 16 + cap]
        i += 16 + cap
        for ifid in (0, 1):
            t, part = sec * 1_000_000 + usec + 30 * ifid, change(ifid, raw)
            head = struct.pack("<5I", ifid, t >> 32, t & 0xFFFFFFFF, len(part), len(part))
            out += _block(6, head + part)
    dst.write_bytes(out)
    return dst


def _at(offset: int, value: bytes):
    """A change of interface 1's frame: ``value`` at ``offset`` (of Ethernet, IPv4
    without options, TCP; a frame of another layout left as it is)."""

    def change(ifid: int, raw: bytes) -> bytes:
        if ifid == 0 or raw[12:15] != b"\x08\x00\x45" or raw[23] != 6:
            return raw
        return raw[:offset] + value + raw[offset + 2 :]

    return change


def _timestamps(second: int):
    """Both frames with a TCP timestamp option: TSval 1 on interface 0, ``second`` on 1."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    def change(ifid: int, raw: bytes) -> bytes:
        p = Ether(raw)
        if raw[12:14] != b"\x08\x00" or TCP not in p:
            return raw
        p[TCP].options = [("NOP", None), ("NOP", None), ("Timestamp", (second if ifid else 1, 0))]
        del p[IP].len, p[IP].chksum, p[TCP].dataofs, p[TCP].chksum
        return bytes(p)

    return change


@pytest.mark.parametrize("engine", ["fast", "scapy"])
@pytest.mark.parametrize(
    "what,change,twice",
    [
        ("ack", _at(44, b"\x99\x99"), 9),
        ("window", _at(48, b"\x00\x07"), 9),
        ("ip id", _at(18, b"\x12\x34"), 9),
        ("tsval", _timestamps(2), 9),
        ("same options", _timestamps(1), 105),
    ],
)
def test_a_resend_on_another_interface_is_no_copy(tmp_path, engine, what, change, twice):
    """A segment on a second interface within 0.1 s with another ACK number, window,
    IP ID or TCP timestamp is a resend (multipath, a route that changed), not the same
    packet seen twice: it was dropped as a copy (``seen_twice 105``) while only the
    addresses, ports, sequence number, flags, lengths and payload were compared. (The 9
    frames of another layout, VLAN or IPv6, are changed in neither: copies still.)"""
    src = write_capture(tmp_path / "a.pcap", mixed())
    tr = read_capture(_copy_changed(src, tmp_path / "c.pcapng", change), engine=engine)
    assert rows_by_path(tr) == EXPECTED, what
    assert tr.meta.get("seen_twice", 0) == twice, (what, tr.meta)


def test_both_engines_read_the_same_window_ip_id_and_options(tmp_path: Path) -> None:
    """What the copy rule compares, alike in both engines: every frame of ``mixed()``
    (VLAN, IPv6, fragments among them), each with a timestamp option, on two interfaces."""
    from shrink.ingest.capture.reader import read_segments
    from shrink.ingest.capture.tcp_segments import option_bytes

    src = write_capture(tmp_path / "a.pcap", mixed())
    c = _copy_changed(src, tmp_path / "c.pcapng", _timestamps(7))
    (fast, _), (slow, _) = (read_segments(c, engine=e) for e in ("fast", "scapy"))
    assert fast.hdr.tolist() == slow.hdr.tolist() and fast.ack.tolist() == slow.ack.tolist()
    assert [option_bytes(fast, i) for i in range(len(fast))] == [
        option_bytes(slow, i) for i in range(len(slow))
    ]
    assert {len(option_bytes(fast, i)) for i in range(len(fast))} == {0, 12}
