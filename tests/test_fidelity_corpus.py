"""The corpus kept in the repository (bench/fidelity_corpus.py): a record per run that
the fit and the tables read as they read the run's directory, and that names no path
of the machine it ran on."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_fidelity
import fidelity_corpus

pytestmark = pytest.mark.compute


def _row(tmp: Path, config: str, k: int, predicted: float, measured: float, kind="cpu_time"):
    cell = {
        "stat": "mean", "predicted": predicted, "measured": measured, "ci": [0.5 * predicted,
        2 * predicted], "status": "ok/ok", "covered": True,
        "log_error": math.log(predicted / measured), "applied_bias": 0.0,
        "budget": {"repetition": 0.03, "drift": 0.01, "speed": 0.02, "dof": 12},
    }  # fmt: skip
    return {
        "config": config, "dir": str(tmp / "somewhere" / config / f"run-{k}"),
        "share_kind": kind, "calibration": bench_fidelity.CALIBRATION, "seconds": 300.0,
        "full_target_use": {"seconds": 15.0, "max_utilization": 0.05},
        "commit": "0" * 40, "mean": cell,
        "speeds": {"mean": {"calibrated": 0.2, "hit": 0.22, "busy": 0.21}, "p999": None},
    }  # fmt: skip


def _rows(tmp: Path):
    return [
        _row(tmp, "a", 0, 90, 100), _row(tmp, "a", 1, 120, 100), _row(tmp, "b", 0, 80, 100),
        _row(tmp, "b", 1, 95, 100), _row(tmp, "c", 0, 130, 100),
    ]  # fmt: skip


def test_a_kept_run_reads_back_as_its_row_under_its_key_and_names_no_local_path(tmp_path):
    rows = _rows(tmp_path)
    written = fidelity_corpus.write(rows, tmp_path / "corpus" / "pass-1")
    assert len(written) == 5
    for path in written:
        assert str(tmp_path) not in path.read_text()
    back = sorted((fidelity_corpus.read(p) for p in written), key=lambda r: r["dir"])
    assert [r["dir"] for r in back] == ["pass-1/a/run-0", "pass-1/a/run-1", "pass-1/b/run-0",
                                        "pass-1/b/run-1", "pass-1/c/run-0"]  # fmt: skip
    for r in back:
        orig = next(o for o in rows if o["config"] == r["config"] and o["dir"].endswith(
            Path(r["dir"]).name))  # fmt: skip
        label = f"pass-1/{Path(r['dir']).name}"
        assert {**orig, "dir": r["dir"], "label": label} == r


def test_the_fit_and_the_tables_from_records_equal_those_from_the_rows(tmp_path, capsys):
    rows = _rows(tmp_path)
    fidelity_corpus.write(rows, tmp_path / "corpus" / "p")
    back = [fidelity_corpus.read(p) for p in fidelity_corpus.records([tmp_path / "corpus"])]
    assert bench_fidelity.leave_one_out(back) == bench_fidelity.leave_one_out(rows)
    pairs = bench_fidelity._pairs(back)
    assert bench_fidelity.fit_bias(pairs) == pytest.approx(
        sum(math.log(p / 100) for p in (90, 120, 80, 95, 130)) / 5
    )
    calibrated = ["--speed", "calibrated"]  # these rows are calibrated runs
    assert bench_fidelity.main(["--summarize", str(tmp_path / "corpus"), *calibrated]) == 0
    text = capsys.readouterr().out
    assert "| a | p/run-0 | " in text and "README's table:" in text
    assert "| a | p/run-1 | 0.200 / 0.210 / 0.220 | 0.91 | 0.95 |" in text
    # As run: each prediction's own interval, [p / 2, 2 p], held its measured MAT.
    assert (
        "as the predictions gave them (the model error they ran with): covered 5 of 5, "
        "median half-width 100.0%" in text
    )


def test_a_kept_record_is_not_overwritten_and_a_pass_name_is_a_plain_name(tmp_path):
    rows = _rows(tmp_path)
    fidelity_corpus.write(rows[:1], tmp_path / "p")
    with pytest.raises(fidelity_corpus.RecordError, match="already kept"):
        fidelity_corpus.write(rows[:1], tmp_path / "p")
    for bad in ("../up", "a b", "", "x" * 81):
        with pytest.raises(fidelity_corpus.RecordError, match="pass name"):
            fidelity_corpus.record(rows[0], bad)
    # A failed run is kept with its error: the corpus counts it.
    failed = {"config": "a", "dir": str(tmp_path / "a" / "run-3"), "error": "the share died"}
    (path,) = fidelity_corpus.write([failed], tmp_path / "q")
    assert fidelity_corpus.read(path) == {
        "config": "a",
        "dir": "q/a/run-3",
        "error": "the share died",
    }


def test_summarize_records_the_runs_it_read_and_not_the_records(tmp_path, capsys):
    fidelity_corpus.write(_rows(tmp_path), tmp_path / "c" / "p")
    assert bench_fidelity.main(["--summarize", str(tmp_path / "c"), "--record",
                                str(tmp_path / "c" / "again")]) == 0  # fmt: skip
    assert not (tmp_path / "c" / "again").exists()
    assert "| a | p/run-0 | " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not a corpus record"),
        ('{"schema": "other"}', "schema is not"),
        ('{"schema": "shrink.fidelity_run/1", "run": "p/a/run-0", "config": 3}', "'config'"),
        ('{"schema": "shrink.fidelity_run/1", "run": "p/a/run-0", "config": "a", '
         '"share_kind": "cpu_time", "mean": {"budget": {}, "predicted": -1}}', "mean.predicted"),
        ('{"schema": "shrink.fidelity_run/1", "run": "p/a/run-0", "config": "a", '
         '"share_kind": "cpu_time", "p999": [1]}', "'p999'"),
        ('{"schema": "shrink.fidelity_run/1", "run": "p/a/run-0", "config": "a", '
         '"share_kind": "cpu_time", "mean": {"budget": {}}}', "mean.status"),
        ('{"schema": "shrink.fidelity_run/1", "run": "p/a/run-0", "config": "a", '
         '"share_kind": "cpu_time", "mean": {"budget": {}, "status": "ok/ok", '
         '"log_error": "x"}}', "mean.log_error"),
    ],
)  # fmt: skip
def test_a_bad_record_is_named_with_its_field(tmp_path, text, says):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(fidelity_corpus.RecordError, match=says) as err:
        fidelity_corpus.read(path)
    assert str(path) in str(err.value)


def test_summarize_says_which_record_is_bad_in_one_line(tmp_path, capsys):
    fidelity_corpus.write(_rows(tmp_path), tmp_path / "c" / "p")
    bad = tmp_path / "c" / "p" / "a--run-0.json"
    data = json.loads(bad.read_text())
    data["config"] = None
    bad.write_text(json.dumps(data))
    assert bench_fidelity.main(["--summarize", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {bad}: field 'config' is missing or not a string"]


def test_only_records_are_read_from_a_folder_and_a_symlink_is_not_followed(tmp_path):
    fidelity_corpus.write(_rows(tmp_path)[:2], tmp_path / "c" / "p")
    (tmp_path / "c" / "notes.json").write_text('{"anything": 1}')
    outside = tmp_path / "elsewhere.json"
    outside.write_text((tmp_path / "c" / "p" / "a--run-0.json").read_text())
    (tmp_path / "c" / "p" / "link.json").symlink_to(outside)
    got = fidelity_corpus.records([tmp_path / "c"])
    assert sorted(p.name for p in got) == ["a--run-0.json", "a--run-1.json"]


def test_a_run_whose_share_was_not_quiet_is_named_and_left_out_on_request(tmp_path, capsys):
    """A run whose own self-check says other work took its share's CPUs measured that
    work as well as the method: it is named, and --quiet-only leaves it out."""
    rows = _rows(tmp_path)
    rows[4]["max_other_cpu"] = 0.97  # c's only run: the configuration drops out
    rows[0]["max_other_cpu"] = 0.06
    fidelity_corpus.write(rows, tmp_path / "corpus" / "p")
    assert bench_fidelity.main(["--summarize", str(tmp_path / "corpus")]) == 0
    out, err = capsys.readouterr()
    assert "not quiet: c p/run-0: other work took up to 97% of its share's CPUs" in err
    assert "| c | p/run-0 |" in out and "p/run-0: other work took up to 6%" not in err
    assert bench_fidelity.main(["--summarize", str(tmp_path / "corpus"), "--quiet-only"]) == 0
    out, err = capsys.readouterr()
    assert "left out: c p/run-0: other work took up to 97%" in err
    assert "| c | p/run-0 |" not in out and "| a | p/run-0 |" in out
    kept, noisy = bench_fidelity.quiet(rows)
    assert noisy == [rows[4]] and kept == rows[:4]


def test_a_run_whose_full_target_was_not_quiet_has_no_truth_to_judge_by():
    """Other work over the self-check's limit on the full target's CPUs makes the
    validation inconclusive: the run's cells are marked and left out of every error."""
    cell = {"stat": "mean", "predicted": 120.0, "measured": 100.0, "status": "ok/ok",
            "log_error": 0.18, "budget": {}}  # fmt: skip
    rows = [
        {"config": "a", "dir": "p/a/run-0", "share_kind": "cpu_time", "mean": cell,
         "full_other_cpu": 0.5},
        {"config": "a", "dir": "p/a/run-1", "share_kind": "cpu_time", "mean": cell,
         "full_other_cpu": 0.05},
    ]  # fmt: skip
    judged = bench_fidelity.full_side_judged(rows)
    assert judged[0]["mean"]["status"] == "ok/not_quiet" and judged[0]["mean"]["log_error"] is None
    assert judged[1] is rows[1] and rows[0]["mean"]["status"] == "ok/ok"  # not modified
    assert [c["run"] for _, c in bench_fidelity._pairs(judged)] == ["p/a/run-1"]
    assert "not quiet +20.0%" in bench_fidelity._errors([judged[0]["mean"]], [])
