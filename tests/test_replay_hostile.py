"""The Python engine's response parser against answers a broken or hostile server
sends: each is a named failure, never a success, and memory stays bounded.

The native core's parser (native/src/http.rs) applies the same rules; its own unit
tests (``cargo test`` in native/) hold the same cases.
"""

from __future__ import annotations

import pytest
from helpers.http_fuzz import Transport

from shrink.replay._conn import _Conn, _Req
from shrink.replay._http import HEAD_LIMIT, parse_head

pytestmark = pytest.mark.compute


class _Engine:
    def __init__(self) -> None:
        self.conns: set[_Conn] = set()
        self.t0 = 0.0
        self.head_only = [False]
        self.key_of_row = [0]
        self.req_bytes = [[b"GET / HTTP/1.1\r\n\r\n"]]
        self.rows: list[tuple[int, int, str]] = []

    def record(self, req: _Req, status: int, nbytes: int, done: float, error: str) -> None:
        self.rows.append((status, nbytes, error))


class _Owner:
    def finished(self, conn: _Conn, req: _Req) -> None:
        pass

    def lost_idle(self, conn: _Conn) -> None:
        pass


def _answer(*reads: bytes) -> tuple[list[tuple[int, int, str]], _Conn]:
    """What one request records when the server sends ``reads``, one read each."""
    eng = _Engine()
    conn = _Conn(eng, _Owner(), 0)  # type: ignore[arg-type]
    conn.connection_made(Transport())  # type: ignore[arg-type]
    conn.submit(_Req(0, 0, 0, 0.0))
    for data in reads:
        conn.data_received(data)
    return eng.rows, conn


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    "body",
    [
        b"-2\r\n0\r\n\r\n",  # a negative size (Python's int reads it; it once completed)
        b"0x5\r\nhello\r\n0\r\n\r\n",  # int(.., 16) reads 0x
        b"0_5\r\nhello\r\n0\r\n\r\n",  # and underscores
        b"+5\r\nhello\r\n0\r\n\r\n",  # and a sign
        b"5\r\nhelloXY0\r\n\r\n",  # data longer than its size, not ended by CRLF
        b"10000000000000000\r\nxx",  # 2**64: the native core cannot hold it either
    ],
)
def test_a_malformed_chunk_is_a_bad_response(body):
    rows, _ = _answer(CHUNKED + body)
    assert rows == [(200, -1, "bad-response")]


def test_a_chunk_ends_with_crlf_even_split_over_reads():
    rows, _ = _answer(CHUNKED + b"5\r\nhello\r", b"\n0;x=1\r\n\r\n")
    assert rows == [(200, 5, "")]


@pytest.mark.parametrize("first", [CHUNKED, CHUNKED + b"0\r\n"])
def test_an_endless_chunk_line_or_trailer_is_bounded(first):
    # a chunk-size line (or trailer) with no CRLF: it was kept whole, growing forever
    rows, conn = _answer(first, *([b"f" * 16384] * 5))
    assert rows == [(200, -1, "bad-response")]
    assert len(conn.buf) <= HEAD_LIMIT


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 -12 OK",
        b"HTTP/1.1 000 OK",
        b"HTTP/1.1 999 OK",
        b"HTTP/1.1 2\r\nX: y",
        b"HTTP/1.1 2000 OK",
        b"HTTP/1.1 200 OK\r\nContent-Length: +2",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0_2",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5",
    ],
)
def test_a_status_or_length_that_is_not_a_number_of_http_is_refused(head):
    with pytest.raises(ValueError):
        parse_head(head)
    rows, _ = _answer(head + b"\r\n\r\nok")
    assert rows == [(0, -1, "bad-response")]


def test_well_formed_answers_still_parse():
    assert parse_head(b"HTTP/1.1 200\r\nContent-Length:  2 ") == (200, 2, False, False)
    assert parse_head(b"HTTP/1.0 599 X") == (599, -1, False, True)
    assert _answer(b"HTTP/1.1 100 Continue\r\n\r\n" * 1000 + b"HTTP/1.1 200 OK\r\n")[0] == []
    rows, _ = _answer(CHUNKED + b"2\r\nok\r\n", b"0\r\n\r\n")
    assert rows == [(200, 2, "")]


@pytest.mark.parametrize(
    "reads",
    [
        [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok"],  # longer than its length
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 2],  # two answers to one request
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"okHTTP/1.1 503 X\r\n"],
        [b"HTTP/1.1 204 No Content\r\n\r\nhello"],  # a body where none may be
        [CHUNKED + b"0\r\n\r\nHTTP/1.1 200 OK\r\n"],  # bytes past the trailer
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"HTTP/1.1 503 X\r\n\r\n"],  # late
    ],
)
def test_a_connection_out_of_step_is_not_reused(reads):
    # The answer itself was whole; what follows it could only be taken for the next
    # request's answer (a 503 it never got), so the connection is closed instead.
    rows, conn = _answer(*reads)
    assert rows[0][2] == "" and len(rows) == 1
    assert not conn.alive


def test_an_exact_answer_keeps_its_connection():
    rows, conn = _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"ok")
    assert rows == [(200, 2, "")] and conn.alive
    rows, conn = _answer(CHUNKED + b"0\r\nX: y\r\n\r\n")
    assert rows == [(200, 0, "")] and conn.alive


def test_a_content_length_past_63_bits_is_refused():
    # Python's int read it and the request waited for a body no server sends (then
    # timed out); the native core cannot hold it and said bad-response
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808"
    with pytest.raises(ValueError):
        parse_head(head)
    assert parse_head(head[:-1] + b"7")[1] == (1 << 63) - 1
    rows, _ = _answer(head + b"\r\n\r\nok")
    assert rows == [(0, -1, "bad-response")]


def test_a_bad_answer_on_a_reused_connection_has_no_earlier_status():
    # the connection's status was the previous answer's until a head was read: a
    # bad-response row of the second request said 404, the native core says 0
    eng = _Engine()
    eng.head_only = [False, False]
    eng.key_of_row = [0, 0]
    conn = _Conn(eng, _Owner(), 0)  # type: ignore[arg-type]
    conn.connection_made(Transport())  # type: ignore[arg-type]
    conn.submit(_Req(0, 0, 0, 0.0))
    conn.data_received(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno")
    conn.submit(_Req(1, 0, 0, 0.0))
    conn.data_received(b"HTTP/1.1 2x0 OK\r\n\r\n")
    assert eng.rows == [(404, 2, ""), (0, -1, "bad-response")]


def _pad(n: int) -> bytes:
    return b"X: " + b"y" * n


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\n" + _pad(HEAD_LIMIT) + b"\r\nContent-Length: 0\r\n\r\n",
        CHUNKED + b"1;" + _pad(HEAD_LIMIT) + b"\r\nx\r\n0\r\n\r\n",
        CHUNKED + b"0\r\n" + _pad(HEAD_LIMIT) + b"\r\n\r\n",
    ],
    ids=["head", "chunk-size line", "trailer"],
)
def test_a_long_head_line_or_trailer_is_bad_however_it_is_read(data):
    # in one read it completed; in reads of 1000 bytes, a partial one went past the
    # limit and it was bad: the outcome hung on how TCP cut the stream
    reads = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    assert _answer(data)[0] == _answer(*reads)[0]
    assert _answer(data)[0][0][2] == "bad-response"


def test_a_head_that_just_fits_is_read_however_it_is_read():
    data = b"HTTP/1.1 200 OK\r\n" + _pad(HEAD_LIMIT - 43) + b"\r\nContent-Length: 0\r\n\r\n"
    assert len(data) == HEAD_LIMIT
    reads = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    assert _answer(data)[0] == _answer(*reads)[0] == [(200, 0, "")]
