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
