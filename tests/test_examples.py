"""Every script in examples/ runs (STYLE: examples are executed by the test suite)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.compute

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
# The simulator example has its own test below, which also checks its numbers.
QUICK = [p for p in EXAMPLES if p.name != "predict_on_simulator.py"]


def test_there_are_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("script", QUICK, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path / "out")])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "MAT" in out or "report" in out


def test_simulator_example_predicts_the_whole_machine_from_one_socket(tmp_path):
    mod = runpy.run_path(str(ROOT / "examples" / "predict_on_simulator.py"))
    errors = mod["main"](tmp_path)
    # SHRiNK scaling alone, from one socket to two under 1-replica, errs high: the
    # simulator's cross-socket costs make the whole machine slower than two sockets'
    # worth of one. The cross-socket correction brings the prediction closer.
    assert errors["shrink_only"]["mean"] > 0.03
    assert abs(errors["corrected"]["mean"]) < abs(errors["shrink_only"]["mean"])
    assert abs(errors["corrected"]["mean"]) < 0.10
    assert (tmp_path / "report.md").exists()
