"""The demo's pre-flight check: busy CPUs and a host that steals are named before the runs."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import shrink.procfs as procfs
from shrink import demo
from shrink.demo_work import WORK_BASE, work_dir


def _scripted(monkeypatch, busy: dict[int, tuple[int, int]], steal: dict[int, tuple[int, int]]):
    """/proc/stat as two snapshots: all zero, then ``busy``/``steal`` (jiffies, total)."""
    snaps = {"cpu": [{c: (0, 0) for c in busy}, busy], "steal": [{c: (0, 0) for c in steal}, steal]}
    monkeypatch.setattr(procfs, "cpu_times", lambda: snaps["cpu"].pop(0))
    monkeypatch.setattr(procfs, "steal_times", lambda: snaps["steal"].pop(0))
    monkeypatch.setattr(demo.time, "sleep", lambda s: None)


@contextlib.contextmanager
def _lock_held_by_another_process(
    path: Path, flags: str, kind: str, uid: int | None = None
) -> Iterator[None]:
    """``path`` opened with ``flags`` (Python source) and flock'ed (SH or EX) by another
    process for the block's length (``uid``: as that user, once the file is open)."""
    import subprocess
    import sys

    become = "" if uid is None else f" os.setuid({uid});"
    code = (
        f"import fcntl, os, sys; fd = os.open(sys.argv[1], {flags}, 0o600);{become}"
        f" fcntl.flock(fd, fcntl.LOCK_{kind}); print(flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        holder.stdout.readline()  # held
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()


def test_a_quiet_machine_gets_no_warning(monkeypatch):
    _scripted(monkeypatch, {0: (2, 100), 1: (1, 100)}, {0: (0, 100), 1: (1, 100)})
    console = Console(record=True, width=200)
    got = demo._check_quiet(console)
    assert got["steal"] == {0: 0.0, 1: 0.01}
    assert console.export_text() == ""


def test_steal_is_named_apart_from_other_work(monkeypatch):
    # CPU 0: 35% busy, 30% of it stolen by the host; CPU 1: 25% busy, none stolen.
    _scripted(monkeypatch, {0: (35, 100), 1: (25, 100)}, {0: (30, 100), 1: (0, 100)})
    console = Console(record=True, width=300)
    got = demo._check_quiet(console)
    assert got["busy"] == {0: 0.35, 1: 0.25}
    text = console.export_text()
    assert "CPUs already busy before the demo starts: CPU 1 25%." in text
    assert "taking CPU time (steal): CPU 0 30%" in text


def test_ctrl_c_during_the_demo_is_one_line_naming_what_was_kept(monkeypatch, tmp_path, capsys):
    """An interrupted sweep carries the files it kept: the demo names them, no traceback."""
    from shrink.loadcurve import LoadCurve
    from shrink.measure import SweepInterrupted

    def stopped(out, **kw):
        exc = SweepInterrupted(LoadCurve([], knob="rate_factor"))
        exc.kept.append(str(out / "measured-curve.partial.json"))
        raise exc

    monkeypatch.setattr(demo, "run_demo", stopped)
    assert demo.main(["--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"interrupted: kept {tmp_path / 'measured-curve.partial.json'}"]

    def plain(out, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_demo", plain)
    (tmp_path / "runs").mkdir()  # what the runs so far wrote
    assert demo.main(["--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip() == f"interrupted: the runs so far are in {tmp_path}"


def test_the_demo_puts_its_docroot_where_the_unprivileged_servers_can_read_it(tmp_path):
    """A checkout under a private home (0700): the trace and document root go to a fresh
    folder the servers' user can enter, and out/work-location says where."""
    import shutil

    from shrink.errors import TestbedError
    from shrink.testbed.private import check_reachable, server_user

    user = server_user()
    if user is None:
        pytest.skip("the servers drop root only when shrink runs as root")
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o700)
    out = home / "out"
    out.mkdir()
    with pytest.raises(TestbedError):
        check_reachable(out, user)
    work = work_dir(out, "testbed")
    try:
        assert not work.is_relative_to(home)
        assert (out / "work-location").read_text().strip() == str(work)
        assert (work / ".made-for").read_text().strip() == str(out.resolve())
        check_reachable(work, user)  # raises if the user cannot read it
        # A rerun to the same --out made a second folder, and so on, one per run.
        assert work_dir(out, "testbed") == work
        # ... but only a folder the demo made and no one else may write.
        work.chmod(0o777)
        other = work_dir(out, "testbed")
        assert other != work and (out / "work-location").read_text().strip() == str(other)
        shutil.rmtree(other)
        (out / "work-location").write_text("/etc\n")
        other = work_dir(out, "testbed")
        assert other.parent == Path(WORK_BASE) and other.name.startswith("shrink-demo-")
        shutil.rmtree(other)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_work_folders_of_removed_outs_are_removed(tmp_path, monkeypatch):
    """A work folder under /var/tmp outlived its --out (75 had piled up on one machine):
    making a new one removes those whose --out is gone or points elsewhere, and only
    those: not one being made, one another user may write, nor a symlink."""
    import shutil

    from shrink import demo_work

    base = tmp_path / "vartmp"
    base.mkdir()
    monkeypatch.setattr(demo_work, "WORK_BASE", str(base))

    def made(out):
        out.mkdir()
        folder = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
        (out / "work-location").write_text(f"{folder}\n")
        (folder / ".made-for").write_text(f"{out}\n")
        return folder

    gone, moved, kept = made(tmp_path / "gone"), made(tmp_path / "moved"), made(tmp_path / "kept")
    shutil.rmtree(tmp_path / "gone")
    (tmp_path / "moved" / "work-location").write_text("/elsewhere\n")
    making = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))  # no .made-for yet
    shared = made(tmp_path / "shared")
    shutil.rmtree(tmp_path / "shared")
    shared.chmod(0o777)
    (base / "shrink-demo-link").symlink_to(gone.parent)
    assert sorted(demo_work.remove_orphans()) == sorted([gone, moved])
    assert kept.is_dir() and making.is_dir() and shared.is_dir() and (tmp_path / "vartmp").is_dir()


def test_a_live_demos_work_folder_is_never_removed(tmp_path, monkeypatch):
    """A live demo's --out need not point back at its work folder: two demos to one
    --out (the first one's work-location replaced), one others may write (its
    work-location removed), or one whose name ends in a space (read back stripped, it
    named another folder). Its servers read the pages there mid-run: a folder a live
    demo holds stays; the held one of a demo that ended goes."""
    import shutil

    from shrink import demo_work

    base = tmp_path / "vartmp"
    base.mkdir()
    monkeypatch.setattr(demo_work, "WORK_BASE", str(base))
    monkeypatch.setattr(demo_work, "_HELD", {}, raising=False)
    spaced = tmp_path / "out "
    spaced.mkdir()
    folder = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
    (spaced / "work-location").write_text(f"{folder}\n")
    (folder / ".made-for").write_text(f"{spaced.resolve()}\n")
    (tmp_path / "out").mkdir()  # the name stripped: another folder, none pointing back
    assert demo_work.remove_orphans() == []
    assert folder.is_dir()
    # another process's demo, live, whose --out no longer points back
    (spaced / "work-location").unlink()
    with _lock_held_by_another_process(folder / ".demo-lock", "os.O_RDONLY | os.O_CREAT", "SH"):
        assert demo_work.remove_orphans() == []
        assert folder.is_dir()
    assert demo_work.remove_orphans() == [folder]  # that demo has ended
    # this process's own, held by work_dir
    shutil.rmtree(spaced)
    spaced.mkdir()
    mine = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
    (mine / ".made-for").write_text(f"{spaced.resolve()}\n")
    demo_work._hold(mine)
    try:
        assert demo_work.remove_orphans() == []
    finally:
        os.close(demo_work._HELD.pop(mine))


def test_a_lock_another_user_may_take_keeps_no_work_folder(tmp_path, monkeypatch):
    """Another local user could open a work folder's 0644 ``.made-for`` and hold an
    exclusive lock on it for good: the clean-up took that for a live demo and never
    removed the folder. The demo's lock is now a 0600 file only its owner can open."""

    from shrink import demo_work

    base = tmp_path / "vartmp"
    base.mkdir()
    monkeypatch.setattr(demo_work, "WORK_BASE", str(base))
    monkeypatch.setattr(demo_work, "_HELD", {}, raising=False)
    folder = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
    (folder / ".made-for").write_text(f"{tmp_path / 'gone'}\n")  # its --out is gone
    (folder / ".made-for").chmod(0o644)
    # (as another user where this runs as root; else this user's: an older demo's lock)
    other = 65534 if os.geteuid() == 0 else None
    with _lock_held_by_another_process(folder / ".made-for", "os.O_RDONLY", "EX", other):
        assert demo_work.remove_orphans() == ([folder] if other else [])
    # a demo's own lock file: no one else may open it
    mine = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
    demo_work._hold(mine)
    try:
        st = (mine / ".demo-lock").lstat()
        assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600
    finally:
        os.close(demo_work._HELD.pop(mine))


def test_a_live_older_demos_work_folder_is_kept(tmp_path, monkeypatch):
    """A demo of an older shrink, live while a newer one cleans up, holds a shared lock
    on ``.made-for``, not ``.demo-lock``: its folder was removed under it when its
    --out did not point back. Held by a process of this user's, it is kept."""
    from shrink import demo_work

    base = tmp_path / "vartmp"
    base.mkdir()
    monkeypatch.setattr(demo_work, "WORK_BASE", str(base))
    monkeypatch.setattr(demo_work, "_HELD", {}, raising=False)
    folder = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
    (folder / ".made-for").write_text(f"{tmp_path / 'gone'}\n")  # its --out is gone
    with _lock_held_by_another_process(folder / ".made-for", "os.O_RDONLY", "SH"):
        assert demo_work.remove_orphans() == []
        assert folder.is_dir()
    assert demo_work.remove_orphans() == [folder]  # that demo has ended


def test_a_planted_work_location_is_not_followed_nor_read_without_end(tmp_path):
    """``--out`` may be a folder others can write: a work-location that is a symlink (to
    a folder of root's, or to /dev/zero) or a FIFO is not read; it hung the demo."""
    import threading

    from shrink import demo_work

    earlier = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=WORK_BASE))
    try:
        (tmp_path / "elsewhere").write_text(f"{earlier}\n")
        out = tmp_path / "out"
        out.mkdir()
        (out / "work-location").symlink_to(tmp_path / "elsewhere")
        assert demo_work._earlier_work(out) is None  # a symlink: not this demo's file
        (out / "work-location").unlink()
        (out / "work-location").write_text(f"{earlier}\n")
        assert demo_work._earlier_work(out) == earlier  # its own file is still read
    finally:
        earlier.rmdir()
    got: list[object] = []
    for plant in ("fifo", "zero"):
        (out / "work-location").unlink()
        if plant == "fifo":
            os.mkfifo(out / "work-location")
        else:
            (out / "work-location").symlink_to("/dev/zero")
        reader = threading.Thread(target=lambda: got.append(demo_work._earlier_work(out)))
        reader.daemon = True
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), plant
    assert got == [None, None]


def test_a_demo_stopped_before_it_made_its_folder_says_nothing_was_measured(
    monkeypatch, tmp_path, capsys
):
    """A read-only checkout: "error: demo-out: cannot write (Read-only file system, EROFS)
    (what was measured is in demo-out)", of a folder that was never made."""
    from shrink.errors import WriteError

    out = tmp_path / "demo-out"

    def refused(out, **kw):
        raise WriteError(out, OSError(30, "Read-only file system"))

    monkeypatch.setattr(demo, "run_demo", refused)
    assert demo.main(["--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {out}: cannot write") and "measured" not in err

    def plain(out, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_demo", plain)
    assert demo.main(["--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == "interrupted: nothing was measured"


@pytest.mark.compute
def test_the_demo_ends_in_words_naming_the_html_report(tmp_path):
    """The demo ended on its whole summary as JSON, whose last field named report.md,
    where the README points to report.html (a fresh Debian run, round 13b)."""
    from shrink.report.demo_summary import closing_lines

    summary = {
        "seconds": 292.0,
        "predicted": {"mean": 2508.4, "p999": None},
        "measured": {"mean": 1155.0, "p999": 1210.6},
        "generator_kept_up": True,
        "report": str(tmp_path / "report.html"),
        "report_md": str(tmp_path / "report.md"),
    }
    lines = closing_lines(summary, tmp_path)
    assert lines[0] == "mean MAT: predicted 2,508 req/s, measured 1,155 req/s"
    assert lines[1] == "p999 MAT: predicted none, measured 1,211 req/s"
    assert lines[2] == "took 4.9 min; the load generator kept up: yes"
    assert lines[3].startswith(f"report: {tmp_path / 'report.html'} (and ")
    assert str(tmp_path / "demo-summary.json") in lines[3]
    assert not any(line.lstrip().startswith(("{", '"')) for line in lines)


def test_the_demo_s_closing_lines_say_which_mats_are_only_bounds(tmp_path):
    """A curve that never crossed its threshold inside its levels gives a bound, not a
    MAT: the closing lines said "measured 3,000 req/s" where the report says at least."""
    from shrink.report.demo_summary import closing_lines

    summary = {
        "seconds": 60.0,
        "predicted": {"mean": 2508.4, "p99": 900.0, "p999": float("nan")},
        "measured": {"mean": 3000.0, "p99": 950.0},
        "predicted_bound": {"mean": None, "p99": "upper", "p999": None},
        "measured_bound": {"mean": "lower", "p99": None},
        "report": str(tmp_path / "report.html"),
        "report_md": str(tmp_path / "report.md"),
    }
    lines = closing_lines(summary, tmp_path)
    assert lines[0] == "mean MAT: predicted 2,508 req/s, measured at least 3,000 req/s"
    assert lines[1] == "p99 MAT: predicted below 900 req/s, measured 950 req/s"
    assert lines[2] == "p999 MAT: predicted none, measured none"


def test_a_demo_that_asks_for_its_lock_during_another_demos_look_still_holds_it(
    tmp_path, monkeypatch
):
    """Another demo's clean-up takes a folder's lock alone for a moment to see whether
    it is held: a demo asking just then went on without its lock, and its folder (its
    servers' pages) could be removed mid-run by the next demo's clean-up."""
    import subprocess
    import sys

    from shrink import demo_work

    monkeypatch.setattr(demo_work, "_HELD", {}, raising=False)
    folder = tmp_path / "shrink-demo-x"
    folder.mkdir()
    (folder / ".made-for").write_text(f"{tmp_path / 'out'}\n")
    looker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time;"
            " fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o600);"
            " fcntl.flock(fd, fcntl.LOCK_EX); print(flush=True); time.sleep(0.3)",
            str(folder / ".demo-lock"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        looker.stdout.readline()  # looking (a look lasts microseconds; here 0.3 s)
        demo_work._hold(folder)
        assert folder in demo_work._HELD
    finally:
        looker.wait()
        if folder in demo_work._HELD:
            os.close(demo_work._HELD.pop(folder))


def test_a_work_location_holding_a_nul_byte_names_no_earlier_folder(tmp_path):
    """``--out`` may be a folder others can write: a work-location holding a NUL byte
    (no path can) was a ValueError traceback from the demo; it names no folder."""
    from shrink import demo_work

    out = tmp_path / "out"
    out.mkdir()
    (out / "work-location").write_bytes(b"/var/tmp/shrink-demo-a\0b\n")
    assert demo_work._earlier_work(out) is None
