"""The CLI behaves like the tools its users know: options checked before anything
runs, exit statuses that tell, percentiles as users write them, exports only when
asked, bounds never read as answers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from helpers.servers import fake_server, scripted_server
from typer.testing import CliRunner

from shrink.cli import app
from tests.conftest import ROOT
from tests.test_export import _trace

SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"


def run(*args, **kw):
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=250, **kw)


def _sim_sweep(trace_file, out, *options):
    """``shrink sim sweep`` of one level on the spec's machine, writing ``out``."""
    return run("sim", "sweep", trace_file, "--machine", SPEC, "-o", out, "--levels", "1", *options)


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    """A three-level curve on a fake one-server target: mean 1.8, 6.9, 300 ms."""
    from shrink.measure import sweep
    from shrink.target import FakeTarget

    path = tmp_path_factory.mktemp("curve") / "curve.json"
    target = FakeTarget(servers=1, demand={"static": 0.001, "dynamic": 0.004})
    sweep(target, _trace(), [2.0, 6.0, 8.5], reps=1, warmup=1.0, duration=4.0, seed=3).write_json(
        path
    )
    return path


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "open.parquet"
    _trace().write_parquet(path)
    return path


# --- percentiles -------------------------------------------------------------------------


@pytest.mark.compute
@pytest.mark.parametrize("stat", ["p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "mean"])
def test_mat_takes_the_percentiles_users_write(curve, stat):
    r = run("mat", curve, "--stat", stat, "--threshold", "40ms", "--json")
    assert r.exit_code in (0, 99), r.output
    assert json.loads(r.stdout)["mat"] is not None


@pytest.mark.compute
def test_p95_lies_between_p90_and_p99(curve):
    from shrink.loadcurve import LoadCurve
    from shrink.mat import mat

    lc = LoadCurve.read_json(curve)
    mats = [mat(lc, s, 0.02).mat for s in ("p90", "p95", "p99")]
    assert mats[0] > mats[1] > mats[2]


def test_thresholds_take_any_percentile():
    from shrink.checks import parse_thresholds

    assert parse_thresholds("p95=20ms,p99.9=500ms") == {"p95": 0.02, "p999": 0.5}


def test_a_threshold_named_twice_is_refused_in_the_users_words(tmp_path, trace_file):
    """The error echoed ``p99.9=5ms,p99.9=6ms`` as ``p999=5ms,p999=6ms``."""
    r = run("predict", trace_file, "--target", f"sim:{SPEC}", "-o", tmp_path / "out",
            "--thresholds", "p99.9=5ms,P99.9=6ms")  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "'p99.9=5ms,P99.9=6ms', name p99.9 twice" in r.stderr, r.stderr


@pytest.mark.compute
@pytest.mark.parametrize("bad", ["p100", "p0", "q95", "p9.5.5"])
def test_a_percentile_users_cannot_mean_is_refused(curve, bad):
    r = run("mat", curve, "--stat", bad, "--threshold", "5ms")
    assert r.exit_code == 2
    assert "--stat" in r.output and "p95" in r.output


@pytest.mark.compute
def test_thresholds_print_one_way(curve):
    r = run("mat", curve, "--stat", "p99.9", "--threshold", "500ms")
    assert "MAT (p99.9 < 500 ms)" in r.stdout, r.stdout


# --- mat's bound line, --cluster's help ---------------------------------------------------


@pytest.mark.compute
def test_mat_exit_99_says_why_on_stderr(curve):
    p = subprocess.run(
        [sys.executable, "-m", "shrink", "mat", str(curve), "--threshold", "1s"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 99
    assert "bound" in p.stderr and "exit status 99" in p.stderr, p.stderr


def test_cluster_help_keeps_its_brackets():
    r = run("replay", "--help")
    assert "shrink-capacity[ray]" in r.output


# --- options checked before anything runs ------------------------------------------------


@pytest.mark.parametrize(
    "mapping, accepted",
    [("1-replicaa", "K-replica"), ("3-replica", "4-replica, 8-replica")],
)
def test_predict_refuses_a_mapping_before_any_run(tmp_path, trace_file, mapping, accepted):
    out = tmp_path / "out"
    r = run("predict", trace_file, "--target", f"sim:{SPEC}", "--mappings", mapping, "-o", out)
    assert r.exit_code == 2, r.output
    assert "--mappings" in r.output and accepted in r.output
    assert "rate_factor" not in r.output  # no level was run
    assert not out.exists()


@pytest.mark.parametrize(
    "mapping, accepted",
    [("K-replica", "K a number of replicas (4-replica)"), ("3-replica", "4-replica, 8-replica")],
)
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_sim_run_and_sweep_refuse_a_mapping_as_the_option(
    tmp_path, trace_file, mapping, accepted, command
):
    # They said "mapping == 'K-replica', must be one of ... or K-replica", exit 1, naming
    # no option and accepting what it refused; sim scaling and predict said --mapping(s).
    out = tmp_path / "out"
    more = ["--levels", "1"] if command == "sweep" else []
    r = run("sim", command, trace_file, "--machine", SPEC, "--mapping", mapping, "-o", out, *more)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --mapping: ") and accepted in r.output, r.output
    assert not out.exists()


def test_warmup_0s_is_accepted(tmp_path, trace_file):
    out = tmp_path / "c.json"
    r = _sim_sweep(trace_file, out, "--warmup", "0s", "--duration", "1s")
    assert r.exit_code == 0, r.output


def test_an_output_under_a_missing_folder_is_refused(tmp_path, trace_file):
    out = tmp_path / "nonexistent" / "dir" / "c.json"
    r = _sim_sweep(trace_file, out, "--duration", "1s")
    assert r.exit_code == 2
    assert "--out" in r.output and "does not exist" in r.output
    assert not out.parent.exists() and not out.parent.parent.exists()


# --- exports only when asked ----------------------------------------------------------------


def test_a_sweep_writes_only_its_curve_by_default(tmp_path, trace_file):
    out = tmp_path / "curve.json"
    r = _sim_sweep(trace_file, out, "--duration", "1s")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.json"]


def test_export_names_the_formats(tmp_path, trace_file):
    out = tmp_path / "curve.json"
    r = _sim_sweep(trace_file, out, "--duration", "1s", "--export", "k6,hdr")
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["curve-hdr", "curve.json", "curve_requests.csv"]
    r = _sim_sweep(trace_file, out, "--export", "k7")
    assert r.exit_code == 2 and "--export" in r.output and "locust" in r.output


# --- exit status: nothing served is an error ------------------------------------------------


def _strict(text: str):
    """JSON as JSON.parse and Go read it: NaN and Infinity refused."""

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_a_sweep_that_served_nothing_exits_1_and_its_json_is_strict(tmp_path, trace_file):
    out = tmp_path / "c.json"
    r = run(
        "sweep", trace_file, "--target", "http://127.0.0.1:1", "--levels", "0.05",
        "--warmup", "0s", "--duration", "500ms", "-o", out, "--json",
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "nothing was served" in r.stderr and "is the server up" in r.stderr
    doc = _strict(r.stdout)
    level = doc["levels"][0]
    assert level["mean"] is None and level["note"] == "no request was served"
    assert out.exists()  # written before the exit status says what it holds
    _strict(out.read_text())


def test_a_replay_that_served_nothing_exits_1(tmp_path):
    out = tmp_path / "x.parquet"
    r = run(
        "replay", "--rate", "20", "--duration", "500ms", "--target", "http://127.0.0.1:1",
        "-o", out, "--json",
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    doc = _strict(r.stdout)
    assert doc["served"] == 0 and doc["latency"]["mean"] is None
    assert doc["latency_note"] and "is the server up" in doc["nothing_served"]


def test_a_sweep_that_served_exits_0(tmp_path):
    from shrink.schedule import open_loop_trace

    trace = tmp_path / "open.parquet"
    open_loop_trace("/x?bytes=512", 50.0, 10.0).write_parquet(trace)
    with fake_server() as port:
        r = run("sweep", trace, "--target", f"http://127.0.0.1:{port}", "--levels", "1",
                "--warmup", "0s", "--duration", "500ms", "--lag-limit", "50ms",
                "-o", tmp_path / "c.json")  # fmt: skip
    assert r.exit_code == 0, r.output


# --- the one JSON writer --------------------------------------------------------------------


def test_the_json_writer_writes_null_for_nan_and_infinity():
    import numpy as np

    from shrink.jsonout import dumps

    doc = {"a": float("nan"), "b": [float("inf"), np.float32("nan"), np.float64(2.5)], "c": (1,)}
    assert _strict(dumps(doc)) == {"a": None, "b": [None, None, 2.5], "c": [1]}


def test_every_writer_goes_through_the_one_json_writer():
    """No module writes JSON with json.dumps itself (it writes NaN by default)."""
    allowed = {
        "shrink/jsonout.py",
        # provenance strings inside prediction.json, themselves written by dumps
        "shrink/predict.py",
    }
    found = []
    for root in ("shrink", "extrapolate"):
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if ("json.dump(" in code or "json.dumps(" in code) and rel not in allowed:
                    found.append(f"{rel}:{n}")
    assert not found, found


def test_echo_json_and_a_prediction_hold_no_nan(tmp_path, capsys):
    from shrink.cli._common import echo_json
    from shrink.prediction import MappingPrediction, Prediction, StatPrediction

    echo_json({"x": float("nan"), "note": "no request was served"})
    assert _strict(capsys.readouterr().out)["x"] is None
    nan = float("nan")
    stat = StatPrediction(nan, (nan, float("inf")), 0.01, "not_reached", None)
    pred = Prediction(
        machine={}, mappings={"1-replica": MappingPrediction({"mean": stat}, {})},
        recommended=None, reason="no recommendation: MATs are bounds",
    )  # fmt: skip
    doc = _strict(pred.write_json(tmp_path / "p.json").read_text())
    assert doc["mappings"]["1-replica"]["mean"]["mat"] is None


# --- one recommendation rule, never on bounds ---------------------------------------------


def _mp(mat, status="ok", ci=None):
    from shrink.prediction import MappingPrediction, StatPrediction

    return MappingPrediction({"mean": StatPrediction(mat, ci or (mat, mat), 0.01, status)}, {})


def test_no_mapping_is_recommended_on_bounds():
    from shrink.recommend import recommend

    # the case: 1-replica >= 81,084 (not reached) against 2-replica-direct's point
    rec = recommend(
        {"1-replica": _mp(81084, "not_reached"), "2-replica-direct": _mp(90000)}, ["mean"]
    )
    assert rec.mapping is None and rec.rule == "bounds" and rec.bounds == ("1-replica",)
    # both bounds: the order is open too
    rec = recommend({"a": _mp(5, "not_reached"), "b": _mp(9, "not_reached")}, ["mean"])
    assert rec.mapping is None


def test_a_bound_that_settles_the_order_still_recommends():
    from shrink.recommend import recommend

    # at least 100 beats a point at 90; a point at 90 beats "under 50"
    assert recommend({"a": _mp(90), "b": _mp(100, "not_reached")}, ["mean"]).mapping == "b"
    assert recommend({"a": _mp(90), "b": _mp(50, "below_range")}, ["mean"]).mapping == "a"
    rec = recommend({"a": _mp(90, ci=(80, 95)), "b": _mp(100, ci=(92, 110))}, ["mean"])
    assert rec.mapping == "b" and rec.overlap and rec.rule == "higher"


def test_predict_whatif_and_extrapolate_share_the_rule():
    import inspect

    import extrapolate.remap
    import extrapolate.whatif
    import shrink.predict

    for mod in (shrink.predict, extrapolate.remap, extrapolate.whatif):
        src = inspect.getsource(mod)
        assert "recommend(" in src and "rank_mappings(" not in src, mod.__name__


# --- the simulator: its search starts near the knee and goes on until a threshold is crossed --


@pytest.mark.compute
def test_the_simulator_searches_past_saturation_until_the_threshold_is_crossed():
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.sim.scaling import MatSearch, compact_cpus, find_mats
    from shrink.sim.target import SimTarget
    from shrink.sim.workloads import tcp_trace

    m = Machine.read_toml(SPEC)
    target = SimTarget(m, "1-replica", Share.cores_of(m, compact_cpus(m, 1)), None)
    # a mean of 5 ms on tcp's 40 us requests lies past the coarse pass's 97% of saturation
    out = find_mats(
        target, tcp_trace(10_000.0, 20.0, seed=0), {"mean": 0.005},
        search=MatSearch(requests_per_level=5000),
    )  # fmt: skip
    assert out.mats["mean"].status == "ok", out.mats["mean"]
    assert max(lv.level for lv in out.curve.levels) > out.capacity_factor


@pytest.mark.compute
def test_the_simulators_records_name_the_traces_fingerprint():
    """A sweep's curve records the trace's fingerprint (validate compares them); the
    simulator's RunLog and its MAT search's curve recorded only the trace's source."""
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.sim.scaling import MatSearch, compact_cpus, find_mats
    from shrink.sim.target import SimTarget
    from shrink.sim.workloads import tcp_trace

    m = Machine.read_toml(SPEC)
    target = SimTarget(m, "1-replica", Share.cores_of(m, compact_cpus(m, 1)), None)
    trace = tcp_trace(10_000.0, 5.0, seed=0)
    res = target.run(trace, rate_factor=0.5, warmup=0.5, duration=1.0, seed=1)
    assert res.runlog.meta["trace"]["fingerprint"] == trace.fingerprint()
    out = find_mats(target, trace, {"mean": 0.005}, search=MatSearch(requests_per_level=2000))
    assert out.curve.meta["trace"]["fingerprint"] == trace.fingerprint()


def test_the_simulators_probe_starts_near_a_tenth_of_its_capacity():
    import samplers
    from shrink.machine import Machine
    from shrink.providers import PROBE_UTILIZATION, SimProvider
    from shrink.share import Share
    from shrink.sim.target import SimTarget
    from shrink.sim.workloads import tcp_trace

    m = Machine.read_toml(SPEC)
    provider = SimProvider(m)
    share = Share.plan(m.all_cpus, m, 0.25, "auto")
    sample = samplers.sample(tcp_trace(2000.0, 20.0, seed=1), 0.25, seed=0, level="session")
    level = provider.probe_level(sample, share, "rate_factor")
    # the trace's own rate (rate factor 1) is far below the knee: the probe is far above it
    assert level is not None and level > 5
    res = SimTarget(m, "1-replica", share, None).run(
        sample, rate_factor=level, warmup=0.5, duration=1.0, seed=3
    )
    assert 0.5 * PROBE_UTILIZATION < res.utilization < 2 * PROBE_UTILIZATION


def test_sim_mappings_checks_first_and_shows_progress(monkeypatch):
    import importlib

    sc = importlib.import_module("shrink.sim.scaling")  # shrink.sim.scaling is also a function
    seen = {}

    def fake(machine, trace, mappings, **kw):
        seen.update(kw)
        kw["progress"]("mapping 1/1: 1-replica")
        mat = {"mat": 100.0, "status": "ok", "ci": [90.0, 110.0]}
        return {
            "workload": "tcp", "workload_mix": {"dynamic_fraction": 0.0, "static_mean_bytes": 1024},
            "thresholds": kw["thresholds"] or {"mean": 0.0005},
            "mappings": {"1-replica": {"mean": mat, "p999": mat, "mean_change": 0.0}},
        }  # fmt: skip

    monkeypatch.setattr(sc, "compare_mappings", fake)
    r = run("sim", "mappings", "--machine", SPEC, "--mappings", "3-replica")
    assert r.exit_code == 2 and "--mappings" in r.output and not seen
    r = run("sim", "mappings", "--machine", SPEC, "--mappings", "1-replica",
            "--thresholds", "mean=5ms")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "mapping 1/1" in r.stderr
    assert "workload tcp" in r.stdout and "mean < 5 ms" in r.stdout


# --- one set of defaults -------------------------------------------------------------------


def _defaults(*path):
    import typer

    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {p.name: p.default for p in cmd.params}


def test_one_set_of_defaults():
    from shrink import defaults
    from shrink.demo import DEMO
    from shrink.predict import PredictConfig

    predict, sweep, sim_sweep = _defaults("predict"), _defaults("sweep"), _defaults("sim", "sweep")
    mat = _defaults("mat")
    assert predict["thresholds"] == defaults.THRESHOLDS_TEXT
    from shrink.checks import parse_thresholds

    assert parse_thresholds(predict["thresholds"]) == DEMO["thresholds"]
    assert dict(PredictConfig().thresholds) == defaults.THRESHOLDS
    for d in (predict, sweep, sim_sweep):
        assert (d["duration"], d["reps"], d["warmup"]) == (
            defaults.DURATION, defaults.REPS, defaults.WARMUP,
        )  # fmt: skip
    assert predict["max_levels"] == mat["max_levels"] == defaults.MAX_LEVELS


def test_mat_adaptive_max_levels_counts_the_curves_levels(monkeypatch, curve, trace_file):
    import shrink.replay.adaptive as adaptive

    seen = {}

    def fake_refine(target, trace, lc, stat, thr, **kw):
        seen.update(kw)
        return lc, []

    monkeypatch.setattr(adaptive, "refine", fake_refine)
    from dataclasses import replace

    from shrink.loadcurve import LoadCurve

    lc = LoadCurve.read_json(curve)  # (two repetitions a level: an interval to narrow)
    twice = curve.parent / "twice.json"
    replace(lc, levels=[replace(lv, reps=[*lv.reps, *lv.reps]) for lv in lc.levels]).write_json(
        twice
    )
    r = run("mat", twice, "--threshold", "5ms", "--adaptive", "--trace", trace_file,
            "--target", "http://127.0.0.1:1", "--max-levels", "5",
            "-o", curve.parent / "x.json")  # fmt: skip
    assert r.exit_code in (0, 99), r.output
    assert seen["max_levels"] == 2  # the curve has 3 levels: 2 more make 5 in all


# --- messages say what to do next ------------------------------------------------------------


@pytest.mark.compute
def test_offered_load_linearity_comes_with_a_verdict(curve):
    from shrink.loadcurve import LoadCurve
    from shrink.measure import offered_check
    from shrink.report.sections.self_checks import _offered_text

    c = offered_check(LoadCurve.read_json(curve))
    assert c["offered_linear"] == (c["offered_linearity"] <= c["offered_linear_tolerance"])
    bad = {"offered_monotone": True, "offered_per_level": 100.0, "offered_linearity": 0.471,
           "offered_linear": False, "offered_linear_tolerance": 0.1,
           "offered_worst_level": 0.5}  # fmt: skip
    text = _offered_text(bad, {})
    assert "within 47.1% of linear (**not linear**" in text and "level 0.5" in text
    good = {**bad, "offered_linearity": 0.03, "offered_linear": True}
    assert "(linear: within 10%)" in _offered_text(good, {})


def test_generator_behind_gives_the_lag_and_a_hint(tmp_path, trace_file):
    # nothing listens on port 1: every send fails fast, and the flag still says how late
    r = run(
        "sweep", trace_file, "--target", "http://127.0.0.1:1", "--levels", "0.05",
        "--warmup", "0s", "--duration", "500ms", "--lag-limit", "1us", "-o", tmp_path / "c.json",
    )  # fmt: skip
    assert "GENERATOR BEHIND (send lag p99" in r.stdout, r.stdout
    assert "--generator-cpus" in r.stderr and "--realtime" in r.stderr


# --- one answer per machine and workload, or a line saying why not ----------------------------


def test_a_simulated_answer_names_its_workload_and_thresholds(tmp_path):
    """A synthesized Support trace's PHP pages name their own work (work=W us): the
    simulator runs them as such, and the answer says so beside the papers' 3.25 ms."""
    import numpy as np

    from shrink.cli.predict_cmd import _sim_workload
    from shrink.prediction import Prediction
    from shrink.sim.scaling import workload_mix
    from shrink.trace import Trace

    n = 100
    dyn = np.arange(n) % 20 == 0  # 5% dynamic
    paths = np.where(dyn, "/app/index.php?bytes=100&work=9000&id=1", "/static/a.gif")
    trace = Trace.from_columns(
        {"session": np.arange(n), "t": np.arange(n) * 0.01, "path": paths,
         "cls": np.where(dyn, "dynamic", "static"), "bytes": np.full(n, 2048)},
    )  # fmt: skip
    path = trace.write_parquet(tmp_path / "synth.parquet")
    mix = workload_mix(trace)
    assert mix["dynamic_work_us"] == 9000 and mix["dynamic_fraction"] == 0.05
    pred = Prediction(machine={}, mappings={}, recommended=None, reason="",
                      thresholds={"mean": 0.005, "p999": 0.5})  # fmt: skip
    line = _sim_workload(path, pred)
    assert "5.0% dynamic (PHP work 9 ms a page, from the trace's work= parameters)" in line
    assert "thresholds mean < 5 ms, p99.9 < 500 ms" in line and "3.25 ms" in line


@pytest.mark.compute
def test_whatif_names_its_workload_demands_and_thresholds():
    r = run("whatif", "--machine", SPEC, "--workload", "support", "--no-sweep")
    assert r.exit_code == 0, r.output
    assert "workload support: 5.0% dynamic (calibrated:" in r.stdout
    assert "thresholds mean < 5 ms, p99.9 < 500 ms" in r.stdout


@pytest.mark.parametrize(
    "option",
    [
        ["--reps", "0"], ["--max-levels", "1"], ["--level", "foo"], ["--alpha", "2"],
        ["--skip", "foo"], ["--share-kind", "foo"], ["--thresholds", "p100=5ms"],
        ["--warmup", "x"], ["--budget", "0s"],
        # Below one repetition (warm-up and window): refused once a testbed had started.
        ["--budget", "1s"],
    ],
    ids=lambda o: "".join(o),
)  # fmt: skip
def test_predict_refuses_every_option_before_any_run(tmp_path, trace_file, option):
    out = tmp_path / "out"
    r = run("predict", trace_file, "--target", f"sim:{SPEC}", "-o", out, *option)
    assert r.exit_code == 2, r.output
    assert option[0] in r.stderr and "rate_factor" not in r.output
    assert not out.exists()


def test_predict_refuses_a_target_it_does_not_know(tmp_path, trace_file):
    r = run("predict", trace_file, "--target", "simx", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "--target" in r.stderr and "sim:SPEC.toml" in r.stderr


@pytest.mark.parametrize(
    "args, option",
    [(["--cores", "1,16"], "--cores"), (["--cores", "1,8", "--mapping", "3-replica"], "--mapping")],
)
def test_sim_scaling_checks_every_core_count_first(args, option):
    r = run("sim", "scaling", "--machine", SPEC, *args)
    assert r.exit_code == 2, r.output
    assert option in r.stderr and "rate factor" not in r.output


@pytest.mark.parametrize("option", ["--routing", "--mode", "--engine"])
def test_sweep_refuses_a_generator_option_by_name(tmp_path, trace_file, option):
    r = run("sweep", trace_file, "--target", "http://127.0.0.1:1", "--levels", "1",
            "-o", tmp_path / "c.json", option, "foo")  # fmt: skip
    assert r.exit_code == 2 and option in r.stderr and "accepted" in r.stderr


def test_a_replay_of_malformed_answers_names_them_not_a_dead_server(tmp_path):
    # Every answer arrived, malformed: "failed to connect or timed out" was untrue.
    def answer(c: socket.socket) -> None:
        c.recv(65536)
        c.sendall(b"HTTP/1.1 999 Nine\r\nContent-Length: 0\r\n\r\n")

    out = tmp_path / "x.parquet"
    with scripted_server(answer) as port:
        r = run(
            "replay", "--rate", "20", "--duration", "500ms", "--engine", "python",
            "--target", f"http://127.0.0.1:{port}", "-o", out, "--json",
        )  # fmt: skip
    assert r.exit_code == 1, r.output
    why = _strict(r.stdout)["nothing_served"]
    assert "bad-response 10" in why and "failed to connect" not in why, why


def _slow_answer(c: socket.socket) -> None:
    """Begin an answer at once (a 10 GB body announced, 4 KiB sent) and send nothing
    more for 3 s: it outlasts a short --timeout."""
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n" + b"x" * 4096)
    time.sleep(3)


def test_a_replay_whose_answers_outlast_the_timeout_does_not_ask_if_the_server_is_up(tmp_path):
    """Every answer begun and not finished within --timeout (a 10 GB file in the docroot):
    "all 1 requests failed to connect or timed out (timeout 1): is the server up at the
    --target address?", of a server that had answered at once and was still sending."""
    with scripted_server(_slow_answer) as port:
        r = run(
            "replay", "--rate", "10", "--duration", "300ms", "--timeout", "500ms",
            "--engine", "python", "--target", f"http://127.0.0.1:{port}",
            "-o", tmp_path / "x.parquet", "--json",
        )  # fmt: skip
    assert r.exit_code == 1, r.output
    why = _strict(r.stdout)["nothing_served"]
    assert "timeout 3" in why and "is the server up" not in why, why
    assert "3 of them timed out after the server had begun to answer" in why, why


def test_a_sweep_whose_answers_outlast_the_timeout_does_not_ask_if_the_server_is_up(tmp_path):
    """sweep's own line, when no level had a request answered: "(N failed to connect or
    timed out): is the server up at the --target address?" of a server that had begun
    every answer; the curve now counts the timeouts after a first byte."""
    from shrink.schedule import open_loop_trace

    trace = tmp_path / "open.parquet"
    open_loop_trace("/x", 10.0, 10.0).write_parquet(trace)
    out = tmp_path / "c.json"
    with scripted_server(_slow_answer) as port:
        r = run(
            "sweep", trace, "--target", f"http://127.0.0.1:{port}", "--levels", "1",
            "--warmup", "0s", "--duration", "300ms", "--timeout", "500ms",
            "--engine", "python", "-o", out,
        )  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "nothing was served" in r.stderr, r.stderr
    assert "is the server up" not in r.stderr, r.stderr
    assert "timed out after the server had begun to answer" in r.stderr, r.stderr
    assert json.loads(out.read_text())["levels"][0]["reps"][0]["answering"] == 3


@pytest.mark.parametrize(
    "args, said",
    [
        (["sweep", "{trace}", "--target", "http://127.0.0.1:1", "--levels", "1",
          "-o", "{tmp}/c.json", "--runlogs", "{tmp}/no/rl"], "--runlogs: {tmp}/no/rl: its folder"),
        (["testbed", "up", "--docroot", "{tmp}", "--state", "{tmp}/no/tb.json"],
         "--state: {tmp}/no/tb.json: its folder"),
    ],
    ids=["runlogs", "state"],
)  # fmt: skip
def test_an_output_option_is_named_once(tmp_path, trace_file, args, said):
    """An error "--runlogs: --runlogs ro/rl: cannot create it, ... is not writable": the
    option's name was put before the line and again as the file's kind."""
    fill = {"trace": str(trace_file), "tmp": str(tmp_path)}
    r = run(*(a.format(**fill) for a in args))
    assert r.exit_code == 2, r.output
    assert said.format(**fill) in r.stderr, r.stderr


def test_a_long_line_is_not_wrapped_off_a_terminal(capsys):
    """rich wrapped what shrink printed at 80 columns when stderr or stdout was not a
    terminal: a long path in a log was cut in two where a script reads it."""
    from shrink.cli._common import console, out_console

    path = "/srv/" + "a-long-folder-name/" * 8 + "curve.json"
    console().print(f"metrics: kept {path}", highlight=False)
    out_console().print(f"wrote {path}", highlight=False)
    got = capsys.readouterr()
    assert got.err == f"metrics: kept {path}\n" and got.out == f"wrote {path}\n"


@pytest.mark.compute
def test_a_replay_that_served_nothing_counts_its_errors_in_the_window_it_says(tmp_path):
    """ "all 2 requests failed (timeout 7); 5 of them timed out after the server had begun
    to answer": the requests were the window's, the errors (and the timed-out answers)
    every row's, warm-up too. Both are now the window's."""
    import numpy as np

    from shrink.cli.replay_cmd import _summary
    from shrink.runlog import RunLog
    from shrink.target import GeneratorCheck, RunResult

    nan = np.nan
    # Warm-up [0, 1): 5 answers begun and timed out; window [1, 2): 2 timed out unanswered.
    log = RunLog.from_columns({
        "intended": [0.1, 0.2, 0.3, 0.4, 0.5, 1.2, 1.4],
        "sent": [0.1, 0.2, 0.3, 0.4, 0.5, 1.2, 1.4],
        "first_byte": [0.15, 0.25, 0.35, 0.45, 0.55, nan, nan],
        "error": ["timeout"] * 7,
    })  # fmt: skip
    res = RunResult(log, (1.0, 2.0), GeneratorCheck(7, 7, 0, 0, 0))
    why = _summary(res, tmp_path / "x.parquet")["nothing_served"]
    assert why.startswith("all 2 requests failed to connect or timed out (timeout 2)"), why
    assert "of them timed out after" not in why, why
