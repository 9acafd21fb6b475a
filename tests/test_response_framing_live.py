"""RFC 9112 section 6.3 framing in both real engines, from a hostile loopback server:
the native engine's epoll loop and the Python engine's asyncio loop replay a
one-session trace against a scripted server (helpers.http_live) that answers with
differing Content-Length values, chunked not as the final coding, Transfer-Encoding
with Content-Length, or whitespace before a field's colon (5.1), and each engine
records what the RFC asks.

The native engine runs only with a core built from a native/src that frames this way
(``shrink_core.FRAMING``); an older installed core is skipped until ``make setup``.
"""

from __future__ import annotations

import pytest
from helpers.http_fuzz import Case, native_core
from helpers.http_live import ScriptedServer, _replay

OK = b"HTTP/1.1 200 OK\r\n"
BODY = b"5\r\nhello\r\n0\r\n\r\n"

CASES = {
    # before: the first value was read, the answer a success with 5 bytes
    "differing Content-Length": (
        Case([[OK + b"Content-Length: 5\r\nContent-Length: 7\r\n\r\nhello"]], (False,), "hold"),
        [("bad-response", 0, -1)],
    ),
    # before: read as chunked, 5 bytes
    "chunked, gzip": (
        Case([[OK + b"Transfer-Encoding: chunked, gzip\r\n\r\n" + BODY]], (False,), "eof"),
        [("ok", 200, 15)],
    ),
    # before: the connection was reused, and the second request waited on it (timeout);
    # now it goes on a new connection, which this server closes at once
    "Transfer-Encoding with Content-Length": (
        Case(
            [[OK + b"Content-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n" + BODY]],
            (False, False),
            "hold",
        ),
        [("ok", 200, 5), ("closed", 0, -1)],
    ),
    # RFC 9112 5.1: an invalid answer; before, no length was read and the body ran to the
    # close (a timeout, as this server holds the connection)
    "whitespace before a colon": (
        Case([[OK + b"Content-Length : 5\r\n\r\nhello"]], (False,), "hold"),
        [("bad-response", 0, -1)],
    ),
}

ENGINES = [
    "python",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(
            native_core() is None, reason="the native core predates RFC 9112 framing (make setup)"
        ),
    ),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", CASES)
def test_an_engine_frames_a_hostile_servers_answer_as_rfc_9112_says(engine, name):
    case, want = CASES[name]
    srv = ScriptedServer()
    try:
        srv.serve(case)
        assert _replay(engine, case, srv.port) == want
    finally:
        srv.close()
