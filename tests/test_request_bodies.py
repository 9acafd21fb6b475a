"""Request bodies go on the wire as the bytes recorded: read from a session log, kept in
the trace's binary ``body`` column, sent by both engines, received by a recording
server byte for byte."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.pcap_synth import Conn, http_response, write_capture

from shrink.errors import TraceFormatError
from shrink.ingest.capture import read_capture
from shrink.ingest.wsesslog import read_wsesslog, write_wsesslog
from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native
from shrink.testbed.fake import FakeServer
from shrink.trace import Trace

needs_core = pytest.mark.skipif(
    not native.available(), reason="the native core is not built (make setup: pip install ./native)"
)
ENGINES = {"python": native.run_python, "native": native.run_native}


def test_the_fake_server_reads_a_request_body_past_and_records_it():
    # A body that looks like a request: read as the next head, it was answered as one.
    body = b"GET /smuggled HTTP/1.1\r\n\r\n\x00\xff"
    post = b"POST /p HTTP/1.1\r\nHost: h\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    with FakeServer() as fake:
        # the body in two parts: the server waits for the rest before it answers
        with socket.create_connection(("127.0.0.1", fake.port), timeout=5) as s:
            s.sendall(post[:-5])
            s.sendall(post[-5:] + b"GET /q HTTP/1.1\r\nHost: h\r\n\r\n")
            got = b""
            while got.count(b"HTTP/1.1 200") < 2 or not got.endswith(b"x" * 100):
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
        assert fake.paths == ["/p", "/q"]
        assert fake.bodies == [body, b""]


def test_the_fake_server_records_each_request_content_type():
    # a Content-Type of its own: the replay sends a recorded one, else form data
    two = (b"POST /p HTTP/1.1\r\nHost: h\r\ncontent-TYPE:  application/json; a=b \r\n"
           b"Content-Length: 2\r\n\r\n{}GET /q HTTP/1.1\r\nHost: h\r\n\r\n")  # fmt: skip
    with FakeServer() as fake:
        with socket.create_connection(("127.0.0.1", fake.port), timeout=5) as s:
            s.sendall(two)
            got = b""
            while got.count(b"HTTP/1.1 200") < 2 or not got.endswith(b"x" * 100):
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
        assert fake.content_types == ["application/json; a=b", None]


# A body with NUL, bytes that are no UTF-8 (0xff, a lone continuation 0x80) and UTF-8
# (é, €), written raw; then a byte no UTF-8 after a backslash (kept, as httperf keeps
# any escaped character) and a \n escape. The path's byte 0xfe reads as %FE, as before.
LOG = (
    b"/post.php method=POST contents='a=\x00\xff\x80&t=\xc3\xa9\xe2\x82\xac \\\xfe\\n'\n"
    b"\t/caf\xfe.html\n"
    b'/put.php method=PUT contents="\xe2\x82\xac"\n'
)
BODIES = {
    "/post.php": b"a=\x00\xff\x80&t=\xc3\xa9\xe2\x82\xac \xfe\n",
    "/caf%FE.html": b"",
    "/put.php": b"\xe2\x82\xac",
}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "bodies.log"
    path.write_bytes(LOG)
    return path


def test_a_session_log_body_reads_as_the_bytes_in_the_file(log):
    trace = read_wsesslog(log)
    assert trace.table.schema.field("body").type == pa.binary()
    assert dict(zip(trace.column("path"), trace.column("body"), strict=True)) == BODIES


@needs_core
@pytest.mark.parametrize("engine", ["python", "native"])
def test_both_engines_send_the_bytes_recorded(log, engine):
    sched = build_schedule(read_wsesslog(log), 1.0, 5.0, loop=False)
    with FakeServer() as fake:
        w = RunLogWriter(None)
        ENGINES[engine](sched, EngineConfig([("127.0.0.1", fake.port)]), w, handle_signals=False)
        assert w.runlog().ok_mask().all()
        got = dict(zip(fake.paths, fake.bodies, strict=True))
    assert got == BODIES


def test_a_trace_written_with_a_string_body_still_reads_and_sends_its_utf8(tmp_path):
    cols = {"session": [0, 0, 1], "t": [0.0, 0.0, 1.0], "method": ["POST", "GET", "POST"],
            "path": ["/a", "/b", "/c"]}  # fmt: skip
    table = Trace.from_columns(cols).table.append_column("body", pa.array(["x=é", "", None]))
    assert table.schema.field("body").type == pa.string()
    path = tmp_path / "old.parquet"
    pq.write_table(table, path)
    trace = Trace.read_parquet(path)
    assert trace.table.schema.field("body").type == pa.binary()
    assert trace.table.column("body").to_pylist() == ["x=é".encode(), b"", None]
    keys = build_schedule(trace, 1.0, 5.0, loop=False).keys
    assert sorted(keys) == [("GET", "/b", b"", ""), ("POST", "/a", "x=é".encode(), ""),
                            ("POST", "/c", b"", "")]  # fmt: skip


def test_a_body_column_of_another_kind_is_refused_by_name(tmp_path):
    table = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/a"]}).table
    path = tmp_path / "bad.parquet"
    pq.write_table(table.append_column("body", pa.array([3])), path)
    with pytest.raises(TraceFormatError, match="column 'body' is of type int64, must be bytes"):
        Trace.read_parquet(path)


def test_bodies_keep_their_bytes_through_parquet_the_session_log_writer_and_jsonl(log, tmp_path):
    trace = read_wsesslog(log)
    again = Trace.read_parquet(trace.write_parquet(tmp_path / "t.parquet"))
    assert again.table.column("body").to_pylist() == trace.table.column("body").to_pylist()
    # httperf cannot send a NUL (its bodies are C strings): the writer refuses it as before
    with pytest.raises(TraceFormatError, match="NUL byte"):
        write_wsesslog(trace, tmp_path / "nul.log")
    bodies = [b.replace(b"\x00", b"") for b in trace.column("body")]
    no_nul = trace.with_column("body", bodies)
    written = write_wsesslog(no_nul, tmp_path / "back.log")
    assert b"\xff\x80" in written.read_bytes()  # the bytes themselves, not their escapes
    assert read_wsesslog(written).same_rows(no_nul)
    rows = [json.loads(line) for line in no_nul.write_jsonl(tmp_path / "t.jsonl").open()]
    assert [r.get("body") for r in rows] == [None, "", "€"]
    assert base64.b64decode(rows[0]["body_base64"]) == bodies[0]


# --- captures: a request's body is kept as the client sent it ---------------------
CAPTURED = [
    (b"POST /f.php HTTP/1.1\r\nHost: f\r\nContent-Length: 9\r\n\r\na=\x00\xff\x80\xc3\xa9=1",
     http_response(20)),
    (b"GET /g HTTP/1.1\r\nHost: f\r\n\r\n", http_response(20)),
    (b"PUT /c HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\nab\x80\r\n2;x=1\r\n\xc3\xa9\r\n0\r\n\r\n", http_response(20)),
]  # fmt: skip
CAPTURED_BODIES = {"/f.php": b"a=\x00\xff\x80\xc3\xa9=1", "/g": b"", "/c": b"ab\x80\xc3\xa9"}


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_captured_request_body_reads_as_the_bytes_sent(tmp_path, engine):
    trace = read_capture(write_capture(tmp_path / "p.pcap", [Conn(CAPTURED)]), engine=engine)
    assert dict(zip(trace.column("path"), trace.column("body"), strict=True)) == CAPTURED_BODIES
    assert trace.meta["http_anomalies"] == {}


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_captured_body_cut_short_keeps_what_came_and_is_counted(tmp_path, engine):
    cut = [(b"POST /f HTTP/1.1\r\nHost: f\r\nContent-Length: 100\r\n\r\nonly this", b"")]
    trace = read_capture(write_capture(tmp_path / "p.pcap", [Conn(cut)]), engine=engine)
    assert trace.column("body").tolist() == [b"only this"]
    assert trace.meta["http_anomalies"] == {"request-body-incomplete": 1}


@needs_core
@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_captured_body_is_replayed_as_the_bytes_sent(tmp_path, engine):
    trace = read_capture(write_capture(tmp_path / "p.pcap", [Conn(CAPTURED)]))
    sched = build_schedule(trace, 1.0, 5.0, loop=False)
    with FakeServer() as fake:
        w = RunLogWriter(None)
        ENGINES[engine](sched, EngineConfig([("127.0.0.1", fake.port)]), w, handle_signals=False)
        assert w.runlog().ok_mask().all()
        assert dict(zip(fake.paths, fake.bodies, strict=True)) == CAPTURED_BODIES
