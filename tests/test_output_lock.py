"""One run at a time writes an output folder: a second predict or validate to a folder
another run is writing is refused before it measures (two runs to one ``-o`` each
replaced the other's files, one by one, and each said it wrote them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import OutputBusyError
from shrink.folder_locks import claimed

pytestmark = pytest.mark.compute

SPEC = Path(__file__).resolve().parents[1] / "examples" / "machines" / "nehalem-2s.toml"


def test_a_held_folder_is_refused_to_a_second_claim_and_free_after(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with claimed(out) as held:
        assert held == out and out.is_dir()
        busy = pytest.raises(OutputBusyError, match=f"{out}: another shrink run is writing")
        with busy, claimed(out):
            pass  # pragma: no cover
    (out / "kept").write_text("a result")
    with claimed(out):
        pass  # released at the block's end
    assert [p.name for p in out.iterdir()] == ["kept"]  # the lock leaves no file behind
    with claimed(tmp_path / "new"):
        pass
    assert not (tmp_path / "new").exists()  # made for the run, left empty: removed


def test_the_lock_goes_with_a_killed_holder(tmp_path):
    out = tmp_path / "out"
    code = (
        "import sys, time\nfrom shrink.folder_locks import claimed\n"
        f"with claimed({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusyError), claimed(out):
            pass  # pragma: no cover
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    with claimed(out):
        pass  # SIGKILL gave no chance to unlock: the kernel did


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "tcp.parquet"
    r = CliRunner().invoke(app, ["synth", "tcp", "--rate", "50000", "--duration", "8s",
                                 "--seed", "1", "-o", str(trace)])  # fmt: skip
    assert r.exit_code == 0, r.output
    return trace


def test_predict_and_validate_to_a_folder_another_run_holds_are_refused(tmp_path):
    trace = _trace(tmp_path)
    out = tmp_path / "out"
    args = ["predict", str(trace), "--target", f"sim:{SPEC}", "--alpha", "0.5", "--mappings",
            "1-replica", "--thresholds", "mean=0.5ms,p99.9=4ms", "--warmup", "300ms",
            "--duration", "1s", "--reps", "1", "--max-levels", "4", "-o", str(out)]  # fmt: skip
    out.mkdir()  # there before: kept, and empty after the refused run
    with claimed(out):
        r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    assert f"{out}: another shrink run is writing this folder" in r.stderr
    assert r.stderr.count("\n") == 1 and list(out.iterdir()) == []
    r = CliRunner().invoke(app, args)
    assert r.exit_code in (0, 99), r.output  # free again: the same command runs
    with claimed(out):
        r = CliRunner().invoke(app, ["validate", str(out / "prediction.json")])
    assert r.exit_code == 1 and "another shrink run is writing" in r.stderr, r.output
    assert not (out / "validation.json").exists()


def test_validate_of_a_missing_prediction_makes_no_folder(tmp_path):
    r = CliRunner().invoke(app, ["validate", str(tmp_path / "nowhere" / "prediction.json")])
    assert r.exit_code in (1, 2), r.output
    assert not (tmp_path / "nowhere").exists()


def test_a_file_system_that_cannot_lock_a_folder_does_not_stop_the_run(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with claimed(tmp_path / "out") as held:
        (held / "result").write_text("kept")
    assert (tmp_path / "out" / "result").read_text() == "kept"


def test_the_holder_of_a_folder_s_lock_is_named(tmp_path):
    """Any user who may read a folder may lock it: root's run was refused as "another
    shrink run is writing this folder", the holder's PID (in /proc/locks) unsaid."""
    out = tmp_path / "out"
    out.mkdir()
    hold = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(OutputBusyError) as err, claimed(out):
            pass
        assert f"(PID {holder.pid} (python" in str(err.value), str(err.value)
    finally:
        holder.kill()
        holder.wait()


def test_flock_holders_reads_proc_locks_as_the_kernel_writes_it(tmp_path):
    from shrink.procfs import flock_holders

    dev = os.makedev(0xFD, 1)
    locks = tmp_path / "locks"
    locks.write_text(
        "1: POSIX  ADVISORY  WRITE 11 fd:01:77 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 22 fd:01:77 0 EOF\n"
        "2: -> FLOCK  ADVISORY  WRITE 33 fd:01:77 0 EOF\n"
        "3: FLOCK  ADVISORY  WRITE 44 fd:01:78 0 EOF\n"
    )
    assert flock_holders(dev, 77, locks) == [22]
    assert flock_holders(dev, 77, tmp_path / "none") == []


def test_a_dead_writers_temporaries_go_and_nothing_else(tmp_path):
    from shrink.folder_locks import drop_temporaries

    out = tmp_path / "out"
    out.mkdir()
    dead = out / ".run003-rf0.5.parquet.0123456789ab.tmp"
    dead.write_bytes(b"")
    # the writer's disk reserve, 8 MiB, was kept after every kill
    reserve = out / ".run003-rf0.5.parquet.ba9876543210.reserve"
    reserve.write_bytes(b"")
    kept = {
        ".run003-rf0.5.parquet.0123456789ab.tmp.keep": "file",  # not the whole name
        ".run003-rf0.5.parquet.0123456789zz.tmp": "file",  # not a temporary's suffix
        ".run003-rf0.5.parquet.0123456789ab.reserved": "file",
        ".trace.parquet.0123456789ab.tmp": "file",  # another file's temporary
        ".run004-rf1.parquet.0123456789ab.tmp": "dir",
        ".run005-rf1.parquet.0123456789ab.tmp": "link",
    }
    target = tmp_path / "target"
    target.write_text("x")
    for name, kind in kept.items():
        if kind == "file":
            (out / name).write_text("x")
        elif kind == "dir":
            (out / name).mkdir()
        else:
            (out / name).symlink_to(target)
    with claimed(out):
        got = drop_temporaries(out, r"run[0-9]{3,}-rf[^/]+\.parquet")
        assert sorted(got) == sorted([dead.name, reserve.name])
    assert sorted(p.name for p in out.iterdir()) == sorted(kept)
    assert target.read_text() == "x"


@pytest.mark.parametrize("name", ["support-demo.parquet", "tcp.parquet", "recorded.parquet"])
def test_the_demo_names_each_trace_it_writes_in_its_work_folder(tmp_path, name):
    """A kill during the demo's trace write left ``work/.support-demo.parquet.HEX.tmp``
    (271 KB), and the rerun kept it."""
    from shrink.atomic import open_exclusive
    from shrink.demo import _WORK_FILES
    from shrink.folder_locks import drop_temporaries

    fd, tmp = open_exclusive(tmp_path / name)
    os.close(fd)
    with claimed(tmp_path):
        assert drop_temporaries(tmp_path, _WORK_FILES) == [tmp.name]


def test_a_folder_that_cannot_be_locked_keeps_every_temporary(tmp_path, monkeypatch):
    """On NFS a folder cannot be flocked (an exclusive lock there needs a file open to
    write): the run went on unguarded, as meant, but still removed the temporaries, so a
    second sweep with the same --runlogs removed the first's RunLog while it was written
    (its rename then failed and the level's RunLog was lost)."""
    import errno

    from shrink.atomic import open_exclusive
    from shrink.folder_locks import drop_temporaries

    names = r"run[0-9]{3,}-rf[^/]+\.parquet"
    fd, live = open_exclusive(tmp_path / "run001-rf1.parquet")  # another sweep's, writing
    os.close(fd)
    assert drop_temporaries(tmp_path, names) == []  # not held: nothing goes

    def no_lock(fd: int, op: int) -> None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr("shrink.folder_locks.fcntl.flock", no_lock)
    with claimed(tmp_path):
        assert drop_temporaries(tmp_path, names) == []
    assert live.exists()
    monkeypatch.undo()
    with claimed(tmp_path):
        with pytest.raises(OutputBusyError), claimed(tmp_path):
            pass  # pragma: no cover
        assert drop_temporaries(tmp_path, names) == [live.name]  # still held after the refusal


def test_predict_removes_what_a_killed_predict_left_in_its_folder(tmp_path):
    # predict held its folder but left a killed run's `.measured-curve.json.HEX.tmp`
    # there for good (sweep --runlogs clears its own).
    trace = _trace(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    dead = [".measured-curve.partial.json.0123456789ab.tmp", ".report.html.ba9876543210.tmp"]
    kept = [".trace.parquet.0123456789ab.tmp", "notes.txt"]  # not predict's
    for name in dead + kept:
        (out / name).write_text("x")
    args = ["predict", str(trace), "--target", f"sim:{SPEC}", "--alpha", "0.5", "--mappings",
            "1-replica", "--thresholds", "mean=0.5ms,p99.9=4ms", "--warmup", "300ms",
            "--duration", "1s", "--reps", "1", "--max-levels", "4", "-o", str(out)]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code in (0, 99), r.output
    names = {p.name for p in out.iterdir()}
    assert not names & set(dead) and set(kept) <= names and "prediction.json" in names
