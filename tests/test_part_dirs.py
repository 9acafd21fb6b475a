"""A cluster actor's part folders: the ones lost actors left are removed, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shrink.replay.part_dirs import (
    ACTOR,
    SPAWNED,
    make_part_dir,
    remove_lost_part_dirs,
    remove_part_dir,
)

PREFIX = ACTOR

pytestmark = pytest.mark.compute


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _part_folder(base, pid, files=(".part.parquet.0e06122ddbc8.tmp",)):
    folder = base / f"{PREFIX}{pid}-abc123"
    folder.mkdir()
    for name in files:
        (folder / name).write_bytes(b"x")
    return folder


def test_a_lost_actors_folder_goes_and_a_live_ones_stays(tmp_path):
    dead = _dead_pid()
    lost = _part_folder(tmp_path, dead, (".part.parquet.6f924793af50.reserve", "part.parquet"))
    live = _part_folder(tmp_path, os.getppid())
    mine = make_part_dir(tmp_path, ACTOR)
    assert mine.name.startswith(f"{PREFIX}{os.getpid()}-")
    assert mine.stat().st_mode & 0o777 == 0o700
    assert remove_lost_part_dirs(tmp_path, ACTOR) == [lost]
    assert not lost.exists() and live.exists() and mine.exists()


def test_what_an_actor_did_not_make_is_left(tmp_path):
    dead = _dead_pid()
    other = _part_folder(tmp_path, dead, ("notes.txt",))  # a file no writer makes
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"{PREFIX}{dead}-link").symlink_to(target)  # a symlink, not a folder
    (tmp_path / f"{PREFIX}{dead}-file").write_bytes(b"x")
    (tmp_path / "shrink-ray-oldname").mkdir()  # no PID in the name
    assert remove_lost_part_dirs(tmp_path, ACTOR) == []
    assert other.exists() and target.exists() and (tmp_path / "shrink-ray-oldname").exists()


def test_a_missing_base_is_no_error(tmp_path):
    assert remove_lost_part_dirs(tmp_path / "absent", ACTOR) == []


def test_a_killed_scaled_out_replays_folder_goes(tmp_path):
    dead = _dead_pid()
    empty = tmp_path / f"{SPAWNED}{dead}-x1"
    empty.mkdir()
    parts = tmp_path / f"{SPAWNED}{dead}-x2"
    parts.mkdir()
    (parts / "run.part1.0123456789ab.parquet").write_bytes(b"x")
    (parts / ".run.part0.0123456789ab.parquet.6f924793af50.reserve").write_bytes(b"x")
    actor = _part_folder(tmp_path, dead)  # another kind's: left to its own kind
    assert sorted(remove_lost_part_dirs(tmp_path, SPAWNED)) == [empty, parts]
    assert actor.exists()


def test_a_folder_a_live_process_locks_stays_whatever_its_pid(tmp_path):
    # A replay in another PID namespace (a container sharing /tmp, unshare --pid): the
    # PID in its folder's name is none here, yet the run is live and holds the lock
    dead = _dead_pid()
    live = tmp_path / f"{SPAWNED}{dead}-x1"
    live.mkdir()
    (live / "run.part0.0123456789ab.parquet").write_bytes(b"rows")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY);"
            " fcntl.flock(fd, fcntl.LOCK_EX); print(flush=True); sys.stdin.read()",
            str(live),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        holder.stdout.readline()  # locked
        assert remove_lost_part_dirs(tmp_path, SPAWNED) == []
        assert (live / "run.part0.0123456789ab.parquet").read_bytes() == b"rows"
    finally:
        holder.stdin.close()
        holder.wait()
    assert remove_lost_part_dirs(tmp_path, SPAWNED) == [live]  # its holder gone


def test_a_made_folder_is_locked_from_the_start_and_let_go_when_removed(tmp_path):
    import fcntl

    mine = make_part_dir(tmp_path, SPAWNED)
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]  # no hidden one left
    fd = os.open(mine, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    remove_part_dir(mine)
    assert not mine.exists()


def _planting(monkeypatch, times):
    """mkdtemp, as another user of a shared /tmp sees each hidden name and makes its
    visible one first (an empty folder: a folder renamed onto it replaced it)."""
    import tempfile

    from shrink.replay import part_dirs

    made = tempfile.mkdtemp
    planted = []

    def mkdtemp(*args, **kwargs):
        hidden = made(*args, **kwargs)
        if len(planted) < times:
            visible = os.path.join(os.path.dirname(hidden), os.path.basename(hidden)[1:])
            os.mkdir(visible)
            planted.append(visible)
        return hidden

    monkeypatch.setattr(part_dirs.tempfile, "mkdtemp", mkdtemp)
    # and no look before the rename sees it (put there just after the look)
    monkeypatch.setattr(part_dirs.os.path, "lexists", lambda path: False)
    return planted


def test_a_planted_name_is_left_to_its_maker_and_another_taken(tmp_path, monkeypatch):
    planted = _planting(monkeypatch, 1)
    mine = make_part_dir(tmp_path, SPAWNED)
    # before: the sweep stopped saying only "error: /tmp/shrink-replay-..." (or, had the
    # name come after the look, root's rename replaced the other user's folder)
    assert str(mine) not in planted and os.path.isdir(planted[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [mine.name, os.path.basename(planted[0])]
    )
    remove_part_dir(mine)


def test_every_name_planted_is_an_error_naming_the_folder(tmp_path, monkeypatch):
    planted = _planting(monkeypatch, 100)
    with pytest.raises(FileExistsError) as err:
        make_part_dir(tmp_path, SPAWNED)
    assert err.value.filename == planted[-1] and "TMPDIR" in err.value.strerror
    assert all(os.path.isdir(p) for p in planted)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        os.path.basename(p) for p in planted
    )


_KILLED_BEFORE_THE_RENAME = """
import os, sys
from pathlib import Path
from shrink.replay import part_dirs
part_dirs._rename_noreplace = lambda src, dst: os.kill(os.getpid(), 9)
part_dirs.make_part_dir(Path(sys.argv[1]), part_dirs.SPAWNED)
"""


def test_the_hidden_folder_of_a_maker_killed_before_its_rename_goes(tmp_path):
    """A process killed between ``mkdtemp`` and the rename left its empty hidden
    ``.shrink-replay-PID-...`` folder for good: the clean-up matched visible names only."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_BEFORE_THE_RENAME, str(tmp_path)], env=env
    )
    assert proc.wait() == -9
    (hidden,) = tmp_path.iterdir()
    assert hidden.name.startswith(f".{SPAWNED}{proc.pid}-")
    assert remove_lost_part_dirs(tmp_path, SPAWNED) == [hidden]
    assert list(tmp_path.iterdir()) == []


def test_a_hidden_folder_not_empty_nor_ours_nor_a_folder_stays(tmp_path):
    dead = _dead_pid()
    full = tmp_path / f".{SPAWNED}{dead}-a1"
    full.mkdir()
    (full / "run.part0.0123456789ab.parquet").write_bytes(b"rows")  # a maker leaves none
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f".{SPAWNED}{dead}-a2").symlink_to(target)
    live = tmp_path / f".{SPAWNED}{os.getppid()}-a4"  # its maker lives
    live.mkdir()
    others = tmp_path / f".{SPAWNED}{dead}-a3"
    if os.geteuid() == 0:  # another user's, empty
        others.mkdir()
        os.chown(others, 65534, 65534)
    assert remove_lost_part_dirs(tmp_path, SPAWNED) == []
    assert (full / "run.part0.0123456789ab.parquet").read_bytes() == b"rows"
    assert target.exists() and live.exists() and (os.geteuid() != 0 or others.exists())


@pytest.mark.parametrize("when", ["before its open", "after its open"])
def test_a_hidden_folder_removed_before_it_was_locked_is_made_again(tmp_path, monkeypatch, when):
    """Since the clean-up removes empty hidden folders of a dead maker, a maker in another
    PID namespace (its PID no live one's here) can lose its hidden folder between
    ``mkdtemp`` and its lock: the replay stopped with FileNotFoundError (at the open) or
    an OSError (ENOENT, at the rename). It now takes another name, as for one planted."""
    import tempfile

    from shrink.replay import part_dirs

    real_mkdtemp, real_open, made = tempfile.mkdtemp, os.open, []

    def mkdtemp(**kw):
        made.append(real_mkdtemp(**kw))
        if len(made) == 1 and when == "before its open":
            os.rmdir(made[0])  # another namespace's remove_lost_part_dirs
        return made[-1]

    def opener(path, flags, *a):
        fd = real_open(path, flags, *a)
        if len(made) == 1 and when == "after its open" and str(path) == made[0]:
            os.rmdir(path)
        return fd

    monkeypatch.setattr(part_dirs.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(part_dirs.os, "open", opener)
    mine = make_part_dir(tmp_path, SPAWNED)
    monkeypatch.undo()
    assert len(made) == 2 and mine.name == os.path.basename(made[1])[1:]
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]
    remove_part_dir(mine)
