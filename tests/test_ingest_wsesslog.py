"""httperf --wsesslog: every syntax rule of httperf's parser, the canonical writer, round trips."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers.wsesslog_quirks import NON_CANONICAL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shrink.classify import Classifier
from shrink.errors import TraceFormatError
from shrink.ingest import read_clf, read_trace
from shrink.ingest.wsesslog import METHODS, format_wsesslog, read_wsesslog, write_wsesslog
from shrink.trace import Trace

pytestmark = pytest.mark.compute

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "wsesslog_all_features.txt"


def _write(tmp_path: Path, text: str | bytes, name: str = "s.log") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def _rows(trace: Trace, *cols: str) -> list[tuple]:
    names = cols or ("session", "burst", "t", "think", "method", "path")
    return list(zip(*(trace.table.column(c).to_pylist() for c in names), strict=True))


# -- the canonical fixture -------------------------------------------------------------


def test_canonical_fixture_round_trips_byte_for_byte(tmp_path):
    trace = read_wsesslog(FIXTURE)
    out = write_wsesslog(trace, tmp_path / "out.log")
    assert out.read_bytes() == FIXTURE.read_bytes()


def test_canonical_fixture_reads_as_written_by_hand():
    trace = read_wsesslog(FIXTURE)
    assert len(trace) == 12
    assert trace.n_sessions == 3
    # session 0: four bursts, thinks 2.5, 1.25, 10, default 0; t accumulates the thinks
    s0 = [r for r in _rows(trace) if r[0] == 0]
    assert [(r[1], r[2], r[3]) for r in s0 if r[5] in ("/index.html", "/app/status.php")] == [
        (0, 0.0, 2.5),
        (3, 13.75, 0.0),
    ]
    assert sorted(set(trace.column("method"))) == sorted(METHODS)
    # sessions start at i / session_rate (1 per second by default)
    ids, starts = trace.session_starts()
    assert ids.tolist() == [0, 1, 2] and starts.tolist() == [0.0, 1.0, 2.0]
    bodies = dict(zip(trace.column("path"), trace.column("body"), strict=True))
    assert bodies["/api/track"] == b'{"event": "view", "note": "it\'s \\ here"}'
    assert bodies["/form.php"] == b"line one\nline two\r\n\tindented  spaces"
    assert bodies["/caf%C3%A9/men%C3%BC.html"] == "créme brûlée".encode()
    assert bodies["/style.css"] == b""
    assert trace.meta["reader"] == "wsesslog" and trace.meta["skipped"] == 0
    cls = dict(zip(trace.column("path"), trace.column("cls"), strict=True))
    assert cls["/app/search.php?q=shrink"] == "dynamic" and cls["/style.css"] == "static"


def test_session_rate_spaces_session_starts(tmp_path):
    trace = read_wsesslog(FIXTURE, session_rate=4.0)
    assert trace.session_starts()[1].tolist() == [0.0, 0.25, 0.5]


# -- non-canonical syntax: same meaning ---------------------------------------------


def test_non_canonical_file_reads_like_the_canonical_one(tmp_path):
    p = _write(tmp_path, NON_CANONICAL)
    got = read_wsesslog(p)
    want = read_wsesslog(FIXTURE)
    # the extra embedded /dummy request is the only difference in the rows
    keep = got.column("path") != "/dummy"
    assert got.filter(keep).same_rows(want)
    # and writing it gives canonical text
    text = format_wsesslog(got.filter(keep))
    assert text == FIXTURE.read_text(encoding="utf-8")


def test_blank_lines_make_no_empty_sessions(tmp_path):
    p = _write(tmp_path, "\n\n\n/a\n\n\n\n/b\n \n\t\n/c\n\n")
    assert read_wsesslog(p).column("session").tolist() == [0, 1, 2]


def test_only_column_one_hash_is_a_comment(tmp_path):
    p = _write(tmp_path, "/a\n /b\n# comment\n")
    trace = read_wsesslog(p)
    assert trace.column("path").tolist() == ["/a", "/b"]
    assert trace.column("burst").tolist() == [0, 0]
    # " #frag" is no comment but a path (one the replay cannot send: not from "/")
    with pytest.raises(TraceFormatError, match="line 2: the path '#frag' does not start"):
        read_wsesslog(_write(tmp_path, "/a\n #frag\n# comment\n"))


def test_method_is_prefix_matched_like_httperf(tmp_path):
    p = _write(tmp_path, "/a method=GETTING\n/b method=POSTAL\n/c method=OPTIONSX\n/d method=PUT\n")
    assert read_wsesslog(p).column("method").tolist() == ["GET", "POST", "OPTIONS", "PUT"]


def test_empty_contents_is_no_body(tmp_path):
    p = _write(tmp_path, "/a method=POST contents=''\n/b contents=\"\"\n")
    trace = read_wsesslog(p)
    assert not trace.has("body")
    assert trace.column("method").tolist() == ["POST", "GET"]


def test_crlf_file_reads_like_lf(tmp_path):
    lf = read_wsesslog(_write(tmp_path, "/a think=1\n\t/b contents=x\n\n/c\n", "lf.log"))
    crlf = read_wsesslog(
        _write(tmp_path, "/a think=1\r\n\t/b contents=x\r\n\r\n/c\r\n", "crlf.log")
    )
    assert crlf.same_rows(lf)


def test_think_default_applies_to_bursts_without_think(tmp_path):
    p = _write(tmp_path, "/a\n/b think=0.5\n/c\n")
    trace = read_wsesslog(p, think_default=2.0)
    assert trace.column("think").tolist() == [2.0, 0.5, 2.0]
    assert trace.column("t").tolist() == [0.0, 2.0, 2.5]
    # the writer leaves the default out, so the same default reads it back
    assert format_wsesslog(trace, think_default=2.0) == "/a\n/b think=0.5\n/c\n"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("/a\n/b think=1 foo=bar\n", 2, "unknown argument 'foo=bar'"),
        ("/a\n\n/b method=get\n", 3, "unknown method"),
        ("/a method=\n", 1, r"method= has no value \(no blank may follow the =\)"),
        ("/a think=\n", 1, r"think= has no value \(no blank may follow the =\)"),
        ("/a contents=\n", 1, r"contents= has no value \(no blank may follow the =\)"),
        ("/a\n/b think=2s\n", 2, "not a number"),
        ("/a think=-1\n", 1, "must be a finite number"),
        ("/a think=nan\n", 1, "must be a finite number"),
        ("/a contents='open\n/b\n", 1, "never closed"),
        ("/a\n/b\x00c think=1\n", 2, "the path holds a NUL byte"),
        ("/a\nhttp://other.host/x\n", 2, "'http://other.host/x' does not start with '/'"),
        ("/a contents=x\\\n", 1, "end of the file"),
        ("/a contents=x\\", 1, "end of the file"),
    ],
)
def test_syntax_errors_name_file_and_line(tmp_path, text, line, message):
    p = _write(tmp_path, text, "bad.log")
    with pytest.raises(TraceFormatError, match=message) as info:
        read_wsesslog(p)
    assert info.value.line == line
    assert info.value.path == str(p)
    assert f"bad.log, line {line}" in str(info.value)


def test_continuation_counts_lines_for_later_errors(tmp_path):
    p = _write(tmp_path, "/a contents='x\\\ny\\\nz'\n/b bogus\n")
    with pytest.raises(TraceFormatError) as info:
        read_wsesslog(p)
    assert info.value.line == 4


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("method", "PATCH", "cannot send method 'PATCH'"),
        ("method", "GETX", "cannot send method"),
        ("path", "/a b", "has blanks"),
        ("path", "", "is empty"),
        ("path", "#x", "comment"),
        ("think", -1.0, "must be finite"),
        ("body", "a\0b", "NUL"),
    ],
)
def test_writer_refuses_what_httperf_cannot_express(tmp_path, column, value, message):
    cols = {"session": [0], "t": [0.0], "path": ["/a"], "body": ["x"]}
    cols[column] = [value]
    with pytest.raises(TraceFormatError, match=message):
        write_wsesslog(Trace.from_columns(cols), tmp_path / "x.log")


def test_empty_file_gives_empty_trace(tmp_path):
    trace = read_wsesslog(_write(tmp_path, "# nothing here\n\n"))
    assert len(trace) == 0
    assert format_wsesslog(trace) == ""


# -- lossless read -> write -> read ------------------------------------------------------


def test_access_log_exported_to_wsesslog_reads_back_losslessly(tmp_path, real_dir):
    clf = read_clf(real_dir / "nasa_aug95_excerpt.repaired.log")
    first = write_wsesslog(clf, tmp_path / "a.log")
    a = read_trace(first)
    second = write_wsesslog(a, tmp_path / "b.log")
    assert second.read_bytes() == first.read_bytes()
    b = read_wsesslog(second)
    assert b.same_rows(a)
    # what wsesslog carries survives from the access log: sessions, bursts, think, paths
    assert a.column("path").tolist() == clf.column("path").tolist()
    assert a.column("think").tolist() == clf.column("think").tolist()
    assert a.column("burst").tolist() == clf.column("burst").tolist()
    assert a.n_sessions == clf.n_sessions


_PATH = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=" \t\n\v\f\r\0"),
    min_size=0,
    max_size=12,
).map(lambda s: "/" + s)
_BODY = st.one_of(
    st.just(""),
    st.text(
        alphabet=st.one_of(
            st.sampled_from(list("'\"\\\n\r\t =#")),
            st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
        ),
        max_size=20,
    ),
)
_REQUEST = st.tuples(st.sampled_from(METHODS), _PATH, _BODY)
_BURST = st.tuples(
    st.integers(min_value=0, max_value=10**6).map(lambda ms: ms / 1000),
    st.lists(_REQUEST, min_size=1, max_size=4),
)
_SESSIONS = st.lists(st.lists(_BURST, min_size=1, max_size=4), min_size=1, max_size=5)


def _build(sessions: list, rate: float) -> Trace:
    cols: dict[str, list] = {k: [] for k in ("session", "burst", "t", "think", "method", "path")}
    cols["body"] = []
    for sid, bursts in enumerate(sessions):
        t = sid / rate
        for bid, (think, requests) in enumerate(bursts):
            for method, path, body in requests:
                for k, v in zip(
                    ("session", "burst", "t", "think", "method", "path", "body"),
                    (sid, bid, t, think, method, path, body),
                    strict=True,
                ):
                    cols[k].append(v)
            t += think
    if not any(cols["body"]):
        del cols["body"]
    cols["cls"] = list(Classifier().classify_many(cols["path"]))
    return Trace.from_columns(cols)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=_SESSIONS, rate=st.sampled_from([0.5, 1.0, 3.0]))
def test_writer_then_reader_round_trips_generated_traces(tmp_path_factory, sessions, rate):
    trace = _build(sessions, rate)
    path = tmp_path_factory.mktemp("ws") / "g.log"
    write_wsesslog(trace, path)
    back = read_wsesslog(path, session_rate=rate)
    assert back.same_rows(trace)
    # and the text is a fixed point of read -> write
    assert format_wsesslog(back) == path.read_text(encoding="utf-8")


def test_generated_round_trip_checks_can_fail(tmp_path):
    """The property above compares real values: a changed think time is noticed."""
    trace = _build([[(1.5, [("GET", "/a", "")]), (0.0, [("GET", "/b", "")])]], 1.0)
    write_wsesslog(trace, tmp_path / "x.log")
    back = read_wsesslog(tmp_path / "x.log")
    assert back.same_rows(trace)
    changed = trace.with_column("think", np.array([1.25, 0.0]))
    assert not back.same_rows(changed)
    assert math.isnan(back.column("rt")[0])


def test_a_wsesslog_is_written_a_batch_at_a_time(tmp_path, monkeypatch):
    """``export`` to wsesslog built the whole text (and the columns as Python lists)
    first: about 10 GB for a trace of 20 M requests. Now one batch of rows at a time,
    the same text as the whole."""
    import tracemalloc

    from shrink.ingest import wsesslog as ws

    n = 50_000
    tr = Trace.from_columns(
        {
            "session": np.arange(n) // 10,
            "burst": np.arange(n) // 5,
            "t": np.arange(n) * 0.01,
            "think": np.where(np.arange(n) % 5 == 0, 1.5, 0.0),
            "path": [f"/pages/a-page-with-a-long-name-{i:06d}.html" for i in range(n)],
        },
        meta={"mode": "session"},
    )
    whole = format_wsesslog(tr)
    monkeypatch.setattr(ws, "WRITE_BATCH", 500)
    tracemalloc.start()
    try:
        write_wsesslog(tr, tmp_path / "t.log")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * 2**20, f"{peak / 2**20:.1f} MiB for {n:,} rows"
    assert len(whole) > 2_000_000  # the whole text alone would be over the bound
    assert (tmp_path / "t.log").read_text(encoding="utf-8") == whole


@pytest.mark.compute
def test_export_says_the_content_types_a_session_log_cannot_hold(tmp_path):
    """A JSON body exported to wsesslog and read back is sent as form data: the format has
    no field for a Content-Type, and `export` said nothing of the type it left out."""
    from typer.testing import CliRunner

    from shrink.cli import app

    tr = Trace.from_columns(
        {
            "session": np.array([0, 0, 0]),
            "burst": np.array([0, 1, 2]),
            "t": np.array([0.0, 1.0, 2.0]),
            "think": np.array([1.0, 1.0, 0.0]),
            "method": ["PUT", "POST", "GET"],
            "path": ["/a.php", "/b.php", "/c"],
            "body": [b'{"k": 1}', b"a=1", b""],
            "content_type": ["application/json", "application/x-www-form-urlencoded", None],
        },
        meta={"mode": "session"},
    )
    tr.write_parquet(tmp_path / "t.parquet")
    r = CliRunner().invoke(
        app, ["export", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "t.log")]
    )
    assert r.exit_code == 0, r.output
    notes = [line for line in r.output.splitlines() if "Content-Type" in line]
    assert len(notes) == 1 and "1 request (application/json)" in notes[0], r.output
    assert "x-www-form-urlencoded" in notes[0]  # what it is sent as
    r = CliRunner().invoke(
        app, ["export", str(tmp_path / "t.parquet"), "-f", "jsonl", "-o", str(tmp_path / "t.j")]
    )
    assert "Content-Type" not in r.output, r.output  # JSON Lines keep it
