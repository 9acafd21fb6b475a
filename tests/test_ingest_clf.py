"""Common/Combined Log Format: the real logs (counted independently with awk/grep), edge cases."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from shrink.classify import Classifier
from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest import detect_format, read_clf, read_trace
from shrink.ingest.clf import parse_clf_time

pytestmark = pytest.mark.compute

NASA = "nasa_aug95_excerpt.repaired.log"
USASK = "usask_access_log_excerpt.log"
ELASTIC = "elastic_apache_logs_combined.log"


def _awk(program: str, path: Path) -> str:
    if shutil.which("awk") is None:
        pytest.skip("awk is not installed")
    return subprocess.run(
        ["awk", program, str(path)], check=True, capture_output=True, text=True
    ).stdout


def _awk_int(program: str, path: Path) -> int:
    return int(_awk(program, path).strip())


# A request line in quotes with at least METHOD and URL, counted by awk splitting on quotes:
# a different method from the reader's regular expression.
_AWK_REQUESTS = 'BEGIN{FS="\\""} NF>=3 {n2=split($2, r, " "); if (n2 >= 2) n++} END{print n+0}'


@pytest.mark.parametrize("name", [NASA, USASK, ELASTIC])
def test_real_log_request_count_matches_an_independent_count(real_dir, name):
    path = real_dir / name
    expected = _awk_int(_AWK_REQUESTS, path)
    lines = _awk_int("END{print NR}", path)
    trace = read_clf(path)
    assert len(trace) == expected
    assert trace.meta["skipped"] == lines - expected
    assert trace.meta["lines"] == lines


@pytest.mark.parametrize("name", [NASA, USASK, ELASTIC])
def test_real_log_requests_per_host_match_awk(real_dir, name):
    path = real_dir / name
    counted = Counter()
    for row in _awk("{c[$1]++} END{for (h in c) print h, c[h]}", path).splitlines():
        host, n = row.rsplit(" ", 1)
        counted[host] = int(n)
    trace = read_clf(path)
    assert Counter(trace.column("client").tolist()) == counted


def test_usask_http09_lines_without_version_parse(real_dir):
    path = real_dir / USASK
    no_version = _awk_int('BEGIN{FS="\\""} {if (split($2, r, " ") == 2) n++} END{print n+0}', path)
    assert no_version == 250  # what SOURCES.md says of this excerpt
    trace = read_clf(path)
    assert trace.meta["skipped"] == 0 and len(trace) == 400
    paths = set(trace.column("path").tolist())
    assert "/~scottp/publish.html" in paths
    assert not any(p.endswith("HTTP/1.0") for p in paths)


def test_usask_only_http09_lines(real_dir, tmp_path):
    src = (real_dir / USASK).read_bytes().splitlines(keepends=True)
    only = [ln for ln in src if b"HTTP/" not in ln]
    p = tmp_path / "http09.log"
    p.write_bytes(b"".join(only))
    trace = read_clf(p)
    assert len(trace) == len(only) == 250
    assert set(trace.column("method").tolist()) <= {"GET", "HEAD", "POST"}


def test_elastic_line_without_closing_quote_is_accepted_and_reported(real_dir):
    path = real_dir / ELASTIC
    trace = read_clf(path)
    assert len(trace) == 10_000
    assert trace.meta["flavor"] == "combined"
    assert trace.meta["repaired_lines"] == [8899]
    with pytest.raises(TraceFormatError, match="closing quote") as info:
        read_clf(path, strict=True)
    assert info.value.line == 8899


def test_elastic_sessions_are_host_and_agent_pairs(real_dir):
    path = real_dir / ELASTIC
    pairs = _awk_int(
        'BEGIN{FS="\\""} {split($1, h, " "); k[h[1] "|" $6]=1} END{n=0; for (x in k) n++; print n}',
        path,
    )
    # with an idle gap longer than the log, a session is exactly one (host, agent) pair
    assert read_clf(path, idle_gap="1000h").n_sessions == pairs
    # the 30-minute rule splits some of them
    assert read_clf(path).n_sessions > pairs


def test_time_zones_become_utc_epoch(real_dir):
    trace = read_clf(real_dir / NASA)
    first = datetime.strptime("01/Aug/1995:00:00:01 -0400", "%d/%b/%Y:%H:%M:%S %z")
    assert trace.meta["origin_epoch"] == first.timestamp()
    assert parse_clf_time("01/Aug/1995:04:00:01 +0000") == first.timestamp()
    assert parse_clf_time("01/Aug/1995:05:30:01 +0130") == first.timestamp()
    # t counts from the first request; the excerpt spans 01:12:23 of wall time
    assert trace.column("t").min() == 0.0
    assert trace.column("t").max() <= 72 * 60 + 23


def _log(tmp_path: Path, lines: list[str], name: str = "access.log") -> Path:
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


def _line(host: str, stamp: str, request: str, status="200", nbytes="10", tail: str = "") -> str:
    return f'{host} - - [{stamp}] "{request}" {status} {nbytes}{tail}'


def test_skipped_lines_are_counted_with_their_numbers(tmp_path):
    good = _line("a", "01/Aug/1995:00:00:01 -0400", "GET /x HTTP/1.0")
    lines = [good] * 30
    lines[2] = "garbage that is no log line"
    lines[9] = ""
    lines[19] = 'a - - [01/Aug/1995:00:00:01 -0400] "GET /x HTTP/1.0" 200'  # no bytes field
    lines[24] = _line("a", "01/Aug/1995:00:00:01 -0400", "-", "408", "-")  # no request
    lines[27] = _line("a", "32/Foo/1995:00:00:01 -0400", "GET /x")  # bad date
    p = _log(tmp_path, lines)
    trace = read_clf(p)
    assert trace.meta["skipped_lines"] == [3, 10, 20, 25, 28]
    assert trace.meta["skipped"] == 5 and len(trace) == 25
    with pytest.raises(TraceFormatError) as info:
        read_clf(p, strict=True)
    assert info.value.line == 3 and "access.log, line 3" in str(info.value)


def test_escaped_quotes_inside_fields(tmp_path):
    line = _line(
        "1.2.3.4",
        "17/May/2015:10:05:03 +0000",
        'GET /search?q=\\"hi\\" HTTP/1.1',
        tail=' "-" "Agent \\"X\\" 1.0"',
    )
    p = _log(tmp_path, [line, line.replace("/search", "/find")])
    trace = read_clf(p, strict=True)
    assert trace.column("path").tolist() == ['/search?q="hi"', '/find?q="hi"']
    assert trace.meta["flavor"] == "combined"


def test_bytes_dash_is_zero_and_status_kept(tmp_path):
    p = _log(
        tmp_path,
        [
            _line("h", "01/Jun/1995:00:00:59 -0600", "GET /a", "304", "-"),
            _line("h", "01/Jun/1995:00:00:59 -0600", "POST /b.cgi HTTP/1.0", "200", "512"),
        ],
    )
    trace = read_clf(p)
    assert trace.column("bytes").tolist() == [0, 512]
    assert trace.column("status").tolist() == [304, 200]
    assert trace.column("method").tolist() == ["GET", "POST"]
    assert trace.column("cls").tolist() == ["static", "dynamic"]
    assert np.isnan(trace.column("rt")).all()


def test_url_with_blanks_is_kept_whole(tmp_path):
    p = _log(tmp_path, [_line("h", "01/Jun/1995:00:00:59 -0600", "GET /a b/c.html HTTP/1.0")])
    assert read_clf(p).column("path").tolist() == ["/a b/c.html"]


def test_sessions_bursts_and_think_times(tmp_path):
    stamp = "01/Aug/1995:00:{:02d}:{:02d} +0000".format
    lines = [
        _line("A", stamp(0, 5), "GET /late.gif"),  # logged out of order
        _line("A", stamp(0, 0), "GET /index.html"),
        _line("B", stamp(0, 2), "GET /b1"),
        _line("A", stamp(0, 1), "GET /a.gif"),
        _line("A", stamp(0, 0), "GET /logo.gif"),
        _line("B", stamp(0, 3), "GET /b2"),
        _line("A", stamp(40, 0), "GET /again"),  # 39:55 later: a new session
    ]
    trace = read_clf(_log(tmp_path, lines))
    rows = list(
        zip(
            *(trace.column(c).tolist() for c in ("session", "burst", "t", "think", "path")),
            strict=True,
        )
    )
    assert rows == [
        (0, 0, 0.0, 4.0, "/index.html"),
        (0, 0, 0.0, 4.0, "/logo.gif"),
        (0, 0, 0.0, 4.0, "/a.gif"),
        (0, 1, 5.0, 0.0, "/late.gif"),
        (1, 0, 2.0, 0.0, "/b1"),
        (1, 0, 2.0, 0.0, "/b2"),
        (2, 0, 2400.0, 0.0, "/again"),
    ]
    # a burst is anchored on its first request: 0,1,2,3 with a 1-s gap make two bursts
    chain = [_line("C", stamp(0, s), f"GET /{s}") for s in range(4)]
    assert read_clf(_log(tmp_path, chain, "c.log")).column("burst").tolist() == [0, 0, 1, 1]
    # burst_gap 0: only the same second shares a burst
    same = read_clf(_log(tmp_path, chain, "c.log"), burst_gap=0)
    assert same.column("burst").tolist() == [0, 1, 2, 3]
    assert same.column("think").tolist() == [1.0, 1.0, 1.0, 0.0]
    # a shorter idle gap splits the chain into sessions
    assert read_clf(_log(tmp_path, chain, "c.log"), idle_gap="500ms").n_sessions == 4


def test_classifier_rules_are_configurable(tmp_path):
    p = _log(tmp_path, [_line("h", "01/Jun/1995:00:00:59 -0600", "GET /x.gif")])
    assert read_clf(p).column("cls").tolist() == ["static"]
    custom = Classifier(dynamic=(r"\.gif$",))
    assert read_clf(p, classifier=custom).column("cls").tolist() == ["dynamic"]


def test_bad_parameters(tmp_path):
    p = _log(tmp_path, [_line("h", "01/Jun/1995:00:00:59 -0600", "GET /x")])
    with pytest.raises(ParameterError, match="idle_gap"):
        read_clf(p, idle_gap="soon")
    with pytest.raises(ParameterError, match="burst_gap"):
        read_clf(p, burst_gap=-1.0)
    with pytest.raises(ParameterError, match="session_rate"):
        read_trace(p, format="clf", session_rate=2.0)


def test_gzip_log_reads_like_plain(real_dir, tmp_path):
    import gzip

    gz = tmp_path / "usask.log.gz"
    gz.write_bytes(gzip.compress((real_dir / USASK).read_bytes()))
    plain = read_trace(real_dir / USASK)
    packed = read_trace(gz)
    assert packed.same_rows(plain)
    assert packed.meta["reader"] == "clf"


_AGENT = ' "-" "Mozilla/5.0 (X11)"'


def test_vhost_combined_lines_are_read(tmp_path):
    # Apache's vhost_combined: "%v:%p %h %l %u %t ..." (Debian's default for virtual hosts)
    p = _log(
        tmp_path,
        [
            "www.example.com:443 "
            + _line("192.0.2.1", "10/Oct/2023:13:55:36 +0200", "GET / HTTP/1.1", tail=_AGENT),
            "other.org "
            + _line("2001:db8::7", "10/Oct/2023:13:55:37 +0200", "GET /b HTTP/1.1", "304", "-"),
            _line("192.0.2.3", "10/Oct/2023:13:55:38 +0200", "GET /c HTTP/1.1"),
        ],
    )
    assert detect_format(p) == "clf"
    trace = read_clf(p, strict=True)
    assert trace.column("client").tolist() == ["192.0.2.1", "2001:db8::7", "192.0.2.3"]
    assert trace.column("path").tolist() == ["/", "/b", "/c"]
    assert trace.column("bytes").tolist() == [10, 0, 10]
    assert trace.meta["vhost_lines"] == 2


@pytest.mark.parametrize(
    "tail",
    [
        _AGENT + " 0.005 0.004",  # nginx: $request_time $upstream_response_time
        _AGENT + " 1.234 1.230, 0.002",  # upstream times of two tried backends
        _AGENT + ' "-" rt=0.005 uct="0.000" urt="0.004"',  # a common nginx "timed" format
        _AGENT + " 5230",  # Apache %D
        " 2",  # Apache common format with %T
    ],
)
def test_fields_after_the_format_are_ignored_and_counted(tmp_path, tail):
    p = _log(
        tmp_path,
        [
            _line("192.0.2.1", "10/Oct/2023:13:55:36 +0000", "GET /a HTTP/1.1", tail=tail),
            _line("192.0.2.1", "10/Oct/2023:13:55:37 +0000", "GET /b HTTP/1.1", "404", "7", tail),
        ],
    )
    assert detect_format(p) == "clf"
    trace = read_clf(p, strict=True)
    assert trace.column("path").tolist() == ["/a", "/b"]
    assert trace.column("status").tolist() == [200, 404]
    assert trace.column("bytes").tolist() == [10, 7]
    assert np.isnan(trace.column("rt")).all()  # the unit of an appended time is not known
    assert trace.meta["extra_field_lines"] == 2 and trace.meta["skipped"] == 0


def test_a_broken_combined_tail_is_not_read_as_common_with_extras(tmp_path):
    p = _log(tmp_path, [_line("h", "10/Oct/2023:13:55:36 +0000", "GET /a", tail=' "ref" x"y')])
    trace = read_clf(p)
    assert len(trace) == 0 and trace.meta["skipped_lines"] == [1]


def test_iso_and_fractional_time_stamps(tmp_path):
    assert parse_clf_time("2023-10-10T13:55:36+02:00") == parse_clf_time(
        "10/Oct/2023:11:55:36 +0000"
    )
    assert parse_clf_time("2023-10-10T11:55:36Z") == parse_clf_time("10/Oct/2023:11:55:36 +0000")
    assert (
        parse_clf_time("10/Oct/2023:11:55:36.250 +0000")
        == parse_clf_time("10/Oct/2023:11:55:36 +0000") + 0.25
    )
    for bad in (
        "2023-13-10T11:55:36Z",
        "2023-02-30T11:55:36Z",
        "10/Oct/2023:11:55:36.",
        "1０/Oct/2023:11:55:36",
    ):
        with pytest.raises(ValueError):
            parse_clf_time(bad)
    p = _log(
        tmp_path,
        [
            _line("h", "2023-10-10T13:55:36+02:00", "GET /a HTTP/1.1"),
            _line("h", "2023-10-10T13:55:38.5+02:00", "GET /b HTTP/1.1"),
        ],
    )
    trace = read_clf(p, strict=True, burst_gap=0)
    assert trace.column("t").tolist() == [0.0, 2.5]


@pytest.mark.parametrize(
    ("stamps", "bad"),
    [
        (
            [
                "01/Jan/1970:00:00:00 +0000",
                "31/Dec/9999:23:59:59 +0000",
                "10/Oct/2023:13:55:36 +0000",
            ],
            2,
        ),
        (
            [
                "10/Oct/2023:13:55:36 +0000",
                "10/Oct/2023:13:55:37 +0000",
                "10/Oct/2153:13:55:37 +0000",
            ],
            3,
        ),
        (
            [
                "10/Oct/2153:13:55:37 +0000",
                "10/Oct/2023:13:55:37 +0000",
                "11/Oct/2023:13:55:37 +0000",
            ],
            1,  # the later of the two is named
        ),
    ],
)
def test_times_a_century_apart_name_the_lines(tmp_path, stamps, bad):
    # Left to the trace check, this named a row of the sorted trace instead of a line.
    p = _log(tmp_path, [_line("h", s, f"GET /{i}") for i, s in enumerate(stamps)])
    with pytest.raises(TraceFormatError, match="at most a century") as info:
        read_trace(p)
    assert info.value.line == bad and f"access.log, line {bad}:" in str(info.value)
    assert "years after line" in str(info.value)


def test_times_from_1970_to_now_are_kept(tmp_path):
    # A device without a clock logs 1970 until it syncs: within a century, read as written.
    p = _log(
        tmp_path,
        [
            _line("h", "01/Jan/1970:00:00:00 +0000", "GET /a"),
            _line("h", "10/Oct/2023:13:55:36 +0000", "GET /b"),
        ],
    )
    assert len(read_trace(p)) == 2


def test_bytes_logged_as_hex_escapes_are_replayed_as_those_bytes(tmp_path):
    # Apache and nginx log a request's bytes past ASCII as \xhh; kept as written, the
    # replay sent /caf%5Cxc3%5Cxa9 where the client had sent /caf\xc3\xa9.
    from shrink.wire import wire_target

    requests = [
        r"GET /caf\xc3\xa9.html HTTP/1.1",  # UTF-8
        r"GET /caf\xE9 HTTP/1.1",  # Latin-1: not text the replay could encode
        r"GET /a\x01b\\xc3 HTTP/1.1",  # a control byte; an escaped backslash stays
    ]
    p = _log(tmp_path, [_line("h", "01/Jun/1995:00:00:59 -0600", r) for r in requests])
    paths = read_clf(p, strict=True).column("path").tolist()
    assert paths == ["/café.html", "/caf%E9", "/a%01b\\xc3"]
    assert [wire_target(x) for x in paths] == ["/caf%C3%A9.html", "/caf%E9", "/a%01b%5Cxc3"]


def test_raw_bytes_that_are_not_utf8_are_replayed_as_those_bytes(tmp_path):
    """A log written raw (no \\xhh escapes) with a Latin-1 byte: the line was read as
    Latin-1 and replayed as /caf%C3%A9, a file the server never had; the UTF-8 text on
    the same line was garbled with it. Each byte that is not UTF-8 reads as %hh."""
    from shrink.ingest.wsesslog import read_wsesslog
    from shrink.wire import wire_target

    line = _line("h", "01/Jun/1995:00:00:59 -0600", "GET /caf\udce9/d\u00e9j\u00e0 HTTP/1.0")
    p = tmp_path / "raw.log"
    p.write_bytes(line.encode("utf-8", "surrogateescape") + b"\n")
    (path,) = read_clf(p, strict=True).column("path").tolist()
    assert path == "/caf%E9/d\u00e9j\u00e0"
    assert wire_target(path) == "/caf%E9/d%C3%A9j%C3%A0"
    w = tmp_path / "s.wsesslog"
    w.write_bytes(b"/a\xff\xfe.html think=1\n\t/b\xc3\xa9\n")
    assert read_wsesslog(w).column("path").tolist() == ["/a%FF%FE.html", "/b\u00e9"]


def test_a_raw_nul_in_the_request_is_a_bad_line_not_a_path(tmp_path):
    """A raw NUL in a request field (a server logs one as \\x00) was read as a path: ingest
    exited 0 with a trace the replay then refused ("cannot be sent: holds CR, LF or NUL")."""
    p = _log(
        tmp_path,
        [
            _line("192.0.2.1", "10/Oct/2023:13:55:36 +0000", "GET /a HTTP/1.1"),
            _line("192.0.2.1", "10/Oct/2023:13:55:37 +0000", "GET /b\x00c HTTP/1.1"),
            _line("192.0.2.1", "10/Oct/2023:13:55:38 +0000", "GET /d\\x00 HTTP/1.1"),
        ],
    )
    trace = read_clf(p)
    assert trace.column("path").tolist() == ["/a", "/d%00"]
    assert trace.meta["skipped_lines"] == [2]
    with pytest.raises(TraceFormatError, match="line 2: request field holds a raw NUL byte"):
        read_clf(p, strict=True)


def test_a_request_for_no_path_is_left_out_and_counted_in_either_mode(tmp_path):
    """A proxy probe's absolute URI, CONNECT's HOST:PORT and Apache's own ``OPTIONS *`` are
    lines a server wrote, but the replay sends paths only: it refused the whole trace.
    They are left out in either mode, counted, and said by ingest."""
    from typer.testing import CliRunner

    from shrink.cli import app

    p = _log(
        tmp_path,
        [
            _line("192.0.2.1", "10/Oct/2023:13:55:36 +0000", "GET /a HTTP/1.1"),
            _line("192.0.2.1", "10/Oct/2023:13:55:37 +0000", "GET http://other.host/x HTTP/1.1"),
            _line("::1", "10/Oct/2023:13:55:38 +0000", "OPTIONS * HTTP/1.0"),
            _line("192.0.2.9", "10/Oct/2023:13:55:39 +0000", "CONNECT a.example:443 HTTP/1.1"),
        ],
    )
    for strict in (False, True):
        trace = read_clf(p, strict=strict)
        assert trace.column("path").tolist() == ["/a"]
        assert (trace.meta["not_path"], trace.meta["not_path_lines"]) == (3, [2, 3, 4])
        assert trace.meta["skipped"] == 0
    res = CliRunner().invoke(app, ["ingest", str(p), "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 0, res.output
    assert "left out 3 requests for no path of the server's" in res.output
    assert "lines 2, 3, 4" in res.output
