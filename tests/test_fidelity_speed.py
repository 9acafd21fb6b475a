"""The corpus's decomposition of a CPU-time share's error into its speed and the rest
(bench/fidelity_speed.py), on M/M/1 curves whose speeds are known."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.curves import mm1_curve

from shrink.mat import mat
from shrink.share import Share, ShareSpeed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fidelity_speed

pytestmark = pytest.mark.compute

MU, ALPHA, THRESHOLD = 1000.0, 0.25, 0.005


def _busy(curve, cost: float, cpu_share: float):
    """Each repetition's utilization as a server spending ``cost`` CPU seconds a request
    on ``cpu_share`` of a CPU would show."""
    levels = [
        dataclasses.replace(
            lv,
            reps=[
                dataclasses.replace(r, utilization=r.throughput * cost / cpu_share) for r in lv.reps
            ],
        )
        for lv in curve.levels
    ]
    return dataclasses.replace(curve, levels=levels)


def _share(s: float, calibrated: float, seed: int):
    """A share at true speed ``s`` (a server at s * MU fed alpha of the load)."""
    rates = ALPHA * np.array([300.0, 500, 650, 750, 820, 880])
    speed = ShareSpeed(nominal=ALPHA, effective=calibrated, method="calibrated")
    share = Share(kind="cpu_time", cpus=(1,), fraction=ALPHA, cpu_fraction=ALPHA, speed=speed)
    curve = mm1_curve(
        rates * s / ALPHA, s * MU, n=40000, reps=2, seed=seed, alpha=ALPHA, share=share
    )
    # its CPU per request: the whole core's 1/MU, times alpha / s (dearer on a slow share)
    return _busy(curve, (1 / MU) * ALPHA / s, ALPHA)


@pytest.mark.parametrize("s", [0.15, 0.2, 0.3])
def test_the_speed_that_hits_and_the_busy_speed_are_the_true_speed(s):
    share = _share(s, calibrated=0.25, seed=int(100 * s))
    full = _busy(
        mm1_curve([300.0, 500, 650, 750, 820, 880], MU, n=40000, reps=2, seed=9), 1 / MU, 1.0
    )
    measured = mat(full, "mean", THRESHOLD).mat
    hit = fidelity_speed.speed_to_hit(share, "mean", THRESHOLD, measured)
    assert hit == pytest.approx(s, rel=0.03)
    assert fidelity_speed.busy_speed(share, full, measured, hit) == pytest.approx(s, rel=0.02)
    # a speed above the true one predicts too low a MAT, one below it too high
    at_calibrated = fidelity_speed.predicted_mat(share, 0.25, "mean", THRESHOLD)
    assert at_calibrated < 0.95 * measured if s < 0.25 else at_calibrated > 1.05 * measured


def test_no_speed_hits_a_measured_mat_out_of_reach():
    share = _share(0.2, calibrated=0.2, seed=1)
    assert fidelity_speed.speed_to_hit(share, "mean", THRESHOLD, 1e9) is None


def test_the_report_reads_a_run_directory_and_says_how_far_the_calibration_was(tmp_path):
    share = _share(0.2, calibrated=0.25, seed=2)
    full = _busy(
        mm1_curve([300.0, 500, 650, 750, 820, 880], MU, n=40000, reps=2, seed=3), 1 / MU, 1.0
    )
    measured = mat(full, "mean", THRESHOLD).mat
    share.write_json(tmp_path / "measured-curve.json")
    full.write_json(tmp_path / "full-curve.json")
    val = {
        "mats": {"mean": {"measured_status": "ok", "measured": measured, "threshold": THRESHOLD}}
    }
    (tmp_path / "validation.json").write_text(json.dumps(val))
    got = fidelity_speed.decompose(tmp_path)
    assert got is not None and got["calibrated"] == 0.25
    # The MAT the share's curve predicts at its nominal speed, as --no-calibrate would.
    at_nominal = fidelity_speed.predicted_mat(share, share.share.cpu_fraction, "mean", THRESHOLD)
    assert got["nominal_status"] == "ok" and got["nominal"] == at_nominal < measured
    assert got["hit"] == pytest.approx(0.2, rel=0.03) and got["busy"] == pytest.approx(
        0.2, rel=0.03
    )
    text = fidelity_speed.speed_report(
        [{"config": "demo", "dir": str(tmp_path), "speeds": {"mean": got}}]
    )
    assert f"| demo | {tmp_path.name} | 0.250 / " in text
    assert f"| {0.25 / got['hit']:.2f} |" in text
    assert math.isclose(0.25 / got["hit"], 1.25, rel_tol=0.04)


def test_speed_report_compares_the_calibration_with_the_nominal_speed() -> None:
    """With each configuration's alpha the report adds alpha over the speed that hits,
    and the correlation of the two errors: here the calibrated speed is alpha times a
    constant, so the two errors move together exactly."""
    rows = [
        {"config": c, "dir": f"/x/{c}-{k}", "speeds": {"mean": {"calibrated": 0.9 * a,
                                                                "hit": h, "busy": None}}}
        for k, (c, a, h) in enumerate(
            [("a", 0.25, 0.2), ("a", 0.25, 0.17), ("b", 0.5, 0.45), ("b", 0.5, 0.3)]
        )
    ]  # fmt: skip
    text = fidelity_speed.speed_report(rows, alphas={"a": 0.25, "b": 0.5})
    nominal = [math.log(a / h) for a, h in ((0.25, 0.2), (0.25, 0.17), (0.5, 0.45), (0.5, 0.3))]
    assert (
        f"nominal (alpha) speed over the speed that hits, in log: mean "
        f"{statistics.fmean(nominal):+.3f}, sd {statistics.stdev(nominal):.3f} over 4 runs"
    ) in text
    assert "correlation of the calibrated and nominal errors: 1.00 over 4 runs" in text
    # Without the alphas there is nothing to compare with.
    assert "nominal" not in fidelity_speed.speed_report(rows)
