"""Nothing measured is lost: bounded memory, a full disk, atomic result files."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from shrink.atomic import write_text
from shrink.errors import WriteError
from shrink.loadcurve import LoadCurve
from shrink.replay import writer as writer_mod
from shrink.replay.writer import RunLogRow, RunLogWriter
from shrink.runlog import RunLog

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _fill(w: RunLogWriter, n: int, start: int = 0) -> None:
    w.targets.code("127.0.0.1:80")
    for i in range(start, start + n):
        w.add(RunLogRow(i * 1e-3, i * 1e-3, i * 1e-3 + 1e-4, i * 1e-3 + 2e-4, 200, 100, 0, i, 0, 0))


def test_a_long_run_keeps_no_flushed_tables(tmp_path):
    w = RunLogWriter(tmp_path / "r.parquet", {"x": 1}, flush_rows=1000)
    for k in range(200):  # 200,000 rows in 200 row groups
        _fill(w, 1000, k * 1000)
        w.maybe_flush()
        assert w._tables == [] and w.pending() == 0
    w.close()
    assert w.rows == 200_000 and w.error is None
    assert pq.ParquetFile(tmp_path / "r.parquet").metadata.num_row_groups == 200
    log = w.runlog()  # read back from the file
    assert len(log) == 200_000 and log.meta == {"x": 1}
    assert not list(tmp_path.glob(".*"))  # no temporary file and no reserve left behind


def test_the_file_appears_only_when_whole(tmp_path):
    w = RunLogWriter(tmp_path / "r.parquet", flush_rows=10)
    _fill(w, 25)
    w.flush()
    assert not (tmp_path / "r.parquet").exists()  # still under its temporary name
    w.close()
    assert len(RunLog.read_parquet(tmp_path / "r.parquet")) == 25


def _enospc_after(
    monkeypatch, budget: int, *, once: bool, room: bool = False, code: int = errno.ENOSPC
) -> None:
    """os.write in the writer fails with ``code`` once ``budget`` bytes are written, and from
    then on no reserve can be allocated either (a full disk) unless ``room``."""
    real = os.write
    state = {"left": budget, "failed": False}
    allocate = os.posix_fallocate

    def fallocate(fd, offset, size):
        if state["failed"] and not room:
            raise OSError(errno.ENOSPC, "No space left on device")
        allocate(fd, offset, size)

    monkeypatch.setattr(writer_mod.os, "posix_fallocate", fallocate)

    def write(fd, data):
        if state["left"] <= 0 and not (once and state["failed"]):
            state["failed"] = True
            raise OSError(code, os.strerror(code))
        state["left"] -= len(data)
        return real(fd, data)

    monkeypatch.setattr(writer_mod.os, "write", write)


def test_a_full_disk_stops_the_writer_and_keeps_every_row_before_it(tmp_path, monkeypatch):
    w = RunLogWriter(tmp_path / "r.parquet", flush_rows=100)
    _fill(w, 300)
    w.flush()  # 300 rows on disk
    on_disk = w._sink.pos
    _enospc_after(monkeypatch, on_disk and 10, once=True)  # the next flush hits a full disk
    _fill(w, 100, 300)
    w.flush()  # finished on the reserve
    assert isinstance(w.error, WriteError) and "no space left" in str(w.error)
    _fill(w, 100, 400)
    w.flush()  # dropped, counted
    w.close()
    assert w.rows == 400 and w.dropped == 100
    log = RunLog.read_parquet(tmp_path / "r.parquet")
    assert len(log) == 400 and log.column("session").tolist() == list(range(400))
    assert str(w.error).count("\n") == 0


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_write_that_fails_only_for_the_reserve_goes_on(tmp_path, monkeypatch, code):
    # The reserve spent, the write fitted, and a smaller reserve still fits: the disk was
    # not full. On a tmpfs with 8 MiB free the 8 MiB reserve filled it, and the writer
    # stopped at its second row group, "no space left".
    w = RunLogWriter(tmp_path / "r.parquet", flush_rows=100)
    _fill(w, 300)
    w.flush()
    # (a quota counts the reserve too: EDQUOT lost every row of the run before)
    _enospc_after(monkeypatch, 10, once=True, room=True, code=code)
    _fill(w, 200, 300)
    w.flush()
    assert w.error is None and w._sink.reserve is not None
    w.close()
    assert w.rows == 500 and w.dropped == 0 and w.error is None
    assert len(RunLog.read_parquet(tmp_path / "r.parquet")) == 500
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_a_disk_that_stays_full_never_puts_a_broken_file_in_place(tmp_path, monkeypatch):
    (tmp_path / "r.parquet").write_bytes(b"old")
    w = RunLogWriter(tmp_path / "r.parquet", flush_rows=100)
    _fill(w, 100)
    _enospc_after(monkeypatch, 0, once=False)
    w.flush()
    w.close()
    assert w.error is not None and (tmp_path / "r.parquet").read_bytes() == b"old"
    assert not list(tmp_path.glob(".*"))


def test_atomic_writes_replace_a_symlink_never_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "curve.json").symlink_to(victim)
    write_text(tmp_path / "curve.json", "new")
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "curve.json").is_symlink()
    assert (tmp_path / "curve.json").read_text() == "new"


def test_an_atomic_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    (tmp_path / "curve.json").write_text("old")

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("shrink.atomic.os.fsync", fsync)
    curve = LoadCurve(levels=[])
    with pytest.raises(WriteError, match="no space left"):
        curve.write_json(tmp_path / "curve.json")
    assert (tmp_path / "curve.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["curve.json"]


@contextmanager
def _tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted in ``tmp_path`` for the test (skips without root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        # lazily if something (a process forked meanwhile) still holds a file there
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.root
def test_a_real_full_tmpfs(tmp_path):
    with _tmpfs(tmp_path, "12m") as mnt:
        w = RunLogWriter(mnt / "r.parquet", flush_rows=20_000)
        w.targets.code("127.0.0.1:80")
        rng = np.random.default_rng(0)
        i = 0
        while w.error is None and i < 2_000_000:  # random values do not compress
            for _ in range(20_000):
                x = float(rng.random())
                w.add(RunLogRow(x, x, x, x, 200, i, 0, i, 0, 0, x))
                i += 1
            w.flush()
        w.close()
        assert w.error is not None and w.rows > 0
        assert len(RunLog.read_parquet(mnt / "r.parquet")) == w.rows
        assert sorted(p.name for p in mnt.iterdir()) == ["r.parquet"]


@pytest.mark.root
def test_a_tmpfs_with_just_the_reserves_room_keeps_the_whole_run(tmp_path):
    # 8200 KiB: the 8 MiB reserve and 8 KiB more. Before, 200 of 1,000 rows were kept
    # and the writer said "no space left" with 8 MiB free.
    with _tmpfs(tmp_path, "8200k") as mnt:
        w = RunLogWriter(mnt / "r.parquet", flush_rows=100)
        for start in range(0, 1000, 100):
            _fill(w, 100, start)
            w.flush()
        w.close()
        assert w.error is None and w.rows == 1000 and w.dropped == 0
        assert len(RunLog.read_parquet(mnt / "r.parquet")) == 1000
        assert sorted(p.name for p in mnt.iterdir()) == ["r.parquet"]


# Under a lowered RLIMIT_FSIZE (Python ignores SIGXFSZ, so a write past it is EFBIG),
# 4,000 rows in row groups of 500 (random values: they do not compress).
_FSIZE_CODE = """
import json, resource, sys
import numpy as np
from shrink.replay.writer import RunLogRow, RunLogWriter
from shrink.runlog import RunLog
resource.setrlimit(resource.RLIMIT_FSIZE, (30 << 10, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
path = sys.argv[1]
w = RunLogWriter(path, flush_rows=500)
w.targets.code("127.0.0.1:80")
rng = np.random.default_rng(0)
for i in range(4000):
    x = float(rng.random())
    w.add(RunLogRow(x, x, x, x, 200, i, 0, i, 0, 0, x))
    w.maybe_flush()
w.close()
try:
    on_disk = len(RunLog.read_parquet(path))
except Exception as exc:
    on_disk = type(exc).__name__
print(json.dumps([w.rows, w.dropped, str(w.error), on_disk]))
"""


def test_a_run_log_under_ulimit_f_keeps_the_rows_that_fit(tmp_path):
    # Before, the row group that crossed the limit cut the file where no footer fitted:
    # the writer removed it, and a `replay -o` under `ulimit -f 30` kept no row at all.
    path = tmp_path / "r.parquet"
    done = subprocess.run(
        [sys.executable, "-c", _FSIZE_CODE, str(path)], capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows, dropped, error, on_disk = json.loads(done.stdout)
    assert rows > 0 and rows + dropped == 4000 and on_disk == rows
    assert "past the file-size limit of 30720 bytes, ulimit -f, EFBIG" in error
    assert path.stat().st_size <= 30 << 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_a_run_log_cut_by_ulimit_f_is_said_to_hold_only_its_first_rows(tmp_path):
    # `replay -o r.parquet` under `ulimit -f 9` said only "r.parquet: cannot write (past
    # the file-size limit ..., EFBIG)", and r.parquet was there, readable, with the first
    # 19 requests of 40 and nothing in it or in the line to tell it from a whole run (a
    # sweep's "kept ... the run logs in rl" named the cut one among the whole ones).
    path = tmp_path / "r.parquet"
    done = subprocess.run(
        [sys.executable, "-c", _FSIZE_CODE, str(path)], capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows, dropped, error, on_disk = json.loads(done.stdout)
    assert 0 < rows == on_disk and dropped > 0
    assert error.startswith(f"{path}: cannot write (past the file-size limit"), error
    assert error.endswith(
        f"; it holds only the run's first {rows:,} row(s), written before that: a run cut "
        "short, not the whole run"
    ), error


def _a_run_log_failing_at(
    path: Path, fail_at: int, monkeypatch, in_group: int = 1, rows: int = 1000
) -> tuple[RunLogWriter, int]:
    """A run log of ``rows`` rows (row groups of 500) whose ``fail_at``-th write in its
    ``in_group``-th row group fails (EIO; never when 0): the writer, and the writes that
    group made."""
    real_write, real_group = os.write, writer_mod.RunLogWriter._write
    inside: list[int] = []

    def group(self, table):
        inside.append(0)
        return real_group(self, table)

    def write(fd, data):
        if len(inside) == in_group:
            inside[-1] += 1
            if inside[-1] == fail_at:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_write(fd, data)

    monkeypatch.setattr(writer_mod.RunLogWriter, "_write", group)
    monkeypatch.setattr(os, "write", write)
    w = RunLogWriter(path, flush_rows=500)
    w.targets.code("127.0.0.1:80")
    rng = np.random.default_rng(0)
    for i in range(rows):
        x = float(rng.random())
        w.add(RunLogRow(x, x, x, x, 200, i, 0, i, 0, 0, x))
        w.maybe_flush()
    w.close()
    monkeypatch.undo()
    return w, inside[in_group - 1]


def test_a_run_log_whose_write_failed_inside_a_row_group_is_not_put_in_place(tmp_path, monkeypatch):
    # An EIO at the last write of a row group (its last column): the Parquet writer's
    # footer named that group's 500 rows all the same; the file was put in place, said to
    # "hold only the run's first 0 row(s)", and reading it failed ("Column 10 named
    # dispatched expected length 500 but got length 0").
    _, writes = _a_run_log_failing_at(tmp_path / "whole.parquet", 0, monkeypatch)
    path = tmp_path / "r.parquet"
    w, _ = _a_run_log_failing_at(path, writes, monkeypatch)
    assert w.rows == 0 and w.error is not None
    assert not path.exists(), str(w.error)
    assert "first 0 row(s)" not in str(w.error)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["whole.parquet"]


@pytest.mark.parametrize("at", ["first", "middle", "last"])
def test_a_write_error_in_a_later_row_group_keeps_the_whole_groups_before_it(
    tmp_path, monkeypatch, at
):
    # A write error (EIO) inside a 1,500-row log's second row group: the file was removed,
    # "cannot write (Input/output error, EIO)", though its first 500 rows had been written
    # whole (after an error inside a row group the Parquet writer writes no footer, or one
    # naming the broken group). Now those rows are kept, and said so.
    _, writes = _a_run_log_failing_at(tmp_path / "whole.parquet", 0, monkeypatch, 2, 1500)
    fail_at = {"first": 1, "middle": writes // 2, "last": writes}[at]
    path = tmp_path / "r.parquet"
    w, _ = _a_run_log_failing_at(path, fail_at, monkeypatch, 2, 1500)
    assert w.rows == 500 and w.dropped == 1000 and w.error is not None
    assert path.exists(), str(w.error)
    assert str(w.error) == (
        f"{path}: cannot write (Input/output error, EIO); it holds only the run's first 500 "
        "row(s), written before that: a run cut short, not the whole run"
    )
    log = RunLog.read_parquet(path)
    whole = RunLog.read_parquet(tmp_path / "whole.parquet")
    assert log.table.equals(whole.table.slice(0, 500))
    assert log.meta == whole.meta
    assert w.runlog().table.equals(log.table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet", "whole.parquet"]


@pytest.mark.parametrize("short", [False, True])
@pytest.mark.parametrize("from_write", [1, 2, 3])
def test_a_write_error_in_the_footer_keeps_every_row_group(
    tmp_path, monkeypatch, from_write, short
):
    # Every write from the footer's ``from_write``-th on fails (EIO): the file was removed
    # with its 1,500 rows written whole. Now the footer, finished in memory, is put after
    # them (its first writes, where a later one failed, read back from the file). With
    # ``short``, the write before the failing one wrote only half its bytes (as a write
    # to a disk filling up does): those were neither read back nor kept, the footer put
    # in place was short of them, and the file was removed all the same.
    real_write = os.write
    closing = [False, 0]

    def write(fd, data):
        if closing[0]:
            closing[1] += 1
            if closing[1] >= from_write:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            if short and closing[1] == from_write - 1:
                view = memoryview(data).cast("B")
                return real_write(fd, view[: max(1, len(view) // 2)])
        return real_write(fd, data)

    path = tmp_path / "r.parquet"
    w = RunLogWriter(path, flush_rows=500)
    w.targets.code("127.0.0.1:80")
    for i in range(1500):
        x = float(i)
        w.add(RunLogRow(x, x, x, x, 200, i, 0, i, 0, 0, x))
        w.maybe_flush()
    w.flush()
    monkeypatch.setattr(os, "write", write)
    closing[0] = True
    w.close()
    monkeypatch.undo()
    assert w.rows == 1500 and w.dropped == 0 and w.error is not None
    assert path.exists(), str(w.error)
    assert RunLog.read_parquet(path).table.column("bytes").to_pylist() == list(range(1500))
    # (every row is there: "a run cut short, not the whole run" was untrue)
    assert str(w.error) == (
        f"{path}: cannot write (Input/output error, EIO); it holds all the run's 1,500 "
        "row(s) all the same"
    )
