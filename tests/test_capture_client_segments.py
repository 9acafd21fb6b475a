"""Client segments captured out of order, or sent again.

A request's time is the capture time of its first packet, whatever order its
segments were captured in: the earliest of the packets that carried its bytes.

The byte stream is put back in sequence order, so the packet that holds a request's
first byte can be captured after one that holds a later byte (reordered on the way, or
the first segment lost and sent again); the client had sent the request by the time
any of its bytes went past.

A segment that sends captured bytes again with other bytes (an overlapping
retransmission that disagrees) leaves the first copy in the stream, as the server
that had it keeps it, and is counted (meta ``differing_resends``), not passed over.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.pcap_synth import Conn, http_response, write_capture

from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute

LONG = b"GET /long HTTP/1.1\r\nHost: h\r\nX-Pad: " + b"p" * 2000 + b"\r\n\r\n"  # two segments
EXCHANGES = [(LONG, http_response(300)), (b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n", http_response(5))]


def _swap_first_request_segments(src: Path, dst: Path) -> None:
    """The first two client segments swapped, and the one with the request's first
    byte sent again 0.2 s later (the first copy lost before the capture point): the
    request's second part is captured at the time the first was."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap, wrpcap

    pkts = list(rdpcap(str(src)))
    data = [i for i, p in enumerate(pkts) if TCP in p and p[TCP].dport == 80 and p[TCP].payload]
    a, b = data[0], data[1]
    ta, tb = pkts[a].time, pkts[b].time
    pkts[a], pkts[b] = pkts[b], pkts[a]
    pkts[a].time, pkts[b].time = ta, tb + 0.2
    wrpcap(str(dst), pkts)


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_request_captured_second_part_first_keeps_its_first_packets_time(
    tmp_path: Path, engine: str
) -> None:
    clean = read_capture(write_capture(tmp_path / "a.pcap", [Conn(EXCHANGES, rtt=0.5)]))
    _swap_first_request_segments(tmp_path / "a.pcap", tmp_path / "r.pcap")
    tr = read_capture(tmp_path / "r.pcap", engine=engine)
    assert tr.column("path").tolist() == ["/long", "/b"]
    # Before, the request's time was that of the packet with its first byte, captured
    # 0.2 s later: its response time came out 0.2 s short.
    np.testing.assert_allclose(tr.column("rt"), clean.column("rt"), atol=1e-6)
    np.testing.assert_allclose(tr.column("t"), clean.column("t"), atol=1e-6)


def _resend_first_request(src: Path, dst: Path, payload: bytes, at: int = 0) -> None:
    """A copy of the first client data segment carrying ``payload`` from ``at`` bytes
    past its sequence number, captured 0.1 s after it."""
    from scapy.layers.inet import TCP
    from scapy.packet import Raw
    from scapy.utils import rdpcap, wrpcap

    pkts = list(rdpcap(str(src)))
    i = next(i for i, p in enumerate(pkts) if TCP in p and p[TCP].dport == 80 and p[TCP].payload)
    again = pkts[i].copy()
    again[TCP].seq += at
    again[TCP].remove_payload()
    again[TCP].add_payload(Raw(payload))
    for layer in ("IP", "TCP"):
        del again[layer].chksum
    del again["IP"].len
    again.time = pkts[i].time + 0.1
    pkts.insert(i + 1, again)
    wrpcap(str(dst), pkts)


AAA = b"GET /aaa HTTP/1.1\r\nHost: h\r\n\r\n"
SHORT = [(AAA, http_response(5))]


@pytest.mark.parametrize("engine", ["fast", "scapy"])
@pytest.mark.parametrize(
    ("payload", "at", "differing"),
    [
        (b"GET /bbb HTTP/1.1\r\nHost: h\r\n\r\n", 0, 1),  # other bytes: counted
        (b"GET /bbb HTTP/1.1", 0, 1),  # a part of it, other bytes
        (AAA, 0, 0),  # the same bytes: a retransmission
        (b"\x00", len(AAA) - 1, 0),  # a keep-alive probe: the last byte sent, any byte
    ],
)
def test_a_resent_segment_with_other_bytes_keeps_the_first_copy_and_is_counted(
    tmp_path: Path, engine: str, payload: bytes, at: int, differing: int
) -> None:
    src = write_capture(tmp_path / "a.pcap", [Conn(SHORT, rtt=0.5)])
    _resend_first_request(src, tmp_path / "r.pcap", payload, at)
    tr = read_capture(tmp_path / "r.pcap", engine=engine)
    assert tr.column("path").tolist() == ["/aaa"]
    assert tr.meta["differing_resends"] == differing
    assert read_capture(src, engine=engine).meta["differing_resends"] == 0


def test_ingest_says_how_many_resent_segments_disagreed(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shrink.cli import app

    src = write_capture(tmp_path / "a.pcap", [Conn(SHORT, rtt=0.5)])
    _resend_first_request(src, tmp_path / "r.pcap", b"GET /bbb HTTP/1.1")
    out = str(tmp_path / "r.parquet")
    text = CliRunner().invoke(app, ["ingest", str(tmp_path / "r.pcap"), "-o", out]).output
    assert "note: 1 TCP segment sent again bytes already captured, with other bytes" in text
    js = CliRunner().invoke(app, ["ingest", str(tmp_path / "r.pcap"), "-o", out, "--json"])
    assert json.loads(js.output)["differing_resends"] == 1


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_response_captured_before_the_resent_first_segment_answers_the_request(
    tmp_path: Path, engine: str
) -> None:
    """The packet with a request's first byte captured only after its response (a copy
    sent again; the first went by the capture unseen): the request was sent by its
    second packet's time. The responses were paired by the first byte's packet's time,
    so the first was taken for the answer to a request the capture missed, and the
    second response paired with the first request."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap, wrpcap

    src = write_capture(tmp_path / "a.pcap", [Conn(EXCHANGES, rtt=0.5)])
    pkts = list(rdpcap(str(src)))
    a = next(i for i, p in enumerate(pkts) if TCP in p and p[TCP].dport == 80 and p[TCP].payload)
    first = pkts.pop(a)
    first.time += 0.7  # after the response, captured 0.5 s after the request
    wrpcap(str(tmp_path / "r.pcap"), sorted([*pkts, first], key=lambda p: p.time))
    tr = read_capture(tmp_path / "r.pcap", engine=engine)
    assert tr.column("path").tolist() == ["/long", "/b"]
    np.testing.assert_allclose(tr.column("rt"), [0.5, 0.5], atol=1e-4)
    assert (tr.meta["unanswered"], tr.meta["orphan_responses"]) == (0, 0)
