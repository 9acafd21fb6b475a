"""Golden check against httperf itself: it must send exactly the requests our reader reads.

httperf parses a session log and sends its requests to a small HTTP server on
loopback that records method, path and body. Skipped where httperf is not
installed (Debian package ``httperf``).
"""

from __future__ import annotations

import http.server
import random
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require_tool
from helpers.wsesslog_quirks import NON_CANONICAL, with_thinks_scaled

from shrink.ingest.wsesslog import METHODS, read_wsesslog, write_wsesslog
from shrink.trace import Trace

FIXTURE = Path(__file__).parent / "data" / "wsesslog_all_features.txt"


class _Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, bytes]]

    def _any(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        # http.server decodes the request line as Latin-1; httperf sent UTF-8 bytes
        path = self.path.encode("latin-1").decode("utf-8")
        self.server.seen.append((self.command, path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"ok")

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = do_TRACE = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _httperf(server, log: Path, sessions: int) -> list[tuple[str, str, bytes]]:
    httperf = require_tool("httperf")
    port = server.server_address[1]
    run = subprocess.run(
        [httperf, "--server", "127.0.0.1", "--port", str(port), "--timeout", "5",
         "--rate", "50", "--wsesslog", f"{sessions},0,{log}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Errors: total 0 " in run.stdout, run.stdout
    return sorted(server.seen)


def _ours(trace: Trace) -> list[tuple[str, str, bytes]]:
    bodies = trace.column("body").tolist() if trace.has("body") else [b""] * len(trace)
    rows = zip(trace.column("method").tolist(), trace.column("path").tolist(), bodies, strict=True)
    return sorted(rows)


# The non-canonical syntax of the reader's tests, with short think times.
QUIRKS = with_thinks_scaled(NON_CANONICAL, 0.002)


def test_httperf_sends_what_our_reader_reads_from_quirky_syntax(recorder, tmp_path):
    log = tmp_path / "quirks.log"
    log.write_bytes(QUIRKS.encode("utf-8"))
    ours = read_wsesslog(log)
    assert _httperf(recorder, log, ours.n_sessions) == _ours(ours)


def test_httperf_sends_what_our_writer_wrote(recorder, tmp_path):
    rng = random.Random(20261121)
    alphabet = [*"abc xyz=&#'\"\\\n\r\t", "é", "€", "漢"]
    cols: dict[str, list] = {k: [] for k in ("session", "burst", "t", "think", "method")}
    cols.update(path=[], body=[])
    for sid in range(12):
        for bid in range(rng.randint(1, 3)):
            think = rng.randint(0, 20) / 1000
            for i in range(rng.randint(1, 4)):
                body = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
                cols["session"].append(sid)
                cols["burst"].append(bid)
                cols["t"].append(float(sid))
                cols["think"].append(think)
                cols["method"].append(rng.choice(METHODS))
                cols["path"].append(f"/s{sid}/b{bid}/r{i}.php?x={rng.randint(0, 99)}")
                cols["body"].append(body)
    trace = Trace.from_columns(cols)
    log = write_wsesslog(trace, tmp_path / "gen.log")
    assert _httperf(recorder, log, 12) == _ours(trace)
    assert _ours(read_wsesslog(log)) == _ours(trace)


def test_httperf_reads_the_canonical_fixture(recorder, tmp_path):
    # the fixture's think times add up to 13.75 s; scale them down for the run
    fast = read_wsesslog(FIXTURE)
    fast = fast.with_column("think", fast.column("think") / 1000)
    log = write_wsesslog(fast, tmp_path / "fast.log")
    assert _httperf(recorder, log, 3) == _ours(read_wsesslog(FIXTURE))


def test_httperf_sends_the_bytes_of_a_body_that_is_not_utf8_as_we_read_them(recorder, tmp_path):
    log = tmp_path / "bytes.log"
    log.write_bytes(b"/p method=POST contents='\xff\x80\xc3\xa9 \\\xfe'\n/q\n")
    ours = read_wsesslog(log)
    assert ours.column("body").tolist() == [b"\xff\x80\xc3\xa9 \xfe", b""]
    assert _httperf(recorder, log, 1) == _ours(ours)
