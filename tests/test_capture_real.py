"""The capture reader against tshark on every real capture in shared/data/real.

The oracle is Debian's tshark with its default preferences (TCP
desegmentation on). Its counts, request lines and response sizes are checked
in (tests/data/capture_counts.json) so the tests run without tshark; when
tshark is installed one test recomputes the counts live. Every HTTP exchange
in these captures is on port 80, so no ``-d tcp.port==N,http`` was needed;
HTTP on odd ports is tested on generated captures (test_capture_synth.py),
where tshark is told the port with ``-d``, because it dissects HTTP only on
the ports it knows (our reader recognises HTTP from content).
"""

from __future__ import annotations

import math
import shutil
from collections import Counter
from pathlib import Path

import pytest
from helpers.captures import FILES, ORACLE, tshark_counts

from shrink.ingest.capture import read_capture
from shrink.trace import Trace

pytestmark = pytest.mark.compute

# The one response in this capture arrives on another connection (port 64700) than
# the only request (port 64698): it is counted, like tshark does, but answers nothing.
ORPHANS = {"scapy_http_compressed.pcap": 1}

_cache: dict[tuple[str, str], Trace] = {}


def _read(real_dir: Path, name: str, engine: str = "fast") -> Trace:
    key = (name, engine)
    if key not in _cache:
        _cache[key] = read_capture(real_dir / name, engine=engine)
    return _cache[key]


def test_every_capture_in_shared_has_an_oracle(real_dir: Path) -> None:
    captures = {
        p.name
        for p in real_dir.iterdir()
        if p.name.endswith((".pcap", ".cap", ".pcapng", ".pcap.gz", ".pcapng.gz"))
    }
    assert captures == set(FILES)


@pytest.mark.parametrize("name", FILES)
def test_request_and_response_counts_match_tshark(real_dir: Path, name: str) -> None:
    tr = _read(real_dir, name)
    want = ORACLE["files"][name]
    assert (tr.meta["requests"], tr.meta["responses"]) == (want["requests"], want["responses"])
    assert len(tr) == want["requests"]  # one row per request, answered or not


@pytest.mark.parametrize("name", FILES)
def test_request_lines_and_response_sizes_match_tshark(real_dir: Path, name: str) -> None:
    tr = _read(real_dir, name)
    want = ORACLE["files"][name]
    mine = Counter(zip(tr.column("method").tolist(), tr.column("path").tolist(), strict=True))
    assert mine == Counter((m, u) for m, u in want["request_lines"])
    # Every (status, body size) tshark reports with a known size is among our answered rows.
    answered = tr.column("answered")
    got = Counter(
        zip(
            tr.column("status")[answered].tolist(),
            tr.column("bytes")[answered].tolist(),
            strict=True,
        )
    )
    sized = Counter((c, s) for c, s in want["response_sizes"] if s is not None and c >= 200)
    if name in ORPHANS:
        assert tr.meta["orphan_responses"] == ORPHANS[name]
        assert not got
        return
    # tshark gives a HEAD response the Content-Length it announces; it has no body.
    heads = Counter(tr.column("status")[tr.column("method") == "HEAD"].tolist())
    assert Counter(c for c, _ in (sized - got).elements()) <= heads


@pytest.mark.parametrize("name", FILES)
def test_fast_and_scapy_engines_give_identical_traces(real_dir: Path, name: str) -> None:
    fast = _read(real_dir, name, "fast")
    slow = _read(real_dir, name, "scapy")
    assert fast.same_rows(slow)
    drop = {"reader", "link_types", "damage"}
    assert {k: v for k, v in fast.meta.items() if k not in drop} == {
        k: v for k, v in slow.meta.items() if k not in drop
    }
    assert fast.meta["reader"] == "capture-fast" and slow.meta["reader"] == "capture-scapy"


def test_zeek_thousand_requests_over_ipv6(real_dir: Path) -> None:
    tr = _read(real_dir, "zeek_http_1000-requests-one-dropped-response.pcap.gz")
    assert len(tr) == 1000
    assert int(tr.column("answered").sum()) == 999
    assert tr.meta["unanswered"] == 1
    assert set(tr.column("client").tolist()) == {"::1"}
    assert set(tr.column("server").tolist()) == {"[::1]:80"}
    assert len(set(tr.column("conn").tolist())) == 1  # one keep-alive connection
    rt = tr.column("rt")
    assert int(sum(math.isnan(x) for x in rt)) == 1
    ok = tr.column("answered")
    assert (rt[ok] >= 0).all() and (tr.column("ttfb")[ok] <= rt[ok]).all()
    assert (tr.column("bytes")[~ok] == -1).all() and (tr.column("status")[~ok] == 0).all()


def test_pipelined_requests_pair_in_order(real_dir: Path) -> None:
    tr = _read(real_dir, "zeek_http_pipelined-requests.pcap")
    rows = tr.table.to_pylist()  # rows of a burst are in request order
    assert {r["conn"] for r in rows} == {0}
    assert [r["path"] for r in rows] == [
        "/style/enhanced.css",
        "/script/urchin.js",
        "/images/template/screen/bullet_utility.png",
        "/images/template/screen/key-point-top.png",
        "/projects/calendar/images/header-sunbird.png",
    ]
    assert [r["bytes"] for r in rows] == [946, 6716, 94, 2349, 27579]
    assert {r["status"] for r in rows} == {200}


def test_chunked_body_counts_decoded_bytes(real_dir: Path) -> None:
    tr = _read(real_dir, "scapy_http_chunk.pcap")
    (row,) = tr.table.to_pylist()
    assert row["status"] == 200
    assert row["bytes"] == 33653  # sum of tshark's http.chunk_size, not the wire bytes


def test_compressed_body_is_counted_before_decoding(real_dir: Path) -> None:
    tr = _read(real_dir, "scapy_http_content_length.pcap")
    assert sorted(zip(tr.column("status").tolist(), tr.column("bytes").tolist(), strict=True)) == [
        (200, 5012),  # gzip body: Content-Length, not the inflated size
        (204, 0),
    ]


def test_head_response_has_no_body(real_dir: Path) -> None:
    (row,) = _read(real_dir, "scapy_http_head.pcapng").table.to_pylist()
    assert (row["method"], row["status"], row["bytes"]) == ("HEAD", 301, 0)


def test_post_captures(real_dir: Path) -> None:
    tr = _read(real_dir, "ppa_http_post.pcapng")
    rows = {r["method"]: r for r in tr.table.to_pylist()}
    assert rows["POST"]["status"] == 302 and rows["POST"]["bytes"] == 20
    tr = _read(real_dir, "ppa1e_http-fault-post.pcap")
    assert tr.column("method").tolist() == ["POST", "POST"]
    assert set(tr.column("status").tolist()) == {403}


def test_damaged_real_file_is_read_leniently_and_refused_strictly(real_dir: Path) -> None:
    # ppa1e_http-fault-post.pcap ends with 2 stray bytes after its last record.
    tr = _read(real_dir, "ppa1e_http-fault-post.pcap")
    assert "record 26" in tr.meta["damage"] and "byte offset 8877" in tr.meta["damage"]
    from shrink.errors import CaptureFormatError

    with pytest.raises(CaptureFormatError) as err:
        read_capture(real_dir / "ppa1e_http-fault-post.pcap", strict=True)
    assert err.value.record == 26 and err.value.offset == 8877


# tshark -r zeek_wikipedia.pcap -Y '!tcp' -T fields -e frame.number
WIKIPEDIA_NOT_TCP = [1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21, 24, 25, 26, 27, 28, 29, 31, 32, 33]
WIKIPEDIA_NOT_TCP += [34, 35, 36, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 109, 112]
WIKIPEDIA_NOT_TCP += list(range(114, 137))


def test_non_http_traffic_is_counted(real_dir: Path) -> None:
    tr = _read(real_dir, "zeek_wikipedia.pcap")
    kinds = tr.meta["skipped_kinds"]
    assert kinds["udp"] == 48 and kinds["non-ip"] == 10
    assert tr.meta["skipped"] == sum(kinds.values())
    # The skipped packet numbers: everything tshark sees as not TCP, and frame 113,
    # a TCP packet of a connection that carries no HTTP.
    assert kinds["non-http-packets"] == 1
    assert tr.meta["skipped_lines"] == sorted([*WIKIPEDIA_NOT_TCP, 113])


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_checked_in_counts_agree_with_live_tshark(real_dir: Path) -> None:
    # A few captures with the counts most easily got wrong (dropped response, lost
    # segments, a damaged tail); running tshark on all of them takes ~20 s.
    for name in (
        "zeek_http_1000-requests-one-dropped-response.pcap.gz",
        "zeek_http_bro.org.pcap",
        "ppa1e_barryscomputer.pcap",
        "ppa1e_http-fault-post.pcap",
    ):
        # read as tshark reads any capture: no options
        req, resp = tshark_counts(real_dir / name, options=())
        want = ORACLE["files"][name]
        assert (req, resp) == (want["requests"], want["responses"]), name
