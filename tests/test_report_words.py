"""The prediction's facts in words: the recommendation (shrink.report.recommendation),
the assumptions (shrink.report.assumptions) and the validation's error
(shrink.report.sections.validation). Tests elsewhere check the facts these sentences are
made of (the rule in test_cli_behaviour, the share's speed and load in test_share_speed);
only these read the wording."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from extrapolate.calibration import load_calibration
from extrapolate.whatif import whatif
from shrink.loadcurve import LoadCurve
from shrink.machine import Machine
from shrink.prediction import MappingPrediction, StatPrediction
from shrink.recommend import Recommendation, recommend
from shrink.report.assumptions import assumptions
from shrink.report.recommendation import (
    NO_RECOMMENDATION,
    reason_text,
    remap_reason,
    whatif_reason,
)
from shrink.report.sections.validation import error_text
from shrink.share import Share, ShareSpeed

pytestmark = pytest.mark.compute


def _mp(mat: float, status: str = "ok", ci: tuple[float, float] | None = None):
    return MappingPrediction({"mean": StatPrediction(mat, ci or (mat, mat), 0.01, status)}, {})


def test_bounds_say_there_is_no_recommendation_and_name_the_bounds():
    rec = recommend({"1-replica": _mp(81084, "not_reached"), "2-replica-direct": _mp(90000)},
                    ["mean"])  # fmt: skip
    text = reason_text(rec)
    assert text.startswith(NO_RECOMMENDATION) and "1-replica did not cross" in text


def test_a_threshold_never_met_recommends_no_mapping_even_the_only_one():
    # One mapping whose MAT is "< 0.2 req/s" was still "the only mapping this machine
    # can run": a recommendation resting on a bound that says the threshold is not met.
    one = {"1-replica": _mp(0.2, "below_range")}
    for out in (one, {**one, "2-replica-direct": _mp(0.3, "below_range")}):
        rec = recommend(out, ["mean"])
        assert rec.mapping is None and rec.rule == "over", rec
        text = reason_text(rec)
        assert text.startswith("no recommendation: no mapping meets the mean threshold"), text
        assert "only mapping" not in text and "lowest load measured" in text
    # a lower bound on the only mapping still meets the threshold at every load measured
    assert recommend({"1-replica": _mp(90.0, "not_reached")}, ["mean"]).mapping == "1-replica"


def test_the_only_mapping_with_a_lower_bound_is_named_with_its_bound_not_a_mat():
    """One mapping whose MAT is ">= 90" was recommended as "the only mapping this machine
    can run", as if its MAT were known: it is the one to run, at least 90 req/s, and the
    MAT itself was not reached."""
    rec = recommend({"1-replica": _mp(90.0, "not_reached")}, ["mean"])
    assert (rec.mapping, rec.rule) == ("1-replica", "only_at_least") and rec.at_least == 90.0
    text = reason_text(rec)
    assert "only mapping" in text and "mean MAT is at least 90 req/s, not reached" in text
    # a point MAT on the only mapping: nothing more to say than that it is the only one
    assert recommend({"1-replica": _mp(90.0)}, ["mean"]).rule == "only"


@pytest.mark.parametrize(
    ("rec", "words"),
    [
        (Recommendation("a", "only", "mean"), "only mapping"),
        (Recommendation("1-replica", "equal", "mean", "b", 0.0, True), "predicted equal"),
        (Recommendation(None, "none", "mean"), "no mapping has a mean MAT"),
        (Recommendation("a", "higher", "mean", "b", 0.05, True), "5.0% above b's but"),
        (Recommendation("a", "higher", "mean", "b", 0.05, False), "do not overlap"),
    ],
)
def test_each_verdict_in_words(rec, words):
    assert words in reason_text(rec)


def test_remap_and_whatif_word_only_a_higher_verdict_their_own_way():
    out = {"1-replica": _mp(100.0), "2-replica-direct": _mp(100.0)}
    equal = recommend(out, ["mean"])
    assert equal.rule == "equal"
    ratio = (2.0, "calibration")
    assert remap_reason(equal, 100.0, (4, "cores"), 0.1, ratio, 1e-4) == reason_text(equal)
    assert whatif_reason(equal, list(out), out, 0.1) == reason_text(equal)
    out = {"1-replica": _mp(100.0), "2-replica-direct": _mp(120.0)}
    higher = recommend(out, ["mean"])
    text = remap_reason(higher, 120.0, (4, "cores"), 0.1, ratio, 1e-4)
    assert text.startswith("2-replica-direct has the highest mean-threshold MAT (120 req/s)")
    assert "D_dynamic/D_static 2 (the calibration's: the share measured one class only)" in text
    text = remap_reason(higher, 120.0, (4, "cores"), 0.1, (2.0, "fitted demands"), 1e-4)
    assert "could not tell a class's demand from the fixed latency" in text
    # 'the measured share (1 cores, cores)': the count and the kind, in words.
    assert "the measured share (4 cores, a core subset)" in text, text
    text = remap_reason(higher, 120.0, (1, "cpu_time"), 0.1, ratio, 1e-4)
    assert "the measured share (1 core, a CPU-time share)" in text, text
    text = whatif_reason(higher, list(out), out, 0.0)
    assert "120 req/s (vs 1-replica 100 (+20.0%))" in text


def test_whatif_on_one_socket_says_the_rules_verdict():
    """One mapping is the rule's ``only``, not a "highest MAT" against no other mapping."""
    cal = load_calibration("published")
    p = whatif(Machine("one", 1, 4), cal.workloads_["tcp"], cal, sweep=False)
    assert p.recommended == "1-replica"
    assert p.reason == reason_text(Recommendation("1-replica", "only", "mean"))


def _assumed(share: Share, **meta: float) -> str:
    curve = LoadCurve([], knob="rate_factor", alpha=0.25, share=share, meta=meta)
    return " ".join(assumptions(0.25, SimpleNamespace(level="session", seed=3), share, curve))


def test_the_assumptions_name_the_speed_the_time_scaling_and_the_matched_load():
    share = Share("cpu_time", (1,), fraction=0.25, cpu_fraction=0.25)
    speed = ShareSpeed(0.25, {"static": 0.2, "dynamic": 0.2}, 0.2, "calibrated", 3.0)
    text = _assumed(replace(share, speed=speed), scaled_time=5.0, share_load=3.2)
    assert "nominal 0.25, calibrated 0.2" in text and "were 5 times the full-scale" in text
    assert "Matched load" in text and "at 3.2 times" in text
    text = _assumed(share, scaled_time=4.0)
    assert "assumed, not measured: 0.25" in text and "were 4 times the full-scale" in text
    assert "Matched load" not in text


def test_an_error_from_a_bound_gets_its_other_end_from_a_stalled_hint():
    m = {
        "error": (964 - 809) / 809,
        "predicted": 964.0,
        "measured": 809.0,
        "predicted_status": "ok",
        "measured_status": "not_reached",
        "measured_stalled_ceiling": 1000.0,
    }
    assert error_text(m) == "at most +19.2% (at least -3.6% by the stalled levels' hint)"


@pytest.mark.parametrize(
    ("predicted", "measured", "text"),
    [
        ("ok", "ok", "+5.0%"),
        # A prediction that only says ">= X" can be off by more, not less.
        ("not_reached", "ok", "at least +5.0%"),
        ("below_range", "ok", "at most +5.0%"),
        ("ok", "not_reached", "at most +5.0%"),
        ("ok", "below_range", "at least +5.0%"),
        # Two lower bounds say nothing of the error: '+5.0%' alone read as one.
        ("not_reached", "not_reached", "unknown (both MATs are only bounds, +5.0% apart)"),
    ],
)
def test_the_report_states_an_error_from_a_bound_as_a_bound(predicted, measured, text):
    m = {"error": 0.05, "predicted_status": predicted, "measured_status": measured}
    assert error_text(m) == text


@pytest.mark.parametrize(("busy", "over"), [(0.062, False), (0.135, True)])
def test_the_speed_row_says_when_a_calibration_run_went_past_its_bound(busy, over):
    """The bounds are the calibration's aim, set before each run: a host that slows
    within one can take it past them, and the report says so rather than keep quiet."""
    from shrink.report.sections.self_checks import _speed_items
    from shrink.share import Share, ShareSpeed

    run = {"seconds": 4.9, "offered_rate": 95.7, "utilization": busy, "phase": "beside"}
    speed = ShareSpeed(nominal=0.25, effective=0.2, method="calibrated", full_target_runs=(run,))
    share = Share(kind="cpu_time", cpus=(1,), cpu_fraction=0.25).with_speed(speed)
    (row,) = _speed_items(share)
    assert f"{100 * busy:.1f}% busy" in row[1]
    assert ("over the calibration's bound" in row[1]) is over


def test_the_interval_width_is_quoted_for_mats_not_for_bounds():
    """With every MAT a bound, the answer still said "+/-14% at most": the width of the
    interval around the last level run, which is no MAT's."""
    from shrink.report.assumptions import confidence

    config = SimpleNamespace(thresholds=["mean"], plan=SimpleNamespace(reps=2))
    bound = _mp(100.0, "not_reached", (86.0, 114.0))
    text = confidence(bound, config, {}, 0.1)
    assert "+/-" not in text and "Every MAT is a bound" in text
    point = confidence(_mp(100.0, "ok", (86.0, 114.0)), config, {}, 0.1)
    assert point.startswith("The MAT intervals are +/-14% at most")


def test_one_mapping_predicted_is_not_said_to_be_all_the_machine_can_run():
    """One mapping predicted read "It is the only mapping this machine can run" whether the
    user asked for that one alone (--mappings 1-replica on 8 CPUs) or --mappings all left
    the others out on 3 CPUs, which run 3-replica too: it is the only one predicted."""
    for mp in (_mp(90.0), _mp(90.0, "not_reached")):
        text = reason_text(recommend({"1-replica": mp}, ["mean"]))
        assert "only mapping predicted" in text and "this machine can run" not in text, text
