"""prediction.json is written once, complete: predict records what its caller knows.

The file format is one value: the main job builds the whole Prediction (its
inputs, what-if and server with the measured facts) before the one write, so no
reader ever sees a prediction without its inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

from shrink.autolevels import AutoPlan
from shrink.pipeline import TargetSettings, run_predict
from shrink.predict import PredictConfig
from shrink.prediction import Prediction
from shrink.sim.workloads import tcp_trace
from tests.conftest import ROOT

SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"


def test_run_predict_writes_prediction_json_once_with_its_inputs(tmp_path, monkeypatch):
    trace_path = tmp_path / "tcp.parquet"
    tcp_trace(rate=20_000.0, duration=4.0, seed=1).write_parquet(trace_path)
    writes: list[dict] = []
    write_json = Prediction.write_json

    def counted(self: Prediction, path: str | Path, **kw: object) -> Path:
        if Path(path).name == "prediction.json":
            writes.append(self.to_dict())
        return write_json(self, path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Prediction, "write_json", counted)
    whatif = {"summary": "the papers' machine"}
    config = PredictConfig(
        alpha=0.5,
        thresholds={"mean": 0.0005},
        mappings=("1-replica",),
        seed=1,
        plan=AutoPlan(warmup=0.3, duration=0.5, reps=1, max_levels=3, warm_run=False),
    )
    out = tmp_path / "pred"
    pred = run_predict(
        trace_path, out, config, target=TargetSettings(target=f"sim:{SPEC}"), whatif=whatif
    )
    assert len(writes) == 1
    # The one write holds what the caller knew and what the sweep derived.
    assert writes[0]["inputs"]["trace"] == str(trace_path)
    assert writes[0]["inputs"]["target"] == f"sim:{SPEC}"
    assert writes[0]["inputs"]["skip"] > 0
    assert writes[0]["whatif"] == whatif
    written = json.loads((out / "prediction.json").read_text())
    assert written["inputs"]["trace"] == pred.inputs["trace"] == str(trace_path)
    assert written["whatif"] == pred.whatif == whatif
