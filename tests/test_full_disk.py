"""A full disk keeps what fits: the finished levels first, the file and errno named,
no truncated file left (ENOSPC injected into the writers)."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from shrink.atomic import atomic_file
from shrink.cli import app
from shrink.cli._replay_opts import EngineOptions
from shrink.errors import WriteError
from shrink.loadcurve import LoadCurve
from shrink.target import FakeTarget
from shrink.trace import Trace

pytestmark = pytest.mark.compute

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class _Target(FakeTarget):
    """A fake target as the CLI builds one; its ``fail_at``-th run cannot write its run log."""

    def __init__(self, fail_at: int = 0, runlog: str = "logs/run001-rf2.parquet") -> None:
        super().__init__()
        self.fail_at, self.runlog, self.runs = fail_at, runlog, 0
        self.state: dict = {}

    def describe(self):
        # As LiveTarget's: the engine's name (a curve's meta.generator.engine is one);
        # a run's describes the engine's run.
        return {**super().describe(), "engine": "fake"}

    def run(self, trace, **kw):
        self.runs += 1
        if self.runs == self.fail_at:
            raise WriteError(self.runlog, ENOSPC)
        res = super().run(trace, **kw)
        res.describe = {**res.describe, "engine": {"engine": "fake"}}
        return res


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    t = np.arange(3000) / 100.0
    trace = tmp_path / "t.parquet"
    Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/f"] * t.size}, meta={"mode": "open"}
    ).write_parquet(trace)

    def run(target: _Target, *extra: str):
        monkeypatch.setattr(EngineOptions, "target", lambda *a, **kw: target)
        (tmp_path / "out").mkdir(exist_ok=True)  # an output's folder must exist
        out = str(tmp_path / "out" / "curve.json")
        args = ["sweep", str(trace), "--target", "http://127.0.0.1:9", "--levels", "1,2,3",
                "--reps", "1", "--warmup", "0.5s", "--duration", "2s", "-o", out,
                *extra]  # fmt: skip
        return CliRunner().invoke(app, args)

    return run


def test_a_curve_that_cannot_be_written_leaves_its_summary(tmp_path, sweep, monkeypatch):
    def full(self, path):
        raise WriteError(path, ENOSPC)

    monkeypatch.setattr(LoadCurve, "write_json", full)
    r = sweep(_Target())
    assert r.exit_code == 1, r.output
    assert "curve.json: cannot write (no space left on the device, ENOSPC)" in r.output
    summary = tmp_path / "out" / "curve.summary.json"
    assert f"kept {summary} (a summary of the 3 finished levels)" in r.output
    assert [lv["level"] for lv in json.loads(summary.read_text())["summary"]] == [1, 2, 3]


def test_with_no_room_even_for_the_summary_it_is_printed(tmp_path, sweep, monkeypatch):
    def full(path, *a, **kw):
        raise WriteError(path, ENOSPC)

    monkeypatch.setattr(LoadCurve, "write_json", lambda self, path: full(path))
    monkeypatch.setattr("shrink.atomic.write_text", full)
    r = sweep(_Target())
    assert r.exit_code == 1 and '"level": 3' in r.output and "printed above" in r.output


def test_a_run_log_that_cannot_be_written_keeps_the_finished_levels(tmp_path, sweep):
    r = sweep(_Target(fail_at=2))
    assert r.exit_code == 1, r.output
    assert "run001-rf2.parquet: cannot write" in r.output and "ENOSPC" in r.output
    kept = LoadCurve.read_json(tmp_path / "out" / "curve.partial.json")
    assert [lv.level for lv in kept.levels] == [1]


def test_an_export_that_cannot_be_written_is_named_and_not_left_truncated(
    tmp_path, sweep, monkeypatch
):
    def k6(path, runs):
        # As the real writer does: pyarrow writes into the writer's temporary file.
        with atomic_file(path, "w") as f:
            f.write("metric_name,timestamp\nhttp_req_duration,1")  # half a row
            raise OSError(errno.ENOSPC, "Error writing bytes to file")  # pyarrow's, no name

    monkeypatch.setattr("shrink.export.csv.write_k6", k6)
    r = sweep(_Target(), "--export", "k6")
    out = tmp_path / "out"
    assert r.exit_code == 1, r.output
    assert "curve_requests.csv: cannot write" in r.output and "ENOSPC" in r.output
    assert (out / "curve.json").exists()  # the finished levels were written first
    assert not (out / "curve_requests.csv").exists() and not list(out.glob(".*.tmp"))
    assert f"kept {out / 'curve.json'}" in " ".join(r.output.split())


def _fails_on_write(monkeypatch, n: int, error: BaseException) -> None:
    """The ``n``-th file written (its fsync) raises ``error``: a disk full part-way, or a
    signal that lands between two outputs."""
    import os

    calls = [0]
    fsync = os.fsync

    def failing(fd: int) -> None:
        calls[0] += 1
        if calls[0] == n:
            raise error
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)


def _split(tmp_path, monkeypatch, error: BaseException, n: int = 4):
    t = np.arange(300) / 100.0
    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": np.arange(t.size), "t": t, "path": ["/f"] * t.size}
                       ).write_parquet(trace)  # fmt: skip
    _fails_on_write(monkeypatch, 3 if n == 4 else 14, error)
    parts = tmp_path / "parts"
    r = CliRunner().invoke(app, ["split", str(trace), "--parts", str(n), "-o", str(parts)])
    return r, parts, " ".join(r.stderr.split())


def test_a_disk_full_part_way_names_the_files_already_written(tmp_path, monkeypatch):
    """Outputs written whole before the failure stay, and the one line says which."""
    r, parts, err = _split(tmp_path, monkeypatch, OSError(errno.ENOSPC, "No space left"))
    assert r.exit_code == 1, r.output
    assert "part-002.parquet: cannot write (no space left on the device, ENOSPC)" in err
    assert f"kept 2 of 4 parts in {parts} (incomplete: the sessions of the other 2 " in err
    assert sorted(p.name for p in parts.iterdir()) == ["part-000.parquet", "part-001.parquet"]


@pytest.mark.parametrize(
    ("error", "status", "start"),
    [(OSError(errno.ENOSPC, "No space left"), 1, "ENOSPC); kept"), (KeyboardInterrupt(), 130,
                                                                    "interrupted: kept")],
)  # fmt: skip
def test_a_split_stopped_part_way_says_its_parts_are_an_incomplete_partition(
    tmp_path, monkeypatch, error, status, start
):
    """50 parts, the 14th not written: "kept 13 files in DIR", not that these are 13 of
    50 parts, which hold none of the other 37's sessions."""
    r, parts, err = _split(tmp_path, monkeypatch, error, n=50)
    assert r.exit_code == status, r.output
    assert (
        f"{start} 13 of 50 parts in {parts} (incomplete: the sessions of the other 37 are "
        "in none of them; run split again)"
    ) in err
    assert "files in" not in err
    assert len(list(parts.iterdir())) == 13


def test_a_signal_part_way_names_the_files_already_written(tmp_path, monkeypatch):
    r, parts, err = _split(tmp_path, monkeypatch, KeyboardInterrupt())
    assert r.exit_code == 130, r.output
    assert f"interrupted: kept 2 of 4 parts in {parts} (incomplete: " in err
    assert "nothing measured was written" not in err


def _predict(tmp_path, monkeypatch, fails, *extra):
    """``predict`` on the simulator, each curve's write first asking ``fails(path)``
    (True: no room for it); the result and the outputs' folder."""
    from pathlib import Path

    spec = Path(__file__).resolve().parents[1] / "examples" / "machines" / "nehalem-2s.toml"
    trace = tmp_path / "tcp.parquet"
    assert CliRunner().invoke(app, ["synth", "tcp", "--rate", "50000", "--duration", "8s",
                                    "--seed", "1", "-o", str(trace)]).exit_code == 0  # fmt: skip
    write = LoadCurve.write_json

    def full(self, path, *a, **kw):
        if fails(Path(path)):
            raise WriteError(path, ENOSPC)
        return write(self, path, *a, **kw)

    monkeypatch.setattr(LoadCurve, "write_json", full)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["predict", str(trace), "--target", f"sim:{spec}", "--alpha",
                                 "0.5", "--mappings", "1-replica", "--thresholds",
                                 "mean=0.5ms,p99.9=4ms", "--warmup", "300ms", "--duration", "1s",
                                 "--reps", "1", "--max-levels", "4", "-o", str(out),
                                 *extra])  # fmt: skip
    return r, out


def test_predict_keeps_a_summary_when_its_measured_curve_does_not_fit(tmp_path, monkeypatch):
    """Nothing measured is lost: predict lost every level when measured-curve.json failed."""
    r, out = _predict(tmp_path, monkeypatch, lambda p: p.name == "measured-curve.json")
    assert r.exit_code == 1, r.output
    summary = out / "measured-curve.summary.json"
    assert f"kept {summary} (a summary of the" in " ".join(r.stderr.split())
    assert json.loads(summary.read_text())["summary"]


def test_predict_writes_each_curve_once(tmp_path, monkeypatch):
    """measured-curve.json was written again at the end: with no room then, predict
    stopped, saying it could not write measured-curve.json and kept measured-curve.json."""
    seen: list[str] = []

    def again(path):
        seen.append(path.name)
        return seen.count(path.name) > 1

    r, out = _predict(tmp_path, monkeypatch, again)
    assert r.exit_code in (0, 99), r.output  # 99: a MAT is a bound, every file written
    assert "error" not in r.stderr
    # the finished levels kept as each ends (measured-curve.partial.json) aside
    whole = sorted(n for n in seen if not n.endswith(".partial.json"))
    assert whole == ["measured-curve.json", "predicted-curve.json"]
    assert LoadCurve.read_json(out / "measured-curve.json").levels


def test_a_failed_rewrite_says_its_earlier_copy_is_kept(tmp_path, monkeypatch, capsys):
    """A file written twice, the second time with no room: the error named it as not
    written and then as kept."""
    import typer

    from shrink.atomic import write_text
    from shrink.cli._common import cli_errors

    out, other = tmp_path / "a.json", tmp_path / "b.json"
    _fails_on_write(monkeypatch, 3, OSError(errno.ENOSPC, "No space left"))
    with pytest.raises(typer.Exit), cli_errors():
        write_text(out, "{}")
        write_text(other, "{}")
        write_text(out, '{"more": 1}')
    err = " ".join(capsys.readouterr().err.split())
    assert err == (f"error: {out}: cannot write (no space left on the device, ENOSPC); "
                   f"kept its earlier whole copy (without this update), {other}")  # fmt: skip
    assert out.read_text() == "{}"


def test_predict_keeps_a_summary_when_its_paired_full_curve_does_not_fit(tmp_path, monkeypatch):
    """The paired full run's levels were lost: no summary, the error naming none kept."""
    r, out = _predict(
        tmp_path, monkeypatch, lambda p: p.name == "full-curve.json", "--paired-full-run"
    )
    assert r.exit_code == 1, r.output
    summary = out / "full-curve.summary.json"
    assert f"kept {summary} (a summary of the" in " ".join(r.stderr.split())
    assert json.loads(summary.read_text())["summary"]


def _validate(tmp_path, monkeypatch, fails):
    """``validate`` measuring the full target now (on the simulator) of a prediction made
    there, each curve's write first asking ``fails(path)``; the result and its folder."""
    r, out = _predict(tmp_path, monkeypatch, lambda p: False)
    assert r.exit_code in (0, 99), r.output
    write = LoadCurve.write_json

    def full(self, path, *a, **kw):
        if fails(path):
            raise WriteError(path, ENOSPC)
        return write(self, path, *a, **kw)

    monkeypatch.setattr(LoadCurve, "write_json", full)
    va = tmp_path / "va"
    r = CliRunner().invoke(app, ["validate", str(out / "prediction.json"), "-o", str(va)])
    return r, va


def test_validate_keeps_a_summary_when_its_full_curve_does_not_fit(tmp_path, monkeypatch):
    """The full-scale run's levels (minutes on a testbed) were lost, nothing kept."""
    from pathlib import Path

    r, va = _validate(tmp_path, monkeypatch, lambda p: Path(p).name == "full-curve.json")
    assert r.exit_code == 1, r.output
    summary = va / "full-curve.summary.json"
    assert f"kept {summary} (a summary of the" in " ".join(r.stderr.split())
    assert json.loads(summary.read_text())["summary"]


def test_validate_stopped_part_way_keeps_the_full_run_finished_levels(tmp_path, monkeypatch):
    """SIGTERM during validate's full-scale run: "nothing measured was written"."""
    from shrink import pipeline
    from shrink.measure import SweepInterrupted

    def stopped(*a, **kw):
        done = LoadCurve.read_json(tmp_path / "out" / "measured-curve.json")
        raise SweepInterrupted(done)

    r, out = _predict(tmp_path, monkeypatch, lambda p: False)
    monkeypatch.setattr(pipeline, "auto_sweep", stopped)
    va = tmp_path / "va"
    r = CliRunner().invoke(app, ["validate", str(out / "prediction.json"), "-o", str(va)])
    assert r.exit_code == 130, r.output
    n = len(LoadCurve.read_json(va / "full-curve.partial.json").levels)
    said = f"interrupted: kept {va / 'full-curve.partial.json'} ({n} finished level"
    assert n and said in " ".join(r.stderr.split()), r.stderr


def test_a_kept_file_that_could_not_be_rewritten_says_how_many_levels_it_holds(sweep, monkeypatch):
    """curve.partial.json written after the first level, then no room: it was listed as
    kept beside a summary of both levels, as if it held them; and "1 finished levels"."""
    real, calls = LoadCurve.write_json, []

    def full_after_one(self, path):
        calls.append(path)
        if len(calls) > 1:
            raise WriteError(path, ENOSPC)
        return real(self, path)

    monkeypatch.setattr(LoadCurve, "write_json", full_after_one)
    r = sweep(_Target(), "--levels", "1,2")
    out = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "curve.summary.json (a summary of the 2 finished levels)" in out
    assert ("curve.partial.json (only the first 1 finished level: it could not be rewritten "
            "after later ones)") in out  # fmt: skip


def test_one_kept_level_is_said_in_the_singular(tmp_path, sweep):
    r = sweep(_Target(fail_at=2))
    assert f"kept {tmp_path / 'out' / 'curve.partial.json'} (1 finished level)" in r.output


def test_predict_with_no_room_for_its_prediction_says_how_to_recompute_it(tmp_path, monkeypatch):
    """No room for prediction.json: both curves were kept, but no MAT table was printed
    and the error did not say how to get the result from what was kept."""
    from pathlib import Path

    from shrink.prediction import Prediction

    def full(self, path, *a, **kw):
        raise WriteError(path, ENOSPC)

    monkeypatch.setattr(Prediction, "write_json", full)
    r, out = _predict(tmp_path, monkeypatch, lambda p: False)
    assert r.exit_code == 1, r.output
    spec = Path(__file__).resolve().parents[1] / "examples" / "machines" / "nehalem-2s.toml"
    curve = out / "measured-curve.json"
    err = " ".join(r.stderr.split())
    assert (
        f"no MAT table was printed: `shrink extrapolate {curve} --machine {spec} --mapping "
        "1-replica --thresholds mean=0.5ms,p99.9=4ms` recomputes the MATs from that kept "
        "measured curve"
    ) in err
    assert LoadCurve.read_json(curve).levels


def test_the_recompute_line_names_a_machine_spec_to_write_for_this_machine(tmp_path):
    from shrink.report.text import recompute_text

    failed = tmp_path / "prediction.json"
    assert recompute_text(failed, "testbed", "this", (), "mean=10ms", "published") == ""
    (tmp_path / "measured-curve.json").write_text("{}")
    other = tmp_path / "report.md"
    assert recompute_text(other, "testbed", "this", (), "mean=10ms", "published") == ""
    text = recompute_text(failed, "testbed", "this", ("a", "b"), "mean=1ms", "c d.json")
    assert f"`shrink extrapolate {tmp_path}/measured-curve.json --machine MACHINE.toml " in text
    assert "--mapping a --mapping b --thresholds mean=1ms --calibration 'c d.json'`" in text
    assert "(shrink machine write MACHINE.toml writes this machine's spec)" in text


def test_the_recompute_line_of_a_run_on_some_cpus_says_it_predicts_the_whole_machine(
    tmp_path, monkeypatch
):
    """``predict --server-cpus`` with no room for prediction.json: the hint gave an
    ``extrapolate`` command as if it recomputed this run's MATs, but extrapolate
    predicts the machine's every CPU (it has no --server-cpus), and its intervals are
    not widened by predict's error budgets. The line now says both."""
    import shrink.pipeline
    from shrink.report.text import recompute_text

    out = tmp_path / "out"
    trace = tmp_path / "t.parquet"
    assert CliRunner().invoke(app, ["synth", "tcp", "--rate", "100", "--duration", "1s",
                                    "-o", str(trace)]).exit_code == 0  # fmt: skip

    def no_room(trace, out_dir, *a, **kw):
        (out_dir / "measured-curve.json").write_text("{}")
        raise WriteError(out_dir / "prediction.json", ENOSPC)

    monkeypatch.setattr(shrink.pipeline, "run_predict", no_room)
    r = CliRunner().invoke(app, ["predict", str(trace), "--target", "testbed", "--server-cpus",
                                 "0", "--mappings", "1-replica", "-o", str(out)])  # fmt: skip
    assert r.exit_code == 1, r.output
    err = " ".join(r.stderr.split())
    assert "predicts from that kept measured curve" in err, err
    assert "but for the whole machine, not for this run's --server-cpus 0" in err, err
    assert "its MATs are not this run's" in err
    # The whole machine's command recomputes the MATs; its intervals are not predict's.
    (tmp_path / "measured-curve.json").write_text("{}")
    whole = recompute_text(tmp_path / "prediction.json", "testbed", "m.toml", (), "mean=1ms",
                           "published")  # fmt: skip
    assert "recomputes the MATs" in whole
    assert "its intervals are not widened by predict's error budgets" in whole


class _Fs:
    """An os.statvfs result: ``inodes`` free of 64, ``blocks`` of 4 KiB free."""

    def __init__(self, inodes: int, blocks: int) -> None:
        self.f_files, self.f_favail = 64, inodes
        self.f_bavail, self.f_frsize = blocks, 4096


def test_enospc_with_bytes_free_says_no_inode_was_left(tmp_path, monkeypatch):
    # An ext4 made with few inodes (mkfs.ext4 -N 16) and 55 MiB free: a sweep's RunLog
    # was "cannot write (no space left on the device, ENOSPC)" while df showed room.
    monkeypatch.setattr("os.statvfs", lambda p: _Fs(inodes=0, blocks=14080))
    said = str(WriteError(tmp_path / "rl" / "run001-rf0.5.parquet", ENOSPC))
    assert said.endswith(
        "run001-rf0.5.parquet: cannot write (no space left on the device: no free inode "
        "for a new file (df -i), though 55.0 MiB are free, ENOSPC)"
    ), said
    monkeypatch.setattr("os.statvfs", lambda p: _Fs(inodes=0, blocks=0))  # both ran out
    assert "(no space left on the device, ENOSPC)" in str(WriteError(tmp_path / "f", ENOSPC))
    monkeypatch.setattr("os.statvfs", lambda p: _Fs(inodes=5, blocks=0))  # bytes ran out
    assert "(no space left on the device, ENOSPC)" in str(WriteError(tmp_path / "f", ENOSPC))
