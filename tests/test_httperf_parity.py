"""A replay sends what httperf --wsesslog sends: every request, in each session's order,
over as many connections (one keep-alive connection per session).

One lighttpd, whose access log records each request's client port (its connection),
serves first httperf's run of a wsesslog file, then ``shrink ingest`` + ``shrink
replay`` of the same file. The two logs must agree request for request.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.servers import free_port

pytestmark = pytest.mark.live

# 4 sessions, 17 requests; session 4's last request is due 1.5 s after its first.
# Both clients start 4 sessions a second (httperf's --rate, shrink's --session-rate):
# the sessions overlap, so each client interleaves requests of several connections.
SESSION_RATE = "4"
WSESSLOG = """\
/index.html think=0.2
    /a.gif
    /b.gif
/page2.html think=0.3
    /c.gif

/index.html think=0.5
/page3.html
    /a.gif
    /d.gif

/page2.html think=0.2
    /b.gif
/index.html
    /d.gif

/page3.html think=0.7
    /c.gif
/page2.html think=0.8
/index.html
"""


def _lighttpd(tmp: Path, log: Path, port: int) -> subprocess.Popen[bytes]:
    conf = tmp / f"{log.stem}.conf"
    conf.write_text(
        f'server.document-root = "{tmp / "www"}"\n'
        'server.bind = "127.0.0.1"\n'
        f"server.port = {port}\n"
        'server.modules = ("mod_accesslog")\n'
        f'accesslog.filename = "{log}"\n'
        'accesslog.format = "%{remote}p %r %>s"\n'
        f'server.errorlog = "{tmp / "error.log"}"\n'
    )
    proc = subprocess.Popen(["lighttpd", "-D", "-f", str(conf)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("lighttpd did not start")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)  # lighttpd writes its buffered access log on exit
    proc.wait(timeout=10)


def _connections(log: Path) -> list[tuple[str, ...]]:
    """Per connection (client port), its requests in order, sorted for comparison."""
    per: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        port, rest = line.split(" ", 1)
        assert rest.endswith(" 200"), line
        per.setdefault(port, []).append(rest.split(" ")[1])
    return sorted(tuple(v) for v in per.values())


@pytest.mark.skipif(
    not (shutil.which("lighttpd") and shutil.which("httperf")), reason="needs lighttpd, httperf"
)
def test_replay_matches_httperf_request_for_request(tmp_path: Path):
    www = tmp_path / "www"
    www.mkdir()
    for name in ("index.html", "page2.html", "page3.html", "a.gif", "b.gif", "c.gif", "d.gif"):
        (www / name).write_text(name * 20)
    sess = tmp_path / "sessions.txt"
    sess.write_text(WSESSLOG)
    port = free_port()

    httperf_log = tmp_path / "httperf.log"
    server = _lighttpd(tmp_path, httperf_log, port)
    try:
        subprocess.run(
            ["httperf", "--server", "127.0.0.1", "--port", str(port),
             f"--wsesslog=4,0,{sess}", "--rate", SESSION_RATE, "--timeout", "5"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    finally:
        _stop(server)

    shrink_log = tmp_path / "shrink.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    trace = tmp_path / "t.parquet"
    subprocess.run(
        [sys.executable, "-m", "shrink", "ingest", str(sess), "--session-rate", SESSION_RATE,
         "-o", str(trace)],
        check=True, capture_output=True, env=env, timeout=60,
    )  # fmt: skip
    server = _lighttpd(tmp_path, shrink_log, port)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "shrink", "replay", str(trace),
             "--target", f"http://127.0.0.1:{port}", "-o", str(tmp_path / "r.parquet"),
             "--lag-limit", "1s"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    finally:
        _stop(server)

    ours, theirs = _connections(shrink_log), _connections(httperf_log)
    assert sum(len(c) for c in theirs) == 17
    assert len(ours) == len(theirs) == 4  # one connection per session
    assert ours == theirs  # every request, in its session's order
    assert Counter(p for c in ours for p in c) == Counter(p for c in theirs for p in c)
