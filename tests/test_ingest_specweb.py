"""Recorded-session logs (TSV/CSV: time session url ...): layout, bursts, think times, skips."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from shrink.errors import TraceFormatError
from shrink.ingest import detect_format, read_specweb, read_trace

pytestmark = pytest.mark.compute


def _write(tmp_path: Path, text: str, name: str = "sessions.tsv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _rows(trace, *cols):
    return list(zip(*(trace.column(c).tolist() for c in cols), strict=True))


FULL = (
    "#shrink-sessions v1\n"
    "# fields: time session url method status bytes rt\n"
    "# u1 loads a page with two images, thinks, posts a form\n"
    "100.000\tu1\t/index.php?id=3\tGET\t200\t5120\t0.040\n"
    "100.050\tu1\t/img/a.gif\tGET\t200\t812\t0.010\n"
    "100.400\tu1\t/img/b.gif\tGET\t304\t-\t0.500\n"
    "105.000\tu1\t/form.php\tPOST\t200\t99\t-\n"
    "\n"
    "101.000\tu2\t/\tGET\t200\t100\t0.002\n"
    "101.200\tu2\t/static/x.css\t\t\t\t\n"
)


def test_full_layout_with_header(tmp_path):
    trace = read_specweb(_write(tmp_path, FULL))
    assert _rows(trace, "session", "burst", "path", "client") == [
        (0, 0, "/index.php?id=3", "u1"),
        (0, 0, "/img/a.gif", "u1"),
        (0, 0, "/img/b.gif", "u1"),
        (0, 1, "/form.php", "u1"),
        (1, 0, "/", "u2"),
        (1, 0, "/static/x.css", "u2"),
    ]
    t = trace.column("t").tolist()
    assert t[:3] == [0.0, 0.0, 0.0] and t[3] == pytest.approx(5.0) and t[4] == pytest.approx(1.0)
    # think = next burst start - end of burst (latest send + rt): 105.0 - (100.4 + 0.5)
    assert trace.column("think")[0] == pytest.approx(4.1)
    assert trace.column("think")[3] == 0.0  # the last burst of a session
    assert trace.column("method").tolist() == ["GET", "GET", "GET", "POST", "GET", "GET"]
    assert trace.column("status").tolist() == [200, 200, 304, 200, 200, 0]
    assert trace.column("bytes").tolist() == [5120, 812, -1, 99, 100, -1]
    rt = trace.column("rt")
    assert rt[0] == 0.04 and math.isnan(rt[3]) and math.isnan(rt[5])
    assert trace.meta["origin"] == 100.0 and trace.meta["delimiter"] == "tab"
    assert trace.meta["skipped"] == 0 and trace.meta["reader"] == "specweb"


def test_think_time_is_never_negative(tmp_path):
    # the response of the first burst ends after the next burst was sent
    text = "0\ts\t/a\tGET\t200\t1\t3.0\n1.0\ts\t/b\tGET\t200\t1\t0.1\n"
    trace = read_specweb(_write(tmp_path, text))
    assert trace.column("burst").tolist() == [0, 1]
    assert trace.column("think").tolist() == [0.0, 0.0]


def test_burst_gap_is_anchored_on_the_first_request(tmp_path):
    text = "".join(f"{0.3 * i:.1f}\ts\t/r{i}\n" for i in range(5))  # 0, .3, .6, .9, 1.2
    p = _write(tmp_path, text)
    assert read_specweb(p).column("burst").tolist() == [0, 0, 1, 1, 2]
    assert read_specweb(p, burst_gap="1s").column("burst").tolist() == [0, 0, 0, 0, 1]
    assert read_specweb(p, burst_gap=0).column("burst").tolist() == [0, 1, 2, 3, 4]


def test_positional_columns_without_header_and_relative_times(tmp_path):
    p = _write(tmp_path, "0.0\t7\t/a\n2.5\t7\t/b\tHEAD\n1.0\t8\t/c\tGET\t404\n")
    trace = read_specweb(p)
    assert _rows(trace, "session", "burst", "t", "think", "method", "status", "client") == [
        (0, 0, 0.0, 2.5, "GET", 0, "7"),
        (0, 1, 2.5, 0.0, "HEAD", 0, "7"),
        (1, 0, 1.0, 0.0, "GET", 404, "8"),
    ]


def test_csv_with_header_in_other_order_and_quoting(tmp_path):
    text = (
        "# fields: session,url,time,rt\n"
        'alice,"/search?q=a,b",10.0,0.5\n'
        "bob,/x,10.2,\n"
        "alice,/next,20.0,-\n"
    )
    p = _write(tmp_path, text, "s.csv")
    assert detect_format(p) == "specweb"
    trace = read_trace(p)
    assert trace.meta["delimiter"] == "comma"
    assert _rows(trace, "session", "burst", "path", "t", "think") == [
        (0, 0, "/search?q=a,b", 0.0, 9.5),
        (0, 1, "/next", 10.0, 0.0),
        (1, 0, "/x", pytest.approx(0.2), 0.0),
    ]


def test_bad_lines_are_skipped_with_numbers_or_raise_when_strict(tmp_path):
    text = (
        "#shrink-sessions v1\n"
        "0.0\ts\t/a\n"
        "zero\ts\t/b\n"  # 3: time not a number
        "1.0\ts\n"  # 4: too few columns
        "2.0\t\t/c\n"  # 5: empty session
        "3.0\ts\t/d\tGET\t200\t10\t-1\n"  # 6: negative rt
        "4.0\ts\t/e\tGET\tOK\n"  # 7: status not a number
        "5.0\ts\t/f\n"
    )
    p = _write(tmp_path, text)
    trace = read_specweb(p)
    assert trace.meta["skipped_lines"] == [3, 4, 5, 6, 7]
    assert trace.column("path").tolist() == ["/a", "/f"]
    with pytest.raises(TraceFormatError, match="not a number") as info:
        read_specweb(p, strict=True)
    assert info.value.line == 3 and "sessions.tsv, line 3" in str(info.value)


@pytest.mark.parametrize(
    ("header", "message", "line"),
    [
        ("#shrink-sessions v2\n", "version 'v2'", 1),
        ("# fields: time session path\n", "unknown field", 1),
        ("# fields: time url\n", "lacks \\['session'\\]", 1),
        ("# comment\n# fields: time session url url\n", "named twice", 2),
        ("0\ts\t/x\n# fields: time session url\n", "before the first data line", 2),
    ],
)
def test_header_errors(tmp_path, header, message, line):
    p = _write(tmp_path, header + "0\ts\t/a\n")
    with pytest.raises(TraceFormatError, match=message) as info:
        read_specweb(p)
    assert info.value.line == line


def test_detects_session_logs(tmp_path):
    assert detect_format(_write(tmp_path, FULL, "a.tsv")) == "specweb"
    assert detect_format(_write(tmp_path, "1.5\tu\t/x\n", "b.tsv")) == "specweb"
    assert detect_format(_write(tmp_path, "1.5,u,/x\n", "c.csv")) == "specweb"


def test_empty_log_gives_empty_trace(tmp_path):
    trace = read_specweb(_write(tmp_path, "#shrink-sessions v1\n# fields: time session url\n"))
    assert len(trace) == 0 and trace.meta["skipped"] == 0


def test_times_a_century_apart_name_the_line(tmp_path):
    # Left to the trace check, this named row 2 of the sorted trace, not line 4.
    p = _write(tmp_path, "# fields: session url time\nu1\t/a\t0.0\nu1\t/b\t1.5\nu2\t/c\t1e12\n")
    with pytest.raises(TraceFormatError, match="at most a century") as info:
        read_trace(p)
    assert info.value.line == 4 and "line 2's 0.0" in str(info.value)
    assert "time 1e12 is 31,688 years after" in str(info.value)


def test_a_url_not_starting_with_a_slash_is_a_bad_line(tmp_path):
    """An absolute URI names its own host, and the replay, which sends paths only,
    refused the whole trace it was read into."""
    p = _write(tmp_path, "100.0\tu1\thttp://other.host/x\n100.1\tu1\t/c\n")
    trace = read_specweb(p)
    assert trace.column("path").tolist() == ["/c"] and trace.meta["skipped_lines"] == [1]
    with pytest.raises(TraceFormatError, match=r"line 1: url 'http://other\.host/x' is not a path"):
        read_specweb(p, strict=True)


def test_a_url_with_a_nul_is_a_bad_line(tmp_path):
    """Read as a path, a NUL made a trace the replay refused whole ("cannot be sent")."""
    p = _write(tmp_path, "100.0\tu1\t/a\x00b\n100.1\tu1\t/c\n")
    trace = read_specweb(p)
    assert trace.column("path").tolist() == ["/c"] and trace.meta["skipped_lines"] == [1]
    with pytest.raises(TraceFormatError, match="line 1: url holds a NUL byte"):
        read_specweb(p, strict=True)
