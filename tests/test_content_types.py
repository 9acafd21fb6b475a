"""A request's Content-Type goes on the wire as recorded: read from a capture into the
trace's ``content_type`` column, kept through Parquet, sampling and the exports, sent
again by both engines; a body without a recorded type goes as form data, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.pcap_synth import Conn, http_response, write_capture
from typer.testing import CliRunner

import samplers
from shrink.cli import app
from shrink.errors import TraceFormatError
from shrink.ingest.capture import read_capture
from shrink.ingest.wsesslog import read_wsesslog, write_wsesslog
from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native
from shrink.replay._http import DEFAULT_CONTENT_TYPE, build_request
from shrink.scaling import probe_trace
from shrink.testbed.fake import FakeServer
from shrink.trace import Trace

needs_core = pytest.mark.skipif(
    not native.available(), reason="the native core is not built (make setup: pip install ./native)"
)
ENGINES = {"python": native.run_python, "native": native.run_native}
JSON = b'{"q":"caf\xc3\xa9","n":[1,2]}'
FORM = b"a=1&b=%C3%A9"
MULTIPART = b'--XyZ\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--XyZ--\r\n'
# a type travels with a body: a request that frames none records none
TYPES = {
    "/j.php": "application/json; charset=utf-8",
    "/f.php": "application/x-www-form-urlencoded",
    "/m.php": "multipart/form-data; boundary=XyZ",
    "/n.php": None,
    "/g": None,
}
BODIES = {"/j.php": JSON, "/f.php": FORM, "/m.php": MULTIPART, "/n.php": b"x=1", "/g": b""}


def _typed() -> Trace:
    """A trace of every request of ``BODIES`` (POST but the GET), typed by ``TYPES``."""
    paths = list(BODIES)
    return Trace.from_columns(
        {"session": range(len(paths)), "t": [0.1 * i for i in range(len(paths))],
         "method": ["GET" if p == "/g" else "POST" for p in paths], "path": paths,
         "body": list(BODIES.values()), "content_type": [TYPES[p] for p in paths]}
    )  # fmt: skip


def _replay(trace: Trace, engine: str) -> tuple[dict[str, str | None], dict[str, bytes]]:
    """What a recording server received, by path: Content-Type and body."""
    sched = build_schedule(trace, 1.0, 5.0, loop=False)
    with FakeServer() as fake:
        w = RunLogWriter(None)
        ENGINES[engine](sched, EngineConfig([("127.0.0.1", fake.port)]), w, handle_signals=False)
        assert w.runlog().ok_mask().all()
        types = dict(zip(fake.paths, fake.content_types, strict=True))
        return types, dict(zip(fake.paths, fake.bodies, strict=True))


@needs_core
@pytest.mark.parametrize("engine", ["python", "native"])
def test_both_engines_send_a_trace_s_recorded_types(engine):
    types, bodies = _replay(_typed(), engine)
    # a body with no recorded type goes as form data, as before; a GET without body bare
    assert types == {**TYPES, "/n.php": DEFAULT_CONTENT_TYPE}
    assert bodies == BODIES


@needs_core
@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_trace_written_before_the_column_replays_with_the_default(tmp_path, engine):
    cols = {"session": [0, 0], "t": [0.0, 0.0], "method": ["POST", "GET"], "path": ["/p", "/g"],
            "body": [b"a=1", b""]}  # fmt: skip
    path = tmp_path / "old.parquet"
    pq.write_table(Trace.from_columns(cols).table, path)
    trace = Trace.read_parquet(path)
    assert not trace.has("content_type")
    types, bodies = _replay(trace, engine)
    assert types == {"/p": DEFAULT_CONTENT_TYPE, "/g": None}
    assert bodies == {"/p": b"a=1", "/g": b""}


@pytest.mark.parametrize(
    "typ", ["text/plain\r\nX-Injected: 1", "text/plain\n\nGET /x HTTP/1.1", "a\x00", "a\u20ac"]
)
def test_a_trace_type_that_would_inject_a_header_is_refused_naming_the_row(tmp_path, typ):
    cols = {"session": [0, 1, 1], "t": [0.0, 1.0, 1.0], "method": ["POST"] * 3,
            "path": ["/a", "/b", "/c"], "body": [b"x"] * 3,
            "content_type": ["text/plain", "text/plain", typ]}  # fmt: skip
    path = Trace.from_columns(cols, {"source": "hostile.pcap"}).write_parquet(tmp_path / "t.pq")
    trace = Trace.read_parquet(path)
    with pytest.raises(TraceFormatError) as err:
        build_schedule(trace, 1.0, 5.0, loop=False)
    msg = str(err.value)
    assert msg.startswith("trace row 2 (session 1, read from hostile.pcap), column content_type: ")
    assert "cannot be sent: the Content-Type holds" in msg and "\n" not in msg


def test_requests_that_differ_only_in_type_are_distinct():
    types = ["application/json", "text/plain", "application/json", None]
    cols = {"session": [0, 0, 0, 0], "t": [0.0] * 4, "method": ["POST"] * 4,
            "path": ["/a"] * 4, "body": [b"{}"] * 4, "content_type": types}  # fmt: skip
    sched = build_schedule(Trace.from_columns(cols), 1.0, 5.0, loop=False)
    post = ("POST", "/a", b"{}")
    assert sched.keys == [(*post, "application/json"), (*post, "text/plain"), (*post, "")]
    assert sched.key_of_row.tolist() == [0, 1, 0, 2]


def test_build_request_sends_the_recorded_type_else_form_data():
    def head(*args) -> list[bytes]:
        return build_request(*args).split(b"\r\n\r\n")[0].split(b"\r\n")[1:]

    json_head = head("POST", "/a", "h", b"{}", "application/json")
    assert b"Content-Type: application/json" in json_head and b"Content-Length: 2" in json_head
    assert b"Content-Type: application/x-www-form-urlencoded" in head("POST", "/a", "h", b"a=1")
    assert not [h for h in head("GET", "/a", "h") if h.startswith(b"Content-")]


def test_the_column_is_checked_by_name_and_a_categorical_one_reads(tmp_path):
    table = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/a"]}).table
    for bad, kind in ((pa.array([b"text/plain"]), "binary"), (pa.array([3]), "int64")):
        path = tmp_path / f"{kind}.parquet"
        pq.write_table(table.append_column("content_type", bad), path)
        with pytest.raises(
            TraceFormatError, match=f"column 'content_type' is of type {kind}, must be a string"
        ):
            Trace.read_parquet(path)
    path = tmp_path / "dict.parquet"
    typed = pa.array(["text/plain"]).dictionary_encode()
    pq.write_table(table.append_column("content_type", typed), path)
    assert Trace.read_parquet(path).table.column("content_type").to_pylist() == ["text/plain"]


def test_the_column_is_kept_through_parquet_sampling_the_probe_info_and_exports(tmp_path):
    trace = _typed()
    path = trace.write_parquet(tmp_path / "t.parquet")
    again = Trace.read_parquet(path)
    assert again.column("content_type").tolist() == trace.column("content_type").tolist()
    kept = samplers.sample(again, 1.0, seed=1)
    assert kept.column("content_type").tolist() == trace.column("content_type").tolist()
    probe = probe_trace(again, 100.0, 0.2, seed=3)
    drawn = set(zip(probe.column("path"), probe.column("content_type"), strict=True))
    assert drawn <= set(TYPES.items()) and len(drawn) > 1
    info = CliRunner().invoke(app, ["trace", "info", str(path), "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.output)["requests"] == len(TYPES)
    rows = [json.loads(line) for line in again.write_jsonl(tmp_path / "t.jsonl").open()]
    assert {r["path"]: r["content_type"] for r in rows} == TYPES
    # httperf's session log has no per-request header: the writer leaves the type out
    log = read_wsesslog(write_wsesslog(again, tmp_path / "t.log"))
    assert not log.has("content_type") and log.column("body").tolist() == list(BODIES.values())


# --- captures: the type a client sent with a body -----------------------------------
CAPTURED = [
    (b"POST /j.php HTTP/1.1\r\nHost: f\r\nContent-Type: application/json; charset=utf-8\r\n"
     b"Content-Length: %d\r\n\r\n%s" % (len(JSON), JSON), http_response(20)),
    (b"POST /f.php HTTP/1.1\r\nHost: f\r\ncontent-type:  application/x-www-form-urlencoded \r\n"
     b"Content-Length: %d\r\n\r\n%s" % (len(FORM), FORM), http_response(20)),
    (b"PUT /m.php HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Type: multipart/form-data; boundary=XyZ\r\n\r\n"
     b"%x\r\n%s\r\n0\r\n\r\n" % (len(MULTIPART), MULTIPART), http_response(20)),
    (b"POST /n.php HTTP/1.1\r\nHost: f\r\nContent-Length: 3\r\n\r\nx=1", http_response(20)),
    (b"GET /g HTTP/1.1\r\nHost: f\r\nContent-Type: text/plain\r\n\r\n", http_response(20)),
]  # fmt: skip


def _capture(tmp_path: Path, exchanges=CAPTURED, engine: str = "fast") -> Trace:
    return read_capture(write_capture(tmp_path / "p.pcap", [Conn(exchanges)]), engine=engine)


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_captured_request_type_reads_as_sent(tmp_path, engine):
    trace = _capture(tmp_path, engine=engine)
    assert trace.table.schema.field("content_type").type == pa.string()
    assert dict(zip(trace.column("path"), trace.column("content_type"), strict=True)) == TYPES
    assert trace.meta["http_anomalies"] == {}


FOLDED = [
    # obs-fold: a line that starts with a space or a tab goes on the one before
    (b"POST /fold HTTP/1.1\r\nHost: f\r\nContent-Type: multipart/form-data;\r\n\t "
     b"boundary=XyZ\r\nContent-Length: 3\r\n\r\na=1", http_response(20)),
    (b"POST /twice HTTP/1.1\r\nContent-Type: text/plain\r\nHost: f\r\n"
     b"Content-Type: application/json\r\nContent-Length: 3\r\n\r\na=1", http_response(20)),
    (b"POST /same HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Type: text/plain\r\n"
     b"Content-Length: 3\r\n\r\na=1", http_response(20)),
]  # fmt: skip


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_folded_type_is_read_unfolded_and_two_unlike_types_are_counted(tmp_path, engine):
    trace = _capture(tmp_path, FOLDED, engine)
    assert trace.column("content_type").tolist() == [
        "multipart/form-data; boundary=XyZ",  # the server read it unfolded, so it goes so
        "text/plain",  # the first of two unlike ones, counted
        "text/plain",  # the same type twice is one type
    ]
    assert trace.meta["http_anomalies"] == {"request-content-type-repeated": 1}


def test_ingest_says_what_of_a_capture_s_http_it_could_not_take_whole(tmp_path):
    pcap = write_capture(tmp_path / "p.pcap", [Conn([*FOLDED, (HOSTILE_POST, http_response(20))])])
    res = CliRunner().invoke(app, ["ingest", str(pcap), "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 0, res.output
    note = [ln for ln in res.output.splitlines() if ln.startswith("note:")]
    assert len(note) == 1
    assert "two unlike Content-Types (the first kept): 1" in note[0]
    assert "Content-Types that cannot be sent again" in note[0]
    res = CliRunner().invoke(
        app, ["ingest", str(pcap), "-o", str(tmp_path / "u.parquet"), "--json"]
    )
    assert json.loads(res.output)["http_faults"] == {
        "request-content-type-dropped": 1, "request-content-type-repeated": 1
    }  # fmt: skip


@needs_core
@pytest.mark.parametrize("engine", ["python", "native"])
def test_both_engines_send_the_captured_types_and_bodies(tmp_path, engine):
    types, bodies = _replay(_capture(tmp_path), engine)
    assert types == {**TYPES, "/n.php": DEFAULT_CONTENT_TYPE}
    assert bodies == BODIES


HOSTILE_POST = b"POST /h HTTP/1.1\r\nContent-Type: text/\x01plain\r\nContent-Length: 3\r\n\r\na=1"
HOSTILE = [
    b"text/plain\rX-Injected: 1",  # a bare CR: the header block's lines end at LF only
    b"text/\x01plain",
    b"text/plain; x=" + b"a" * 1024,
]


@pytest.mark.parametrize("engine", ["fast", "scapy"])
def test_a_captured_type_that_cannot_go_on_the_wire_is_dropped_and_counted(tmp_path, engine):
    exchanges = [
        (b"POST /h%d HTTP/1.1\r\nHost: f\r\nContent-Type: %s\r\nContent-Length: 3\r\n\r\na=1"
         % (i, typ), http_response(20))
        for i, typ in enumerate(HOSTILE)
    ]  # fmt: skip
    trace = _capture(tmp_path, [*exchanges, CAPTURED[0]], engine)
    # the requests are kept, their bodies too; only the type goes, as if none was sent
    assert trace.column("path").tolist() == ["/h0", "/h1", "/h2", "/j.php"]
    assert trace.column("body").tolist() == [b"a=1"] * 3 + [JSON]
    assert trace.column("content_type").tolist() == [None] * 3 + [TYPES["/j.php"]]
    assert trace.meta["http_anomalies"] == {"request-content-type-dropped": 3}


def test_a_request_target_with_a_nul_is_left_out_and_counted(tmp_path):
    """A captured request line whose target held a NUL was read as a path: ingest exited 0
    and the replay refused the whole trace later ("cannot be sent: holds CR, LF or NUL").
    Alone in the capture, the error blamed a one-way capture ("only responses")."""
    ok = (b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\n", http_response(2))
    bad = (b"GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", http_response(2))
    pcap = write_capture(tmp_path / "p.pcap", [Conn([ok, bad, ok])])
    trace = read_capture(pcap)
    assert trace.column("path").tolist() == ["/ok", "/ok"]
    assert trace.meta["http_anomalies"]["request-target-nul"] == 1
    alone = write_capture(tmp_path / "q.pcap", [Conn([bad])])
    res = CliRunner().invoke(app, ["ingest", str(alone), "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 1
    assert "1 request with a NUL byte in the target" in res.output
    assert "only responses" not in res.output


def test_a_request_for_no_path_is_left_out_before_the_sessions_are_made(tmp_path):
    """A captured proxy request (``GET http://other.host/x``) or CONNECT's ``host:443`` was
    read as a path, and the replay, which sends paths only, refused the whole trace. They
    are left out and counted; alone in the capture, the error says why."""
    ok = (b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\n", http_response(2))
    proxy = (b"GET http://other.host/x HTTP/1.1\r\nHost: other.host\r\n\r\n", http_response(2))
    star = (b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", http_response(0))
    pcap = write_capture(tmp_path / "p.pcap", [Conn([ok, proxy, ok, star])])
    trace = read_capture(pcap)
    assert trace.column("path").tolist() == ["/ok", "/ok"]
    assert trace.meta["http_anomalies"]["request-target-not-path"] == 2
    assert trace.meta["requests"] == 4
    alone = write_capture(tmp_path / "q.pcap", [Conn([proxy])])
    res = CliRunner().invoke(app, ["ingest", str(alone), "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 1
    assert "1 request for no path of the server's" in res.output
