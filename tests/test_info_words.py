"""Words a reader could not act on: `trace info`'s "duration" and "span" (two lengths of
a trace, told apart by nothing), and `whatif`'s "1:none" (no best mapping, no reason)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app

ROOT = Path(__file__).resolve().parent.parent


def test_trace_info_says_which_length_is_which(tmp_path):
    trace = tmp_path / "s.parquet"
    log = ROOT / "examples" / "traces" / "support-access.log"
    r = CliRunner().invoke(app, ["ingest", str(log), "-o", str(trace)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["trace", "info", str(trace)])
    assert r.exit_code == 0, r.output
    labels = re.findall(r"^│ (\S[^│]*?) +│", r.output, re.M)
    assert "sessions" in labels and "duration" not in labels and "span" not in labels, labels
    flat = " ".join(re.sub(r"[│┌┐└┘─┬┴]", " ", r.output).split())
    assert "first to last request 12.000 s (the bursts' start times)" in flat, flat
    assert (
        "loop period 7.500 s: a looped replay starts the trace again this often (its session "
        "starts' span plus one mean gap between them; a pass still running overlaps the next)"
    ) in flat, flat
    assert "request rate 13.25 req/s (over first to last request)" in flat, flat


@pytest.mark.parametrize(
    ("lines", "period", "rate"),
    [(1, "1.000 s", "none: every request is at one instant"),
     (99, "12.000 s", "8.25 req/s (over first to last request)")],
    ids=["one-request", "one-session"],
)  # fmt: skip
def test_trace_info_says_what_the_loop_period_of_one_session_is(tmp_path, lines, period, rate):
    """A trace of one session (or one request) was said to loop at "its session starts'
    span plus one mean gap between them": there is no gap, and its period is its last
    burst's start (at least 1 s); one request's rate was "nan req/s"."""
    log = ROOT / "examples" / "traces" / "support-access.log"
    first = log.read_text().splitlines()
    ip = first[0].split()[0]
    one = tmp_path / "one.log"
    one.write_text("\n".join([x for x in first if x.split()[0] == ip][:lines]) + "\n")
    trace = tmp_path / "one.parquet"
    r = CliRunner().invoke(app, ["ingest", str(one), "-o", str(trace)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["trace", "info", str(trace)], terminal_width=400)
    assert r.exit_code == 0, r.output
    flat = " ".join(re.sub(r"[│┌┐└┘─┬┴]", " ", r.output).split())
    assert (
        f"loop period {period}: a looped replay starts the trace again this often (a single "
        "session start: one pass lasts from its start to its last burst's start, at least 1 s;"
    ) in flat, flat
    assert "mean gap" not in flat and f"request rate {rate}" in flat, flat
    r = CliRunner().invoke(app, ["trace", "info", "--json", str(trace)])
    assert {"span", "duration", "request_rate"} <= set(json.loads(r.output)), r.output


@pytest.mark.compute
def test_whatif_says_why_a_dynamic_fraction_has_no_best_mapping():
    from shrink.report.recommendation import sweep_best_text

    rows = [
        {"dynamic_fraction": 0.0, "mat": {"1-replica": 9.0}, "best": "1-replica"},
        {"dynamic_fraction": 1.0, "mat": {"1-replica": 0.0}, "best": None},
    ]
    said = sweep_best_text({"stat": "mean", "threshold": 5e-4, "rows": rows})
    assert said.startswith(
        "best mapping by dynamic fraction (the highest MAT, mean < 0.5 ms): 0:1-replica, 1:none; "
        "none: at that fraction no mapping's mean latency is under 0.5 ms even at the lightest "
        "load (every MAT is 0)"
    ), said
    assert "none:" not in sweep_best_text({"stat": "mean", "threshold": 5e-4, "rows": rows[:1]})


def test_whatif_on_the_example_machine_gives_the_reason_for_none():
    spec = ROOT / "examples" / "machines" / "nehalem-2s.toml"
    r = CliRunner().invoke(app, ["whatif", "--machine", str(spec), "--workload", "tcp"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("best mapping by"))
    assert "1:none" in line and "even at the lightest load (every MAT is 0)" in line, line
