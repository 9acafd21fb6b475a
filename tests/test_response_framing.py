"""Both replay engines frame an answer as RFC 9112 section 6.3 says: differing
Content-Length values are an unrecoverable framing error, chunked counts only as the
final transfer coding (a body up to the close otherwise), Transfer-Encoding wins over
Content-Length and the connection is then not reused, and an interim 1xx answer is
never the final one (a 101 no request asked for is bad). Chunked applied twice (6.1)
and whitespace between a field name and its colon (5.1) make an invalid answer, and
Connection is read as a list of tokens (RFC 9110 7.6.1).

The Python engine's connection always; the native core's parser through its test hook
(``shrink_core.parse_stream``) when the core is built from a native/src that frames this
way (it says so with ``shrink_core.FRAMING``; an older core is skipped until
``make setup`` rebuilds it).
"""

from __future__ import annotations

import pytest
from helpers.http_fuzz import Case, native_core, native_stream, python_stream

from shrink.replay._http import parse_head

pytestmark = pytest.mark.compute

CORE = native_core()

OK = b"HTTP/1.1 200 OK\r\n"
TE = b"Transfer-Encoding: "
OK_2 = OK + b"Content-Length: 2\r\n\r\nok"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
BODY = b"5\r\nhello\r\n0\r\n\r\n"  # 15 bytes: chunked, or a body up to the close


def _case(data: bytes, end: str = "hold", requests: int = 2, head: bool = False) -> Case:
    return Case([[data]], (head,) * requests, end)


def _bytewise(case: Case) -> Case:
    """The same bytes, a read each."""
    return Case([[bytes([b]) for b in case.reads[0]]], case.head_only, case.end)


# (what the server sends, how it ends) -> each request's row, whether left open
CASES = {
    "two differing Content-Length lines": (
        _case(OK + b"Content-Length: 5\r\nContent-Length: 7\r\n\r\nhello"),
        ([("bad-response", 0, -1)], False),
    ),
    "differing Content-Length values in a list": (
        _case(OK + b"Content-Length: 5, 7\r\n\r\nhello"),
        ([("bad-response", 0, -1)], False),
    ),
    "the same Content-Length repeated": (
        _case(OK + b"Content-Length: 5, 5\r\nContent-Length: 5\r\n\r\nhello", requests=1),
        ([("ok", 200, 5)], True),
    ),
    "chunked then gzip: a body up to the close": (
        _case(OK + b"Transfer-Encoding: chunked, gzip\r\n\r\n" + BODY, "eof", 1),
        ([("ok", 200, 15)], False),
    ),
    "chunked then gzip on two lines": (
        _case(OK + TE + b"chunked\r\n" + TE + b"gzip\r\n\r\n" + BODY, "eof", 1),
        ([("ok", 200, 15)], False),
    ),
    "gzip then chunked: chunked": (
        _case(OK + TE + b"gzip\r\n" + TE + b"chunked\r\n\r\n" + BODY, requests=1),
        ([("ok", 200, 5)], True),
    ),
    "Transfer-Encoding with Content-Length: not reused": (
        _case(OK + b"Content-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n" + BODY),
        ([("ok", 200, 5)], False),
    ),
    "Transfer-Encoding from HTTP/1.0: not reused": (
        _case(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n" + TE + b"chunked\r\n\r\n" + BODY),
        ([("ok", 200, 5)], False),
    ),
    "a close on a second Connection line": (
        _case(OK + b"Connection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
        ([("ok", 200, 0)], False),
    ),
    "101 to a request without Upgrade": (
        _case(b"HTTP/1.1 101 Switching Protocols\r\n\r\n" + OK + b"Content-Length: 0\r\n\r\n"),
        ([("bad-response", 0, -1)], False),
    ),
    "103 Early Hints, then the answer": (
        _case(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + OK_2, requests=1),
        ([("ok", 200, 2)], True),
    ),
    "100 Continue, then a 204": (
        _case(CONTINUE + b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", requests=1),
        ([("ok", 204, 0)], True),
    ),
    "a HEAD answer says chunked": (
        _case(OK + b"Transfer-Encoding: chunked\r\n\r\n", requests=1, head=True),
        ([("ok", 200, 0)], True),
    ),
    "a 304 with its Content-Length": (
        _case(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 24\r\n\r\n", requests=1),
        ([("ok", 304, 0)], True),
    ),
    # Connection is a list of tokens (RFC 9110 7.6.1): before, "closed" was read as close
    "Connection: closed is no close": (
        _case(OK + b"Connection: Upgrade, closed\r\n" + OK_2[17:], requests=1),
        ([("ok", 200, 2)], True),
    ),
    "Connection: close among tokens": (
        _case(OK + b"Connection: Upgrade, Close\r\n" + OK_2[17:], requests=1),
        ([("ok", 200, 2)], False),
    ),
    # before, HTTP/1.0 with "keep-alives" was kept open
    "HTTP/1.0 with no keep-alive token": (
        _case(b"HTTP/1.0 200 OK\r\nConnection: keep-alives\r\n" + OK_2[17:], requests=1),
        ([("ok", 200, 2)], False),
    ),
    # RFC 9112 5.1: an invalid message; before, the length was not read and the body ran to
    # the close, taking the next answer's bytes as this one's
    "whitespace before a Content-Length's colon": (
        _case(OK + b"Content-Length : 2\r\n\r\nok" + OK_2, "eof"),
        ([("bad-response", 0, -1)], False),
    ),
    "whitespace before any field's colon": (
        _case(OK + b"X-Cache\t: hit\r\nContent-Length: 2\r\n\r\nok", requests=1),
        ([("bad-response", 0, -1)], False),
    ),
    # RFC 9112 6.1: chunked at most once; before, read as one chunked layer
    "chunked twice": (
        _case(OK + TE + b"chunked, chunked\r\n\r\n" + BODY, requests=1),
        ([("bad-response", 0, -1)], False),
    ),
    "chunked twice on two lines": (
        _case(OK + TE + b"chunked\r\n" + TE + b"gzip, Chunked\r\n\r\n" + BODY, requests=1),
        ([("bad-response", 0, -1)], False),
    ),
    # 1*DIGIT: leading zeros are allowed; before, the Python engine's int() refused a
    # decimal past 4300 digits (a bad-response) where the native core read 2
    "a Content-Length with 5000 leading zeros": (
        _case(OK + b"Content-Length: " + b"0" * 5000 + b"2\r\n\r\nok", requests=1),
        ([("ok", 200, 2)], True),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_the_python_engine_frames_as_rfc_9112_says(name):
    case, want = CASES[name]
    assert python_stream(case) == want
    # however TCP cuts it
    assert python_stream(_bytewise(case)) == want


@pytest.mark.skipif(CORE is None, reason="the native core predates RFC 9112 framing (make setup)")
@pytest.mark.parametrize("name", CASES)
def test_the_native_core_frames_as_rfc_9112_says(name):
    case, want = CASES[name]
    assert native_stream(CORE, case) == want
    assert native_stream(CORE, _bytewise(case)) == want


def test_parse_head_frames_as_rfc_9112_says():
    def head(fields: bytes) -> tuple[int, int, bool, bool]:
        return parse_head(OK + fields)

    for bad in [b"Content-Length: 5\r\nContent-Length: 7", b"Content-Length: 5, 7",
                b"Content-Length: 7,", b"Content-Length: 5 7", b"Content-Length: +5"]:  # fmt: skip
        with pytest.raises(ValueError):
            head(bad)
    assert head(b"Content-Length: 24, 24\r\nContent-Length: 24") == (200, 24, False, False)
    assert head(b"Transfer-Encoding: chunked, gzip") == (200, -1, False, False)
    assert head(b"Transfer-Encoding: gzip, chunked;x=1") == (200, -1, True, False)
    assert head(b"Content-Length: 9\r\nTransfer-Encoding: chunked") == (200, -1, True, True)
    assert head(b"Connection: keep-alive\r\nConnection: close")[3] is True
    assert head(b"Connection: closed, xclose")[3] is False
    assert parse_head(b"HTTP/1.0 200 OK\r\nConnection: keep-alives")[3] is True
    for bad in [b"Content-Length : 5", b"X-Any\t: y", b"Transfer-Encoding: chunked, chunked",
                b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip, chunked;x=1"]:  # fmt: skip
        with pytest.raises(ValueError):
            head(bad)
