"""validate's inputs given at another path than the prediction records (a moved or copied
machine file, simulator spec or document root): validate had no option for them, so a
prediction whose files were moved could not be validated at all."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import SPEC, cli_ok
from typer.testing import CliRunner

from shrink.cli import app


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A prediction made on the simulator with a spec that was then moved elsewhere."""
    d = tmp_path_factory.mktemp("pred")
    spec = d / "m.toml"
    shutil.copy(SPEC, spec)
    trace = d / "t.parquet"
    cli_ok("synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", str(trace))
    cli_ok("predict", str(trace), "-o", str(d / "p"), "--machine", str(spec),
        "--target", f"sim:{spec}", "--duration", "1s", "--warmup", "0s", "--reps", "1",
        "--max-levels", "2", "--mappings", "1-replica")  # fmt: skip
    elsewhere = d / "elsewhere"
    elsewhere.mkdir()
    os.rename(spec, elsewhere / "m.toml")
    return d / "p" / "prediction.json", elsewhere / "m.toml"


class _Reached(Exception):
    """Raised where validate would start the full run: the checks have passed."""


def _validate(pred: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Any]:
    from shrink import pipeline

    seen: list = []

    def provider(settings, **_kw):
        seen.append(settings)
        raise _Reached

    monkeypatch.setattr(pipeline, "make_provider", provider)
    r = CliRunner().invoke(app, ["validate", str(pred), *args], terminal_width=300)
    if seen:
        assert r.exit_code == 70 and "_Reached" in r.output, r.output  # (said as a bug)
        return 0, r.output, seen[0]
    return r.exit_code, r.output, None


def test_a_moved_spec_and_machine_file_are_taken_with_options_when_they_are_the_same(
    moved, tmp_path, monkeypatch
):
    pred, spec = moved
    code, out, _ = _validate(pred, monkeypatch=monkeypatch)
    assert code == 1 and "no such file" in out and "give it with --target sim:" in out, out
    code, out, settings = _validate(
        pred, "--target", f"sim:{spec}", "--machine", str(spec), monkeypatch=monkeypatch
    )
    assert code == 0, out
    assert settings.target == f"sim:{spec}" and settings.machine == str(spec), settings
    edited = tmp_path / "edited.toml"
    edited.write_text(spec.read_text() + "\n# edited\n")
    for args, option in (
        (["--target", f"sim:{spec}", "--machine", str(edited)], "--machine"),
        (["--target", f"sim:{edited}", "--machine", str(spec)], "--target sim:"),
    ):
        code, out, _ = _validate(pred, *args, monkeypatch=monkeypatch)
        assert code == 1, out
        assert f"{edited}: not the " in out and f"({option}) this prediction read" in out, out
        assert "give the one predict read (a copy or a move of it is the same)" in out, out
        assert "changed since predict" not in out, out
    code, out, _ = _validate(
        pred, "--target", f"sim:{spec}", "--machine", str(tmp_path / "no.toml"),
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert code == 1 and f"{tmp_path / 'no.toml'}: no such file (the machine file" in out, out
    code, out, _ = _validate(
        pred, "--target", f"sim:{spec}", "--machine", str(spec), "--docroot", str(tmp_path),
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert code == 2 and "--docroot" in out and "this prediction read no document root" in out
    code, out, _ = _validate(pred, "--target", "testbed", monkeypatch=monkeypatch)
    assert code == 2 and "validate takes sim:SPEC.toml only" in out, out
    code, out, _ = _validate(
        pred, "--full-run", "paired", "--machine", str(spec), monkeypatch=monkeypatch
    )
    assert code == 2 and "--machine" in out and "runs nothing" in out, out


@pytest.mark.compute
def test_a_moved_docroot_is_taken_with_docroot_when_it_is_the_same(tmp_path):
    """A copy of the document root (new modification times) is the same; an edited copy
    is refused naming the option, the path and the file that differs."""
    from shrink.errors import OptionError, ParameterError
    from shrink.run_inputs import _fingerprints, check_recorded_files

    www = tmp_path / "www"
    (www / "a").mkdir(parents=True)
    (www / "a" / "p.php").write_text("<?php echo 1;")
    (www / "index.html").write_text("hi")
    inputs = {"target": "testbed", "docroot": str(www), "machine": "this"}
    inputs["fingerprints"] = json.loads(json.dumps(_fingerprints(inputs)))
    copy = tmp_path / "copy"
    shutil.copytree(www, copy, copy_function=shutil.copyfile)  # times not kept
    shutil.rmtree(www)
    with pytest.raises(ParameterError, match="give it with --docroot"):
        check_recorded_files(inputs)
    got = check_recorded_files(inputs, given={"docroot": str(copy)})
    assert got["docroot"] == str(copy) and inputs["docroot"] == str(www), got
    (copy / "a" / "p.php").write_text("<?php echo 2;")
    with pytest.raises(ParameterError) as e:
        check_recorded_files(inputs, given={"docroot": str(copy)})
    said = str(e.value)
    assert said.startswith(f"{copy}: not the document root (--docroot) this prediction read")
    assert "(a/p.php differ)" in said and "changed since predict" not in said, said
    with pytest.raises(OptionError, match=r"--machine: .*this prediction read no machine file"):
        check_recorded_files(inputs, given={"machine": str(tmp_path / "m.toml")})
    older = {k: v for k, v in inputs.items() if k != "fingerprints"}
    with pytest.raises(OptionError, match="records no fingerprint of its document root"):
        check_recorded_files(older, given={"docroot": str(copy)})


def test_a_docroot_edited_during_predict_s_runs_is_said_in_the_record_and_the_report(
    tmp_path, monkeypatch
):
    """The document root's fingerprint was taken at predict's end only: one edited
    during the runs was recorded as the content the prediction was measured on. It is
    taken before the first run too, and a difference is a fact in prediction.json and a
    row of the report's checks."""
    from shrink import pipeline
    from shrink.pipeline import run_predict
    from shrink.predict import PredictConfig
    from shrink.providers import TargetSettings

    trace = tmp_path / "t.parquet"
    cli_ok("synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", str(trace))
    www = tmp_path / "www"
    (www / "a").mkdir(parents=True)
    (www / "a" / "p.php").write_text("<?php echo 1;")
    real = pipeline.predict

    def edits_during_the_runs(*args, **kwargs):
        (www / "a" / "p.php").write_text("<?php echo 2;")  # after the start's walk
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "predict", edits_during_the_runs)
    config = PredictConfig(mappings=("1-replica",), plan=_plan())
    settings = TargetSettings(f"sim:{SPEC}", str(SPEC), www)
    run_predict(trace, tmp_path / "p", config, target=settings)
    doc = json.loads((tmp_path / "p" / "prediction.json").read_text())
    changed = doc["inputs"]["docroot_changed"]
    assert changed["differ"] == ["a/p.php"], changed
    assert changed["at_end"] == doc["inputs"]["fingerprints"]["docroot"] != changed["at_start"]
    report = (tmp_path / "p" / "report.md").read_text()
    assert "**changed while predict ran**" in report and "a/p.php differ" in report, report
    monkeypatch.setattr(pipeline, "predict", real)  # unchanged: nothing said
    run_predict(trace, tmp_path / "q", config, target=settings)
    doc = json.loads((tmp_path / "q" / "prediction.json").read_text())
    assert "docroot_changed" not in doc["inputs"]
    assert "changed while predict ran" not in (tmp_path / "q" / "report.md").read_text()


def _plan():
    from shrink.autolevels import AutoPlan

    return AutoPlan(warmup=0.0, duration=1.0, reps=1, max_levels=2, min_duration=1.0)


@pytest.mark.compute
def test_a_docroot_fingerprint_counts_no_modification_time(tmp_path):
    """Decided: the modification time is not part of the fingerprint. A copy of the
    document root (cp -r, a checkout, a deploy) gives every file new times and the same
    content, and validate --docroot takes it; with mtime_ns counted every such copy
    would be refused. So a same-size edit in the middle of a file over 128 KiB stays
    unseen even with its time changed, as validate --help and docs/recipes.md say."""
    from shrink.docroot_print import WINDOW
    from shrink.run_inputs import file_fingerprint

    www = tmp_path / "www"
    www.mkdir()
    big = www / "big.bin"
    data = bytearray(2 * WINDOW + 4096)
    big.write_bytes(data)
    os.utime(big, ns=(1_000_000_000, 1_000_000_000))
    before = file_fingerprint(www)
    os.utime(big, ns=(2_000_000_123, 2_000_000_123))  # the time alone
    assert file_fingerprint(www) == before
    data[WINDOW + 100] = 1  # the middle, the same size, a later time
    big.write_bytes(data)
    os.utime(big, ns=(3_000_000_456, 3_000_000_456))
    assert big.stat().st_mtime_ns == 3_000_000_456
    assert file_fingerprint(www) == before
    data[WINDOW - 1] = 1  # within the first 64 KiB: seen
    big.write_bytes(data)
    assert file_fingerprint(www) != before


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"fingerprints": {"docroot": "zz", "docroot_walk": {"entries": "x"}}},
         "inputs.fingerprints.docroot_walk.entries"),
        ({"fingerprints": {"docroot": "zz", "docroot_walk": {"unreadable": 5}}},
         "inputs.fingerprints.docroot_walk.unreadable"),
        ({"fingerprints": {"machine": {"a": 1}}}, "inputs.fingerprints.machine"),
        ({"docroot_changed": {"differ": 5}}, "inputs.docroot_changed.differ"),
    ],
    ids=["walk-entries", "walk-unreadable", "machine-print", "changed-differ"],
)  # fmt: skip
def test_a_prediction_s_fingerprints_of_the_wrong_shape_are_refused_naming_the_field(
    moved, tmp_path, edit, field, monkeypatch
):
    """A prediction.json edited so that its document root's walk says ``"entries": "x"``
    (or its unreadable names a number, or the names that changed during predict a
    number): validate stopped with "internal error (ValueError: invalid literal for
    int() ...): this is a bug", and the report's checks would fail the same way. They
    are read as their types, and refused in one line naming the file and the field."""
    src = json.loads(moved[0].read_text())
    www = tmp_path / "www"
    www.mkdir()
    inputs = src["inputs"]
    src["inputs"] = {**inputs, "docroot": str(www), **edit}
    src["inputs"]["fingerprints"] = {**inputs["fingerprints"], **edit.get("fingerprints", {})}
    pred = tmp_path / "prediction.json"
    pred.write_text(json.dumps(src))
    code, out, _ = _validate(pred, "--full-run", "run", monkeypatch=monkeypatch)
    assert code == 1 and f"error: {pred}: {field}: " in " ".join(out.split()), out


def test_a_fifo_or_a_folder_given_for_a_file_is_named_for_what_it_is(tmp_path):
    """A FIFO given for the machine file (or the document root) was said to be "no such
    file"; a folder given for the machine file was walked (up to 60 s for a large one)
    and refused by its fingerprint, and a file given for the document root likewise."""
    from shrink.errors import ParameterError
    from shrink.run_inputs import _fingerprints, check_recorded_files

    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("hi")
    machine = tmp_path / "m.toml"
    machine.write_text("[machine]\n")
    inputs = {"target": "testbed", "docroot": str(www), "machine": str(machine)}
    inputs["fingerprints"] = json.loads(json.dumps(_fingerprints(inputs)))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for key, path, said in (
        ("machine", fifo, "a FIFO, not a file (the machine file (--machine) given)"),
        ("machine", www, "a folder, not a file (the machine file (--machine) given)"),
        ("docroot", fifo, "a FIFO, not a folder (the document root (--docroot) given)"),
        ("docroot", machine, "a file, not a folder (the document root (--docroot) given)"),
    ):
        with pytest.raises(ParameterError) as e:
            check_recorded_files(inputs, given={key: str(path)})
        assert str(e.value).startswith(f"{path}: {said}: give the one predict read"), e.value


def test_a_docroot_removed_during_predict_s_runs_is_said_in_the_record_and_the_report(
    tmp_path, monkeypatch
):
    """A document root removed (or moved) during predict's runs: its walk at the end
    found no folder, so the prediction recorded no fingerprint of it and no change, and
    said nothing; validate then checked no document root at all."""
    from shrink import pipeline
    from shrink.pipeline import run_predict
    from shrink.predict import PredictConfig
    from shrink.providers import TargetSettings

    trace = tmp_path / "t.parquet"
    cli_ok("synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", str(trace))
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("hi")
    real = pipeline.predict

    def removes_it_during_the_runs(*args, **kwargs):
        shutil.rmtree(www)  # after the start's walk
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "predict", removes_it_during_the_runs)
    config = PredictConfig(mappings=("1-replica",), plan=_plan())
    run_predict(trace, tmp_path / "p", config, target=TargetSettings(f"sim:{SPEC}", str(SPEC), www))
    doc = json.loads((tmp_path / "p" / "prediction.json").read_text())
    changed = doc["inputs"]["docroot_changed"]
    assert changed["at_end"] is None and changed["at_start"], changed
    report = " ".join((tmp_path / "p" / "report.md").read_text().split())
    assert "no folder there at the end: removed or moved" in report, report
    assert "records no fingerprint of it, so validate cannot check one" in report, report
