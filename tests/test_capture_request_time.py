"""A request's time is the capture time of its first packet, whatever order its
segments were captured in: the earliest of the packets that carried its bytes.

The byte stream is put back in sequence order, so the packet that holds a request's
first byte can be captured after one that holds a later byte (reordered on the way, or
the first segment lost and sent again); the client had sent the request by the time
any of its bytes went past.
"""

from __future__ import annotations

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
