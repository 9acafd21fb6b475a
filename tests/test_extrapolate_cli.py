"""``shrink calibrate``, ``shrink whatif`` and ``shrink extrapolate`` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.curves import half_share_curve
from typer.testing import CliRunner

from extrapolate._synthetic import Truth, truth_curve
from shrink.cli import app
from shrink.machine import Machine

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parent.parent
SPEC = str(ROOT / "examples" / "machines" / "nehalem-2s.toml")
runner = CliRunner()


def _invoke(args: list[str]):
    result = runner.invoke(app, args)
    return result


def test_whatif_json_has_every_mapping_with_intervals():
    r = _invoke(
        ["whatif", "--machine", SPEC, "--workload", "tcp", "--calibration", "published", "--json"]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema"] == "shrink.prediction/1"
    for name in ("1-replica", "2-replica-direct", "2-replica-indirect"):
        for stat in ("mean", "p999"):
            m = d["mappings"][name][stat]
            assert m["ci"][0] <= m["mat"] <= m["ci"][1] and m["mat"] > 0
    # The calibration figures it was fitted on, reproduced within their precision.
    figs = d["calibration"]["figures"]
    assert figs and all(f["within_precision"] for f in figs)
    assert d["recommended"] == "2-replica-direct"
    assert d["mappings"]["2-replica-direct"]["mean"]["mat"] / d["mappings"]["1-replica"]["mean"][
        "mat"
    ] - 1 == pytest.approx(0.123, abs=0.0005)


def test_whatif_prints_both_workloads():
    r = _invoke(
        ["whatif", "--machine", SPEC, "--workload", "tcp", "--workload", "support", "--no-sweep"]
    )
    assert r.exit_code == 0, r.output
    assert "== tcp on nehalem-2s ==" in r.stdout and "== support on nehalem-2s ==" in r.stdout
    assert r.stdout.count("<- recommended") == 2
    assert "within precision" in r.stdout and " NO" not in r.stdout


def test_whatif_on_a_trace_workload(tmp_path):
    from shrink.trace import Trace

    tr = Trace.from_columns(
        {
            "session": [0, 0, 1, 1, 2],
            "t": [0.0, 0.0, 1.0, 1.0, 2.0],
            "path": ["/a.gif", "/b.php", "/c.gif", "/d.gif", "/e.gif"],
            "cls": ["static", "dynamic", "static", "static", "static"],
        }
    )
    p = tr.write_parquet(tmp_path / "mine.parquet")
    r = _invoke(["whatif", "--machine", SPEC, "--workload", str(p), "--json", "--no-sweep"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["workload"]["dynamic_fraction"] == pytest.approx(0.2)
    assert d["recommended"] == "1-replica"


def test_whatif_bad_workload_is_one_clear_error():
    r = _invoke(["whatif", "--machine", SPEC, "--workload", "nosuch"])
    assert r.exit_code == 1
    assert "workload == 'nosuch'" in r.output


def test_calibrate_published_and_from_curves(tmp_path):
    out = tmp_path / "pub.json"
    r = _invoke(["calibrate", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["schema"] == "shrink.calibration/1"
    # The file works as --calibration.
    r = _invoke(
        [
            "whatif",
            "--machine",
            SPEC,
            "--workload",
            "support",
            "--calibration",
            str(out),
            "--json",
            "--no-sweep",
        ]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recommended"] == "1-replica"

    # A user's own runs: one-socket shares and both mappings over two sockets.
    mach = Machine.read_toml(SPEC)
    t = Truth()
    files = []
    for i, (mp, cpus) in enumerate(
        [
            ("1-replica", (0,)),
            ("1-replica", (0, 1)),
            ("1-replica", (0, 1, 2)),
            ("1-replica", (0, 1, 4, 5)),
            ("2-replica-direct", (0, 1, 4, 5)),
            ("2-replica-indirect", (0, 1, 4, 5)),
        ]
    ):
        c = truth_curve(
            t, mach, mp, cpus, dyn=0.0, smr=0.0, workload="static", levels=12, reps=2, seed=i
        )
        files.append(str(c.write_json(tmp_path / f"c{i}.json")))
    r = _invoke(["calibrate", *files, "--machine", SPEC, "--thresholds", "mean=1.5ms", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["physics"]["nic_remote_penalty"] == pytest.approx(t.nic_penalty, rel=0.3)
    own = tmp_path / "own.json"
    own.write_text(r.stdout)
    r = _invoke(
        [
            "whatif",
            "--machine",
            SPEC,
            "--workload",
            "static",
            "--workload",
            "tcp",
            "--calibration",
            str(own),
            "--json",
            "--no-sweep",
        ]
    )
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.stdout)["predictions"]) == {"static", "tcp"}
    usl = doc["usl"]["static"]
    assert usl["core_counts"] == [1, 2, 3]
    assert usl["kappa_ci"][0] <= usl["kappa"] <= usl["kappa_ci"][1]


def test_extrapolate_a_share_curve(tmp_path):
    mach = Machine.read_toml(SPEC)
    c = half_share_curve(mach, levels=16, reps=2, seed=3)
    src = c.write_json(tmp_path / "share.json")
    out = tmp_path / "pred.json"
    r = _invoke(
        [
            "extrapolate",
            str(src),
            "--machine",
            SPEC,
            "--mapping",
            "1-replica",
            "--mapping",
            "2-replica-direct",
            "--thresholds",
            "mean=1.5ms,p999=20ms",
            "-o",
            str(out),
        ]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert set(d["mappings"]) == {"1-replica", "2-replica-direct"}
    assert d["mappings"]["1-replica"]["p999"]["threshold"] == pytest.approx(0.02)
    r = _invoke(["extrapolate", str(tmp_path / "missing.json"), "--machine", SPEC])
    assert r.exit_code == 1 and "missing.json" in r.output


def test_calibrate_takes_cpu_time_shares_like_core_runs():
    from extrapolate.calibration import observations_from_curves
    from shrink.loadcurve import LoadCurve
    from shrink.share import Share

    mach = Machine.read_toml(SPEC)
    c = truth_curve(Truth(), mach, "1-replica", (0, 1), dyn=0.0, smr=0.0, workload="s", seed=4)
    slow = LoadCurve.from_dict(c.to_dict())
    slow.alpha = 0.5
    slow.share = Share.cpu_time((0, 1), 0.5)
    for lv in slow.levels:
        for rep in lv.reps:
            rep.throughput *= 0.5
            for cs in [rep.overall, *rep.per_class.values()]:
                cs.throughput *= 0.5
                for f in ("mean", "p50", "p90", "p99", "p999"):
                    setattr(cs, f, getattr(cs, f) / 0.5)
    (a,), _ = observations_from_curves([c], {"mean": 1.5e-3}, machine=mach)
    (b,), _ = observations_from_curves([slow], {"mean": 1.5e-3}, machine=mach)
    assert b.config == a.config and b.value == pytest.approx(a.value, rel=1e-6)


@pytest.mark.parametrize(("thresholds", "bound"), [("mean=60s", "lower"), ("mean=1us", "upper")])
def test_extrapolate_exits_99_when_a_mat_is_only_a_bound(tmp_path, thresholds, bound):
    """As ``shrink mat`` (and k6 on a failed threshold): status 99, everything still written."""
    mach = Machine.read_toml(SPEC)
    c = half_share_curve(mach, levels=8, reps=2, seed=3)
    src = c.write_json(tmp_path / "share.json")
    out = tmp_path / "pred.json"
    args = ["extrapolate", str(src), "--machine", SPEC, "--mapping", "1-replica"]
    r = _invoke([*args, "--thresholds", thresholds, "-o", str(out), "--json"])
    assert r.exit_code == 99, r.output
    assert json.loads(out.read_text())["mappings"]["1-replica"]["mean"]["bound"] == bound
    assert json.loads(r.stdout)["mappings"]["1-replica"]["mean"]["bound"] == bound
    r = _invoke([*args, "--thresholds", thresholds])  # the table too, then the status
    assert r.exit_code == 99 and (">= " if bound == "lower" else "< ") in r.stdout
    r = _invoke([*args, "--thresholds", "mean=1.5ms"])  # crossed: a MAT, status 0
    assert r.exit_code == 0, r.output
