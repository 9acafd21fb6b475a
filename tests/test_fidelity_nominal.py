"""The corpus read at the nominal speed (bench/fidelity_nominal.py): a calibrated run's
cells become the nominal prediction's, a run made without a calibration keeps its own,
and the fit of them is written as its own entry of the model error."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_fidelity
import fidelity_nominal

pytestmark = pytest.mark.compute


def _row(config: str, k: int, nominal: float | None, status: str = "ok", **extra):
    cell = {
        "stat": "mean", "predicted": 110.0, "measured": 100.0, "ci": [50.0, 200.0],
        "status": "ok/ok", "covered": True, "log_error": math.log(1.1), "applied_bias": -0.1,
        "budget": {"repetition": 0.03, "drift": 0.05, "speed": 0.2, "dof": 12},
    }  # fmt: skip
    speeds = {"calibrated": 0.2, "hit": 0.18, "busy": 0.19, "nominal": nominal,
              "nominal_status": status}  # fmt: skip
    return {
        "config": config, "dir": f"p/{config}/run-{k}", "share_kind": "cpu_time",
        "calibration": bench_fidelity.CALIBRATION, "mean": cell, "p999": None,
        "speeds": {"mean": speeds, "p999": None}, **extra,
    }  # fmt: skip


def test_a_calibrated_run_is_read_at_its_nominal_mat_without_the_calibration_term():
    rows = fidelity_nominal.nominal_rows([_row("a", 0, 80.0)], bench_fidelity.NOMINAL)
    (r,) = rows
    c = r["mean"]
    assert r["calibration"] == bench_fidelity.NOMINAL and r["recomputed"] is True
    assert c["predicted"] == 80.0 and c["log_error"] == pytest.approx(math.log(0.8))
    assert c["status"] == "ok/ok" and c["applied_bias"] == 0.0 and c["ci"] is None
    # The repetitions' and drift's terms stay, the calibration's goes.
    assert c["budget"] == {"repetition": 0.03, "drift": 0.05, "speed": 0.0, "dof": 12}
    assert r["p999"] is None


def test_a_nominal_mat_not_crossed_is_a_bound_and_a_run_without_one_is_left_out():
    bound = fidelity_nominal.nominal_rows([_row("a", 0, None, "not_reached")], "n")[0]["mean"]
    assert bound["status"] == "not_reached/ok" and bound["log_error"] is None
    old = _row("a", 1, None)
    del old["speeds"]["mean"]["nominal_status"]  # a record made before the field
    assert fidelity_nominal.nominal_rows([old], "n")[0]["mean"] is None
    # Not a CPU-time share, or a failed run: nothing to read at a nominal speed, so
    # they stay as they ran (a core subset has no calibration; a failure is counted).
    cores = {**_row("c", 0, 80.0), "share_kind": "cores"}
    failed = {"config": "x", "error": "boom"}
    assert fidelity_nominal.nominal_rows([cores, failed], "n") == [cores, failed]


def test_a_run_made_at_the_nominal_speed_keeps_its_own_cells():
    own = {**_row("a", 0, 70.0), "calibration": "n"}
    assert fidelity_nominal.nominal_rows([own], "n") == [own]


def test_the_nominal_fit_is_its_own_entry_and_leaves_the_calibrated_one(tmp_path, monkeypatch):
    shipped = json.loads(bench_fidelity.MODEL_ERROR.read_text())
    path = tmp_path / "model_error.json"
    path.write_text(json.dumps(shipped))
    monkeypatch.setattr(bench_fidelity, "MODEL_ERROR", path)
    rows = [_row("a", 0, 80.0), _row("a", 1, 70.0), _row("b", 0, 60.0), _row("b", 1, 75.0)]
    data = bench_fidelity.fit(fidelity_nominal.nominal_rows(rows, bench_fidelity.NOMINAL), True)
    entry = data["share_kinds"][bench_fidelity.NOMINAL_ENTRY]
    logs = [math.log(x / 100) for x in (80, 70, 60, 75)]
    assert entry["bias"] == pytest.approx(sum(logs) / 4, abs=1e-4)
    assert entry["provenance"]["calibration"] == bench_fidelity.NOMINAL
    assert entry["provenance"]["recomputed_runs"] == 4 and entry["provenance"]["runs"] == 4
    written = json.loads(path.read_text())
    assert written["share_kinds"]["cpu_time"] == shipped["share_kinds"]["cpu_time"]
    assert written["share_kinds"]["cores"] == shipped["share_kinds"]["cores"]


def test_the_default_fit_writes_the_core_subset_entry_too(tmp_path, monkeypatch):
    # A core subset has no calibration: the one fit the default reading makes must
    # write its entry, or core-subset predictions keep a stale model error.
    shipped = json.loads(bench_fidelity.MODEL_ERROR.read_text())
    path = tmp_path / "model_error.json"
    path.write_text(json.dumps(shipped))
    monkeypatch.setattr(bench_fidelity, "MODEL_ERROR", path)
    cores = [
        {**_row(name, k, None), "share_kind": "cores", "calibration": None}
        for name, k in (("c", 0), ("c", 1), ("d", 0))
    ]
    for r, x in zip(cores, (90.0, 80.0, 70.0), strict=True):
        r["mean"] = {**r["mean"], "log_error": math.log(x / 100)}
    data = bench_fidelity.fit(fidelity_nominal.nominal_rows(cores, bench_fidelity.NOMINAL), True)
    entry = data["share_kinds"]["cores"]
    assert entry["bias"] == pytest.approx(math.log(0.9 * 0.8 * 0.7) / 3, abs=1e-4)
    assert entry["provenance"]["configurations"] == ["c", "d"]
    assert "recomputed_runs" not in entry["provenance"]
    assert "calibration" not in entry["provenance"]
    written = json.loads(path.read_text())
    assert (
        written["share_kinds"][bench_fidelity.NOMINAL_ENTRY]
        == shipped["share_kinds"][bench_fidelity.NOMINAL_ENTRY]
    )
