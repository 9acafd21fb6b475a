"""`validate --full-run CURVE` says when the curve records other facts than the prediction
(another shrink version, mapping, machine or trace): it compared them without a word."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import SPEC, cli_ok
from typer.testing import CliRunner

from shrink.cli import app


@pytest.fixture(scope="module")
def predicted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A prediction made on the simulator, and a full-scale curve of the same trace."""
    d = tmp_path_factory.mktemp("pred")
    trace = d / "t.parquet"
    cli_ok("synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", str(trace))
    cli_ok("predict", str(trace), "-o", str(d / "p"), "--machine", str(SPEC),
        "--target", f"sim:{SPEC}", "--duration", "1s", "--warmup", "0s", "--reps", "1",
        "--max-levels", "3", "--mappings", "1-replica")  # fmt: skip
    full = d / "full.json"
    cli_ok("sim", "sweep", str(trace), "--machine", str(SPEC), "-o", str(full),
        "--levels", "1,2", "--reps", "1", "--warmup", "0s", "--duration", "1s")  # fmt: skip
    return d / "p" / "prediction.json", full


def _validate(pred: Path, full: Path, folder: Path) -> tuple[str, dict, str]:
    for name in ("prediction.json", "predicted-curve.json", "measured-curve.json"):
        shutil.copy(pred.parent / name, folder / name)
    r = CliRunner().invoke(app, ["validate", str(folder / "prediction.json"), "--full-run",
                                 str(full)])  # fmt: skip
    assert r.exit_code in (0, 99), r.output
    meta = json.loads((folder / "validation.json").read_text())["meta"]
    return r.output, meta, (folder / "report.md").read_text()


def test_a_curve_of_the_same_run_is_not_flagged(tmp_path, predicted):
    pred, full = predicted
    out, meta, report = _validate(pred, full, tmp_path)
    assert "differs" not in meta and "like with like" not in out + report, out
    # the file written named as every command names it: bare, not in JSON's quotes
    assert f"wrote {tmp_path / 'validation.json'}" in out.splitlines(), out


def test_a_curve_of_another_version_and_mapping_is_said_to_differ(tmp_path, predicted):
    pred, full = predicted
    doc = json.loads(full.read_text())
    doc["meta"]["target"]["shrink_version"] = "9.9.9"
    doc["mapping"] = "2-replica-direct"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    (tmp_path / "v").mkdir()
    out, meta, report = _validate(pred, other, tmp_path / "v")
    assert meta["differs"]["shrink_version"][1] == "9.9.9", meta
    assert meta["differs"]["mapping"] == ["1-replica", "2-replica-direct"], meta
    assert "warning: the full-scale curve records other facts" in out, out
    assert "shrink version" in out and "'2-replica-direct' measured" in out, out
    assert "Not like for like" in report


def test_a_curve_of_another_synthesized_trace_is_said_to_differ(tmp_path, predicted):
    # both traces' source is 'shrink synth tcp': another rate and seed went unsaid
    pred, _ = predicted
    other = tmp_path / "o.parquet"
    cli_ok("synth", "tcp", "--rate", "1000", "--duration", "12s", "--seed", "2", "-o", str(other))
    full = tmp_path / "full.json"
    cli_ok("sim", "sweep", str(other), "--machine", str(SPEC), "-o", str(full),
        "--levels", "1,2", "--reps", "1", "--warmup", "0s", "--duration", "1s")  # fmt: skip
    (tmp_path / "v").mkdir()
    out, meta, _ = _validate(pred, full, tmp_path / "v")
    assert "trace" in meta.get("differs", {}), meta
    assert "shrink synth tcp (" in out, out


def test_a_fresh_full_run_of_a_sparse_trace_is_measured_and_is_the_same_trace(tmp_path):
    """`validate` measuring the full run itself on the simulator: its search started at a
    tenth of the trace's rate, where a sparse log (an access log of 10,000 requests in
    3.5 days) has no request in a window: "error: the loop window holds no request",
    exit 1, after predict (which finds the simulator's capacity first) had measured it.
    And every fresh full run was said to be of another trace: the curve recorded the
    fingerprint of the window it looped, not of the trace."""
    trace = tmp_path / "sparse.parquet"
    cli_ok("synth", "tcp", "--rate", "0.05", "--duration", "4000s", "--seed", "1", "-o", str(trace))
    cli_ok("predict", str(trace), "-o", str(tmp_path / "p"), "--machine", str(SPEC),
        "--target", f"sim:{SPEC}", "--duration", "1s", "--warmup", "0s", "--reps", "1",
        "--max-levels", "3", "--mappings", "1-replica")  # fmt: skip
    r = CliRunner().invoke(app, ["validate", str(tmp_path / "p" / "prediction.json")])
    assert r.exit_code in (0, 99), r.output
    meta = json.loads((tmp_path / "p" / "validation.json").read_text())["meta"]
    assert "differs" not in meta and "like with like" not in r.output, r.output


@pytest.mark.parametrize("last_run", [[1], "x", 5])
def test_a_curve_whose_last_run_note_is_no_object_is_validated(tmp_path, predicted, last_run):
    """A full-scale curve's ``meta.last_run`` is a free-form note: one that is not an
    object (an edited or damaged file), with no shrink version in its target, was an
    AttributeError ("internal error", exit 70) from validate --full-run."""
    pred, full = predicted
    doc = json.loads(full.read_text())
    doc["meta"]["target"].pop("shrink_version", None)
    doc["meta"]["last_run"] = last_run
    (other := tmp_path / "other.json").write_text(json.dumps(doc))
    (tmp_path / "v").mkdir()
    _, meta, _ = _validate(pred, other, tmp_path / "v")
    assert "shrink_version" not in meta.get("differs", {}), meta


def test_a_prediction_made_with_relative_paths_is_validated_from_another_folder(
    tmp_path, monkeypatch
):
    """predict recorded the trace and the simulator's spec as they were typed: `validate`
    of that prediction.json run from another folder said "error: t.parquet: no such file"
    (a file the user never named there), or would measure another folder's t.parquet."""
    made = tmp_path / "made"
    made.mkdir()
    shutil.copy(SPEC, made / "m.toml")
    monkeypatch.chdir(made)
    cli_ok("synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", "t.parquet")
    cli_ok("predict", "t.parquet", "-o", "p", "--machine", "m.toml", "--target", "sim:m.toml",
        "--duration", "1s", "--warmup", "0s", "--reps", "1", "--max-levels", "3",
        "--mappings", "1-replica")  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = CliRunner().invoke(app, ["validate", str(made / "p" / "prediction.json")])
    assert r.exit_code in (0, 99), r.output
    meta = json.loads((made / "p" / "validation.json").read_text())["meta"]
    assert "differs" not in meta, r.output


def test_an_older_prediction_with_a_relative_trace_says_where_the_name_came_from(
    tmp_path, predicted, monkeypatch
):
    pred, _ = predicted
    for name in ("prediction.json", "predicted-curve.json", "measured-curve.json"):
        shutil.copy(pred.parent / name, tmp_path / name)
    doc = json.loads((tmp_path / "prediction.json").read_text())
    doc["inputs"]["trace"] = "t.parquet"  # as predict recorded it before
    (tmp_path / "prediction.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["validate", "prediction.json"])
    assert r.exit_code == 1, r.output
    assert "relative to the folder predict ran in" in r.output, r.output
    assert "--trace" in r.output, r.output


def test_a_copied_prediction_whose_trace_path_holds_another_file_is_refused_before_measuring(
    tmp_path, predicted
):
    """A prediction folder copied to another machine or place names its trace by the
    absolute path predict saw: there that path may hold another file (a trace of the
    same name), which validate measured at full scale and only then said differs; or be
    gone. Both are said before any run, with what to give instead."""
    pred, _ = predicted
    for name in ("prediction.json", "predicted-curve.json", "measured-curve.json"):
        shutil.copy(pred.parent / name, tmp_path / name)
    other = tmp_path / "t.parquet"
    cli_ok("synth", "tcp", "--rate", "1000", "--duration", "12s", "--seed", "2", "-o", str(other))
    doc = json.loads((tmp_path / "prediction.json").read_text())
    gone = tmp_path / "gone.parquet"
    said_of = {other: "not the trace this prediction measured", gone: "no such file (the trace"}
    for path, said in said_of.items():
        doc["inputs"]["trace"] = str(path)
        (tmp_path / "prediction.json").write_text(json.dumps(doc))
        r = CliRunner().invoke(app, ["validate", str(tmp_path / "prediction.json")])
        assert r.exit_code == 1, r.output
        assert f"{path}: {said}" in r.output and "--trace" in r.output, r.output
        assert not (tmp_path / "full-curve.json").exists()
        assert not (tmp_path / "validation.json").exists()


def test_a_trace_given_with_trace_that_is_not_the_predicted_one_is_refused_before_measuring(
    tmp_path, predicted
):
    """validate --trace OTHER measured OTHER at full scale, for the minutes that takes, and
    only then said the traces differ. It is refused first; a copy of the predicted trace
    (a moved project) is the same trace and is taken."""
    pred, _ = predicted
    other = tmp_path / "other.parquet"
    cli_ok("synth", "tcp", "--rate", "1000", "--duration", "12s", "--seed", "2", "-o", str(other))
    out = tmp_path / "v"
    r = CliRunner().invoke(
        app, ["validate", str(pred), "--trace", str(other), "-o", str(out)], terminal_width=250
    )
    assert r.exit_code == 2, r.output
    assert "--trace" in r.output and "not the trace this prediction measured" in r.output
    assert not out.exists() or not any(out.iterdir()), r.output
    moved = tmp_path / "moved.parquet"
    shutil.copy(pred.parent.parent / "t.parquet", moved)
    r = CliRunner().invoke(app, ["validate", str(pred), "--trace", str(moved), "-o", str(out)])
    assert r.exit_code in (0, 99), r.output


def test_a_copied_prediction_whose_spec_or_machine_path_holds_another_file_is_refused(
    tmp_path, predicted
):
    """predict's other files (the simulator's spec, the machine) were read back from the
    paths predict saw with no check: a copied prediction folder measured whatever file
    is now there. Each is fingerprinted as the trace is, and refused before any run."""
    pred, _ = predicted
    for name in ("prediction.json", "predicted-curve.json", "measured-curve.json"):
        shutil.copy(pred.parent / name, tmp_path / name)
    doc = json.loads((tmp_path / "prediction.json").read_text())
    assert set(doc["inputs"]["fingerprints"]) == {"target", "machine"}
    edited = tmp_path / "m.toml"
    edited.write_text(SPEC.read_text() + "\n# edited\n")
    cases = {
        "machine": (str(edited), "machine file (--machine)"),
        "target": (f"sim:{edited}", "simulator spec (--target sim:)"),
    }
    for key, (value, what) in cases.items():
        bad = {**doc["inputs"], key: value}
        (tmp_path / "prediction.json").write_text(json.dumps({**doc, "inputs": bad}))
        r = CliRunner().invoke(app, ["validate", str(tmp_path / "prediction.json")])
        assert r.exit_code == 1, r.output
        assert f"{edited}: not the {what} this prediction read" in r.output, r.output
        assert "put back the one predict read, give it with " in r.output, r.output
        assert not (tmp_path / "validation.json").exists()
    gone = {**doc["inputs"], "machine": str(tmp_path / "gone.toml")}
    (tmp_path / "prediction.json").write_text(json.dumps({**doc, "inputs": gone}))
    r = CliRunner().invoke(app, ["validate", str(tmp_path / "prediction.json")])
    assert r.exit_code == 1 and "gone.toml: no such file (the machine file" in r.output, r.output


@pytest.mark.compute
def test_a_changed_docroot_or_recipe_is_refused_unless_another_recipe_is_given(tmp_path):
    from shrink.errors import ParameterError
    from shrink.run_inputs import _fingerprints, check_recorded_files

    docroot, recipe = tmp_path / "www", tmp_path / "r.toml"
    (docroot / "a").mkdir(parents=True)
    (docroot / "a" / "p.php").write_text("<?php echo 1;")
    recipe.write_text("name = 'x'\n")
    inputs = {"target": "testbed", "docroot": str(docroot), "server": str(recipe)}
    inputs["fingerprints"] = _fingerprints(inputs)
    check_recorded_files(inputs)
    (docroot / "a" / "p.php").write_text("<?php echo 2;")
    with pytest.raises(ParameterError, match=r"www: not the document root \(--docroot\)"):
        check_recorded_files(inputs)
    (docroot / "a" / "p.php").write_text("<?php echo 1;")
    recipe.write_text("name = 'y'\n")
    with pytest.raises(ParameterError, match="give the recipe with --server"):
        check_recorded_files(inputs)
    check_recorded_files(inputs, server="nginx-php-fpm")  # another recipe: not read
    older = {**inputs["fingerprints"], "docroot": "0" * 16}  # taken before the walk was recorded
    del older["docroot_walk"]
    check_recorded_files({**inputs, "fingerprints": older}, server="nginx-php-fpm")


@pytest.mark.compute
def test_a_docroot_fingerprint_follows_no_link_out_of_it_and_reads_no_fifo(tmp_path):
    """A document root's fingerprint read a FIFO in it (its size 0) and waited for a
    writer forever, at predict's end and before validate's run. It then followed linked
    folders out of the document root, which the servers do not serve (they follow no
    symlink): a link to / walked the whole machine as root. A link counts by where it
    points; what is inside the document root counts where it is."""
    import os
    import threading

    from shrink.docroot_print import docroot_record
    from shrink.run_inputs import file_fingerprint

    root, elsewhere = tmp_path / "www", tmp_path / "assets"
    (root / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (root / "index.html").write_text("hi")
    (elsewhere / "a.css").write_text("a{}")
    (root / "assets").symlink_to(elsewhere)
    (root / "everything").symlink_to("/")
    (root / "sub" / "up").symlink_to(root)  # a loop
    (root / "sub" / "home").symlink_to("../index.html")  # inside
    os.mkfifo(root / "pipe")
    out: list[str | None] = []
    t = threading.Thread(target=lambda: out.append(file_fingerprint(root)), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the read, or the test process never ends
        with open(root / "pipe", "wb"):
            pass
        t.join(10)
        pytest.fail("the fingerprint read the FIFO in the document root, or walked /")
    assert docroot_record(str(root))["entries"] == 7
    (elsewhere / "a.css").write_text("b{}")  # not served: not seen
    assert file_fingerprint(root) == out[0]
    (root / "index.html").write_text("ho")  # what the link inside points at
    assert file_fingerprint(root) != out[0]
    (root / "index.html").write_text("hi")
    (root / "sub" / "home").unlink()
    (root / "sub" / "home").symlink_to("../pipe")  # pointed elsewhere
    assert file_fingerprint(root) != out[0]


@pytest.mark.compute
def test_a_docroot_walk_is_bounded_and_says_so(tmp_path, monkeypatch):
    """The walk had no bound: a large document root was read whole at predict's end
    and again before validate. It stops at a number of entries or bytes, and the record
    says which, and a later walk stops at the same entry."""
    from shrink import docroot_print
    from shrink.run_inputs import check_recorded_files

    root = tmp_path / "www"
    root.mkdir()
    for i in range(10):
        (root / f"{i}.html").write_text(f"page {i}")
    rec = docroot_print.docroot_record(str(root), max_entries=4)
    assert rec["entries"] == 4 and rec["bounded"] == "entries: the first 4", rec
    monkeypatch.setattr(docroot_print, "MAX_BYTES", 12)
    rec = docroot_print.docroot_record(str(root))
    assert rec["entries"] == 10 and rec["bounded"].startswith("bytes: past"), rec
    walk = {**rec, "entries": 4, "bounded": "time: the first 4 entries"}
    walk["digest"] = docroot_print.docroot_record(str(root), max_entries=4)["digest"]
    (root / "9.html").write_text("past the bound")  # past where predict stopped
    inputs = {"target": "testbed", "docroot": str(root)}
    inputs["fingerprints"] = {"docroot": walk.pop("digest"), "docroot_walk": walk}
    check_recorded_files(inputs)


@pytest.mark.compute
def test_a_docroot_file_over_1_mib_changed_at_its_end_is_seen(tmp_path):
    """Files over 1 MiB counted by their size only, and files up to 1 MiB were read
    whole (10 GB for 10,000 of them). Each file now counts by its size and its first
    and last 64 KiB: an edit at either end is seen, in the middle of a large file not."""
    from shrink.run_inputs import file_fingerprint

    root = tmp_path / "www"
    root.mkdir()
    big = root / "video.mp4"
    data = bytearray(3 << 20)
    big.write_bytes(data)
    before = file_fingerprint(root)
    data[-1] = 1
    big.write_bytes(data)
    assert file_fingerprint(root) != before
    data[-1], data[1 << 20] = 0, 1  # the middle: past the bound
    big.write_bytes(data)
    assert file_fingerprint(root) == before


@pytest.mark.compute
def test_a_docroot_refusal_names_what_changed_or_what_this_user_cannot_read(tmp_path, monkeypatch):
    """A refusal gave two fingerprints and no name. Run by a user who cannot read some
    files (predict ran as root) it said "it changed since predict, or the prediction was
    copied", neither true. It names the changed files, or the ones it cannot read."""
    import builtins
    import io
    import os

    from shrink.errors import ParameterError
    from shrink.run_inputs import _fingerprints, check_recorded_files

    root = tmp_path / "www"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "p.php").write_text("<?php echo 1;")
    (root / "a" / "secret.php").write_text("<?php echo 2;")
    (root / "index.html").write_text("hi")
    inputs = {"target": "testbed", "docroot": str(root)}
    inputs["fingerprints"] = json.loads(json.dumps(_fingerprints(inputs)))
    check_recorded_files(inputs)
    (root / "a" / "b" / "p.php").write_text("<?php echo 3;")
    with pytest.raises(ParameterError, match=r"\(a/b/p\.php differ\)"):
        check_recorded_files(inputs)
    (root / "a" / "b" / "p.php").write_text("<?php echo 1;")

    def refuse(real):
        def opener(path, *args, **kwargs):
            if str(path).endswith("secret.php"):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)

        return opener

    for mod, name in ((os, "open"), (io, "open"), (builtins, "open")):
        monkeypatch.setattr(mod, name, refuse(getattr(mod, name)))
    with pytest.raises(ParameterError) as e:
        check_recorded_files(inputs)
    assert "cannot read 1 of the document root's entries as this user (a/secret.php)" in str(
        e.value
    )
    assert "changed since predict" not in str(e.value)


def test_a_report_written_elsewhere_names_the_share_curve_its_mat_command_reads(
    tmp_path, predicted
):
    """validate -o DIR writes its report in DIR, the share's curve staying beside the
    prediction; the report's `shrink mat measured-curve.json ...` named a file DIR does
    not hold. It names the curve as a command run in DIR finds it, quoted."""
    import os
    import re
    import shlex

    pred, full = predicted
    out = tmp_path / "it's a report"
    r = CliRunner().invoke(app, ["validate", str(pred), "--full-run", str(full), "-o", str(out)])
    assert r.exit_code in (0, 99), r.output
    md = (out / "report.md").read_text()
    cmds = re.findall(r"`(shrink mat [^`]+)`", md)
    assert cmds, md
    for cmd in cmds:
        curve = shlex.split(cmd)[2]
        assert os.path.samefile(out / curve, pred.parent / "measured-curve.json"), cmd
