"""Bad input is one line naming the file and the field; bounded MATs are never points;
trace content is made fit for the wire; output paths are checked before measuring."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.testbed import sleeper
from typer.testing import CliRunner

from shrink import files
from shrink.checks import parse_duration, parse_threshold, parse_thresholds
from shrink.cli import app
from shrink.errors import ParameterError, ShrinkError, TestbedError, TraceFormatError
from shrink.ingest import read_clf, read_specweb
from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.machine import Machine
from shrink.mat import mat, mat_text
from shrink.replay._http import build_request, wire_target
from shrink.schedule import build_schedule
from shrink.testbed import lifecycle
from shrink.trace import Trace

runner = CliRunner()


def _curve(*levels: tuple[float, float, float]) -> LoadCurve:
    """Levels of (knob, mean latency s, throughput req/s), two equal repetitions each."""
    out = []
    for x, mean, thr in levels:
        st = ClassStats(1000, thr, mean, mean, mean, mean, 2 * mean)
        out.append(Level(x, [LevelStats(thr, st), LevelStats(thr, st)]))
    return LoadCurve(levels=out)


# --------------------------------------------------------------------- the one reader
def test_read_json_names_file_and_field(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    doc = _curve((1, 0.001, 100), (2, 0.002, 200)).to_dict()
    doc["levels"][1]["reps"][0]["overall"]["n"] = "many"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"c\.json: levels\[1\]\.reps\[0\]\.overall\.n: "):
        LoadCurve.read_json(p)
    del doc["levels"]
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match="load curve lacks levels"):
        LoadCurve.read_json(p)


def test_the_curve_format_is_the_curve_type(tmp_path: Path) -> None:
    """One definition: LoadCurve and its parts are the schema, reader and writer."""
    from shrink.loadcurve import CURVE_FORMAT

    defs = CURVE_FORMAT.json_schema(mode="serialization")["$defs"]
    assert defs["ClassStats"]["properties"]["n"]["minimum"] == 0
    assert "schema" in CURVE_FORMAT.json_schema(mode="serialization")["properties"]
    doc = _curve((1, 0.001, 100), (2, 0.002, 200)).to_dict()
    assert doc["schema"] == "shrink.loadcurve/1"
    # A repetition written before failures, send lags and steal were recorded, with no
    # latency measured (null), still reads: the defaults, and NaN for the figure.
    rep = doc["levels"][0]["reps"][0]
    for key in ("failures", "requests", "send_lag_max", "steal", "generator_cpu"):
        del rep[key]
    rep["overall"]["p999"] = None
    doc["meta"] = {"scaled_time": 2.0, "note": "kept"}
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    back = LoadCurve.read_json(p)
    old = back.levels[0].reps[0]
    assert (old.failures, old.requests, old.send_lag_max) == (None, None, None)
    assert math.isnan(old.overall.p999) and back.to_dict()["meta"] == doc["meta"]
    assert (back.sweep.scaled_time, back.meta) == (2.0, {"note": "kept"})
    again = back.write_json(tmp_path / "again.json")
    assert LoadCurve.read_json(again).write_json(tmp_path / "3.json").read_bytes() == (
        again.read_bytes()
    )
    # The meta keys later stages read are checked, by name.
    doc["meta"]["scaled_time"] = -1
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"c\.json: meta\.scaled_time: "):
        LoadCurve.read_json(p)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"schema": "shrink.loadcurve/1", \xff}', r"byte offset 33: not UTF-8"),
        (b'{"schema": "shrink.loadcurve/1",\n "levels": [', r"line 2: not JSON"),
        (b'{"n": ' + b"9" * 5000 + b"}", r"line 1: not a load curve: a number of more than 4,300"),
        (b"[" * 100_000, r"nested too deeply|not JSON"),
        (b"PAR1\x15\x04\xff\xfe", r"not UTF-8 text, so not a load curve \(a binary file"),
    ],
)
def test_read_json_refuses_in_one_line(tmp_path: Path, data: bytes, match: str) -> None:
    p = tmp_path / "c.json"
    p.write_bytes(data)
    with pytest.raises(TraceFormatError, match=match) as err:
        LoadCurve.read_json(p)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(p))


def test_directory_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="is a directory"):
        LoadCurve.read_json(tmp_path)
    with pytest.raises(TraceFormatError, match="no such load curve"):
        LoadCurve.read_json(tmp_path / "none.json")


def test_machine_sizes_are_bounded(tmp_path: Path) -> None:
    p = tmp_path / "m.toml"
    p.write_text('name = "x"\nsockets = 100000000\ncores_per_socket = 2\n')
    with pytest.raises(TraceFormatError, match=r"m\.toml: sockets: .*less than or equal to 64"):
        Machine.read_toml(p)
    p.write_text('name = "x"\nsockets = 64\ncores_per_socket = 4096\nthreads_per_core = 16\n')
    with pytest.raises(TraceFormatError, match="must be <= 8192"):
        Machine.read_toml(p)
    p.write_text("sockets = 2\ncores_per_socket = 2\n[nic]\nports = 1\nport_socket = [5]\n")
    with pytest.raises(TraceFormatError, match="port_socket must name a socket"):
        Machine.read_toml(p)
    assert Machine.from_dict({"sockets": 2, "cores_per_socket": 4}).sockets == 2


def test_testbed_state_errors_are_testbed_errors(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text('{"schema": "shrink.testbed/1", "replicas": [{"port": "x"}]}')
    with pytest.raises(TestbedError, match=r"s\.json: .*replicas\[0\]"):
        from shrink.testbed.state import TestbedState

        TestbedState.read(p)


def test_down_on_a_damaged_state_stops_what_it_names_and_no_stranger(tmp_path: Path) -> None:
    proc, start = sleeper()
    try:
        p = tmp_path / "s.json"
        # JSON, but not a state: the PID with its start time is ours, and is stopped
        rep = {"port": "broken", "php_pids": [proc.pid], "starttimes": {str(proc.pid): start}}
        p.write_text(json.dumps({"schema": "shrink.testbed/1", "replicas": [rep]}))
        # garbage: the start time is salvaged by pattern
        damaged = p.read_bytes()[:-3] + b"\xff"
        stopped = lifecycle.down(p)
        assert list(stopped.values()) == [[proc.pid]]
        proc.wait(timeout=5)
    finally:
        proc.kill()
        proc.wait()
    proc, start = sleeper()
    try:
        p.write_bytes(damaged.replace(str(start).encode(), str(start + 1).encode()))
        assert list(lifecycle.down(p).values()) == [[]]  # a different start time: a stranger
        assert proc.poll() is None
        p.write_bytes(damaged.replace(b"1000000", b"x").replace(b'"starttimes"', b'"other"'))
        assert list(lifecycle.down(p).values()) == [[]]  # no start time and not lighttpd
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(TestbedError, match="no such testbed state"):
        lifecycle.down(tmp_path / "none.json")


def test_down_on_a_file_that_is_no_state_says_so_and_stops_nothing(tmp_path: Path) -> None:
    """``testbed down --state /etc/shadow`` said "damaged state (PIDs it still names):
    nothing was running" and exited 0, naming neither the file nor what was wrong."""
    p = tmp_path / "shadow"
    p.write_text("root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    with pytest.raises(TestbedError, match="names no process either: nothing was stopped") as err:
        lifecycle.down(p)
    assert str(p) in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------- text and Parquet readers
def test_clf_is_linear_in_line_length(tmp_path: Path) -> None:
    # An unclosed user agent ending in blanks took 23.5 s at 100 KB (quadratic backtracking).
    head = '1.2.3.4 - - [01/Aug/1995:00:00:01 -0400] "GET /x HTTP/1.0" 200 1 "r" "ua \\'
    p = tmp_path / "a.log"
    p.write_text(head + " " * 100_000 + '"x\\" 5"\n' + head[:-5] + '"\n')
    done = threading.Event()
    result: list[Trace] = []

    def run() -> None:
        result.append(read_clf(p))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(10.0), "CLF reader ran past 10 s on a 100 KB line"
    assert result[0].meta["skipped"] == 1 and len(result[0]) == 1


def test_clf_bytes_past_int64_is_a_skipped_line(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    line = '1.2.3.4 - - [01/Aug/1995:00:00:01 -0400] "GET /x HTTP/1.0" 200 ' + "9" * 30
    p.write_text(line + "\n")
    assert read_clf(p).meta["skipped"] == 1


def test_specweb_bare_cr_is_skipped_in_lenient_mode(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_bytes(b"# fields: time,session,url\n1,a,/x\n2,b\rc,/y\n4,a,/w\n")
    tr = read_specweb(p)
    assert len(tr) == 2 and tr.meta["skipped_lines"] == [3]
    with pytest.raises(TraceFormatError, match=r"s\.csv, line 3: bad CSV"):
        read_specweb(p, strict=True)
    p.write_bytes(b"1\ta\t/x\tGET\t200\n2\ta\t/x\tGET\t99999999999\n")
    assert read_specweb(p).meta["skipped_lines"] == [2]  # not an HTTP status (nor an int32)


def _trace(**cols: list) -> Trace:
    base = {"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}
    return Trace.from_columns({**base, **cols})


def test_parquet_trace_with_bad_types_or_values(tmp_path: Path) -> None:
    p = _trace().write_parquet(tmp_path / "t.parquet")
    table = pq.read_table(p)
    pq.write_table(table.set_column(2, "t", pa.array(["x", "y"])), p)
    with pytest.raises(TraceFormatError, match=r"t\.parquet: column 't' is of type string") as e:
        Trace.read_parquet(p)
    assert "\n" not in str(e.value)
    pq.write_table(table.set_column(2, "t", pa.array([0.0, float("nan")])), p)
    with pytest.raises(TraceFormatError, match=r"row 1: t == nan"):
        Trace.read_parquet(p)
    pq.write_table(table.set_column(5, "path", pa.array(["/a", None])), p)
    with pytest.raises(TraceFormatError, match="row 1: column 'path' is null"):
        Trace.read_parquet(p)
    p.write_bytes(b"PAR1" + os.urandom(64))
    with pytest.raises(TraceFormatError, match="not a readable Parquet trace"):
        Trace.read_parquet(p)


def test_shrink_mat_on_a_parquet_file(tmp_path: Path) -> None:
    p = _trace().write_parquet(tmp_path / "t.parquet")
    r = runner.invoke(app, ["mat", str(p), "--threshold", "5ms"])
    assert r.exit_code == 1 and "not UTF-8 text, so not a load curve" in r.output
    assert "Traceback" not in r.output


# --------------------------------------------------------------------- bounds and thresholds
def test_a_small_mat_keeps_its_significant_digits() -> None:
    # Written ",.0f", a bound of 0.215 req/s read "< 0" in whatif, predict and the report.
    from shrink.report.recommendation import whatif_reason
    from shrink.report.text import rate_text

    assert mat_text(0.215, "below_range") == "< 0.215"
    assert mat_text(0.0042, "ok", [0.003, 0.00612]) == "0.0042 [0.003, 0.00612]"
    assert mat_text(5.431, "not_reached") == ">= 5.43"
    assert mat_text(12_345.6) == "12,346" and mat_text(0) == "0"
    assert rate_text(0.215) == "0.215" and rate_text(1234.4) == "1,234"
    from shrink.prediction import MappingPrediction, StatPrediction
    from shrink.recommend import recommend

    out = {n: MappingPrediction({"mean": StatPrediction(m, (m, m), 0.01)}, {})
           for n, m in (("1-replica", 0.25), ("2-replica-direct", 0.5))}  # fmt: skip
    text = whatif_reason(recommend(out, ["mean"]), list(out), out, 0.0)
    assert "MAT, 0.5 req/s (vs 1-replica 0.25 (+100.0%))" in text, text


def test_a_bounded_mat_is_never_a_point(tmp_path: Path) -> None:
    curve = _curve((1, 0.001, 100), (2, 0.002, 200), (3, 0.004, 300))
    low = mat(curve, "mean", 0.0005)  # over at the lowest level
    high = mat(curve, "mean", 0.010)  # never reached
    ok = mat(curve, "mean", 0.003)
    assert (low.bound, high.bound, ok.bound) == ("upper", "lower", None)
    assert low.text() == "< 100.0" and high.text() == ">= 300.0"
    assert ok.text(",.0f").startswith(f"{ok.mat:,.0f} [")
    assert mat_text(608, "not_reached", [335, 608]) == ">= 608"
    assert mat_text(float("nan"), "ok") == "-"
    d = high.to_dict()
    assert d["bound"] == "lower" and d["ci"] is None and d["text"] == ">= 300.0"
    path = curve.write_json(tmp_path / "c.json")
    for thr, code, text in (("0.5ms", 99, "< 100.0 req/s"), ("10ms", 99, ">= 300.0 req/s"),
                            ("3ms", 0, "CI [")):  # fmt: skip
        r = runner.invoke(app, ["mat", str(path), "--threshold", thr])
        assert r.exit_code == code and text in r.output, r.output
    r = runner.invoke(app, ["mat", str(path), "--threshold", "0.5ms", "--json"])
    assert r.exit_code == 99 and json.loads(r.stdout)["bound"] == "upper"


def test_a_threshold_needs_a_unit() -> None:
    with pytest.raises(ParameterError, match=r"threshold == '5' has no unit; .*us, ms, s"):
        parse_threshold("5")
    with pytest.raises(ParameterError, match="threshold mean == '5' has no unit"):
        parse_thresholds("mean=5,p999=500ms")
    with pytest.raises(ParameterError, match=r"units: us, ms, s"):
        parse_threshold("5min")
    assert parse_threshold("500us") == pytest.approx(5e-4)
    assert parse_threshold("5 ms") == pytest.approx(5e-3)
    assert parse_duration("5") == 5.0  # a duration (not a threshold) may be bare seconds
    r = runner.invoke(app, ["mat", "x.json", "--threshold", "5"])
    assert r.exit_code == 2 and "has no unit" in r.output  # a refused option


def test_a_statistic_given_twice_is_refused() -> None:
    # "mean=5ms,mean=50ms" kept the last silently; p99.9 and p999 are one statistic.
    for text in ("mean=5ms,mean=50ms", "p99.9=500ms,p999=1s"):
        with pytest.raises(ParameterError, match=r"twice: give each statistic once"):
            parse_thresholds(text)
    machine = Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml"
    args = ["sim", "mappings", "--machine", str(machine), "--thresholds", "mean=5ms,mean=50ms"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "twice" in r.output, r.output


# --------------------------------------------------------------------- the wire
def test_paths_are_encoded_for_the_wire() -> None:
    assert wire_target("/a b") == "/a%20b"
    assert wire_target("/café?q=ü") == "/caf%C3%A9?q=%C3%BC"
    assert wire_target("/a%20b?x=1&y=/z") == "/a%20b?x=1&y=/z"  # already encoded: as is
    assert wire_target("/100%") == "/100%25"
    assert wire_target("") == "/"
    sched = build_schedule(_trace(path=["/a b", "/é"]), 1.0, 1.0, loop=False)
    assert [k[1] for k in sched.keys] == ["/a%20b", "/%C3%A9"]
    req = build_request("GET", sched.keys[1][1], "h")
    assert req.startswith(b"GET /%C3%A9 HTTP/1.1\r\n")


@pytest.mark.parametrize("path", ["/a\r\nHost: evil", "/a\nb", "/a\x00"])
def test_smuggling_paths_are_refused_naming_the_row(path: str) -> None:
    tr = _trace(path=["/ok", path]).with_meta(source="access.log")
    with pytest.raises(TraceFormatError, match=r"trace row 1 \(session 2, read from access\.log\)"):
        build_schedule(tr, 1.0, 1.0, loop=False)


@pytest.mark.parametrize(
    "path", ["http://other.host/x", "HTTP://other.host", "other.host:443", "*", "rel/x", "?q=1"]
)
def test_a_path_not_in_origin_form_is_refused_naming_the_row(path: str) -> None:
    # An absolute URI went on the request line as it was: the server takes its host over
    # the Host header (a proxy under test fetched from other.host); the other forms
    # asked for no file.
    with pytest.raises(ValueError, match=r"does not start with '/'"):
        wire_target(path)
    tr = _trace(path=["/ok", path]).with_meta(source="access.log")
    with pytest.raises(TraceFormatError, match=r"trace row 1 \(session 2, .*start with '/'"):
        build_schedule(tr, 1.0, 1.0, loop=False)
    assert wire_target("//other.host/x") == "//other.host/x"  # origin-form: a path


@pytest.mark.parametrize("path", ["http://other.host/x", "/a\r\nHost: evil"])
def test_an_open_loop_path_that_cannot_be_sent_names_the_option(path: str, tmp_path: Path) -> None:
    # Before: "trace row 0 (session 0), column path: ...", of a trace the user never gave
    # (and the absolute URI went out as it was).
    args = ["replay", "--rate", "5", "--duration", "1s", "--path", path,
            "--target", "http://127.0.0.1:9", "-o", str(tmp_path / "r.parquet")]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "--path: " in r.output and "trace row" not in r.output, r.output
    assert not (tmp_path / "r.parquet").exists()


def test_a_method_must_be_a_token() -> None:
    with pytest.raises(TraceFormatError, match=r"trace row 0 .* not an HTTP method name"):
        build_schedule(_trace(method=["GE T", "GET"]), 1.0, 1.0, loop=False)


# --------------------------------------------------------------------- the CLI
def test_every_command_is_guarded() -> None:
    def commands(typer_app):  # type: ignore[no-untyped-def]
        yield from typer_app.registered_commands
        for g in typer_app.registered_groups:
            yield from commands(g.typer_instance)

    cmds = list(commands(app))
    assert len(cmds) > 20 and all(hasattr(c.callback, "__wrapped__") for c in cmds)


def test_a_bug_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def boom(*a: object, **k: object) -> None:
        raise KeyError("oops")

    monkeypatch.setattr(LoadCurve, "read_json", boom)
    r = runner.invoke(app, ["mat", str(tmp_path / "c.json"), "--threshold", "5ms"])
    assert r.exit_code == 70 and "internal error (KeyError" in r.output
    assert "Traceback" not in r.output


def test_output_paths_are_checked_before_measuring(tmp_path: Path) -> None:
    trace = _trace().write_parquet(tmp_path / "t.parquet")
    out = tmp_path / "dir"
    out.mkdir()
    # sweep against a port nobody listens on: the output check comes first
    r = runner.invoke(app, ["sweep", str(trace), "--target", "http://127.0.0.1:9/",
                            "--levels", "1", "-o", str(out)])  # fmt: skip
    # a refused output is a refused option: exit status 2, as click's usage errors
    assert r.exit_code == 2 and f"output {out} is a directory" in r.output
    r = runner.invoke(app, ["sample", str(trace), "--alpha", "0.5", "-o", str(trace / "x")])
    assert r.exit_code == 2 and "is not a directory" in r.output
    with pytest.raises(ShrinkError, match="is a file; name a directory"):
        files.check_output(trace, kind="dir")


def test_an_output_folder_at_a_symlink_or_pipe_says_what_it_is(tmp_path: Path) -> None:
    """``validate -o`` at a symlink to a file (or at a FIFO) said "is a file"."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "link").symlink_to("f")
    os.mkfifo(tmp_path / "fifo")
    r = runner.invoke(app, ["validate", str(tmp_path / "p.json"), "-o", str(tmp_path / "link")])
    assert r.exit_code == 2 and "link is a symlink to f, a file; name a directory" in r.output
    with pytest.raises(ShrinkError, match="fifo is a pipe; name a directory"):
        files.check_output(tmp_path / "fifo", kind="dir")


def test_the_entry_point_prints_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_bytes(b"\xff\xfe")
    r = subprocess.run(
        [sys.executable, "-m", "shrink", "mat", str(bad), "--threshold", "5ms"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_predict_table_and_report_write_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    from shrink.cli.predict_cmd import _print_summary
    from shrink.prediction import MappingPrediction, Prediction, StatPrediction
    from shrink.report.tables import mat_table as _mat_table

    stats = {
        "mean": StatPrediction(608.0, (335.0, 608.0), 0.005, "not_reached"),
        "p999": StatPrediction(120.0, (120.0, 120.0), 0.5, "below_range"),
    }
    pred = Prediction(
        machine={}, mappings={"1-replica": MappingPrediction(stats, {})},
        recommended="1-replica", reason="only one", target_description="t",
        thresholds={"mean": 0.005, "p999": 0.5},
    )  # fmt: skip
    _print_summary(pred, Path("out"))
    text = capsys.readouterr().out
    assert ">= 608" in text and "< 120" in text and "[335" not in text
    _, rows = _mat_table(pred, pred.thresholds or {})
    assert rows[0][1].startswith(">= 608") and rows[0][3].startswith("< 120")
    assert StatPrediction(1.0, (1.0, 1.0), 0.1, "below_range").to_dict()["bound"] == "upper"


def test_parquet_strings_that_are_not_utf8(tmp_path: Path) -> None:
    p = _trace(path=["/aa", "/b"]).write_parquet(tmp_path / "t.parquet")
    data = bytearray(p.read_bytes())
    data[data.find(b"/aa") + 1] = 0xE3  # a lead byte with no continuation
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="Invalid UTF8"):
        Trace.read_parquet(p)


def test_a_refused_value_is_shown_with_the_digits_that_refuse_it() -> None:
    # 1.0000001 was shown as 1 ("alpha == 1, must be in (0, 1]"), which reads as a contradiction.
    from shrink.checks import check_alpha

    with pytest.raises(ParameterError, match=r"^alpha == 1\.0000001, must be in \(0, 1\]"):
        check_alpha(1.0000001)
    with pytest.raises(ParameterError, match=r"^alpha == 1\.5, must be in \(0, 1\]"):
        check_alpha(1.5)
