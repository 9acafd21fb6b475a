"""The Prediction value: its JSON form and the recommendation rule."""

from __future__ import annotations

import pytest

from shrink.errors import TraceFormatError
from shrink.prediction import MappingPrediction, Prediction, StatPrediction, rank_mappings

pytestmark = pytest.mark.compute


def _mp(**mats: float | None) -> MappingPrediction:
    return MappingPrediction({s: StatPrediction(m, (m, m), 0.01) for s, m in mats.items()}, {})


def test_rank_mappings_is_the_recommendation_rule():
    maps = {"a": _mp(mean=100.0, p999=50.0), "b": _mp(mean=120.0), "c": _mp(mean=100.0, p999=60.0)}
    assert rank_mappings(maps, ["mean"]) == ["b", "a", "c"]  # equals keep their order
    assert rank_mappings(maps, ["mean", "p999"]) == ["b", "c", "a"]  # the next stat breaks ties
    near = {"a": _mp(mean=1001.0), "b": _mp(mean=1003.0)}
    assert rank_mappings(near, ["mean"]) == ["b", "a"]
    assert rank_mappings(near, ["mean"], decimals=-1) == ["a", "b"]  # both 1000 req/s
    assert rank_mappings({"x": _mp(mean=None), "y": _mp(mean=5.0)}, ["mean"]) == ["y", "x"]


def test_stat_prediction_writes_what_its_producer_knows():
    modelled = StatPrediction(100.0, (90.0, 110.0), 0.01)
    assert set(modelled.to_dict()) == {"mat", "ci", "threshold"}
    measured = StatPrediction(100.0, (90.0, 110.0), 0.01, "not_reached", 130.0)
    assert measured.to_dict()["stalled_ceiling"] == 130.0 and measured.is_bound
    remapped = StatPrediction.from_dict({"mat": 1.0, "ci": [1, 1], "threshold": 1, "status": "ok"})
    assert "stalled_ceiling" not in remapped.to_dict()
    for sp in (modelled, measured, remapped):
        assert StatPrediction.from_dict(sp.to_dict()).to_dict() == sp.to_dict()


def test_prediction_round_trip_and_schema(tmp_path):
    p = Prediction({"name": "m"}, {"1-replica": _mp(mean=10.0)}, "1-replica", "only one")
    p.alpha, p.thresholds, p.extra = 0.25, {"mean": 0.01}, {"workload": {"name": "w"}}
    d = p.to_dict()
    assert "target" not in d and d["alpha"] == 0.25 and d["workload"] == {"name": "w"}
    back = Prediction.read_json(p.write_json(tmp_path / "p.json"))
    assert back.to_dict() == d
    with pytest.raises(TraceFormatError, match=r"expected 'shrink\.prediction/1'"):
        Prediction.from_dict({**d, "schema": "shrink.mat/1"})


def test_the_prediction_format_is_the_prediction_type(tmp_path):
    """One definition: Prediction and its parts are the schema, reader and writer."""
    import json

    import numpy as np

    from shrink.prediction import PREDICTION_FORMAT

    defs = PREDICTION_FORMAT.json_schema()["$defs"]
    assert defs["StatPrediction"]["properties"]["status"]["anyOf"][0]["enum"] == [
        "ok",
        "not_reached",
        "below_range",
    ]
    # A what-if's file: no machine, no reason, a statistic by any name, keys of its own.
    doc = {
        "schema": "shrink.prediction/1",
        "mappings": {"m": {"p95": {"mat": 5.0, "ci": [4, 6], "threshold": 0.1}, "curve": {}}},
        "workload": {"name": "w"},
    }
    back = Prediction.from_dict(doc)
    assert back.mappings["m"].stats["p95"].mat == 5.0 and back.extra == {"workload": {"name": "w"}}
    assert (back.machine, back.reason, back.recommended) == ({}, "", None)
    back.mappings["m"].stats["p95"] = StatPrediction(np.float64(7.5), (None, None), 0.1)
    written = json.loads(back.write_json(tmp_path / "p.json").read_text())
    assert written["mappings"]["m"]["p95"]["mat"] == 7.5 and written["workload"] == {"name": "w"}
    # A MAT the main job measured with a threshold that is no time is refused, by name.
    doc["measured_mats"] = {"mean": {"mat": 1.0, "ci": [1, 1], "threshold": -1}}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"p\.json: measured_mats\.mean\.threshold: "):
        Prediction.read_json(tmp_path / "p.json")


def test_a_prediction_with_any_percentile_threshold_reads_back(tmp_path):
    # predict --thresholds p95=5ms wrote "p95" (and p99.99 as "p9999"); the reader took
    # only mean, p50, p90, p99 and p999, so validate refused the prediction it made.
    p = Prediction({"name": "m"}, {"1-replica": _mp(p95=10.0, p9999=5.0)}, "1-replica", "one")
    p.thresholds = {"p95": 0.005, "p9999": 0.01, "p05": 0.001}
    p.measured_mats = {"p95": StatPrediction(2.0, (2.0, 2.0), 0.005)}
    back = Prediction.read_json(p.write_json(tmp_path / "p.json"))
    assert back.thresholds == p.thresholds and back.to_dict() == p.to_dict()
    for bad in ("p100", "p0", "p5", "p950", "P95", "median"):
        with pytest.raises(TraceFormatError, match=r"thresholds\."):
            Prediction.from_dict({**p.to_dict(), "thresholds": {bad: 0.005}})
