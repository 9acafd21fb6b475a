"""The plain-stream shortcut of HTTP parsing gives exactly what the careful parser gives.

:mod:`shrink.ingest.capture.http_plain` parses a keep-alive stream with one match per
message when every message is plain, and gives up otherwise. Here every real
capture and a set of generated ones (all the framings, pipelining, trouble on
the wire, cookies) is read with the shortcut and with it switched off.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.captures import FILES, mixed, req
from helpers.pcap_synth import Conn, http_response, write_capture

from shrink.ingest.capture import http_parse, read_capture

pytestmark = pytest.mark.compute


def _both(monkeypatch: pytest.MonkeyPatch, path: Path, **kw) -> None:
    quick = read_capture(path, **kw)
    with monkeypatch.context() as m:
        m.setattr(http_parse, "plain_requests", lambda *a: None)
        m.setattr(http_parse, "plain_responses", lambda *a: None)
        careful = read_capture(path, **kw)
    assert quick.same_rows(careful)
    assert quick.meta == careful.meta


@pytest.mark.parametrize("name", FILES)
def test_real_captures(monkeypatch: pytest.MonkeyPatch, real_dir: Path, name: str) -> None:
    _both(monkeypatch, real_dir / name)


def _plainish() -> list[Conn]:
    big = [(req(f"/k{i}"), http_response(900 + 2000 * i)) for i in range(6)]
    odd = [
        (req("/cl2"), http_response(10, extra="Content-Length: 10\r\n")),  # two lengths
        (req("/lc"), http_response(5).replace(b"Content-Length", b"content-LENGTH")),
        (req("/sp"), http_response(7).replace(b"Content-Length: 7", b"Content-Length:  7 \t")),
        (req("/post", "POST", "Content-Length: 3\r\n") + b"abc", http_response(3)),
        (req("/cont"), b"HTTP/1.1 100 Continue\r\n\r\n" + http_response(4)),
        (req("/h", "HEAD"), http_response(0, extra="Content-Length: 99\r\n", length=False)),
        (req("/lf"), b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"),
        (req("/cut"), http_response(50)[:-10]),
        (req("/te"), http_response(6, extra="Transfer-Encoding: identity\r\n")),
        (req("/fold"), http_response(8, extra="X-A: 1\r\n \tfolded\r\nX-B:\r\n")),
        (req("/st"), b"HTTP/1.1 200\r\nContent-Length: 3\r\n\r\nabc"),
        (req("/tab", headers="Content-length:\t0\r\n"), http_response(1)),
    ]
    return [
        Conn(big, cport=41000),
        Conn(big, cport=41001, start=0.3, reorder=True, retransmit=True),
        Conn(big, cport=41002, start=0.6, skip_first=3, handshake=False),
        *[Conn([x], cport=41010 + i, start=1 + i * 0.1) for i, x in enumerate(odd)],
        Conn(odd, cport=41003, start=2.0),
        Conn(big, cport=41004, start=2.5, pipeline=True),
    ]


@pytest.mark.parametrize("sessions", ["client", "cookie:s"])
def test_generated_captures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sessions: str) -> None:
    _both(monkeypatch, write_capture(tmp_path / "m.pcap", mixed()), sessions=sessions)
    _both(monkeypatch, write_capture(tmp_path / "p.pcap", _plainish()), sessions=sessions)
    cut = write_capture(tmp_path / "s.pcap", _plainish(), snaplen=300)  # holes in every stream
    _both(monkeypatch, cut, sessions=sessions)
