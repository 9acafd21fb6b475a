"""The demo's pieces with other configurations (bench/bench_fidelity.py), on a fake
target: the plumbing only, no live server (accuracy is measured by the benchmark)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

import shrink.pipeline
import shrink.providers
from shrink import demo
from shrink.trace import Trace
from tests.helpers.fake_provider import FakeProvider

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_fidelity

pytestmark = pytest.mark.compute


def test_the_default_trace_is_the_demos_own(tmp_path):
    # Counts of the demo's trace as written before configurations existed.
    trace_path, docroot = demo._synth(tmp_path, Console(record=True))
    info = Trace.read_parquet(trace_path).info()
    assert (trace_path.name, info.requests, info.sessions) == ("support-demo.parquet", 238890, 2201)
    assert (docroot / "manifest.json").exists()


def test_a_config_replaces_the_demos_trace(tmp_path):
    cfg = {**demo.DEMO, **bench_fidelity.CONFIGS["support-s7-u600"], "duration": 60}
    trace_path, _ = demo._synth(tmp_path, Console(record=True), cfg)
    assert Trace.read_parquet(trace_path).info().requests != 238890
    tcp = {**demo.DEMO, **bench_fidelity.CONFIGS["static-tcp-a25"]}
    trace_path, docroot = demo._synth(tmp_path / "tcp", Console(record=True), tcp)
    info = Trace.read_parquet(trace_path).info()
    assert info.request_rate == pytest.approx(2000, rel=0.05)
    assert (docroot / "static" / "file1k.bin").stat().st_size == 1024


TCP_TEST = {**bench_fidelity.CONFIGS["static-tcp-a25"], "duration": 20}


@pytest.fixture(scope="module")
def tcp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One run of a tcp configuration on the fake target, with the quick plan, in
    ``<folder>/tcp-test/run-0`` as bench_fidelity lays runs out: what it returned, and
    the folder. Run once for the tests of its results and of its summary."""
    base = tmp_path_factory.mktemp("configs")
    with pytest.MonkeyPatch.context() as mp:
        # every provider the demo makes is the fake one-core provider; no pre-flight wait
        mp.setattr(shrink.providers, "make_provider", lambda *a, **k: FakeProvider())
        mp.setattr(shrink.pipeline, "make_provider", lambda *a, **k: FakeProvider())
        mp.setattr(demo, "_check_quiet", lambda console: {"busy": {}, "steal": {}})
        mp.setitem(bench_fidelity.CONFIGS, "tcp-test", TCP_TEST)
        mp.setattr(demo, "_plan", lambda plan, quick, *_, _p=demo._plan: _p(None, True))
        got = bench_fidelity.run_config("tcp-test", base / "tcp-test" / "run-0")
    return base, got


def test_a_tcp_config_runs_end_to_end_with_rule_thresholds(tcp_run):
    base, got = tcp_run
    out = base / "tcp-test" / "run-0"
    rule = json.loads((out / "thresholds.json").read_text())
    # The rule: light-load value / (1 - 0.8), measured on the whole (fake) core.
    for s in ("mean", "p999"):
        assert rule["thresholds"][s] == pytest.approx(rule["light_load"][s] / 0.2)
    # The fake core's light load: 0.5 ms requests, 10% of 2,000 req/s.
    assert 0.0004 < rule["light_load"]["mean"] < 0.001
    pred = json.loads((out / "prediction.json").read_text())
    assert pred["inputs"]["plan"]["max_levels"] == 5  # the quick plan
    assert json.loads((out / "config.json").read_text())["config"]["alpha"] == 0.25
    assert got["config"] == "tcp-test" and got["share_kind"] == "cpu_time"
    for s in ("mean", "p999"):
        assert {"predicted", "measured", "ci", "status", "covered", "budget"} <= set(got[s])
    # By default a CPU-time share is taken at its nominal fraction: the prediction read
    # nothing of the full target.
    use = got["full_target_use"]
    assert use["runs"] == [] and use["seconds"] == 0.0
    # What the content term reads: alpha, and a static page's dynamic part, none.
    assert got["alpha"] == 0.25 and got["dynamic_share"] == 0.0


def test_summarize_tabulates_the_runs_it_finds(tcp_run, monkeypatch, capsys):
    base, _ = tcp_run
    monkeypatch.setitem(bench_fidelity.CONFIGS, "tcp-test", TCP_TEST)
    assert bench_fidelity.main(["--summarize", str(base)]) == 0
    text = capsys.readouterr().out
    assert "| tcp-test | run-0 | " in text and "tcp-test:" in text
    assert "all configurations:" in text


def _cell(config, predicted, measured, rep=0.02, kind="cpu_time"):
    import math

    return {
        "config": config,
        "dir": f"{config}/{predicted}",
        "share_kind": kind,
        "mean": {
            "stat": "mean", "predicted": predicted, "measured": measured, "ci": None,
            "status": "ok/ok", "covered": None, "log_error": math.log(predicted / measured),
            "applied_bias": 0.0,
            "budget": {"repetition": rep, "drift": 0.0, "speed": 0.0, "dof": 20},
        },
    }  # fmt: skip


def test_the_model_error_is_a_bias_and_a_spread_judged_leaving_a_configuration_out():
    """Predictions 30% low, give or take 10%, where the repetitions explain 2%: the bias
    is their mean log error and the spread what is left about it; a configuration is
    judged with the fit of the others, so one that alone is far off stays uncovered."""
    import math

    rows = [_cell("a", 77, 100), _cell("a", 63, 100), _cell("b", 77, 100),
            _cell("b", 63, 100), _cell("c", 140, 100)]  # fmt: skip
    pairs = bench_fidelity._pairs(rows[:4])
    logs = [math.log(0.77), math.log(0.63)]
    bias = sum(logs) / 2
    assert bench_fidelity.fit_bias(pairs) == pytest.approx(bias)
    want = sum((x - bias) ** 2 for x in logs) / 2 - 2 * 0.02**2
    assert bench_fidelity.fit_sigma(pairs, bias) == pytest.approx(math.sqrt(want))
    loo = bench_fidelity.leave_one_out(rows)
    # "c" is corrected by the others' bias (about x1.43): 140 -> about 200, not covered.
    assert [c["covered"] for c in loo["c"]["cells"]] == [False]
    assert loo["c"]["cells"][0]["error"] == pytest.approx(1.4 / math.exp(bias) - 1)
    # "a" is judged with the fit of "b" and "c": c's miss widens the spread.
    assert loo["a"]["sigma"] > loo["c"]["sigma"]
    assert all(c["covered"] for c in loo["a"]["cells"])
    assert bench_fidelity.fit_bias([]) == 0.0 and bench_fidelity.fit_sigma([]) == 0.0


def test_the_readme_table_is_made_from_the_runs():
    """Conclusive errors (corrected by the others' bias), then bounds; the leave-one-out
    intervals' half-width and coverage, per configuration."""
    rows = [_cell("demo", 77, 100), _cell("demo", 63, 100), _cell("support-a50", 70, 100)]
    bound = _cell("support-a50", 90, 100)
    bound["mean"]["status"] = "not_reached/ok"
    loo = bench_fidelity.leave_one_out([*rows, bound])
    table = bench_fidelity.readme_table([*rows, bound], loo).splitlines()
    assert table[0].startswith("| configuration | runs | mean-threshold error")
    demo = table[2].split(" | ")
    assert demo[0] == "| demo: Support-like, 25% CPU-time share of one core" and demo[1] == "2"
    corrected = [f"{100 * (c['error']):+.1f}%" for c in loo["demo"]["cells"]]
    assert demo[2] == f"-23.0%, -37.0% ({', '.join(corrected)})"
    assert demo[3] == "-" and demo[4].endswith("%")  # no p99.9 cell in these rows
    assert demo[5] == f"{sum(c['covered'] for c in loo['demo']['cells'])} of 2 |"
    a50 = table[3].split(" | ")
    assert a50[1] == "2" and a50[2].endswith("; bound -10.0%"), a50


def test_a_fit_uses_only_the_runs_of_this_calibration():
    """A CPU-time share's errors belong to the calibration that made its speed: runs of
    another are left out and counted; core subsets need none and all stay."""
    rows = [
        {**_cell("a", 77, 100), "calibration": bench_fidelity.CALIBRATION},
        {**_cell("a", 63, 100), "calibration": "per class, light on both sides"},
        {**_cell("b", 70, 100)},  # older result: no calibration recorded
        {**_cell("c", 90, 100, kind="cores")},
    ]
    keep, left = bench_fidelity.current(rows)
    assert left == 2 and [r["dir"] for r in keep] == ["a/77", "c/90"]


def test_a_runs_error_is_read_without_the_bias_it_was_corrected_by(tmp_path):
    """prediction.json keeps the model error at its top level: a run corrected by a
    bias of -0.2 (x1.22) that predicted 122 against 100 was, uncorrected, exact."""
    import math

    pred = {
        "mappings": {"1-replica": {"mean": {"error_budget": {}}}},
        "share": {"kind": "cpu_time"},
        "model_error": {"bias": -0.2},
        "share_model": {"calibration": bench_fidelity.CALIBRATION},
    }
    val = {"mats": {"mean": {"predicted": 100 * math.exp(0.2), "measured": 100.0,
                             "predicted_status": "ok", "measured_status": "ok"}}}  # fmt: skip
    (tmp_path / "prediction.json").write_text(json.dumps(pred))
    (tmp_path / "validation.json").write_text(json.dumps(val))
    got = bench_fidelity.row(tmp_path)
    assert got["mean"]["log_error"] == pytest.approx(0.0, abs=1e-12)
    assert got["mean"]["applied_bias"] == -0.2
    assert got["calibration"] == bench_fidelity.CALIBRATION


def test_summarize_says_when_there_is_nothing(tmp_path, capsys):
    assert bench_fidelity.main(["--summarize", str(tmp_path)]) == 1
    assert "no run under" in capsys.readouterr().err


def test_a_recorded_trace_is_time_compressed_and_served_as_recorded(real_dir, tmp_path):
    from shrink.synth.docroot import missing_paths

    source = real_dir / "nasa_aug95_excerpt.repaired.log"
    cfg = {**demo.DEMO, **bench_fidelity.CONFIGS["nasa-a50"], "source": source}
    trace_path, docroot = demo._synth(tmp_path, Console(record=True), cfg)
    tr = Trace.read_parquet(trace_path)
    # Of the 1,880 lines, the plain files answered 200 (the rest counted and said).
    assert (len(tr), tr.n_sessions) == (1532, 167)
    assert tr.info().request_rate == pytest.approx(2000, rel=1e-6)
    # One factor for send times and think times alike: a think time of 9 s stays 9 s
    # of the recorded log's time.
    k = tr.meta["time_compressed"]
    assert 4000 < k < 6000
    assert float(tr.column("think").max()) * k == pytest.approx(1793, rel=1e-6)
    assert missing_paths(docroot, set(tr.column("path").tolist())) == []
    assert set(tr.column("cls")) == {"static"}  # the document root serves files only
    sizes = dict(zip(tr.column("path"), tr.column("bytes"), strict=True))
    assert (docroot / "images" / "NASA-logosmall.gif").stat().st_size == sizes[
        "/images/NASA-logosmall.gif"
    ]


def test_a_run_that_finds_no_answer_is_recorded_and_summarized(tmp_path, monkeypatch, capsys):
    from shrink.errors import MeasurementError

    def fails(out, **kwargs):
        raise MeasurementError("load curve has no usable level: the generator fell behind")

    monkeypatch.setattr(demo, "run_demo", fails)
    got = bench_fidelity.run_config("static-tcp-a25", tmp_path / "static-tcp-a25" / "run-0")
    assert got["error"].startswith("load curve has no usable level")
    assert bench_fidelity.main(["--summarize", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| static-tcp-a25 | " in text and "failed: load curve has no usable level" in text
    assert "mean: no conclusive run of 1" in text


def test_the_default_demo_predicts_as_before(tmp_path, monkeypatch):
    """No config: the demo's alpha, seed, thresholds and plan reach run_predict."""
    from types import SimpleNamespace

    from shrink.autolevels import AutoPlan

    seen = {}

    def run_predict(trace_path, out, config, **kwargs):
        seen.update(kwargs, config=config, trace=Path(trace_path).name)
        stat = SimpleNamespace(mat=1.0, bound=None)  # as a MAT read off a curve
        return SimpleNamespace(
            mappings={"1-replica": SimpleNamespace(stats={"mean": stat, "p999": stat})},
            self_checks={"generator_kept_up": True},
            server=None,
            extra={},
        )

    mats = {s: {"measured": 1.0} for s in ("mean", "p999")}
    validation = SimpleNamespace(to_dict=lambda: {"mats": mats, "conclusive": True})
    monkeypatch.setattr(shrink.pipeline, "run_predict", run_predict)
    monkeypatch.setattr(shrink.pipeline, "run_validate", lambda *a, **k: validation)
    monkeypatch.setattr(demo, "_check_quiet", lambda console: {"busy": {}, "steal": {}})
    monkeypatch.setattr(demo, "_whatif", lambda trace_path, thresholds: None)
    demo.run_demo(tmp_path)
    assert seen["trace"] == "support-demo.parquet"
    cfg = seen["config"]
    assert (cfg.alpha, cfg.seed, seen["target"].target) == (0.25, 1, "testbed")
    assert cfg.thresholds == {"mean": 0.010, "p999": 0.5}
    assert cfg.plan == AutoPlan(
        warmup=0.5, duration=2.5, reps=2, probe_reps=1, warm_run=False, max_levels=9,
        coarse=(0.65, 0.8, 0.9, 1.0, 1.1, 1.25), budget_s=demo.SWEEP_BUDGET_S,
    )  # fmt: skip
    assert cfg.share_kind == "cpu_time" and cfg.validation_budget_s > 0
    assert not (tmp_path / "thresholds.json").exists()


@pytest.mark.parametrize("name", sorted(bench_fidelity.CONFIGS))
def test_every_config_writes_a_trace_its_document_root_serves(name, tmp_path):
    from shrink.synth.docroot import missing_paths

    cfg = {**demo.DEMO, **bench_fidelity.CONFIGS[name], "duration": 30}
    if cfg.get("workload") == "recorded" and not Path(cfg["source"]).exists():
        pytest.skip(f"recorded trace not found: {cfg['source']}")
    trace_path, docroot = demo._synth(tmp_path, Console(record=True), cfg)
    tr = Trace.read_parquet(trace_path)
    assert len(tr) > 1000
    assert missing_paths(docroot, set(tr.column("path").tolist())) == []
    # Thresholds: the demo's (the same Support mix) or the light-load rule's.
    assert cfg["thresholds"] in (demo.DEMO["thresholds"], None)


def test_a_rerun_adds_runs_and_writes_over_none(tmp_path, monkeypatch):
    from shrink.errors import MeasurementError

    def fails(out, **kwargs):
        raise MeasurementError("no answer")

    monkeypatch.setattr(demo, "run_demo", fails)
    for _ in range(2):
        bench_fidelity.main(["--config", "static-tcp-a25", "--out", str(tmp_path)])
    assert sorted(p.name for p in (tmp_path / "static-tcp-a25").iterdir()) == ["run-0", "run-1"]


def test_the_light_load_is_a_tenth_of_the_whole_core_whatever_the_trace_rate(tmp_path, monkeypatch):
    # 0.1 ms a request: the pilot at 200 req/s finds the core 2% busy, so the light
    # load runs at five times the pilot's rate.
    fast = FakeProvider(demand={"static": 0.0001, "dynamic": 0.001})
    monkeypatch.setattr(shrink.providers, "make_provider", lambda *a, **k: fast)
    cfg = {**demo.DEMO, **bench_fidelity.CONFIGS["static-tcp-a25"], "duration": 20}
    trace_path, docroot = demo._synth(tmp_path, Console(record=True), cfg)
    rule = demo.light_load_thresholds(trace_path, docroot, tmp_path, seed=1)
    assert rule["pilot_utilization"] == pytest.approx(0.02, abs=0.005)
    assert rule["light_load"]["rate_factor"] == pytest.approx(0.5, rel=0.25)
    assert rule["light_load_utilization"] == pytest.approx(0.10, abs=0.02)
    # Each repetition holds at least min_requests requests.
    assert rule["light_load_requests"] >= 3 * demo.LIGHT_LOAD["min_requests"]
    assert json.loads((tmp_path / "thresholds.json").read_text()) == rule


def test_ctrl_c_in_bench_fidelity_is_one_line_and_keeps_the_finished_runs(
    tmp_path, monkeypatch, capsys
):
    """A run cut short is named in one line; the runs before it still make the report."""
    done = {"config": "support-s7-u600", "dir": "x", "error": "no level kept up"}
    calls = iter([done])

    def run(name, out, **kw):
        out.mkdir(parents=True)  # as a real run does: the next one goes to run-1
        got = next(calls, None)
        if got is None:
            raise KeyboardInterrupt
        return got

    monkeypatch.setattr(bench_fidelity, "run_config", run)
    argv = ["--config", "support-s7-u600", "--runs", "3", "--out", str(tmp_path)]
    assert bench_fidelity.main(argv) == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        f"interrupted: the runs so far are in {tmp_path / 'support-s7-u600' / 'run-1'}"
    )
    assert "Traceback" not in captured.out + captured.err


def test_a_smaller_time_share_gets_a_budget_in_proportion():
    """Its runs last 1/s as long: the budget holds as many levels at any alpha."""
    base = demo._plan(None, False).budget_s
    assert base == demo.SWEEP_BUDGET_S
    assert demo._plan(None, False, 0.25).budget_s == base
    assert demo._plan(None, False, 0.5).budget_s == base  # never less than the demo's
    assert demo._plan(None, False, 0.125).budget_s == pytest.approx(2 * base)
    given = demo._plan(None, False)
    assert demo._plan(given, False, 0.125) is given  # a caller's plan is kept
    assert demo._plan(None, True, 0.125).budget_s is None  # a smoke test's has none


def test_a_signal_during_a_light_load_run_stops_the_demo(monkeypatch):
    """The light-load runs that set the thresholds let the engine's stop flag pass: the
    run ended early, the demo went on, and a SIGTERM to bench_fidelity was lost."""
    from types import SimpleNamespace

    from shrink.measure import loop_window
    from tests.helpers.session_traces import poisson_trace

    looped = loop_window(poisson_trace(100.0, 200.0), 0.0, 50.0)
    calls = []

    def run(trace, **kw):
        calls.append(kw["rate_factor"])
        return SimpleNamespace(describe={"engine": {"interrupted": True}}, utilization=0.1)

    with pytest.raises(KeyboardInterrupt):
        demo._light_run(SimpleNamespace(run=run), looped, 1.0, seed=1)
    assert calls == [1.0]
