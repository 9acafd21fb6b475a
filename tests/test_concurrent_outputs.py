"""Two runs naming one output: a second ``sweep -o c.json`` started while the first
ran wrote c.json, then the first replaced it at its end; each said "curve: c.json",
and the second's levels were gone. A ``replay -o`` into a folder a sweep holds for
its RunLogs replaced a RunLog the sweep had kept. Now the later writer keeps its own
file beside the other's and says so, and the folder held by a run is refused."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shrink import atomic, folder_locks
from shrink.atomic import expect_unchanged, recording, write_text
from shrink.errors import OutputBusyError, WriteError
from shrink.folder_locks import claimed

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _written_by_another_run(path: Path, text: str) -> None:
    other = path.with_name(".other")
    other.write_text(text)
    os.replace(other, path)


@pytest.mark.parametrize("there_before", [False, True], ids=["new", "existing"])
def test_an_output_another_run_wrote_meanwhile_is_not_replaced(tmp_path, there_before):
    out = tmp_path / "c.json"
    if there_before:
        out.write_text("an older curve")  # what the user names to be replaced
    expect_unchanged(out)
    _written_by_another_run(out, "the other run's curve")
    with recording() as kept, pytest.raises(WriteError) as err:
        write_text(out, "this run's curve")
    assert out.read_text() == "the other run's curve"
    assert (tmp_path / "c.1.json").read_text() == "this run's curve"
    assert kept == [tmp_path / "c.1.json"]
    assert "another run wrote it while this one ran" in str(err.value)
    assert str(tmp_path / "c.1.json") in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.1.json", "c.json"]


def test_an_output_named_is_replaced_and_rewritten_by_its_own_run(tmp_path):
    out = tmp_path / "c.json"
    out.write_text("an older curve")
    expect_unchanged(out)
    write_text(out, "partial")  # a run that writes its output more than once
    write_text(out, "whole")
    assert out.read_text() == "whole" and sorted(os.listdir(tmp_path)) == ["c.json"]


def _holder(folder: Path) -> subprocess.Popen[str]:
    """Another process holding ``folder`` (as a sweep holds its --runlogs) until its stdin
    ends; it prints "held" once it does."""
    return subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom shrink.folder_locks import claimed\n"
         f"with claimed({str(folder)!r}):\n    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_an_output_in_a_folder_another_run_holds_is_refused(tmp_path):
    """The folder is held by another process (as a sweep holds its --runlogs)."""
    rl = tmp_path / "rl"
    rl.mkdir()
    (rl / "run000-rf1.parquet").write_text("the sweep's RunLog")
    holder = _holder(rl)
    try:
        assert holder.stdout.readline().strip() == "held"
        done = subprocess.run(
            [sys.executable, "-m", "shrink", "replay", "--rate", "10", "--target",
             "http://127.0.0.1:9/", "--duration", "1s", "-o", str(rl / "run000-rf1.parquet")],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )  # fmt: skip
    finally:
        holder.communicate("", timeout=30)
    assert done.returncode == 1, done.stderr  # (as a prediction folder held: OutputBusyError)
    assert "another shrink run is writing this folder" in done.stderr
    assert (rl / "run000-rf1.parquet").read_text() == "the sweep's RunLog"


def test_an_output_in_a_folder_this_run_holds_is_written(tmp_path):
    with claimed(tmp_path / "rl") as rl:
        folder_locks.refuse_held_folder(rl / "x.json")
        write_text(rl / "x.json", "ours")
    assert (tmp_path / "rl" / "x.json").read_text() == "ours"


def test_an_output_rewritten_through_a_symlinked_folder_is_replaced(tmp_path):
    """``-o link/c.json`` with ``link`` the user's own symlink to a folder, c.json there
    from an earlier run: the folder was opened with O_NOFOLLOW when the output was noted,
    read as empty, and the rewrite was kept as c.1.json, "another run wrote it", exit 1."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "real" / "c.json").write_text("an earlier run's curve")
    out = tmp_path / "link" / "c.json"
    expect_unchanged(out)
    write_text(out, "this run's curve")
    assert (tmp_path / "real" / "c.json").read_text() == "this run's curve"
    assert sorted(os.listdir(tmp_path / "real")) == ["c.json"]


def test_an_output_another_run_wrote_in_a_symlinked_folder_is_not_replaced(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    out = tmp_path / "link" / "c.json"
    out.write_text("an older curve")
    expect_unchanged(out)
    _written_by_another_run(tmp_path / "real" / "c.json", "the other run's curve")
    with pytest.raises(WriteError):
        write_text(out, "this run's curve")
    assert (tmp_path / "real" / "c.json").read_text() == "the other run's curve"
    assert (tmp_path / "real" / "c.1.json").read_text() == "this run's curve"


def test_an_output_the_user_removed_meanwhile_is_written_in_its_place(tmp_path):
    """No one's file is there to lose: it was kept as c.1.json with "another run wrote it"."""
    out = tmp_path / "c.json"
    out.write_text("an older curve")
    expect_unchanged(out)
    out.unlink()
    write_text(out, "this run's curve")
    assert out.read_text() == "this run's curve" and os.listdir(tmp_path) == ["c.json"]


def test_a_folder_held_by_another_run_is_refused_through_a_symlink_to_it(tmp_path):
    rl = tmp_path / "rl"
    rl.mkdir()
    (tmp_path / "link").symlink_to("rl")
    holder = _holder(rl)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusyError):
            folder_locks.refuse_held_folder(tmp_path / "link" / "x.parquet")
    finally:
        holder.communicate("", timeout=30)


def _another_run_wrote(out: Path) -> None:
    expect_unchanged(out)
    _written_by_another_run(out, "the other run's curve")


def test_this_runs_file_is_kept_beside_an_output_of_the_longest_legal_name(tmp_path):
    """A 255-byte name: its STEM.1.SUFFIX was too long (ENAMETOOLONG) and this run's
    file was removed, the measurement lost."""
    out = tmp_path / ("é" * 122 + "abcdef.json")  # 255 bytes
    assert len(os.fsencode(out.name)) == 255
    _another_run_wrote(out)
    with recording() as kept, pytest.raises(WriteError):
        write_text(out, "this run's curve")
    assert len(kept) == 1 and kept[0].read_text() == "this run's curve"
    assert kept[0].name.endswith(".1.json") and len(os.fsencode(kept[0].name)) <= 255
    assert out.read_text() == "the other run's curve"


def test_this_runs_file_is_kept_where_the_file_system_makes_no_hard_links(tmp_path, monkeypatch):
    """FAT and some FUSE file systems refuse link(2) (EPERM): this run's file was removed."""

    def no_link(*args, **kw):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    out = tmp_path / "c.json"
    (tmp_path / "c.1.json").write_text("a file already there")
    _another_run_wrote(out)
    monkeypatch.setattr(os, "link", no_link)
    with recording() as kept, pytest.raises(WriteError):
        write_text(out, "this run's curve")
    assert kept == [tmp_path / "c.2.json"]
    assert (tmp_path / "c.2.json").read_text() == "this run's curve"
    assert (tmp_path / "c.1.json").read_text() == "a file already there"
    assert sorted(os.listdir(tmp_path)) == ["c.1.json", "c.2.json", "c.json"]


def test_a_name_cut_to_fit_255_bytes_is_never_cut_inside_a_character(tmp_path):
    """A 254-byte name whose cut fell inside an "é": STEM.1.SUFFIX (and the temporary
    file's name) ended in half a character, a name that is not UTF-8 ("?" in ls; a file
    system keeping names UTF-8 refuses it, and this run's file was then lost)."""
    out = tmp_path / ("a" + "é" * 124 + ".json")  # 254 bytes: 248 of it cut mid-"é"
    _another_run_wrote(out)
    with recording() as kept, pytest.raises(WriteError):
        write_text(out, "this run's curve")
    name = os.fsencode(kept[0].name)
    assert name.decode("utf-8").endswith("é.1.json") and len(name) <= 255
    fd, tmp = atomic.open_exclusive(tmp_path / ("é" * 125 + ".json"))  # 255: 237 kept
    os.close(fd)
    assert tmp.name.encode("utf-8") and len(os.fsencode(tmp.name)) <= 255


def test_an_output_named_through_a_symlink_and_dotdot_is_replaced_where_it_is(tmp_path):
    """``-o link/../c.json``, ``link`` the user's own symlink to elsewhere/sub: the
    kernel writes elsewhere/c.json, but the output was noted by abspath as c.json beside
    ``link`` (nothing there), and the rewrite was kept as c.1.json, exit 1."""
    (tmp_path / "elsewhere" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere" / "sub")
    (tmp_path / "elsewhere" / "c.json").write_text("an earlier run's curve")
    out = tmp_path / "link" / ".." / "c.json"
    expect_unchanged(out)
    write_text(out, "this run's curve")
    assert (tmp_path / "elsewhere" / "c.json").read_text() == "this run's curve"
    assert sorted(os.listdir(tmp_path / "elsewhere")) == ["c.json", "sub"]


def test_a_held_folder_named_through_a_symlink_and_dotdot_is_refused(tmp_path):
    rl = tmp_path / "rl"
    (rl / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(rl / "sub")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom shrink.folder_locks import claimed\n"
         f"with claimed({str(rl)!r}):\n    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusyError):
            folder_locks.refuse_held_folder(tmp_path / "link" / ".." / "x.parquet")
    finally:
        holder.communicate("", timeout=30)


def test_a_runlog_another_replay_wrote_meanwhile_is_not_replaced(tmp_path):
    from shrink.replay.writer import RunLogWriter
    from shrink.runlog import RunLog

    # two ``replay -o r.parquet`` at once: both said "-> r.parquet", exit 0, and the
    # file held the rows of the one that ended last (the RunLog writer never looked)
    out = tmp_path / "r.parquet"
    expect_unchanged(out)
    writer = RunLogWriter(out, {})
    _written_by_another_run(out, "the other replay's RunLog")
    with recording() as kept:
        writer.close()
    assert out.read_text() == "the other replay's RunLog"
    aside = tmp_path / "r.1.parquet"
    assert kept == [aside] and writer.path == aside
    assert isinstance(writer.error, WriteError) and str(aside) in str(writer.error)
    assert "another run wrote it while this one ran" in str(writer.error)
    assert isinstance(writer.runlog(), RunLog)  # read back from its own file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.1.parquet", "r.parquet"]
    # a replay's own rewrite (none other meanwhile) is not put aside
    again = tmp_path / "again.parquet"
    again.write_text("an older RunLog")
    expect_unchanged(again)
    second = RunLogWriter(again, {})
    second.close()
    assert second.error is None and second.path == again
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "again.parquet",
        "r.1.parquet",
        "r.parquet",
    ]
