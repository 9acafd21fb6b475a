"""predict calibrates the share's speed (shrink.scaling) and scales by it; the report says
so (its words: test_report_words)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.fake_provider import FakeProvider, sessions

from shrink.autolevels import AutoPlan
from shrink.measure import loop_window
from shrink.predict import PredictConfig, predict
from shrink.report.assumptions import assumptions as assumptions_of
from shrink.share import Share, ShareSpeed

pytestmark = pytest.mark.compute


class _Fixed:
    """A calibration that read ``speed`` and runs nothing beside the sweep."""

    def __init__(self, speed: ShareSpeed) -> None:
        self.speed = speed

    def slice(self, level) -> None:
        pass

    def now(self) -> ShareSpeed:
        return self.speed

    def finish(self) -> ShareSpeed:
        return self.speed


@pytest.mark.parametrize("paired", [True, False])
def test_predict_scales_by_the_calibrated_speed_and_reports_it(monkeypatch, tmp_path, paired):
    calls = []

    def probe(share_target, full_target, trace, *, nominal, seed):
        calls.append((full_target is not None, nominal))
        return _Fixed(ShareSpeed(nominal, {"static": 0.2, "dynamic": 0.2}, 0.2, "calibrated", 3.0))

    monkeypatch.setattr("shrink.predict.calibrate_beside", probe)
    plan = AutoPlan(warmup=2, duration=10, reps=2, max_levels=7, probe_level=1.0)
    cfg = PredictConfig(
        alpha=0.25, thresholds={"mean": 0.004}, mappings=["1-replica"], seed=3, plan=plan,
        paired_full_run=paired, calibrate=paired,
    )  # fmt: skip
    trace = sessions(6000, 1, span=1000.0)
    res = predict(trace, FakeProvider(speed=0.2), cfg)
    pred = res.prediction
    assert calls == ([(True, 0.25)] if paired else [])
    # The share's load follows the sample's own rate in the loop window, relative to
    # alpha's (a sample holds a few percent more or fewer of its requests).
    skip, span = res.measured.sweep.skip, res.measured.meta["loop_window"]
    ratio = len(loop_window(res.sample, skip, span)) / (0.25 * len(loop_window(trace, skip, span)))
    assert ratio != pytest.approx(1.0, abs=1e-3)
    assert pred.share.speed == ShareSpeed.from_dict(pred.to_dict()["speed"])
    assert Share.from_dict(pred.to_dict()["share"]).speed == pred.share.speed
    if paired:
        assert pred.share.speed.effective == 0.2 and pred.share.speed.method == "calibrated"
        # Scaled by the measured speed, the share's MAT is the full core's: the paired
        # full-scale curve says what that is.
        from shrink.mat import mat

        truth = mat(res.full, "mean", 0.004).mat
        # The share ran at its measured speed over alpha times each level's rate factor.
        load = 0.8 / ratio
        assert res.measured.sweep.share_load == pytest.approx(load)
        # Its windows were 1/s = 5 times the full target's, not 1/alpha = 4: a share at
        # speed 0.2 moves through its queueing states five times slower.
        assert res.measured.sweep.scaled_time == pytest.approx(5.0)
        assert pred.mappings["1-replica"].stats["mean"].mat == pytest.approx(truth, rel=0.25)
    else:
        assert pred.share.speed.method == "nominal" and pred.share.speed.effective == 0.25
        assert res.measured.sweep.share_load == pytest.approx(1.0 / ratio)
        assert res.measured.sweep.scaled_time == 4.0
    # The words say what was measured (which words: test_report_words).
    words = assumptions_of(0.25, cfg, pred.share, res.measured)
    assert pred.assumptions[: len(words)] == words


def test_scaled_by_the_measured_speed_the_share_predicts_the_paired_truth_over_seeds(
    monkeypatch,
):
    """The fake's share is exactly 0.2 of a core: scaled by that speed, the share's MAT
    is the full core's up to the two sweeps' sampling noise (a session sample, its
    own levels), over eight seeds, not one."""
    from shrink.mat import mat

    speed = ShareSpeed(0.25, {"static": 0.2, "dynamic": 0.2}, 0.2, "calibrated", 3.0)
    monkeypatch.setattr("shrink.predict.calibrate_beside", lambda *a, **k: _Fixed(speed))
    plan = AutoPlan(warmup=2, duration=10, reps=2, max_levels=7, probe_level=1.0)
    trace = sessions(6000, 1, span=1000.0)
    errors = []
    for seed in range(8):
        cfg = PredictConfig(
            alpha=0.25, thresholds={"mean": 0.004}, mappings=["1-replica"], seed=seed,
            plan=plan, paired_full_run=True, calibrate=True,
        )  # fmt: skip
        res = predict(trace, FakeProvider(speed=0.2), cfg)
        truth = mat(res.full, "mean", 0.004).mat
        errors.append(res.prediction.mappings["1-replica"].stats["mean"].mat / truth - 1)
    # measured 2026-11-24: median |error| 3.8%, the largest 14.4%
    assert float(np.median(np.abs(errors))) <= 0.06, errors
    assert max(np.abs(errors)) <= 0.2, errors


@pytest.mark.parametrize(
    ("effective", "ratio", "want_load", "want_time"),
    [(0.19, 1.0, 0.76, 4 / 0.76), (0.25, 0.96, 1 / 0.96, 4.0), (0.1, 1.0, 0.4, 10.0)],
)
def test_the_share_runs_at_its_speed_over_alpha_and_in_slow_motion_by_it(
    effective, ratio, want_load, want_time
):
    """The sweep's scaling follows the calibrated speed: the share's load per level is its
    speed over alpha (over the sample's own rate ratio), and its time runs 1/s slow."""
    from shrink.autolevels import sweep_scaling

    scaling = sweep_scaling(effective, 0.25, ratio)
    assert scaling.share_load == pytest.approx(want_load)
    assert scaling.scaled_time == pytest.approx(want_time)
    # without time scaling only the load follows the speed
    assert sweep_scaling(effective, 0.25, ratio, time_scaling=False).scaled_time == 1.0


def test_the_sweeps_scaling_is_a_frozen_value_apart_from_the_users_plan():
    """The plan holds only the user's settings; what the sweep derives from the share's
    speed is one frozen value, and the curve's meta records it."""
    import dataclasses

    from shrink.autolevels import SweepScaling, sweep_scaling

    assert not {"scaled_time", "share_load"} & {f.name for f in dataclasses.fields(AutoPlan)}
    scaling = sweep_scaling(0.19, 0.25, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scaling.share_load = 1.0  # type: ignore[misc]
    assert scaling.meta() == {"scaled_time": scaling.scaled_time, "share_load": scaling.share_load}
    assert scaling.share_load == pytest.approx(0.76)
    assert SweepScaling().meta() == {}


def test_a_validation_reads_a_prediction_whose_plan_lists_the_sweeps_scaling():
    """prediction.json files whose ``inputs.plan`` lists scaled_time and share_load still
    validate: the full run takes the user's settings, its skip and loop window, unscaled."""
    from shrink.pipeline import full_run_plan

    plan = {**AutoPlan(reps=3).__dict__, "scaled_time": 4.0, "share_load": 0.9}
    inputs = {"plan": plan, "skip": 5.0, "loop_window": 30.0}
    assert full_run_plan(inputs) == AutoPlan(reps=3, skip=5.0, loop_window=30.0)
    assert full_run_plan({}) == AutoPlan()
