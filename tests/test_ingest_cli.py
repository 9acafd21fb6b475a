"""The format registry (read_trace, detect_format), ``shrink ingest`` and ``shrink export``."""

from __future__ import annotations

import json
import struct
import sys
import types
from pathlib import Path

import pytest
from helpers.pcap_synth import Conn, http_response, write_capture
from helpers.surface import exported, public_names
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest import READ_FORMATS, detect_format, read_clf, read_trace, write_trace
from shrink.ingest.wsesslog import format_wsesslog
from shrink.trace import Trace

pytestmark = pytest.mark.compute

runner = CliRunner()
FIXTURE = Path(__file__).parent / "data" / "wsesslog_all_features.txt"
NASA = "nasa_aug95_excerpt.repaired.log"


def _invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


# -- detection and the registry ---------------------------------------------------------


def test_detects_every_real_file_kind(real_dir):
    assert detect_format(real_dir / NASA) == "clf"
    assert detect_format(real_dir / "elastic_apache_logs_combined.log") == "clf"
    assert detect_format(real_dir / "ppa1e_http.cap") == "pcap"
    assert detect_format(real_dir / "ppa_http_post.pcapng") == "pcap"
    assert detect_format(real_dir / "zeek_http_1000-requests-one-dropped-response.pcap.gz") == (
        "pcap"
    )
    assert detect_format(FIXTURE) == "wsesslog"


def test_undetectable_files_ask_for_a_format(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(TraceFormatError, match="empty"):
        detect_format(tmp_path / "empty.txt")
    (tmp_path / "prose.txt").write_text("Dear reader,\nthis is a letter.\n")
    with pytest.raises(TraceFormatError, match="pass --format") as info:
        detect_format(tmp_path / "prose.txt")
    assert "prose.txt" in str(info.value)
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "missing.log")


def test_unknown_format_and_foreign_options_are_parameter_errors():
    with pytest.raises(ParameterError, match="format == 'xml'"):
        read_trace(FIXTURE, format="xml")
    with pytest.raises(ParameterError, match=r"^idle_gap == 60, does not apply to the wsesslog"):
        read_trace(FIXTURE, idle_gap=60)
    with pytest.raises(ParameterError, match=r"^burst_gap == 1, .* format \(nor do idle_gap\)"):
        read_trace(FIXTURE, idle_gap=60, burst_gap=1)
    assert set(READ_FORMATS) == {"wsesslog", "specweb", "clf", "pcap", "parquet"}


def test_public_surface_is_importable():
    import shrink.ingest as ingest

    assert public_names(ingest) == exported(ingest)


def test_parquet_traces_are_recognised(tmp_path):
    trace = read_trace(FIXTURE)
    p = trace.write_parquet(tmp_path / "t.parquet")
    assert detect_format(p) == "parquet"
    assert read_trace(p).same_rows(trace)


def test_pcap_is_dispatched_lazily_to_the_capture_reader(real_dir, monkeypatch):
    calls = []

    def read_capture(path, *, strict=False, **opts):
        calls.append((Path(path).name, strict, opts))
        return Trace.empty({"reader": "fake-capture"})

    fake = types.ModuleType("shrink.ingest.capture")
    fake.read_capture = read_capture  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shrink.ingest.capture", fake)
    trace = read_trace(real_dir / "ppa1e_http.cap", strict=True, port=80)
    assert trace.meta["reader"] == "fake-capture"
    assert calls == [("ppa1e_http.cap", True, {"port": 80})]


def test_missing_pcap_support_is_said_plainly(real_dir, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "shrink.ingest.capture", None)
    with pytest.raises(TraceFormatError, match="pcap/pcapng support is missing"):
        read_trace(real_dir / "ppa1e_http.cap")
    result = _invoke("ingest", real_dir / "ppa1e_http.cap", "-o", tmp_path / "x.parquet")
    assert result.exit_code == 1
    assert "pcap/pcapng support is missing" in result.output


def test_write_trace_formats(tmp_path):
    trace = read_trace(FIXTURE)
    assert write_trace(trace, tmp_path / "a.log", "wsesslog").read_bytes() == FIXTURE.read_bytes()
    lines = write_trace(trace, tmp_path / "a.jsonl", "jsonl").read_text().splitlines()
    assert len(lines) == len(trace) and json.loads(lines[0])["path"] == "/index.html"
    assert Trace.read_parquet(write_trace(trace, tmp_path / "a.parquet", "parquet")).same_rows(
        trace
    )
    with pytest.raises(ParameterError, match="format == 'csv'"):
        write_trace(trace, tmp_path / "a.csv", "csv")


# -- shrink ingest -------------------------------------------------------------------


def test_ingest_real_log_writes_the_trace_and_a_summary(real_dir, tmp_path):
    out = tmp_path / "nasa.parquet"
    result = _invoke("ingest", real_dir / NASA, "-o", out)
    assert result.exit_code == 0, result.output
    assert "(clf): 1,880 requests" in result.output
    assert "skipped 0 lines" in result.output
    written = Trace.read_parquet(out)
    assert written.same_rows(read_clf(real_dir / NASA))
    assert written.meta["reader"] == "clf" and written.meta["skipped"] == 0


def test_ingest_reports_skipped_line_numbers(real_dir, tmp_path):
    lines = (real_dir / NASA).read_text().splitlines()[:100]
    bad = list(range(5, 80, 3))  # 25 bad lines
    for number in bad:
        lines[number - 1] = f"junk {number}"
    src = tmp_path / "junk.log"
    src.write_text("\n".join(lines) + "\n")
    result = _invoke("ingest", src, "-o", tmp_path / "j.parquet", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["requests"] == 75 and summary["skipped"] == 25
    assert summary["skipped_lines"] == bad[:20]
    text = _invoke("ingest", src, "-o", tmp_path / "j.parquet").output
    assert "skipped 25 unreadable lines: 5, 8, 11" in text and text.rstrip().endswith("...")
    strict = _invoke("ingest", src, "-o", tmp_path / "j.parquet", "--strict")
    assert strict.exit_code == 1 and "junk.log, line 5" in strict.output


def test_ingest_options_reach_the_reader(real_dir, tmp_path):
    out = tmp_path / "u.parquet"
    args = ("ingest", real_dir / "usask_access_log_excerpt.log", "-o", out, "--json")
    default = json.loads(_invoke(*args).output)
    split = json.loads(_invoke(*args, "--idle-gap", "1m", "--burst-gap", "0").output)
    assert split["sessions"] > default["sessions"]
    assert split["bursts"] > default["bursts"]
    assert Trace.read_parquet(out).meta["idle_gap"] == 60.0
    bad = _invoke("ingest", FIXTURE, "-o", out, "--idle-gap", "10m")
    assert bad.exit_code == 2 and "--idle-gap: idle_gap == '10m', does not apply" in bad.output
    forced = _invoke("ingest", real_dir / NASA, "-o", out, "--format", "wsesslog")
    assert forced.exit_code == 1 and "line 1" in forced.output


def test_ingest_wsesslog_with_session_rate(tmp_path):
    out = tmp_path / "w.parquet"
    result = _invoke("ingest", FIXTURE, "-o", out, "--session-rate", "2")
    assert result.exit_code == 0, result.output
    assert Trace.read_parquet(out).session_starts()[1].tolist() == [0.0, 0.5, 1.0]


# -- shrink export -------------------------------------------------------------------


def test_export_wsesslog_and_jsonl(real_dir, tmp_path):
    parquet = tmp_path / "nasa.parquet"
    assert _invoke("ingest", real_dir / NASA, "-o", parquet).exit_code == 0
    ws = tmp_path / "nasa.wsesslog"
    result = _invoke("export", parquet, "--format", "wsesslog", "-o", ws)
    assert result.exit_code == 0, result.output
    assert ws.read_text() == format_wsesslog(Trace.read_parquet(parquet))
    # and the exported file ingests again to the same sessions and bursts
    again = tmp_path / "again.parquet"
    assert _invoke("ingest", ws, "-o", again).exit_code == 0
    a, b = Trace.read_parquet(parquet), Trace.read_parquet(again)
    for col in ("session", "burst", "think", "path", "method"):
        assert a.column(col).tolist() == b.column(col).tolist()
    js = tmp_path / "nasa.jsonl"
    assert _invoke("export", parquet, "--format", "jsonl", "-o", js).exit_code == 0
    assert len(js.read_text().splitlines()) == 1880


def test_export_refuses_a_method_httperf_lacks(tmp_path):
    parquet = Trace.from_columns(
        {"session": [0], "t": [0.0], "path": ["/x"], "method": ["PATCH"]}
    ).write_parquet(tmp_path / "p.parquet")
    result = _invoke("export", parquet, "-o", tmp_path / "p.log")
    assert result.exit_code == 1 and "PATCH" in result.output


def test_ingest_says_fields_after_the_log_format_are_not_read(tmp_path):
    src = tmp_path / "nginx.log"
    src.write_text(
        '192.0.2.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 5 "-" "curl/8" 0.005 -\n'
    )
    result = _invoke("ingest", src, "-o", tmp_path / "n.parquet")
    assert result.exit_code == 0, result.output
    assert "(clf): 1 request" in result.output
    assert "are not read: 1 line had some" in result.output


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "#Software: Microsoft Internet Information Services 10.0\n#Version: 1.0\n"
            "#Fields: date time s-ip cs-method cs-uri-stem cs-uri-query s-port c-ip sc-status\n"
            "2023-10-10 13:55:36 10.0.0.1 GET /index.html - 80 192.0.2.1 200\n",
            "W3C extended log",
        ),
        (
            "http 2018-07-02T22:23:00.186641Z app/my-lb/50dc6c495c0c9188 192.168.131.39:2817 "
            '10.0.0.1:80 0.000 0.001 0.000 200 200 34 366 "GET http://example.com:80/ HTTP/1.1" '
            '"curl/7.46.0" - -\n',
            "Application Load Balancer",
        ),
        (
            "2015-05-13T23:39:43.945958Z my-lb 192.168.131.39:2817 10.0.0.1:80 0.000073 0.001048 "
            '0.000057 200 200 0 29 "GET http://www.example.com:80/ HTTP/1.1" "curl/7.38.0" - -\n',
            "Classic Load Balancer",
        ),
        (
            '{"time":"2023-10-10T13:55:36+00:00","remote_addr":"192.0.2.1","status":200}\n',
            "JSON-lines log",
        ),
    ],
)
def test_access_logs_of_other_formats_are_named(tmp_path, text, named):
    # An ALB log was taken for a session log ("unknown argument '2018-07-02T...'"); the others
    # were "cannot tell the format", which sent the user to --format clf and no request read.
    src = tmp_path / "access.log"
    src.write_text(text)
    with pytest.raises(TraceFormatError, match=named) as info:
        detect_format(src)
    assert "access.log" in str(info.value) and "Combined Log Format" in str(info.value)
    result = _invoke("ingest", src, "-o", tmp_path / "t.parquet")
    assert result.exit_code == 1 and named in result.output and "Traceback" not in result.output


def test_a_jsonl_trace_export_is_named(real_dir, tmp_path):
    trace = read_clf(real_dir / NASA)
    out = write_trace(trace, tmp_path / "t.jsonl", "jsonl")
    with pytest.raises(TraceFormatError, match="JSON-lines trace") as info:
        detect_format(out)
    # It told the user to convert shrink's own export to Combined Log Format.
    assert "Combined Log Format" not in str(info.value), info.value
    assert "ingest the Parquet trace it was exported from" in str(info.value), info.value


def _one_way(src: Path, dst: Path, sport: int) -> Path:
    """The packets of a little-endian Ethernet/IPv4 pcap sent from TCP port ``sport``."""
    data = src.read_bytes()
    out, off = bytearray(data[:24]), 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        frame = data[off + 16 : off + 16 + incl]
        ihl = (frame[14] & 15) * 4
        if struct.unpack_from(">H", frame, 14 + ihl)[0] == sport:
            out += data[off : off + 16 + incl]
        off += 16 + incl
    dst.write_bytes(bytes(out))
    return dst


def test_a_capture_without_requests_says_why(tmp_path):
    # Each of these wrote an empty trace with exit 0, or blamed packets skipped as not HTTP.
    conns = [Conn([(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", http_response(3000))] * 3)]
    whole = write_capture(tmp_path / "whole.pcap", conns)
    cut = write_capture(tmp_path / "cut.pcap", conns, snaplen=70)
    replies = _one_way(whole, tmp_path / "replies.pcap", 80)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(whole.read_bytes()[:24])
    for src, why in [
        (cut, "12 of 24 packets were cut by the capture's snapshot length"),
        (replies, "only responses were captured (3 responses without their request)"),
        (empty, "the capture holds no packet"),
    ]:
        out = tmp_path / "t.parquet"
        result = _invoke("ingest", src, "-o", out)
        assert result.exit_code == 1, result.output
        assert f"{src.name}: no HTTP request read: {why}" in result.output
        assert not out.exists()
    requests_only = _one_way(whole, tmp_path / "requests.pcap", 40000)
    result = _invoke("ingest", requests_only, "-o", tmp_path / "r.parquet")
    assert result.exit_code == 0 and "(pcap): 3 requests" in result.output


def test_ingest_tells_a_capture_what_makes_a_session(tmp_path):
    # The capture reader takes sessions= (client, connection, cookie:NAME) but ingest had
    # no option for it: 20 users behind one address could only be one session.
    conns = [
        Conn([(f"GET /u{u}/{i} HTTP/1.1\r\nHost: t\r\n\r\n".encode(), http_response(10))
              for i in range(3)], cport=41000 + u, start=0.2 * u, gap=2.0)
        for u in range(15)
    ]  # fmt: skip
    cap = write_capture(tmp_path / "proxy.pcap", conns)
    out = tmp_path / "p.parquet"
    one = _invoke("ingest", cap, "-o", out)
    assert one.exit_code == 0, one.output
    assert "1 session had up to 15 connections to one server open at once" in one.output
    assert "--sessions connection" in one.output
    split = _invoke("ingest", cap, "-o", out, "--sessions", "connection")
    assert split.exit_code == 0, split.output
    assert Trace.read_parquet(out).n_sessions == 15 and "note" not in split.output
    bad = _invoke("ingest", cap, "-o", out, "--sessions", "users")
    assert bad.exit_code == 2 and "--sessions: sessions == 'users'" in bad.output


def test_ingest_refuses_a_cookie_name_no_cookie_has_and_says_when_none_was_sent(tmp_path):
    # 'cookie:☃' was an internal error (UnicodeEncodeError, exit 70); 'cookie:a b' and a
    # name no request carried read every session by client address and said nothing.
    cap = write_capture(
        tmp_path / "c.pcap",
        [Conn([(b"GET / HTTP/1.1\r\nHost: t\r\nCookie: sid=A\r\n\r\n", http_response(10))])],
    )
    out = tmp_path / "c.parquet"
    for name in ("\u2603", "a b", "a=b", "a;b", " sid"):
        bad = _invoke("ingest", cap, "-o", out, "--sessions", f"cookie:{name}")
        assert bad.exit_code == 2, bad.output
        assert "a cookie's name is ASCII letters, digits" in bad.output
    none = _invoke("ingest", cap, "-o", out, "--sessions", "cookie:nosuch")
    assert none.exit_code == 0, none.output
    assert "note: no request sent cookie nosuch or was answered with it" in none.output
    sid = _invoke("ingest", cap, "-o", out, "--sessions", "cookie:sid")
    assert sid.exit_code == 0 and "note" not in sid.output, sid.output


@pytest.mark.parametrize("linktype", [105, 65535])
def test_a_capture_of_a_link_type_not_read_names_it(tmp_path, linktype):
    """Before: 'skipped 3 packets (not HTTP or unreadable: unsupported-link 3)': which link
    the capture was of was not said (found by bench/bench_fuzz.py --states)."""
    conns = [Conn([(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", http_response(10))])]
    data = bytearray(write_capture(tmp_path / "a.pcap", conns).read_bytes())
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    struct.pack_into(endian + "I", data, 20, linktype)
    src = tmp_path / "odd.pcap"
    src.write_bytes(bytes(data))
    result = _invoke("ingest", src, "-o", tmp_path / "t.parquet")
    assert result.exit_code == 1, result.output
    assert "unsupported-link " in result.output
    assert f"(link type {linktype})" in result.output, result.output


def test_captures_joined_by_cat_are_read_as_one_and_the_note_says_where(tmp_path):
    """Before: 'warning: ..., record N, byte offset M: a second capture's file header
    starts here ...; no record could be read after it', the second capture's requests lost."""
    import gzip

    one = [Conn([(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", http_response(10))])]
    two = [Conn([(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n", http_response(10))], cport=41000)]
    a = write_capture(tmp_path / "a.pcap", one).read_bytes()
    src = tmp_path / "ab.pcap.gz"
    src.write_bytes(
        gzip.compress(a) + gzip.compress(write_capture(tmp_path / "b.pcap", two).read_bytes())
    )
    result = _invoke("ingest", src, "-o", tmp_path / "t.parquet")
    assert result.exit_code == 0, result.output
    assert "2 requests" in result.output and "warning" not in result.output, result.output
    assert "note: 2 captures (or pcapng sections) joined in one file" in result.output
    assert f"a capture's header at byte offset {len(a):,})" in result.output, result.output


@pytest.mark.parametrize(
    ("wrap", "what"),
    [
        (lambda d: __import__("bz2").compress(d), "bzip2-compressed: decompress it first"),
        (lambda d: __import__("lzma").compress(d), "xz-compressed: decompress it first"),
        (lambda d: b"\x28\xb5\x2f\xfd" + d, "zstd-compressed: decompress it first"),
    ],
)
def test_a_capture_compressed_other_than_gzip_is_named_with_format_pcap(tmp_path, wrap, what):
    """Before, with --format pcap (the capture reader itself): 'not a pcap or pcapng
    capture (bad magic 425a6839)', where the format's detection said what to run."""
    conns = [Conn([(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", http_response(10))])]
    src = tmp_path / "a.pcap.x"
    src.write_bytes(wrap(write_capture(tmp_path / "a.pcap", conns).read_bytes()))
    result = _invoke("ingest", "-f", "pcap", src, "-o", tmp_path / "t.parquet")
    assert result.exit_code == 1, result.output
    assert what in result.output and "bad magic" not in result.output, result.output
