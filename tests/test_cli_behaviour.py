"""The CLI behaves like the tools its users know: options checked before anything
runs, exit statuses that tell, percentiles as users write them, exports only when
asked, bounds never read as answers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from tests.conftest import ROOT
from tests.test_export import _trace

SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"


def run(*args, **kw):
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=250, **kw)


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


@pytest.mark.parametrize("stat", ["p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "mean"])
def test_mat_takes_the_percentiles_users_write(curve, stat):
    r = run("mat", curve, "--stat", stat, "--threshold", "40ms", "--json")
    assert r.exit_code in (0, 99), r.output
    assert json.loads(r.stdout)["mat"] is not None


def test_p95_lies_between_p90_and_p99(curve):
    from shrink.loadcurve import LoadCurve
    from shrink.mat import mat

    lc = LoadCurve.read_json(curve)
    mats = [mat(lc, s, 0.02).mat for s in ("p90", "p95", "p99")]
    assert mats[0] > mats[1] > mats[2]


def test_thresholds_take_any_percentile():
    from shrink.checks import parse_thresholds
    from shrink.cli._common import stat_thresholds

    assert parse_thresholds(stat_thresholds("p95=20ms,p99.9=500ms")) == {
        "p95": 0.02,
        "p999": 0.5,
    }


@pytest.mark.parametrize("bad", ["p100", "p0", "q95", "p9.5.5"])
def test_a_percentile_users_cannot_mean_is_refused(curve, bad):
    r = run("mat", curve, "--stat", bad, "--threshold", "5ms")
    assert r.exit_code == 2
    assert "--stat" in r.output and "p95" in r.output


def test_thresholds_print_one_way(curve):
    r = run("mat", curve, "--stat", "p99.9", "--threshold", "500ms")
    assert "MAT (p99.9 < 500 ms)" in r.stdout, r.stdout


# --- mat's bound line, --cluster's help ---------------------------------------------------


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
    assert "shrink[ray]" in r.output


# --- options checked before anything runs ------------------------------------------------


@pytest.mark.parametrize(
    "mapping, accepted",
    [("1-replicaa", "K-replica"), ("3-replica", "4-replica, 8-replica")],
)
def test_predict_refuses_a_mapping_before_any_run(tmp_path, trace_file, mapping, accepted):
    out = tmp_path / "out"
    r = run(
        "predict", trace_file, "--target", f"sim:{SPEC}", "--mappings", mapping, "-o", out
    )
    assert r.exit_code == 2, r.output
    assert "--mappings" in r.output and accepted in r.output
    assert "rate_factor" not in r.output  # no level was run
    assert not out.exists()


def test_warmup_0s_is_accepted(tmp_path, trace_file):
    out = tmp_path / "c.json"
    r = run(
        "sim", "sweep", trace_file, "--machine", SPEC, "-o", out, "--levels", "1",
        "--warmup", "0s", "--duration", "1s",
    )  # fmt: skip
    assert r.exit_code == 0, r.output


def test_an_output_under_a_missing_folder_is_refused(tmp_path, trace_file):
    out = tmp_path / "nonexistent" / "dir" / "c.json"
    r = run(
        "sim", "sweep", trace_file, "--machine", SPEC, "-o", out, "--levels", "1",
        "--duration", "1s",
    )  # fmt: skip
    assert r.exit_code == 2
    assert "--out" in r.output and "does not exist" in r.output
    assert not out.parent.exists() and not out.parent.parent.exists()


# --- exports only when asked ----------------------------------------------------------------


def test_a_sweep_writes_only_its_curve_by_default(tmp_path, trace_file):
    out = tmp_path / "curve.json"
    r = run(
        "sim", "sweep", trace_file, "--machine", SPEC, "-o", out, "--levels", "1",
        "--duration", "1s",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.json"]


def test_export_names_the_formats(tmp_path, trace_file):
    out = tmp_path / "curve.json"
    r = run(
        "sim", "sweep", trace_file, "--machine", SPEC, "-o", out, "--levels", "1",
        "--duration", "1s", "--export", "k6,hdr",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["curve-hdr", "curve.json", "curve_requests.csv"]
    r = run(
        "sim", "sweep", trace_file, "--machine", SPEC, "-o", out, "--levels", "1",
        "--export", "k7",
    )  # fmt: skip
    assert r.exit_code == 2 and "--export" in r.output and "locust" in r.output
