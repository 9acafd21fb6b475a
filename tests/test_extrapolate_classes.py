"""The cross-socket extrapolation of a trace whose classes are not only static and dynamic."""

from __future__ import annotations

import pytest
from helpers.machines import NEHALEM
from helpers.models import perfect_model

from extrapolate._synthetic import Truth, truth_curve, truth_mat
from extrapolate.calibration import CrossSocketModel
from extrapolate.remap import extrapolate_curve
from shrink.loadcurve import LoadCurve

THRESHOLDS = {"mean": 1.5e-3, "p999": 20e-3}
DYN, SMR = 0.05, 1 / 3.6


def _model(t: Truth) -> CrossSocketModel:
    return perfect_model(t, NEHALEM)


def _relabelled(curve: LoadCurve, static_kept: float) -> LoadCurve:
    """``curve`` with all but ``static_kept`` of its static requests in a class of the
    trace's own (``image``): served alike, so in the overall statistics, but in no
    per-class ones (a run keeps per-class statistics for static and dynamic only)."""
    out = LoadCurve.from_dict(curve.to_dict())
    for lv in out.levels:
        for rep in lv.reps:
            if static_kept == 0:
                del rep.per_class["static"]
            else:
                rep.per_class["static"].throughput *= static_kept
    return out


@pytest.mark.parametrize("static_kept", [0.5, 0.0])
def test_requests_of_other_classes_count_as_static(static_kept):
    """Half the static requests labelled ``image`` (or all of them, beside the dynamic
    ones): the mix is still 5% dynamic and the full machine's MATs are the truth's."""
    t = Truth()
    share = truth_curve(
        t, NEHALEM, "1-replica", (0, 1, 2, 3), dyn=DYN, smr=SMR, workload="w", alpha=0.5, seed=11
    )
    pred, _ = extrapolate_curve(_relabelled(share, static_kept), _model(t), NEHALEM,
                                     thresholds=THRESHOLDS)  # fmt: skip
    for mp, mpred in pred.mappings.items():
        for stat, thr in THRESHOLDS.items():
            truth = truth_mat(t, NEHALEM, mp, NEHALEM.all_cpus, DYN, SMR, stat, thr)
            assert mpred.stats[stat].mat == pytest.approx(truth, rel=0.03), (mp, stat)


def test_a_static_demand_lost_in_the_fixed_latency_gives_no_negative_demand():
    """Static requests of 0.1 us beside a fixed latency of 50 us: at light load the static
    mean is the fixed latency give or take its noise, and this seed's lightest levels put
    it below the fitted L0 (a ratio of -2e4, and demand_dynamic < 0 refused by the model).
    The ratio is then the fitted demands', positive, and said to be."""
    t = Truth(demand_static=1e-7)
    share = truth_curve(t, NEHALEM, "1-replica", (0, 1, 2, 3), dyn=DYN, smr=SMR, workload="w",
                        alpha=0.5, seed=2, levels=6, reps=2)  # fmt: skip
    pred, curves = extrapolate_curve(share, _model(t), NEHALEM, thresholds=THRESHOLDS)
    meta = curves["1-replica"].meta
    assert meta["dynamic_static_ratio_from"] == "fitted demands"
    assert meta["dynamic_static_ratio"] == pytest.approx(
        t.demand_dynamic / t.demand_static, rel=0.2
    )
    truth = truth_mat(t, NEHALEM, "1-replica", NEHALEM.all_cpus, DYN, SMR, "mean", 1.5e-3)
    assert pred.mappings["1-replica"].stats["mean"].mat == pytest.approx(truth, rel=0.03)
