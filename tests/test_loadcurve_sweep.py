"""A curve's ``meta``: the keys later stages read are one typed, frozen value
(``LoadCurve.sweep``, :class:`shrink.schemas.CurveMeta`); the others stay as written;
the file keeps one ``meta``, written back byte for byte."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from shrink.errors import TraceFormatError
from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.schemas import CurveMeta, GeneratorMeta

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]
# A live sweep's meta as written: typed keys (one nested, with a key of its own),
# notes no stage reads as a type, and no typed key left at its default.
META = {
    "generator": {"routing": "hash", "conns_per_session": 2, "lag_limit": 0.05, "pool": 3},
    "scaled_time": 4,
    "target": {"engine": "native", "versions": {"lighttpd": "1.4"}},
    "interrupted": True,
    "summary": {"levels": 1},
}


def _written(tmp_path: Path, meta: dict) -> Path:
    one = ClassStats(10, 100.0, 0.001, 0.001, 0.001, 0.002, 0.003)
    doc = LoadCurve(levels=[Level(1.0, [LevelStats(100.0, one)])]).to_dict()
    p = tmp_path / "c.json"
    p.write_text(json.dumps({**doc, "meta": meta}, indent=1, sort_keys=True) + "\n")
    return p


def test_the_typed_keys_are_a_frozen_value_and_the_notes_stay_open(tmp_path):
    curve = LoadCurve.read_json(_written(tmp_path, META))
    assert curve.sweep.scaled_time == 4.0 and isinstance(curve.sweep.scaled_time, float)
    assert curve.sweep.generator.conns_per_session == 2 and curve.sweep.generator.lag_limit == 0.05
    assert curve.sweep.target["engine"] == "native" and not curve.sweep.paired
    assert curve.meta == {"interrupted": True, "summary": {"levels": 1}}
    with pytest.raises(ValidationError, match="frozen"):
        curve.sweep.paired = True  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        curve.sweep.generator.routing = "round-robin"  # type: ignore[misc]
    # A change is a new value, checked as a file's key would be.
    with pytest.raises(ValidationError, match="share_load"):
        curve.sweep.with_(share_load=0)
    with pytest.raises(TypeError, match="no key scaled"):
        curve.sweep.with_(scaled=2.0)
    assert curve.sweep.with_(paired=True).paired and not curve.sweep.paired


def test_a_curve_reads_and_writes_back_byte_for_byte_with_its_open_keys(tmp_path):
    """Defaults no writer stated stay unwritten; a key of its own in ``generator`` stays."""
    p = _written(tmp_path, META)
    curve = LoadCurve.read_json(p)
    again = curve.write_json(tmp_path / "again.json")
    assert json.loads(again.read_text())["meta"] == {**META, "scaled_time": 4.0}
    assert curve.sweep.generator.model_extra == {"pool": 3}
    once = LoadCurve.read_json(again).write_json(tmp_path / "once.json")
    assert once.read_bytes() == again.read_bytes()
    # Its copies keep the typed value; a stated key is written with the others.
    assert curve.normalized().sweep == curve.sweep
    curve.sweep = curve.sweep.with_(paired=True)
    meta = curve.to_dict()["meta"]
    assert meta["paired"] is True and meta["interrupted"] and "share_load" not in meta


def test_a_bad_typed_key_is_one_line_naming_the_file_and_the_field(tmp_path):
    bad = {**META, "generator": {**META["generator"], "conns_per_session": 0}}
    with pytest.raises(TraceFormatError) as err:
        LoadCurve.read_json(_written(tmp_path, bad))
    text = str(err.value)
    assert re.match(r".*c\.json: meta\.generator\.conns_per_session: ", text)
    assert "\n" not in text
    with pytest.raises(TraceFormatError, match=r"c\.json: meta\.paired: "):
        LoadCurve.read_json(_written(tmp_path, {"paired": "perhaps"}))


def test_typed_keys_given_in_meta_are_the_typed_value():
    """A constructor's ``meta`` may still hold them (older callers): they become ``sweep``."""
    curve = LoadCurve(
        levels=[],
        sweep=CurveMeta(generator=GeneratorMeta(engine="python")),
        meta={"workload": "support", "paired": True, "seed": 3},
    )
    assert (curve.sweep.workload, curve.sweep.paired) == ("support", True)
    assert curve.sweep.generator.engine == "python" and curve.meta == {"seed": 3}
    assert curve.to_dict()["meta"] == {
        "generator": {"engine": "python"},
        "paired": True,
        "seed": 3,
        "workload": "support",
    }


def test_no_stage_reads_a_typed_key_through_meta():
    """``curve.sweep.<key>``, not ``meta["<key>"]``: one definition of each (a trace's own
    meta has a ``workload`` too, so lines reading a trace's are left out)."""
    typed = "|".join(CurveMeta.model_fields)
    pattern = re.compile(rf"""meta(\[|\.get\(|\.update\()["']({typed})["']""")
    hits = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("shrink", "extrapolate")
        for path in sorted((ROOT / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and "trace.meta" not in line
    ]
    assert hits == []
