"""Generated captures that know their truth, and the tshark oracle for the real ones."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from helpers.pcap_synth import Conn, http_response

# tshark's counts for every real capture in shared/data/real (tests/data/capture_counts.json).
ORACLE = json.loads(
    (Path(__file__).resolve().parent.parent / "data" / "capture_counts.json").read_text()
)
FILES = sorted(ORACLE["files"])


def req(path: str, method: str = "GET", headers: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode()


def mixed() -> list[Conn]:
    return [
        Conn(
            [
                (req("/a"), http_response(3000)),
                (req("/b.php?x=1"), http_response(5000, chunked=True)),
                (
                    req("/h", "HEAD"),
                    http_response(0, extra="Content-Length: 999\r\n", length=False),
                ),
                (req("/nc"), http_response(0, status=204, length=False)),
            ],
            cport=40001,
        ),
        Conn(
            [
                (req("/p1"), http_response(2000)),
                (req("/p2"), http_response(0, status=304, length=False)),
                (req("/p3"), http_response(7000)),
            ],
            cport=40002,
            pipeline=True,
            start=0.5,
        ),
        Conn([(req("/r"), http_response(20000))], cport=40003, start=1.0),
        Conn(
            [(req("/odd"), http_response(1234))],
            cport=40004,
            sport=12345,
            start=1.5,
            client="fd00::1",
            server="fd00::2",
        ),
        Conn(
            [(req("/old"), http_response(4321, version="1.0", length=False))],
            cport=40006,
            start=2.5,
        ),
        Conn([(req("/u"), b"")], cport=40005, start=3.0, fin=False),
    ]


EXPECTED = {
    "/a": (200, 3000),
    "/b.php?x=1": (200, 5000),
    "/h": (200, 0),
    "/nc": (204, 0),
    "/p1": (200, 2000),
    "/p2": (304, 0),
    "/p3": (200, 7000),
    "/r": (200, 20000),
    "/odd": (200, 1234),
    "/old": (200, 4321),
    "/u": (0, -1),
}


def rows_by_path(tr) -> dict[str, tuple[int, int]]:
    return {r["path"]: (r["status"], r["bytes"]) for r in tr.table.to_pylist()}


# How tshark must read the synthetic captures: port 12345 is HTTP, and segments
# may come out of order.
SYNTHETIC_OPTIONS = ("-d", "tcp.port==12345,http", "-o", "tcp.reassemble_out_of_order:TRUE")


def tshark_counts(path: Path, options: Sequence[str] = SYNTHETIC_OPTIONS) -> tuple[int, int]:
    """(requests, responses) that tshark finds in ``path``, read with ``options``.

    A nonzero exit is not an error: tshark exits 2 on a file with stray trailing
    bytes, after reading it.
    """
    argv = ["tshark", "-r", str(path), *options, "-T", "fields"]
    out = subprocess.run(
        [*argv, "-e", "http.request", "-e", "http.response"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout.splitlines()
    return (
        sum(1 for line in out if line.split("\t")[0]),
        sum(1 for line in out if line.split("\t")[1]),
    )
