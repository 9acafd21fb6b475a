"""The capture reader on generated captures: link types, framing, TCP trouble, sessions.

Generated captures know their own truth (what was sent), so these tests check
more than counts: a capture with reordered, retransmitted and overlapping
segments must give exactly the rows of the clean capture. Where tshark is
installed it is the oracle for the counts, told about the odd port with
``-d tcp.port==12345,http`` (it dissects HTTP only on ports it knows, while we
recognise HTTP from content) and with out-of-order reassembly switched on.
"""

from __future__ import annotations

import math
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.captures import EXPECTED, mixed, req, rows_by_path, tshark_counts
from helpers.pcap_synth import Conn, http_response, write_capture

from shrink.errors import ParameterError
from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute


@pytest.mark.parametrize(
    ("linktype", "fmt", "vlan"),
    [
        (1, "pcap", None),
        (1, "pcapng", 7),
        (113, "pcap", None),
        (113, "pcap", 7),
        (276, "pcapng", None),
        (276, "pcapng", 7),  # every packet was skipped as non-IP: the tag was read too early
        (101, "pcap", None),
        (0, "pcap", None),
        (0, "pcapng", None),
    ],
)
def test_link_types_formats_and_framing(tmp_path: Path, linktype: int, fmt: str, vlan) -> None:
    p = write_capture(tmp_path / f"x.{fmt}", mixed(), linktype=linktype, fmt=fmt, vlan=vlan)
    fast = read_capture(p, engine="fast")
    slow = read_capture(p, engine="scapy")
    assert fast.same_rows(slow)
    assert rows_by_path(fast) == EXPECTED
    assert (fast.meta["requests"], fast.meta["responses"]) == (11, 10)
    assert fast.meta["unanswered"] == 1 and fast.meta["skipped"] == 0
    if shutil.which("tshark") and linktype in (1, 113):
        assert tshark_counts(p) == (11, 10)


def test_gzip_compressed_capture(tmp_path: Path) -> None:
    import gzip

    p = write_capture(tmp_path / "x.pcap", mixed())
    gz = tmp_path / "x.pcap.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    assert read_capture(gz).same_rows(read_capture(p))


def test_odd_port_ipv6_is_detected_from_content(tmp_path: Path) -> None:
    p = write_capture(tmp_path / "x.pcap", mixed())
    tr = read_capture(p)
    (row,) = [r for r in tr.table.to_pylist() if r["path"] == "/odd"]
    assert row["server"] == "[fd00::2]:12345" and row["client"] == "fd00::1"


@pytest.mark.parametrize(
    "trouble",
    [
        {"reorder": True},
        {"retransmit": True},
        {"overlap": True},
        {"reorder": True, "retransmit": True, "overlap": True},
    ],
)
def test_reordered_retransmitted_overlapping_segments_change_nothing(
    tmp_path: Path, trouble: dict[str, bool]
) -> None:
    ex = [(req(f"/k{i}"), http_response(1000 + 3217 * i, chunked=i % 2 == 1)) for i in range(6)]
    clean = read_capture(write_capture(tmp_path / "a.pcap", [Conn(ex)]))
    bent = read_capture(write_capture(tmp_path / "b.pcap", [Conn(ex, **trouble)]))
    assert rows_by_path(bent) == rows_by_path(clean)
    assert bent.meta["missing_bytes"] == 0
    assert np.allclose(bent.column("rt"), clean.column("rt"), atol=0.01)


def test_flow_caught_mid_stream(tmp_path: Path) -> None:
    # No handshake, and the capture starts 5 bytes into the first request.
    ex = [(req("/first"), http_response(2000)), (req("/second"), http_response(3000))]
    tr = read_capture(write_capture(tmp_path / "m.pcap", [Conn(ex, handshake=False, skip_first=5)]))
    assert rows_by_path(tr) == {"/second": (200, 3000)}
    assert tr.meta["orphan_responses"] == 1  # the answer to the request we missed


def test_snaplen_truncation_is_counted_and_lengths_survive(tmp_path: Path) -> None:
    ex = [(req(f"/s{i}"), http_response(5000 + i)) for i in range(3)]
    tr = read_capture(write_capture(tmp_path / "s.pcap", [Conn(ex)], snaplen=200))
    assert rows_by_path(tr) == {f"/s{i}": (200, 5000 + i) for i in range(3)}
    assert tr.meta["truncated"] > 0 and tr.meta["missing_bytes"] > 0
    # Those are the bytes of wire payload the snapshot length cut off: each response
    # segment (MSS 1448) keeps 200 - 54 header bytes = 146 payload bytes.
    missing = 0
    for i in range(3):
        n = len(http_response(5000 + i))
        segs = [min(1448, n - k) for k in range(0, n, 1448)]
        missing += sum(max(0, x - 146) for x in segs)
    assert tr.meta["missing_bytes"] == missing


def test_port_reuse_starts_a_new_connection(tmp_path: Path) -> None:
    a = Conn([(req("/one"), http_response(100))], cport=41000)
    b = Conn([(req("/two"), http_response(200))], cport=41000, start=5.0, isn=777_777)
    p = write_capture(tmp_path / "r.pcap", [a, b])
    tr = read_capture(p, sessions="connection")
    assert rows_by_path(tr) == {"/one": (200, 100), "/two": (200, 200)}
    assert tr.meta["connections"] == 2 and tr.n_sessions == 2


def sessions_capture(tmp_path: Path) -> Path:
    page = [
        (req("/index.html", headers="Cookie: sid=A\r\n"), http_response(5000)),
        (req("/img/1.gif", headers="Cookie: sid=A\r\n"), http_response(800)),
    ]
    later = [(req("/next.php", headers="Cookie: sid=A\r\n"), http_response(3000))]
    other = [
        (req("/login"), http_response(10, extra="Set-Cookie: sid=B; Path=/\r\n")),
        (req("/home", headers="Cookie: sid=B\r\n"), http_response(20)),
    ]
    conns = [
        Conn(page, client="10.0.0.1", cport=50000, start=0.0, gap=0.05),
        Conn(later, client="10.0.0.1", cport=50001, start=10.0),
        Conn(page[:1], client="10.0.0.1", cport=50002, start=4000.0),
        Conn(other, client="10.0.0.3", cport=50003, start=1.0, gap=2.0),
    ]
    return write_capture(tmp_path / "sess.pcap", conns)


def test_sessions_by_client_with_idle_gap_and_bursts(tmp_path: Path) -> None:
    tr = read_capture(sessions_capture(tmp_path), idle_gap=1800.0, burst_gap=0.5)
    rows = tr.table.to_pylist()
    assert tr.n_sessions == 3  # 10.0.0.1 twice (idle 4000 s > 1800 s), 10.0.0.3 once
    first = [r for r in rows if r["session"] == 0]
    assert [r["path"] for r in first] == ["/index.html", "/img/1.gif", "/next.php"]
    # The image follows the page within burst_gap: same burst, same t.
    assert [r["burst"] for r in first] == [0, 0, 1]
    assert first[0]["t"] == first[1]["t"] == 0.0
    assert first[2]["t"] == pytest.approx(10.0, abs=1e-6)
    # Think time: from the burst's last response byte to the next burst.
    last_end = first[1]["t"] + 0.05 + first[1]["rt"] + first[0]["rt"]
    assert first[0]["think"] == first[1]["think"] == pytest.approx(10.0 - last_end, abs=0.01)
    assert first[2]["think"] == 0.0
    assert tr.meta["mode"] == "session"


def test_sessions_by_connection_and_by_cookie(tmp_path: Path) -> None:
    p = sessions_capture(tmp_path)
    by_conn = read_capture(p, sessions="connection")
    assert by_conn.n_sessions == 4
    by_cookie = read_capture(p, sessions="cookie:sid")
    s = {r["path"]: r["session"] for r in by_cookie.table.to_pylist()}
    # sid=A joins the two A connections until the idle gap; the login that set sid=B joins /home.
    assert s["/login"] == s["/home"]
    assert s["/img/1.gif"] == s["/next.php"]
    assert by_cookie.n_sessions == 3


def test_bad_parameters_are_refused(tmp_path: Path) -> None:
    p = write_capture(tmp_path / "x.pcap", mixed())
    with pytest.raises(ParameterError, match="sessions"):
        read_capture(p, sessions="user")
    with pytest.raises(ParameterError, match="idle_gap"):
        read_capture(p, idle_gap=0)
    with pytest.raises(ParameterError, match="engine"):
        read_capture(p, engine="tshark")  # type: ignore[arg-type]


def test_times(tmp_path: Path) -> None:
    ex = [(req("/t"), http_response(10_000))]
    tr = read_capture(write_capture(tmp_path / "t.pcap", [Conn(ex, rtt=0.02)]))
    (row,) = tr.table.to_pylist()
    assert row["t"] == 0.0
    assert row["ttfb"] == pytest.approx(0.02, abs=1e-5)
    assert row["rt"] > row["ttfb"] and not math.isnan(row["rt"])
    assert row["answered"] is True and row["cls"] == "static"


def test_gaps_take_durations(tmp_path: Path) -> None:
    p = sessions_capture(tmp_path)
    assert read_capture(p, idle_gap="30m", burst_gap="500ms").same_rows(
        read_capture(p, idle_gap=1800.0, burst_gap=0.5)
    )
    assert read_capture(p, burst_gap=0).meta["burst_gap"] == 0


def test_shrink_ingest_cli_reads_a_capture(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    p = write_capture(tmp_path / "x.pcapng", mixed(), fmt="pcapng")
    out = tmp_path / "x.parquet"
    res = CliRunner().invoke(app, ["ingest", str(p), "-o", str(out), "--burst-gap", "100ms"])
    assert res.exit_code == 0, res.output
    tr = Trace.read_parquet(out)
    assert len(tr) == 11 and tr.meta["reader"] == "capture-fast"
    assert tr.meta["burst_gap"] == 0.1


def test_big_endian_and_nanosecond_pcap(tmp_path: Path) -> None:
    import struct

    p = write_capture(tmp_path / "le.pcap", mixed())
    d = p.read_bytes()
    be = bytearray(struct.pack(">IHHiIII", *struct.unpack("<IHHiIII", d[:24])))
    ns = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, *struct.unpack("<HHiIII", d[4:24])))
    off = 24
    while off < len(d):
        sec, usec, cap, wire = struct.unpack("<IIII", d[off : off + 16])
        body = d[off + 16 : off + 16 + cap]
        be += struct.pack(">IIII", sec, usec, cap, wire) + body
        ns += struct.pack("<IIII", sec, usec * 1000, cap, wire) + body
        off += 16 + cap
    le_tr = read_capture(p)
    for name, data in (("be.pcap", be), ("ns.pcap", ns)):
        q = tmp_path / name
        q.write_bytes(bytes(data))
        for engine in ("fast", "scapy"):
            assert read_capture(q, engine=engine).same_rows(le_tr), (name, engine)


def test_interim_responses_and_how_connections_end(tmp_path: Path) -> None:
    post = b"POST /up.php HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
    conns = [
        Conn([(post + b"hello", (b"HTTP/1.1 100 Continue\r\n\r\n", http_response(321)))]),
        # HTTP/1.0, no Content-Length: the body runs to the close, here a reset
        Conn(
            [(b"GET /rst HTTP/1.0\r\n\r\n", http_response(2500, version="1.0", length=False))],
            cport=40011,
            rst=True,
            start=1.0,
        ),
        Conn(
            [(b"GET /fin HTTP/1.0\r\n\r\n", http_response(1500, version="1.0", length=False))],
            cport=40012,
            start=2.0,
        ),
    ]
    p = write_capture(tmp_path / "c.pcap", conns)
    tr = read_capture(p)
    assert rows_by_path(tr) == {"/up.php": (200, 321), "/rst": (200, 2500), "/fin": (200, 1500)}
    # The 100 Continue is a response (tshark counts it too) that answers nothing; the
    # body cut by a reset may be incomplete: it answers /rst but is not counted whole.
    assert (tr.meta["requests"], tr.meta["responses"]) == (3, 3)
    assert tr.meta["http_anomalies"] == {"response-incomplete": 1}
    if shutil.which("tshark"):
        assert tshark_counts(p) == (3, 3)


def test_null_link_type_of_a_big_endian_writer(tmp_path: Path) -> None:
    # DLT_NULL's family is in the writer's byte order: a big-endian capture (or one
    # converted from it) gave "non-ip" for every packet and no request.
    import struct

    p = write_capture(tmp_path / "le.pcap", mixed(), linktype=0)
    d = p.read_bytes()
    be = bytearray(struct.pack(">IHHiIII", *struct.unpack("<IHHiIII", d[:24])))
    swapped = bytearray(d[:24])
    off = 24
    while off < len(d):
        sec, usec, cap, wire = struct.unpack("<IIII", d[off : off + 16])
        body = struct.pack(">I", struct.unpack("<I", d[off + 16 : off + 20])[0])
        body += d[off + 20 : off + 16 + cap]
        be += struct.pack(">IIII", sec, usec, cap, wire) + body
        swapped += d[off : off + 16] + body
        off += 16 + cap
    le_tr = read_capture(p)
    for name, data in (("be.pcap", be), ("swapped.pcap", swapped)):
        q = tmp_path / name
        q.write_bytes(bytes(data))
        tr = read_capture(q)
        assert tr.same_rows(le_tr) and tr.meta["skipped"] == 0, name
        assert read_capture(q, engine="scapy").same_rows(tr), name  # scapy swaps it too


def test_a_bare_lf_message_ends_at_its_own_empty_line(tmp_path: Path) -> None:
    # A header block ended by LF LF was taken to run on to the next CRLF CRLF: the
    # following request (or response) on the connection was swallowed, and a blank
    # line in a body moved the body's start.
    lf_req = b"GET /lf HTTP/1.1\nHost: t\n\n"
    lf_resp = b"HTTP/1.1 200 OK\nContent-Length: 9\n\n" + b"<p>\r\n\r\nok"
    conns = [
        Conn([(lf_req, http_response(3)), (req("/crlf"), http_response(4))]),
        Conn([(req("/x"), lf_resp), (req("/y"), http_response(7))], cport=40021, start=1.0),
    ]
    p = write_capture(tmp_path / "lf.pcap", conns)
    tr = read_capture(p)
    assert rows_by_path(tr) == {"/lf": (200, 3), "/crlf": (200, 4), "/x": (200, 9), "/y": (200, 7)}
    assert (tr.meta["requests"], tr.meta["responses"]) == (4, 4)
    assert not tr.meta.get("http_anomalies")
    if shutil.which("tshark"):
        assert tshark_counts(p) == (4, 4)


def test_frames_with_an_fcs_said_in_the_link_type_field(tmp_path: Path) -> None:
    # Above its 16-bit link type the pcap header may say the frames end in an FCS (the
    # P flag, bit 26, and the FCS length in 16-bit words, bits 28-31): the link read
    # as 0x4000001 and every packet was skipped as an unsupported link.
    import struct

    p = write_capture(tmp_path / "plain.pcap", mixed())
    d = p.read_bytes()
    fcs = bytearray(d[:20]) + struct.pack("<I", 1 | 1 << 26 | 2 << 28)
    off = 24
    while off < len(d):
        sec, usec, cap, wire = struct.unpack("<IIII", d[off : off + 16])
        fcs += struct.pack("<IIII", sec, usec, cap + 4, wire + 4)
        fcs += d[off + 16 : off + 16 + cap] + b"\xde\xad\xbe\xef"
        off += 16 + cap
    q = tmp_path / "fcs.pcap"
    q.write_bytes(bytes(fcs))
    for engine in ("fast", "scapy"):
        tr = read_capture(q, engine=engine)
        assert tr.same_rows(read_capture(p)) and tr.meta["skipped"] == 0, engine
    if shutil.which("tshark"):
        assert tshark_counts(q) == (11, 10)


def test_a_raw_non_ascii_target_is_replayed_as_the_bytes_captured(tmp_path: Path) -> None:
    # Targets were read as Latin-1 and sent as UTF-8: a raw UTF-8 /café went out as
    # /caf%C3%83%C2%A9, and the server looked for another file.
    from shrink.wire import wire_target

    utf8, latin1 = "GET /café?q=é HTTP/1.1\r\n\r\n".encode(), b"GET /caf\xe9 HTTP/1.1\r\n\r\n"
    conns = [Conn([(utf8, http_response(3)), (latin1, http_response(4))])]
    p = write_capture(tmp_path / "u.pcap", conns)
    for engine in ("fast", "scapy"):
        paths = read_capture(p, engine=engine).column("path").tolist()
        assert paths == ["/café?q=é", "/caf%E9"], engine
        assert [wire_target(x) for x in paths] == ["/caf%C3%A9?q=%C3%A9", "/caf%E9"]


def test_an_ipv6_payload_length_of_zero_is_read_from_the_record(tmp_path: Path) -> None:
    """Linux's BIG TCP hands the capture IPv6 segments whose payload length is 0 (as
    segmentation offload does with IPv4's total length): they were counted malformed,
    and the IPv6 connection's request was lost. Both engines trust the record instead."""
    p = write_capture(tmp_path / "x.pcap", mixed(), linktype=101)
    data = bytearray(p.read_bytes())
    off, zeroed = 24, 0
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        frame = off + 16
        if data[frame] >> 4 == 6:
            data[frame + 4 : frame + 6] = b"\0\0"
            zeroed += 1
        off = frame + incl
    p.write_bytes(bytes(data))
    assert zeroed >= 4
    fast = read_capture(p, engine="fast")
    assert fast.same_rows(read_capture(p, engine="scapy"))
    assert rows_by_path(fast) == EXPECTED and fast.meta["skipped"] == 0
    # A bare header with nothing after it is cut short, not a TCP segment of no bytes.
    bare = struct.pack(">IHBB16s16s", 6 << 28, 0, 6, 64, bytes(16), bytes(16))
    p.write_bytes(bytes(data) + struct.pack("<IIII", 1_700_000_009, 0, 40, 40) + bare)
    for engine in ("fast", "scapy"):
        tr = read_capture(p, engine=engine)
        assert rows_by_path(tr) == EXPECTED and tr.meta["skipped"] == 1, engine


def test_a_tunnel_ends_the_http_of_its_connection(tmp_path: Path) -> None:
    # A 2xx to CONNECT ends its header block and the connection becomes a tunnel (RFC 9112
    # 6.3): the response was read as delimited by the close, so its row had the tunnel's
    # bytes and lifetime (10 KB, 5 s), and requests sent inside the tunnel (plain HTTP to
    # the origin) or after a 101 became rows of this server, unanswered.
    tunnel = b"CONNECT example.com:80 HTTP/1.1\r\nHost: example.com:80\r\n\r\n"
    inner = [(req(f"/in{i}"), http_response(5000)) for i in range(2)]
    ws = b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    switched = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
    conns = [
        Conn(
            [(tunnel, b"HTTP/1.1 200 Connection established\r\n\r\n"), *inner],
            sport=3128,
            gap=2.0,
        ),
        Conn([(ws, switched), (req("/frame"), b"\x81\x02hi")], cport=40031, start=10.0),
        # refused first, then allowed with credentials: both CONNECTs are requests
        Conn(
            [
                (tunnel, http_response(10, status=407)),
                (tunnel, b"HTTP/1.1 200 OK\r\n\r\n"),
                (b"\x16\x03\x01" + bytes(range(200)), b"\x16\x03\x03" + bytes(300)),
            ],
            cport=40032,
            start=20.0,
        ),
    ]
    p = write_capture(tmp_path / "t.pcap", conns)
    for engine in ("fast", "scapy"):
        tr = read_capture(p, engine=engine, sessions="connection")
        rows = tr.table.to_pylist()
        got = [(r["method"], r["path"], r["status"], r["bytes"]) for r in rows]
        # (the CONNECTs ask for no path of the server's: left out, counted)
        assert got == [("GET", "/ws", 101, 0)], engine
        assert max(r["rt"] for r in rows) < 0.01, engine  # not the tunnel's lifetime
        assert tr.meta["unanswered"] == 0
        assert tr.meta["requests"] == 4
        assert tr.meta["http_anomalies"] == {
            "tunnel-requests": 2 + 1,
            "request-target-not-path": 3,
        }


def _behind_one_address(users: int = 20) -> list[Conn]:
    """Users behind one address (a reverse proxy, a NAT, a load test on loopback): each
    on its own keep-alive connection, 5 requests 2 s apart, starting 0.3 s apart."""
    return [
        Conn(
            [(req(f"/u{u}/r{i}"), http_response(100)) for i in range(5)],
            cport=41000 + u,
            start=0.3 * u,
            gap=2.0,
        )
        for u in range(users)
    ]


def test_users_behind_one_address_are_named(tmp_path: Path) -> None:
    # By client address, 20 users behind a proxy are one session whose bursts merge into
    # one at t = 0 (100 requests sent at once, 13.7 s of traffic and its think times
    # gone), and nothing said so: the reader now counts the connections open at once.
    p = write_capture(tmp_path / "proxy.pcap", _behind_one_address())
    tr = read_capture(p)
    assert tr.n_sessions == 1 and float(tr.column("t").max()) == 0.0
    assert tr.meta["most_connections_at_once"] == 20 and tr.meta["crowded_sessions"] == 1
    by_conn = read_capture(p, sessions="connection")
    assert by_conn.n_sessions == 20 and by_conn.meta["crowded_sessions"] == 0
    assert float(by_conn.column("t").max()) == pytest.approx(0.3 * 19 + 4 * 2.0, abs=0.01)
    # one browser's page (two keep-alive connections, a pipelined one) is no crowd
    browser = read_capture(write_capture(tmp_path / "b.pcap", mixed()))
    assert browser.meta["crowded_sessions"] == 0
    assert browser.meta["most_connections_at_once"] >= 1
