"""A sweep's exports: HdrHistogram logs read back by the ``hdrhistogram`` package agree
with the exact percentiles; the CSVs have Locust's and k6's columns; OpenMetrics parses."""

from __future__ import annotations

import csv
import json
import re
import urllib.request

import httpx
import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from shrink.export import RecordingTarget, level_samples, write_sweep_exports
from shrink.export.csv import HISTORY_COLUMNS, K6_COLUMNS, STATS_COLUMNS
from shrink.export.hdr import HIGHEST_US, LOWEST_US, SIGNIFICANT_DIGITS
from shrink.export.metrics import MetricsServer, exposition
from shrink.measure import sweep
from shrink.target import FakeTarget
from shrink.trace import Trace

LEVELS = [2.0, 6.0, 8.5]
REPS = 2


def _trace() -> Trace:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1 / 100.0, 6000))
    t = t[t < 50.0]
    cls = np.where(rng.random(t.size) < 0.1, "dynamic", "static")
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/x"] * t.size, "cls": cls},
        meta={"mode": "open"},
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    trace = _trace()
    rec = RecordingTarget(FakeTarget(servers=1, demand={"static": 0.001, "dynamic": 0.004}))
    curve = sweep(rec, trace, LEVELS, reps=REPS, warmup=1.0, duration=4.0, seed=3)
    runs = level_samples(curve, trace, rec.runs)
    path = out / "curve.json"
    curve.write_json(path)
    files = write_sweep_exports(path, runs)
    return curve, runs, files, out


def _order_gap(h: HdrHistogram, p: float) -> float:
    """How far the exact (interpolated) percentile may sit from HdrHistogram's rank.

    numpy's linear percentile lies between the order statistics around (n-1)p;
    HdrHistogram takes the one at rank round(p n): they are at most one rank apart.
    """
    n = h.get_total_count()
    lo = h.get_value_at_percentile(max(p - 100.0 / n, 0.0))
    hi = h.get_value_at_percentile(min(p + 100.0 / n, 100.0))
    return float(hi - lo)


def test_the_hdr_log_reads_back_with_the_exact_percentiles(swept):
    curve, runs, _files, out = swept
    assert len(runs) == len(LEVELS) * REPS
    precision = 10.0**-SIGNIFICANT_DIGITS
    checked = 0
    for lv in curve.levels:
        log = out / "curve-hdr" / f"level-{lv.level:g}.hlog"
        reader = HistogramLogReader(str(log), HdrHistogram(LOWEST_US, HIGHEST_US, 3))
        for rep in lv.reps:
            h = reader.get_next_interval_histogram()
            assert h is not None and h.get_tag() == f"level={lv.level:g}"
            assert h.get_total_count() == rep.overall.n
            for p, exact in ((50.0, rep.overall.p50), (99.0, rep.overall.p99),
                             (99.9, rep.overall.p999)):  # fmt: skip
                exact_us = exact * 1e6
                got = h.get_value_at_percentile(p)
                allowed = precision * exact_us + 1.0 + _order_gap(h, p)
                assert abs(got - exact_us) <= allowed, (lv.level, p, got, exact_us, allowed)
                checked += 1
        assert reader.get_next_interval_histogram() is None  # one interval per repetition
    assert checked == len(LEVELS) * REPS * 3


def test_a_unit_slip_would_fail_the_comparison(swept):
    """The tolerance is tight enough to catch milliseconds written as microseconds."""
    curve, _runs, _files, out = swept
    lv = curve.levels[-1]
    reader = HistogramLogReader(
        str(out / "curve-hdr" / f"level-{lv.level:g}.hlog"), HdrHistogram(1, HIGHEST_US, 3)
    )
    h = reader.get_next_interval_histogram()
    exact_ms = lv.reps[0].overall.p50 * 1e3
    allowed = 1e-3 * exact_ms + 1.0 + _order_gap(h, 50.0) / 1e3
    assert abs(h.get_value_at_percentile(50.0) - exact_ms) > allowed


def test_the_percentile_spectrum_is_wrk2s(swept):
    _curve, _runs, _files, out = swept
    text = (out / "curve-hdr" / "level-2.hgrm").read_text()
    assert "Latency Distribution (HdrHistogram - Recorded Latency)" in text
    assert "Detailed Percentile spectrum:" in text
    assert re.search(r"Value +Percentile +TotalCount +1/\(1-Percentile\)", text)
    assert re.search(r"^ +99\.900% +[0-9.]+ms$", text, flags=re.M)
    assert "#[Mean    =" in text and "#[Max     =" in text


def test_the_csvs_have_locusts_and_k6s_columns(swept):
    curve, runs, _files, out = swept
    with (out / "curve_stats.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == STATS_COLUMNS
    agg = [r for r in rows if r["Name"] == "Aggregated"]
    assert [float(r["Level"]) for r in agg] == LEVELS
    for r, lv in zip(agg, curve.levels, strict=True):
        n = sum(rep.overall.n for rep in lv.reps)
        assert int(r["Request Count"]) - int(r["Failure Count"]) == n
        pooled = np.concatenate([x.latency for x in runs if x.level == lv.level])
        assert float(r["99.9%"]) == pytest.approx(np.quantile(pooled, 0.999) * 1e3, abs=1e-3)
    with (out / "curve_stats_history.csv").open() as f:
        hist = list(csv.DictReader(f))
    assert list(hist[0]) == HISTORY_COLUMNS
    assert len(hist) == len(LEVELS) * REPS * 4  # a 4 s window: four seconds
    with (out / "curve_requests.csv").open() as f:
        reqs = list(csv.DictReader(f))
    assert list(reqs[0]) == K6_COLUMNS
    assert len(reqs) == sum(x.ok.size for x in runs)
    assert {r["metric_name"] for r in reqs} == {"http_req_duration"}
    assert reqs[0]["extra_tags"] == "level=2&rep=1"


def test_openmetrics_text_and_server(swept):
    _curve, runs, _files, _out = swept
    text = exposition(runs)
    assert text.endswith("# EOF\n")
    assert f"shrink_sweep_runs_total {len(runs)}" in text
    assert 'shrink_level_latency_seconds{rate_factor="2",quantile="0.999"}' in text
    with MetricsServer(list(runs), 0) as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            assert resp.read().decode() == text


def test_every_unit_ends_its_metric_familys_name():
    """OpenMetrics: a family's UNIT MUST be a suffix of its name after an underscore;
    shrink_level_throughput declared requests_per_second, which a strict parser refuses."""
    text = exposition([], "x")
    units = re.findall(r"^# UNIT (\S+) (\S+)$", text, re.M)
    assert units and all(name.endswith(f"_{unit}") for name, unit in units), units


def test_curve_json_is_unchanged_by_the_exports(swept):
    _curve, _runs, _files, out = swept
    d = json.loads((out / "curve.json").read_text())
    assert d["schema"] == "shrink.loadcurve/1" and len(d["levels"]) == len(LEVELS)


def test_trace_classes_cannot_inject_formulas_or_break_the_csvs(tmp_path):
    # A class from a recorded log: '=cmd|...' was written as is (a spreadsheet runs it),
    # and a comma, quote or line break in one made the k6 writer fail (exit 70).
    from shrink.export.csv import write_k6, write_stats
    from shrink.export.samples import RunSamples

    nasty = ["=cmd|' /C calc'!A0", "+1", "-2", "@SUM(1)", "\tx", "\ry", 'a,b"c\nd', "static"]
    n = 4 * len(nasty)
    t = np.linspace(0.0, 1.0, n)
    run = RunSamples(
        rate_factor=1.0, window=(0.0, 1.0), epoch=1.7e9, intended=t, done=t + 0.001,
        ok=np.ones(n, dtype=bool), cls=np.array(nasty * 4), status=np.full(n, 200),
        nbytes=np.full(n, 100), level=2.0,
    )  # fmt: skip
    want = {("'" + c if c[0] in "=+-@\t\r" else c) for c in nasty}
    with write_stats(tmp_path / "s.csv", [run]).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["Name"] for r in rows} == want | {"Aggregated"}
    assert all(len(r) == len(STATS_COLUMNS) and None not in r for r in rows)
    with write_k6(tmp_path / "k.csv", [run]).open(newline="") as f:
        reqs = list(csv.DictReader(f))
    assert len(reqs) == n and {r["name"] for r in reqs} == want
    assert all(len(r) == len(K6_COLUMNS) and None not in r for r in reqs)


def test_jsonl_is_written_a_batch_at_a_time(tmp_path, monkeypatch):
    """``export -f jsonl`` turned the whole table into Python dicts first: over 13 GB for
    a trace of 20 M requests before a byte was written. Now one batch at a time."""
    import tracemalloc

    from shrink import trace as trace_mod

    n = 20_000
    tr = Trace.from_columns(
        {"session": np.arange(n) // 20, "t": np.arange(n) * 0.01, "path": ["/a.html"] * n},
        meta={"mode": "session"},
    )
    monkeypatch.setattr(trace_mod, "WRITE_BATCH", 500)
    tracemalloc.start()
    try:
        tr.write_jsonl(tmp_path / "t.jsonl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB for {n:,} rows"
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == n and json.loads(lines[-1])["session"] == (n - 1) // 20


def test_a_label_value_is_escaped_in_the_exposition() -> None:
    # A quote or line feed in a label value ended the sample early: `run="x"` then a
    # line ` evil 1\"} 1` a scraper would read as a sample of its own.
    from shrink.export.metrics import exposition

    text = exposition([], 'x"}\n evil 1\\')
    line = [ln for ln in text.splitlines() if ln.startswith("shrink_sweep_running_info")]
    assert line == ['shrink_sweep_running_info{state="running",run="x\\"}\\n evil 1\\\\"} 1'], text
    assert not any(ln.startswith(" evil") for ln in text.splitlines()), text


def test_the_spectrums_footer_gives_mean_and_deviation_in_milliseconds(swept):
    """The footer's standard deviation is in the same unit as its mean (ms), as wrk2's."""
    _curve, runs, _files, out = swept
    text = (out / "curve-hdr" / "level-8.5.hgrm").read_text()
    m = re.search(r"#\[Mean += +([0-9.]+), StdDeviation += +([0-9.]+)\]", text)
    assert m is not None
    lat_ms = np.concatenate([r.latency for r in runs if r.level == 8.5]) * 1e3
    assert float(m.group(1)) == pytest.approx(lat_ms.mean(), rel=0.01, abs=0.002)
    assert float(m.group(2)) == pytest.approx(lat_ms.std(), rel=0.01, abs=0.002)


def test_the_metrics_throughput_is_the_curves_even_past_saturation(swept):
    """shrink_level_throughput said 'completed requests a second' but counted the
    requests sent in the window that succeeded: past saturation that is the offered
    rate, not the rate the server completed (the LoadCurve's throughput)."""
    curve, runs, _files, _out = swept
    top = curve.levels[-1]
    assert top.reps[-1].throughput < 0.97 * top.reps[-1].offered  # overloaded
    text = exposition(runs)
    for lv in curve.levels:
        rf = next(r.rate_factor for r in runs if r.level == lv.level)
        m = re.search(rf'^shrink_level_throughput\{{rate_factor="{rf:g}"\}} (\S+)$', text, re.M)
        assert m is not None, (lv.level, text)
        assert float(m.group(1)) == pytest.approx(lv.reps[-1].throughput, rel=1e-5)


def test_the_metrics_name_each_level_as_the_sweep_was_given_it():
    """A sweep given --knob rate --levels 300 was labelled only rate_factor="3"."""
    trace = _trace()
    rec = RecordingTarget(FakeTarget(servers=1), (trace, [300.0], "rate"))
    sweep(rec, trace, [300.0], knob="rate", reps=1, warmup=1.0, duration=4.0, seed=3)
    text = exposition(rec.runs)
    assert re.search(r'^shrink_level_throughput\{knob="rate",level="300",rate_factor="[0-9.]+"\} ',
                     text, re.M), text  # fmt: skip
    assert 'level="300",rate_factor=' in text and 'quantile="0.999"}' in text


def test_the_metrics_name_the_run_under_way_and_the_state_for_the_servers_whole_life():
    """shrink_sweep_running_info was in the exposition's code but never served: nothing
    told the server which run was under way. Then it was served only while a run was:
    a scrape before the first run or after the last found no such metric at all; it
    now says idle, running (with the run) or finished."""
    from shrink.cli.sweep_cmd import _told
    from shrink.measure import SweepHooks

    trace = _trace()
    rec = RecordingTarget(FakeTarget(servers=1), (trace, [300.0, 400.0], "rate"))
    seen: list[str] = []

    def progress(what: str, done: int, total: int) -> None:
        seen.append(exposition(list(rec.runs), server.current, server.state))

    def scrape() -> str:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with httpx.Client(trust_env=False, timeout=5) as c:
            return c.get(url).text

    with MetricsServer(rec.runs, 0) as server:
        seen.append(scrape())  # before the first run
        hooks = SweepHooks(_told(progress, server))
        levels = [300.0, 400.0]
        sweep(rec, trace, levels, knob="rate", reps=1, warmup=1.0, duration=4.0, hooks=hooks)
        seen.append(scrape())  # after the last
    info = r'^shrink_sweep_running_info\{state="([a-z]+)",run="([^"]*)"\} 1$'
    running = [re.findall(info, t, re.M) for t in seen]
    assert running[0] == [("idle", "")]
    assert running[1:3] == [[("running", "rate 300 rep 1/1")], [("running", "rate 400 rep 1/1")]]
    assert running[-2] == running[-1] == [("finished", "")]  # done: nothing under way
    assert _told(progress, None) is progress  # no server, nothing to tell


@pytest.mark.compute
@pytest.mark.parametrize("export", [None, "csv"])
def test_a_sweep_keeps_its_runs_requests_only_for_an_export(tmp_path, monkeypatch, export):
    """Every run's requests (about 90 bytes each) were held until the sweep ended, with
    no export or metrics asked for: a sweep's memory grew with every request it sent."""
    from helpers.cli import SPEC, cli_ok

    from shrink.export import samples

    kept = []
    made = samples.RunSamples.from_result
    monkeypatch.setattr(samples.RunSamples, "from_result",
                        classmethod(lambda cls, *a: kept.append(1) or made(*a)))  # fmt: skip
    trace = tmp_path / "t.parquet"
    _trace().write_parquet(trace)
    cli_ok("sim", "sweep", str(trace), "--machine", str(SPEC), "-o", str(tmp_path / "c.json"),
           "--levels", "1,2", "--reps", "1", "--warmup", "0s", "--duration", "1s",
           *(["--export", export] if export else []))  # fmt: skip
    assert len(kept) == (2 if export else 0)


def test_the_metrics_alone_keep_the_last_run_of_each_level_and_the_totals():
    """``--metrics-port`` without an export kept every run's requests until the sweep
    ended, though the exposition needs only the counts and the last run of each level."""
    trace = _trace()
    every = RecordingTarget(FakeTarget(servers=1), (trace, [300.0, 400.0], "rate"))
    last = RecordingTarget(FakeTarget(servers=1), (trace, [300.0, 400.0], "rate"), last_only=True)
    for rec in (every, last):
        sweep(rec, trace, [300.0, 400.0], knob="rate", reps=3, warmup=1.0, duration=4.0, seed=3)
    assert len(every.runs) == 6 and len(last.runs) == 2
    assert last.totals() == (6, sum(int(r.ok.size) for r in every.runs))
    assert exposition(every.runs) == exposition(last.runs, totals=last.totals())
    with MetricsServer(last.runs, 0, last.totals) as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with httpx.Client(trust_env=False, timeout=5) as c:
            assert c.get(url).text == exposition(every.runs, "", "idle")
