"""The floor (bench/fidelity_floor.py): each run's full-scale MAT predicted by the
other runs' of its configuration, beside the prediction's own errors."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fidelity_floor

from shrink.scaling.transform import NOMINAL

pytestmark = pytest.mark.compute


def _row(config: str, k: int, predicted: float, measured: float, **extra):
    def cell(stat: str):
        return {
            "stat": stat, "predicted": predicted, "measured": measured, "status": "ok/ok",
            "log_error": math.log(predicted / measured),
            "budget": {"repetition": 0.0, "drift": 0.0, "speed": 0.0, "dof": 0},
        }  # fmt: skip

    return {
        "config": config, "dir": f"p/{config}/run-{k}", "share_kind": "cores",
        "mean": cell("mean"), "p999": cell("p999"), **extra,
    }  # fmt: skip


def test_the_oracle_is_the_geometric_mean_of_the_other_runs():
    rows = [_row("a", k, 100.0, m) for k, m in enumerate((100.0, 200.0, 400.0))]
    got = [p for p in fidelity_floor.pairs(rows) if p.stat == "mean"]
    assert [p.oracle for p in got] == pytest.approx(
        [
            math.sqrt(200 * 400) / 100 - 1,
            math.sqrt(100 * 400) / 200 - 1,
            math.sqrt(100 * 200) / 400 - 1,
        ]
    )
    assert [p.ours for p in got] == pytest.approx([0.0, -0.5, -0.75])
    # A full target that repeats itself exactly is its own perfect oracle.
    steady = [_row("b", k, 90.0, 100.0) for k in range(4)]
    assert all(p.oracle == pytest.approx(0.0) for p in fidelity_floor.pairs(steady))


def test_only_fresh_quiet_conclusive_runs_of_configurations_with_three_count():
    rows = [_row("a", k, 110.0, 100.0) for k in range(3)]
    rows += [_row("two", k, 110.0, 100.0) for k in range(2)]  # too few runs
    rows += [
        _row("a", 3, 500.0, 100.0, max_other_cpu=0.5),  # the share not quiet
        _row("a", 4, 500.0, 100.0, full_other_cpu=0.5),  # the full side not quiet
        _row("a", 5, 500.0, 100.0, share_kind="cpu_time", calibration="calibrated"),
        {"config": "a", "dir": "p/a/run-6", "error": "boom"},
    ]
    bound = _row("a", 7, 500.0, 100.0)
    bound["mean"]["status"] = "not_reached/ok"
    rows.append(bound)
    nominal = _row("a", 8, 110.0, 100.0, share_kind="cpu_time", calibration=NOMINAL)
    got = fidelity_floor.pairs([*rows, nominal])
    assert {p.config for p in got} == {"a"}
    # Three cores runs (two statistics each), the bound's p99.9, the nominal run's two.
    assert len(got) == 2 * 3 + 1 + 2
    assert all(p.ours == pytest.approx(0.1) for p in got if p.stat == "mean")


def test_a_run_is_corrected_by_the_model_fitted_without_its_configuration():
    rows = [_row("a", k, 110.0, 100.0) for k in range(3)]
    rows += [_row("b", k, 90.0, 100.0) for k in range(3)]
    rows += [_row("c", k, 100.0, 100.0) for k in range(3)]
    got = {(p.config, p.stat): p for p in fidelity_floor.pairs(rows)}
    # Fitted without a, the bias is the mean of b's and c's log errors.
    bias = (math.log(0.9) + 0.0) / 2
    assert got[("a", "mean")].loo == pytest.approx(math.exp(math.log(1.1) - bias) - 1)
    assert got[("a", "mean")].ours == pytest.approx(0.1)


def test_the_spread_is_about_each_configurations_mean():
    # Two configurations far apart, each moving by a factor e either way: the spread
    # is 1 in log, whatever the gap between their means.
    e = math.e
    rows = [_row("a", k, 2 * m, m) for k, m in enumerate((100 / e, 100.0, 100 * e))]
    rows += [_row("b", k, 50 / m, 1e4 * m) for k, m in enumerate((1 / e, 1.0, e))]
    got = fidelity_floor.pairs(rows)
    measured, predicted, corr = fidelity_floor.spread(got, "mean")
    assert measured == pytest.approx(math.sqrt(2 / 3))
    # a's prediction follows its full target; b's moves against it.
    assert predicted == pytest.approx(math.sqrt(2 / 3))
    assert corr == pytest.approx(0.0, abs=1e-9)
    steady = [_row("c", k, 100.0, 100.0) for k in range(3)]
    assert math.isnan(fidelity_floor.spread(fidelity_floor.pairs(steady), "mean")[2])


def test_the_command_reads_records_and_says_when_there_is_too_little(tmp_path, capsys):
    folder = tmp_path / "pass"
    folder.mkdir()
    for k, m in enumerate((100.0, 120.0, 90.0)):
        row = _row("a", k, 100.0, m)
        row["dir"] = f"pass/a/run-{k}"
        row["schema"] = "shrink.fidelity_run/1"
        row["run"] = row.pop("dir")
        (folder / f"a--run-{k}.json").write_text(json.dumps(row))
    assert fidelity_floor.main([str(folder)]) == 0
    out = capsys.readouterr().out
    assert "\na " in out and "\nall " in out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fidelity_floor.main([str(empty)]) == 1
    assert "no configuration with 3 conclusive runs" in capsys.readouterr().err
