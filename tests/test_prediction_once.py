"""prediction.json is written once, complete: predict records what its caller knows.

The file format is one value: the main job builds the whole Prediction (its
inputs, what-if and server with the measured facts) before the one write, so no
reader ever sees a prediction without its inputs.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import shrink.pipeline
from shrink.autolevels import AutoPlan
from shrink.machine import Machine
from shrink.pipeline import TargetSettings, run_predict
from shrink.predict import PredictConfig
from shrink.prediction import Prediction
from shrink.providers import SimProvider
from shrink.sim.workloads import tcp_trace
from tests.conftest import ROOT

pytestmark = pytest.mark.compute

SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"
WHATIF = {"summary": "the papers' machine"}


class _RecipeSim(SimProvider):
    """The simulator standing in for a testbed: a server recipe, its versions measured."""

    def server_record(self) -> dict[str, Any]:
        return {"name": "fake", "source": "built-in", "stop_signal": 15}

    @contextmanager
    def open(self, share: Any, mapping: str) -> Any:
        with super().open(share, mapping) as target:
            desc = target.describe
            target.describe = lambda: {**desc(), "versions": {"fake": "fake/1.0"}}
            yield target


def _predict(tmp_path: Path, monkeypatch: Any) -> tuple[Prediction, list[dict], dict]:
    """A small sim-target prediction; the prediction, each prediction.json write's content,
    and the file as written."""
    trace_path = tmp_path / "tcp.parquet"
    tcp_trace(rate=20_000.0, duration=4.0, seed=1).write_parquet(trace_path)
    writes: list[dict] = []
    write_json = Prediction.write_json

    def counted(self: Prediction, path: str | Path, **kw: Any) -> Path:
        if Path(path).name == "prediction.json":
            writes.append(self.to_dict())
        return write_json(self, path, **kw)

    monkeypatch.setattr(Prediction, "write_json", counted)
    config = PredictConfig(
        alpha=0.5,
        thresholds={"mean": 0.0005},
        mappings=("1-replica",),
        seed=1,
        plan=AutoPlan(warmup=0.3, duration=0.5, reps=1, max_levels=3, warm_run=False),
    )
    out = tmp_path / "pred"
    settings = TargetSettings(target=f"sim:{SPEC}")
    pred = run_predict(trace_path, out, config, target=settings, whatif=WHATIF)
    return pred, writes, json.loads((out / "prediction.json").read_text())


def test_run_predict_writes_prediction_json_once_with_its_inputs(tmp_path, monkeypatch):
    pred, writes, written = _predict(tmp_path, monkeypatch)
    assert len(writes) == 1
    # The one write holds what the caller knew and what the sweep derived.
    assert writes[0]["inputs"]["trace"] == str(tmp_path / "tcp.parquet")
    assert writes[0]["inputs"]["target"] == f"sim:{SPEC}"
    assert writes[0]["inputs"]["skip"] > 0
    assert writes[0]["whatif"] == WHATIF
    assert written["inputs"]["trace"] == pred.inputs["trace"]
    assert written["whatif"] == pred.whatif == WHATIF


def test_the_one_write_names_the_server_recipe_and_its_versions(tmp_path, monkeypatch):
    provider = _RecipeSim(Machine.read_toml(SPEC))
    monkeypatch.setattr(shrink.pipeline, "make_provider", lambda *a, **k: provider)
    pred, writes, written = _predict(tmp_path, monkeypatch)
    assert len(writes) == 1
    server = {"name": "fake", "source": "built-in", "stop_signal": 15}
    assert writes[0]["server"] == written["server"] == {**server, "versions": {"fake": "fake/1.0"}}
    assert writes[0]["target_description"].endswith(", server fake")
    assert writes[0]["provenance"]["server"] == "fake (built-in): fake/1.0"
    assert written["target_description"] == pred.target_description
