"""The CLI reads one way everywhere (issue: a new user's first hour).

Every command's help is checked: flags show no ``<bool>``, usage lines name
arguments in capitals, ``-o`` is ``--out``. Then the messages a new user meets.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import typer
from helpers.servers import fake_server
from typer.testing import CliRunner

from shrink.cli import app
from shrink.cli._common import fmt_number, plural, stat_name
from tests.conftest import ROOT

RUN = CliRunner().invoke
SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"
TRACES = ROOT / "examples" / "traces"


def _commands() -> list[tuple[list[str], object]]:
    """Every (path, click command) of the app, groups included."""
    root = typer.main.get_command(app)
    out: list[tuple[list[str], object]] = []

    def walk(cmd, path):
        out.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(root, [])
    return out


COMMANDS = _commands()


def test_every_command_is_found():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"sweep", "predict", "trace info", "testbed status", "sim sweep"} <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "shrink")
def test_help_has_no_bool_metavar_and_capital_arguments(path):
    r = RUN(app, [*path, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "<bool>" not in r.output
    usage = next(ln for ln in r.output.splitlines() if "Usage:" in ln)
    assert "{" not in usage and "}" not in usage, usage
    cmd = dict((tuple(p), c) for p, c in COMMANDS)[tuple(path)]
    for param in cmd.params:
        if param.param_type_name == "argument":
            assert param.name.upper() in usage, usage


def test_dash_o_is_out_everywhere():
    with_o = []
    for path, cmd in COMMANDS:
        for param in cmd.params:
            if "-o" in param.opts:
                assert "--out" in param.opts, (path, param.opts)
                with_o.append(" ".join(path))
            assert "--output" not in param.opts  # the old spelling is only a hidden alias
    assert len(with_o) >= 10


def test_output_still_works_as_a_hidden_alias(tmp_path):
    out = tmp_path / "tcp.parquet"
    r = RUN(app, ["synth", "tcp", "--rate", "100", "--duration", "2s", "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert out.exists()
    r = RUN(app, ["synth", "tcp", "--help"], terminal_width=200)
    assert "--output" not in r.output


def _takes_text(param) -> bool:
    desc = getattr(param, "type_descriptor", None)  # typer >= 0.20 (its own click)
    if desc is not None:
        return desc.annotation is str or str in get_args(desc.annotation)
    return param.type.name == "text"


def test_durations_take_units_in_every_command():
    """No duration option is a bare float: each one reads 2s, 500ms, 1m."""
    names = {"--duration", "--warmup", "--timeout", "--skip", "--budget", "--lag-limit"}
    seen = 0
    for path, cmd in COMMANDS:
        for param in cmd.params:
            if names & set(param.opts):
                seen += 1
                assert _takes_text(param), (path, param.opts)
    assert seen >= 10


@pytest.fixture(scope="module")
def sim_curve(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sim")
    trace = tmp / "tcp.parquet"
    r = RUN(app, ["synth", "tcp", "--rate", "20000", "--duration", "6s", "--seed", "1",
                  "-o", str(trace)])  # fmt: skip
    assert r.exit_code == 0, r.output
    curve = tmp / "curve.json"
    r = RUN(app, ["sim", "sweep", str(trace), "--machine", str(SPEC), "--levels", "0.5,1,2",
                  "--warmup", "500ms", "--duration", "1s", "-o", str(curve),
                  "--export", "all"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "3 levels" in r.output
    return curve


@pytest.mark.compute
def test_stat_p99_9_is_p999(sim_curve):
    assert stat_name("p99.9") == "p999" and stat_name("P999") == "p999"
    a = RUN(app, ["mat", str(sim_curve), "--stat", "p99.9", "--threshold", "2ms", "--json"])
    b = RUN(app, ["mat", str(sim_curve), "--stat", "p999", "--threshold", "2ms", "--json"])
    # 99: the threshold is not crossed within the curve, the MAT only a bound (shrink mat)
    assert a.exit_code in (0, 99) and a.exit_code == b.exit_code, a.output
    assert json.loads(a.stdout) == json.loads(b.stdout)
    bad = RUN(app, ["mat", str(sim_curve), "--stat", "p100", "--threshold", "2ms"])
    assert bad.exit_code == 2 and "p99.9" in bad.output


@pytest.mark.compute
def test_sim_sweep_writes_the_exports_asked_for(sim_curve):
    assert (sim_curve.parent / "curve-hdr" / "level-1.hlog").exists()
    assert (sim_curve.parent / "curve_stats.csv").exists()


def test_plurals_and_one_number_format():
    assert plural(1, "session") == "1 session" and plural(2, "session") == "2 sessions"
    assert plural(1328, "request") == "1,328 requests" and plural(2, "process") == "2 processes"
    assert fmt_number(53040.0) == "53,040" and fmt_number(0.3624) == "0.3624"
    assert fmt_number(11.4567) == "11.46" and fmt_number(37748736.0) == "37,748,736"


def test_trace_info_writes_no_exponents(tmp_path):
    trace = tmp_path / "s.parquet"
    r = RUN(app, ["synth", "support", "--users", "20", "--duration", "30s", "--seed", "1",
                  "-o", str(trace)])  # fmt: skip
    assert r.exit_code == 0 and "1 session," not in r.output
    r = RUN(app, ["trace", "info", str(trace)], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert not re.search(r"\de[+-]\d", r.output), r.output


def test_a_capture_counts_packets_not_lines(tmp_path):
    r = RUN(app, ["ingest", str(TRACES / "support.pcap"), "-o", str(tmp_path / "c.parquet")])
    assert r.exit_code == 0, r.output
    assert "skipped 0 packets" in r.output and "lines" not in r.output
    assert "3 sessions" in r.output
    r = RUN(app, ["ingest", str(TRACES / "support-access.log"), "-o", str(tmp_path / "a.parquet")])
    assert r.exit_code == 0 and "skipped 0 lines" in r.output


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_testbed_status_after_down_says_down(tmp_path):
    from shrink.testbed.state import ReplicaState, TestbedState

    pid = _dead_pid()
    rep = ReplicaState(
        "replica-0", "127.0.0.1", 1, [0], masters=[pid], processes={"lighttpd": [pid]},
        starttimes={pid: 1}, pinned={}, config="", errorlog="", run_dir=str(tmp_path),
    )  # fmt: skip
    state = tmp_path / "tb.json"
    TestbedState([rep], {"kind": "cores"}, {"name": "1-replica"}, {}, "", {}, "now").write(state)
    r = RUN(app, ["testbed", "status", "--state", str(state)])
    assert r.exit_code == 1 and "crashed or killed" in r.stdout  # gone without `down`
    assert RUN(app, ["testbed", "down", "--state", str(state)]).exit_code == 0
    r = RUN(app, ["testbed", "status", "--state", str(state)])
    assert r.exit_code == 1
    assert "testbed is down" in r.stdout and "crashed" not in r.stdout and "PROBLEM" not in r.stdout
    # --json says the same of each replica: stopped by `down`, not crashed.
    r = RUN(app, ["testbed", "status", "--state", str(state), "--json"])
    assert r.exit_code == 1 and "crashed" not in r.stdout
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["stopped"]
    assert doc["replicas"][0]["problem"].startswith("stopped by `shrink testbed down`")


def test_the_non_root_hint_names_options_that_exist(tmp_path, monkeypatch):
    from shrink.errors import TopologyError
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.testbed import lifecycle

    if shutil.which("lighttpd", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("lighttpd is not installed")
    (tmp_path / "doc").mkdir()
    monkeypatch.setattr(lifecycle, "can_write_cgroups", lambda layout: False)
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    m = Machine("m", sockets=1, cores_per_socket=len(cpus), cpus=(cpus,))
    with pytest.raises(TopologyError) as err:
        lifecycle.up(tmp_path / "doc", m, Share.parse(f"{cpus[0]}@50%", m),
                     state_path=tmp_path / "s.json", port=0)  # fmt: skip
    hint = str(err.value)
    named = re.findall(r"`shrink ([a-z ]+?) (--[a-z-]+)", hint)
    assert named, hint
    by_path = {" ".join(p): c for p, c in COMMANDS}
    for command, option in named:
        opts = {o for prm in by_path[command].params for o in prm.opts}
        assert option in opts, (command, option)


@pytest.mark.compute
def test_predict_prints_a_line_per_level_off_a_terminal(tmp_path):
    trace = tmp_path / "tcp.parquet"
    assert RUN(app, ["synth", "tcp", "--rate", "50000", "--duration", "8s", "--seed", "1",
                     "-o", str(trace)]).exit_code == 0  # fmt: skip
    r = RUN(app, ["predict", str(trace), "--target", f"sim:{SPEC}", "--alpha", "0.5",
                  "--mappings", "1-replica", "--thresholds", "mean=0.5ms,p99.9=4ms",
                  "--warmup", "300ms", "--duration", "1s", "--reps", "1", "--max-levels", "4",
                  "-o", str(tmp_path / "out")])  # fmt: skip
    # four short levels may leave a MAT a bound: then status 99, said on stderr
    assert r.exit_code == 0 or (r.exit_code == 99 and "bound" in r.stderr), r.output
    assert (tmp_path / "out" / "prediction.json").is_file()
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("scaled run: ")]
    assert len(lines) >= 3, r.stderr
    assert all(re.search(r"\[\d+/\d+, [\d,]+ s\]$", ln) for ln in lines), lines


def test_sweep_prints_a_line_per_run_off_a_terminal(tmp_path):
    from shrink.schedule import open_loop_trace

    trace = tmp_path / "open.parquet"
    open_loop_trace("/x?bytes=512", 100.0, 20.0).write_parquet(trace)
    curve = tmp_path / "curve.json"
    with fake_server() as port:
        r = RUN(app, ["sweep", str(trace), "--target", f"http://127.0.0.1:{port}",
                      "--levels", "1,2", "--warmup", "200ms", "--duration", "500ms",
                      "--reps", "1", "--lag-limit", "50ms", "-o", str(curve),
                      "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if re.search(r"\[\d+/2 runs, [\d,]+ s\]$", ln)]
    assert [ln.split("  [")[0] for ln in lines] == [
        "rate_factor 1 rep 1/1",
        "rate_factor 2 rep 1/1",
        "done",
    ], r.stderr
    assert json.loads(r.stdout)["exports"] == []  # stdout stays JSON; none asked for


def test_a_mat_command_exits_99_only_for_a_bound():
    import typer

    from shrink.cli._common import bounded_mats, exit_if_bound
    from shrink.prediction import MappingPrediction, StatPrediction

    ok = StatPrediction(500.0, (450.0, 550.0), 0.01, status="ok")
    lower = StatPrediction(700.0, (700.0, 700.0), 0.5, status="not_reached")
    modelled = StatPrediction(900.0, (800.0, 1000.0), 0.5)  # the what-if's: no status
    preds = {"1-replica": MappingPrediction({"mean": ok, "p999": lower}, {}),
             "2-replica": MappingPrediction({"mean": ok, "p999": modelled}, {})}  # fmt: skip
    assert bounded_mats(preds) == ["1-replica p99.9"]
    as_dicts = {k: v.to_dict() for k, v in preds.items()}  # what sim mappings prints
    assert bounded_mats(as_dicts) == ["1-replica p99.9"]
    exit_if_bound([])  # nothing bounded: returns
    with pytest.raises(typer.Exit) as e:
        exit_if_bound(bounded_mats(preds))
    assert e.value.exit_code == 99


@pytest.mark.compute
@pytest.mark.parametrize(
    ("option", "value"), [("--duration", "2x"), ("--duration", "0"), ("--timeout", "2x")]
)
def test_replay_refuses_a_bad_duration_naming_the_option(tmp_path, option, value):
    """Exit 2 naming the option, as every other command's durations: replay's --duration
    and --timeout were exit 1 with 'duration == ...', naming no option."""
    from shrink.trace import Trace

    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]}).write_parquet(trace)
    out = tmp_path / "r.parquet"
    for args in (["replay", str(trace)], ["replay", "--rate", "5"]):
        r = RUN(app, [*args, "--target", "127.0.0.1:1", "-o", str(out), option, value])
        assert r.exit_code == 2 and f"{option}:" in r.output, r.output
        assert not out.exists()


@pytest.mark.compute
def test_machine_write_refuses_an_output_folder_that_does_not_exist(tmp_path):
    """Every other command refuses an output whose folder is missing (exit 2): a typo in
    a path must not make a tree. `machine write` made the folders and wrote there."""
    out = tmp_path / "typo" / "m.toml"
    spec = ROOT / "examples" / "machines" / "nehalem-2s.toml"
    r = RUN(app, ["machine", "write", str(out), "--machine", str(spec)])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output
    assert not out.parent.exists()
    r = RUN(app, ["machine", "write", str(tmp_path / "m.toml"), "--machine", str(spec)])
    assert r.exit_code == 0 and (tmp_path / "m.toml").exists(), r.output


@pytest.mark.compute
def test_a_validation_line_says_once_that_its_mats_are_bounds():
    """'error +6145.1% (both MATs are only bounds) (a MAT is only a bound)': the CLI's
    note repeated what the error's text already said."""
    from shrink.cli.validate_cmd import validation_lines

    both = {"predicted": 2e5, "measured": 2e3, "error": 61.45,
            "predicted_status": "not_reached", "measured_status": "not_reached"}  # fmt: skip
    one = {**both, "measured_status": "ok"}
    (line,) = validation_lines({"mats": {"mean": both}}, {"mean": True})
    assert line.count("bound") == 1 and "error unknown (both MATs are only bounds" in line, line
    (line,) = validation_lines({"mats": {"mean": one}}, {"mean": True})
    assert "at least" in line and line.endswith("(a MAT is only a bound)"), line


@pytest.mark.compute
@pytest.mark.parametrize("command", ["replay", "sweep", "mat"])
def test_a_row_that_cannot_be_sent_is_named_with_its_trace_file(tmp_path, command):
    """semantics.md: bad input is an error naming the file and the line; a path holding
    CR LF was refused naming the row alone ('trace row 1 (session 1), column path')."""
    from shrink.trace import Trace

    trace = tmp_path / "crlf.parquet"
    paths = ["/ok", "/a\r\nX: y", "/b"]
    Trace.from_columns({"session": [1, 1, 2], "t": [0.0, 0.1, 0.2], "path": paths}).write_parquet(
        trace
    )
    args = {"replay": [str(trace), "-o", str(tmp_path / "r.parquet")],
            "sweep": [str(trace), "--levels", "1", "-o", str(tmp_path / "c.json")],
            "mat": [str(tmp_path / "c.json"), "--threshold", "5ms", "--adaptive",
                    "--rel-width", "0.0001", "--trace", str(trace)]}[command]  # fmt: skip
    if command == "mat":
        from helpers.curves import half_share_curve

        from shrink.machine import Machine

        spec = Machine.read_toml(ROOT / "examples" / "machines" / "nehalem-2s.toml")
        half_share_curve(spec, levels=3, reps=2, seed=1).write_json(tmp_path / "c.json")
    r = RUN(app, [command, *args, "--target", "127.0.0.1:1"])
    assert r.exit_code == 1, r.output
    assert f"{trace}: trace row 1 (session 1), column path" in r.output, r.output


@pytest.mark.compute
def test_machine_write_refuses_to_write_over_the_spec_it_reads(tmp_path):
    """`machine write X.toml --machine X.toml` wrote over its input, losing the spec's
    comments (where its numbers come from); every other command refuses an output that
    is its input (exit 2)."""
    spec = tmp_path / "x.toml"
    text = (ROOT / "examples" / "machines" / "xeon-2s-8c.toml").read_text()
    spec.write_text(text)
    r = RUN(app, ["machine", "write", str(spec), "--machine", str(spec)])
    assert r.exit_code == 2 and "OUT:" in r.output and "is the input" in r.output, r.output
    assert spec.read_text() == text


@pytest.mark.compute
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--rate", "0"], "--rate"),
        (["--rate", "nan"], "--rate"),
        (["--rate", "1e12"], "--rate"),
        (["--rate", "5", "--arrival", "bogus"], "--arrival"),
    ],
)
def test_replay_refuses_a_bad_open_loop_naming_the_option(tmp_path, args, option):
    """--rate 0, nan or past what a run holds, and --arrival bogus exited 1 with
    'rate == 0' naming no option, after --duration and --timeout were made exit 2."""
    out = tmp_path / "r.parquet"
    r = RUN(app, ["replay", *args, "--duration", "1s", "--target", "127.0.0.1:1", "-o", str(out)])
    assert r.exit_code == 2 and f"{option}:" in r.output, r.output
    assert not out.exists()


def test_replay_refuses_a_trace_beside_rate(tmp_path):
    """replay TRACE --rate R ran an open loop and left TRACE unread without a word."""
    from shrink.trace import Trace

    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]}).write_parquet(trace)
    out = tmp_path / "r.parquet"
    args = ["replay", str(trace), "--rate", "5", "--duration", "1s", "-o", str(out)]
    r = RUN(app, [*args, "--target", "127.0.0.1:1"])
    assert r.exit_code == 2 and "--rate:" in r.output and "t.parquet" in r.output, r.output
    assert not out.exists()


def test_a_target_off_loopback_is_a_refused_option(tmp_path):
    """replay --target 10.0.0.1 exited 1 naming no option, though nothing had run: a
    value refused before anything runs is exit 2 naming its option."""
    out = tmp_path / "r.parquet"
    args = ["replay", "--rate", "10", "--path", "/x", "--duration", "1s", "-o", str(out)]
    r = RUN(app, [*args, "--target", "http://10.0.0.1:80/"])
    assert r.exit_code == 2 and "--target:" in r.output and "--allow-remote" in r.output, r.output
    assert not out.exists()


@pytest.mark.parametrize("what", ["root", "file"])
def test_testbed_up_refuses_a_docroot_naming_the_option(tmp_path, what):
    """testbed up --docroot / (or a file) exited 1 naming no option."""
    if what == "root":
        docroot = tmp_path / "fs"
        docroot.symlink_to("/")
    else:
        docroot = tmp_path / "page.html"
        docroot.write_text("x")
    state = tmp_path / "s.json"
    r = RUN(app, ["testbed", "up", "--docroot", str(docroot), "--state", str(state)])
    assert r.exit_code == 2 and "--docroot:" in r.output, r.output
    assert not state.exists()


@pytest.mark.compute
@pytest.mark.parametrize("value", ["1e-300s", "500us", "0.1ms"])
@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_a_timeout_shorter_than_the_engine_can_keep_is_refused(tmp_path, command, value):
    """--timeout has a floor, as --duration has: 1e-300 s was taken, and every request
    was given up on."""
    from shrink.trace import Trace

    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]}).write_parquet(trace)
    out = tmp_path / ("r.parquet" if command == "replay" else "c.json")
    extra = ["--levels", "1"] if command == "sweep" else []
    r = RUN(app, [command, str(trace), "--target", "127.0.0.1:1", "-o", str(out), *extra,
                  "--timeout", value])  # fmt: skip
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "--timeout:" in said and "must be at least 1 ms" in said, said
    assert "gives up on every request" in said and not out.exists()


@pytest.mark.compute
def test_the_engine_refuses_a_timeout_below_its_floor():
    from shrink.errors import ParameterError
    from shrink.replay._config import EngineConfig

    with pytest.raises(ParameterError, match="timeout == 1e-300, must be at least 1 ms"):
        EngineConfig(targets=[("127.0.0.1", 1)], timeout=1e-300)
    assert EngineConfig(targets=[("127.0.0.1", 1)], timeout=0.001).timeout == 0.001


# --- usage errors: one line, as shrink's own errors ---------------------------------------
def _one_line(r) -> str:
    lines = r.stderr.splitlines()
    assert r.exit_code == 2 and len(lines) == 1, (r.exit_code, r.stderr)
    assert "Usage:" not in r.stderr and "Try '" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "shrink")
def test_an_unknown_option_is_one_line_naming_it_and_the_commands_help(path):
    """Before: click's three lines ("Usage: ...", "Try '... --help' for help.", a blank,
    "Error: No such option: --frobnicate")."""
    line = _one_line(RUN(app, [*path, "--frobnicate"]))
    assert line.startswith("error: no such option: --frobnicate"), line
    assert line.endswith(f"; see {' '.join(['shrink', *path])} --help"), line


ARGUMENTS = [
    (p, a.name.upper())
    for p, c in COMMANDS
    for a in c.params[:1]
    if a.param_type_name == "argument" and a.required
]


@pytest.mark.parametrize(("path", "name"), ARGUMENTS, ids=lambda p: " ".join(p))
def test_a_missing_argument_is_one_line_naming_it(path, name):
    line = _one_line(RUN(app, path))
    assert line == f"error: missing argument '{name}'; see {' '.join(['shrink', *path])} --help"


@pytest.mark.compute
def test_a_value_refused_by_its_parser_and_an_unknown_command_are_one_line(tmp_path):
    line = _one_line(RUN(app, ["synth", "tcp", "--rate", "1", "--duration", "1", "-o", "x/"]))
    assert line == (
        "error: invalid value for '-o' / '--out': x/ names a folder; name a file; "
        "see shrink synth tcp --help"
    )
    assert _one_line(RUN(app, ["testbed", "nosuch"])) == (
        "error: no such command 'nosuch'; see shrink testbed --help"
    )


def test_machine_write_names_its_argument_a_path_as_every_command_does():
    r = RUN(app, ["machine", "write", "--help"], terminal_width=200)
    assert "OUT <path>" in r.output and "<Path>" not in r.output, r.output
