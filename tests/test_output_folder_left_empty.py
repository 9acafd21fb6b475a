"""An output folder (``-o`` of predict, validate) is made at the option check, to hold
it: a ``kill -9`` between the check and the first write left it empty, and the next run
into it took it as the user's own folder, leaving it there again when it too wrote
nothing. The run that makes it now marks it (``.shrink-made``, its PID and start time)
until it ends; the next run takes an empty leftover as its own, without a word."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import shrink
from shrink.folder_locks import MADE_MARK, hold_output, release_outputs

_ROOT = str(Path(shrink.__file__).resolve().parents[1])

# A run killed (-9) after its option check held (and made) argv[1], before any write.
_KILLED = (
    "import os, signal, sys\nfrom shrink.folder_locks import hold_output\n"
    "hold_output(sys.argv[1], 'dir')\nos.kill(os.getpid(), signal.SIGKILL)\n"
)


def _killed_run(folder: Path) -> None:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    r = subprocess.run([sys.executable, "-c", _KILLED, str(folder)], env=env, timeout=60)
    assert r.returncode == -9


@pytest.mark.compute
def test_the_empty_folder_a_killed_run_left_is_taken_by_the_next(tmp_path):
    out = tmp_path / "pred"
    _killed_run(out)
    assert os.listdir(out) == [MADE_MARK]  # (left: its maker's mark alone)
    hold_output(out, "dir")  # the next run: refused after its check, writes nothing
    release_outputs()
    assert not out.exists()


@pytest.mark.compute
def test_a_run_that_wrote_leaves_its_folder_unmarked(tmp_path):
    out = tmp_path / "pred"
    hold_output(out, "dir")
    assert os.listdir(out) == [MADE_MARK]
    (out / "prediction.json").write_text("{}\n")
    release_outputs()
    assert os.listdir(out) == ["prediction.json"]


@pytest.mark.compute
def test_the_users_own_empty_folder_is_kept_and_a_stale_mark_beside_files_dropped(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    hold_output(mine, "dir")
    assert os.listdir(mine) == []  # (not this run's: no mark)
    release_outputs()
    assert mine.is_dir()
    kept = tmp_path / "kept"
    _killed_run(kept)
    (kept / "prediction.json").write_text("{}\n")  # (a killed run that had written)
    hold_output(kept, "dir")
    release_outputs()
    assert os.listdir(kept) == ["prediction.json"]


# A run holding argv[1] (an existing folder), then letting it go.
_HOLDS = (
    "import sys\nfrom shrink.folder_locks import hold_output, release_outputs\n"
    "hold_output(sys.argv[1], 'dir')\nrelease_outputs()\n"
)


@pytest.mark.compute
def test_a_fifo_by_the_marks_name_does_not_hold_the_run(tmp_path):
    # A FIFO named .shrink-made in the output folder (a user's own, or planted in a folder
    # others may write): opened to be read, the option check waited on it for good.
    out = tmp_path / "pred"
    out.mkdir()
    os.mkfifo(out / MADE_MARK)
    env = {**os.environ, "PYTHONPATH": _ROOT}
    r = subprocess.run([sys.executable, "-c", _HOLDS, str(out)], env=env, timeout=30)
    assert r.returncode == 0
    assert os.listdir(out) == [MADE_MARK]  # (not a mark: left as it is)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_node_by_the_marks_name_is_not_opened(tmp_path, monkeypatch):
    # A device node named .shrink-made (mknod) was opened to be read, only then told from
    # a mark: a device's open acts (a terminal's, without O_NOCTTY, became the controlling
    # terminal of a run in a session of its own, whose hangup then stopped it; a tape
    # rewinds, a watchdog arms). Nothing but a regular file is opened. (/dev/null's node
    # here, opened harmlessly: the test sees the open itself.)
    out = tmp_path / "pred"
    out.mkdir()
    try:
        os.mknod(out / MADE_MARK, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("no device nodes here (a namespace without CAP_MKNOD)")
    opened = _record_opens(monkeypatch)
    try:
        hold_output(out, "dir")
    finally:
        release_outputs()
        monkeypatch.undo()
    assert MADE_MARK not in opened
    assert os.listdir(out) == [MADE_MARK]  # (not a mark: left as it is)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_the_marks_write_opens_nothing_a_race_put_there(tmp_path, monkeypatch, kind):
    """The mark's write in a folder this run made a moment before opened whatever was by
    its name then (O_CREAT|O_TRUNC): a FIFO or a device node put there by a race was
    opened (a device's open acts), and the mark not written. It is written to a new
    file of a fresh name (O_EXCL) and renamed into place."""
    from shrink.folder_locks import _mark_made

    out = tmp_path / "pred"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / MADE_MARK)
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        try:
            os.mknod(out / MADE_MARK, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("no device nodes here (a namespace without CAP_MKNOD)")
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    opened = _record_opens(monkeypatch)
    try:
        assert _mark_made(fd, True)
    finally:
        monkeypatch.undo()
        os.close(fd)
    assert MADE_MARK not in opened
    assert os.listdir(out) == [MADE_MARK]  # (no temporary left)
    assert stat.S_ISREG(os.lstat(out / MADE_MARK).st_mode)
    assert (out / MADE_MARK).read_text().split()[0] == str(os.getpid())


def _record_opens(monkeypatch) -> list[str]:
    """From now on, the paths ``os.open`` is given (the list, filled as they come)."""
    opened: list[str] = []
    real_open = os.open

    def recording_open(path, flags, *args, **kw):
        opened.append(os.fspath(path))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", recording_open)
    return opened
