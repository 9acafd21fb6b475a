"""A capture whose two directions were stamped by clocks apart (two interfaces, a
mirror port): the server's packets more than a round trip behind the client's.

Responses were paired with requests by time alone (a response captured before the
next request's first packet answers one the capture missed): each response looked
older than its own request, and went to the request before it. The server's TCP ACK
tells: the segment that carries a response's first byte acknowledges the request's
bytes. Where the capture has ACKs they pair; where they and the times disagree, the
reader says so (``skew_seen``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.captures import req
from helpers.pcap_synth import Conn, http_response, write_capture
from typer.testing import CliRunner

from shrink.cli import app
from shrink.ingest.capture import read_capture

pytestmark = pytest.mark.compute

EXCHANGES = [(req(f"/{p}"), http_response(100 * (i + 1))) for i, p in enumerate("abc")]


def _skewed(tmp_path: Path, behind: float, *, acks: bool = True) -> Path:
    """``Conn(EXCHANGES, rtt=0.5)`` with the server's packets stamped ``behind`` s
    early (and, unless ``acks``, the ACK flag taken off the server's data segments)."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap, wrpcap

    src = write_capture(tmp_path / "a.pcap", [Conn(EXCHANGES, rtt=0.5)])
    pkts = list(rdpcap(str(src)))
    for p in pkts:
        if p[TCP].sport == 80:
            p.time -= behind
            if not acks and p[TCP].payload:
                p[TCP].flags = int(p[TCP].flags) & ~0x10
                p[TCP].ack = 0
                del p[TCP].chksum
    out = tmp_path / f"skew{behind}{acks}.pcap"
    wrpcap(str(out), sorted(pkts, key=lambda p: p.time))
    return out


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_responses_stamped_before_their_requests_pair_by_the_servers_ack(
    tmp_path: Path, engine: str
) -> None:
    tr = read_capture(_skewed(tmp_path, 0.6), engine=engine)
    assert tr.column("path").tolist() == ["/a", "/b", "/c"]
    assert tr.column("bytes").tolist() == [100, 200, 300]  # before: 200, 300, -1
    assert (tr.meta["unanswered"], tr.meta["orphan_responses"]) == (0, 0), tr.meta
    assert tr.meta["skew_seen"] == 3, tr.meta
    # stamped 0.1 s before their requests: no response time can be told
    assert np.isnan(tr.column("rt")).all()


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_without_acks_the_times_pair_as_before(tmp_path: Path, engine: str) -> None:
    """No ACK flag on the server's data segments: the time rule, as before (a response older
    than the next request answers one the capture missed)."""
    tr = read_capture(_skewed(tmp_path, 0.6, acks=False), engine=engine)
    assert tr.column("bytes").tolist() == [200, 300, -1]
    assert (tr.meta["unanswered"], tr.meta["orphan_responses"]) == (1, 1), tr.meta
    assert "skew_seen" not in tr.meta


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_skew_under_the_round_trip_is_not_seen(tmp_path: Path, engine: str) -> None:
    """ACKs and times agree: nothing said, the times kept (0.5 - 0.2 s)."""
    tr = read_capture(_skewed(tmp_path, 0.2), engine=engine)
    assert tr.column("bytes").tolist() == [100, 200, 300]
    assert "skew_seen" not in tr.meta
    np.testing.assert_allclose(tr.column("rt"), 0.3, atol=1e-3)


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_response_to_a_request_the_capture_missed_stays_an_orphan(
    tmp_path: Path, engine: str
) -> None:
    """A flow caught after its first request went by: the first response's ACK covers
    none of the first captured request's bytes, so it answers the missed one, as its
    time says too (nothing seen of skew)."""
    skip = len(EXCHANGES[0][0])
    src = write_capture(tmp_path / "m.pcap", [Conn(EXCHANGES, rtt=0.5, skip_first=skip)])
    tr = read_capture(src, engine=engine)
    assert tr.column("path").tolist() == ["/b", "/c"]
    assert tr.column("bytes").tolist() == [200, 300]
    assert tr.meta["orphan_responses"] == 1 and "skew_seen" not in tr.meta, tr.meta


def test_ingest_says_the_responses_were_paired_by_ack(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    src = _skewed(tmp_path, 0.6)
    r = CliRunner().invoke(app, ["ingest", str(src), "-o", str(out)], terminal_width=250)
    assert r.exit_code == 0, r.output
    assert "note: 3 responses stamped before the request it answers" in r.stdout, r.stdout
    r = CliRunner().invoke(app, ["ingest", str(src), "-o", str(out), "--json"])
    assert '"skew_seen": 3' in r.stdout, r.stdout


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_response_the_ack_makes_an_orphan_is_no_skew_said(tmp_path: Path, engine: str) -> None:
    """The server's packets stamped 0.6 s AHEAD, the flow caught after its first request:
    the missed request's response is stamped after /b's first packet (the time rule
    gave it to /b), its ACK covers none of /b's bytes: an orphan. No response was
    stamped before the request it answers: nothing said (skew_seen was 1, and ingest's
    note said so)."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap, wrpcap

    skip = len(EXCHANGES[0][0])
    src = write_capture(tmp_path / "m.pcap", [Conn(EXCHANGES, rtt=0.5, skip_first=skip)])
    pkts = list(rdpcap(str(src)))
    for p in pkts:
        if p[TCP].sport == 80:
            p.time += 0.6
    out = tmp_path / "ahead.pcap"
    wrpcap(str(out), sorted(pkts, key=lambda p: p.time))
    tr = read_capture(out, engine=engine)
    assert tr.column("bytes").tolist() == [200, 300]
    assert tr.meta["orphan_responses"] == 1 and "skew_seen" not in tr.meta, tr.meta
