"""``mat`` on a curve over the threshold already at its lowest level told the user to
"measure lower levels for the MAT itself", also where the statistic did not fall from
the level above to the lowest (a threshold under what the server takes unloaded: the
sweep's step down stops there), where lower levels bring nothing."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve

pytestmark = pytest.mark.compute


def _curve(*levels: tuple[float, float, float]) -> LoadCurve:
    out = []
    for x, mean, thr in levels:
        st = ClassStats(1000, thr, mean, mean, mean, mean, 2 * mean)
        out.append(Level(x, [LevelStats(thr, st), LevelStats(thr, st)]))
    return LoadCurve(levels=out)


def _said(tmp_path, curve: LoadCurve) -> str:
    path = curve.write_json(tmp_path / "c.json")
    r = CliRunner().invoke(app, ["mat", str(path), "--threshold", "1ms"])
    assert r.exit_code == 99, r.output
    return r.output


def test_a_statistic_that_did_not_fall_is_not_told_to_measure_lower(tmp_path):
    said = _said(tmp_path, _curve((0.5, 0.010, 50), (1, 0.010, 100), (2, 0.011, 200)))
    assert "measure lower levels" not in said, said
    assert "did not fall from the level above to the lowest" in said, said


def test_a_statistic_still_falling_is_told_to_measure_lower(tmp_path):
    said = _said(tmp_path, _curve((1, 0.005, 100), (2, 0.010, 200)))
    assert "measure lower levels for the MAT itself" in said, said
