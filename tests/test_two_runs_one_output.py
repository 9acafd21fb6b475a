"""Two runs with one ``-o`` at once: both passed the output's check, and the one that
ended first had its files replaced by the other's (two ``split`` runs into one folder
both exited 0, each naming its 300 parts; one's were gone). Now the output is held for
the run (:func:`shrink.folder_locks.hold_output`) and the second is refused in one line."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app

pytestmark = pytest.mark.compute


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "t.parquet"
    r = CliRunner().invoke(app, ["synth", "tcp", "--rate", "2000", "--duration", "1s",
                                 "--seed", "1", "-o", str(trace)])  # fmt: skip
    assert r.exit_code == 0, r.output
    return trace


def _other_run(out: Path) -> subprocess.Popen[str]:
    """Another process holding ``out`` as a run that names it holds it: the kernel's
    ``flock`` on ``.NAME.lock`` in its folder."""
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"
    )
    lock = out.with_name(f".{out.name}.lock")
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


@pytest.mark.parametrize(
    ("command", "kind", "name"),
    [(["split", "--parts", "4"], "dir", "parts"), (["export"], "file", "x.wsesslog")],
)
def test_a_second_run_with_an_output_another_run_holds_is_refused(tmp_path, command, kind, name):
    trace = _trace(tmp_path)
    out = tmp_path / name
    args = [command[0], str(trace), *command[1:], "-o", str(out)]
    other = _other_run(out)
    try:
        r = CliRunner().invoke(app, args)
    finally:
        os.kill(other.pid, signal.SIGKILL)
        other.wait()
    what = "folder" if kind == "dir" else "file"
    assert r.exit_code == 1, r.output
    assert f"{out}: another shrink run is writing this {what} (PID {other.pid}" in r.stderr
    assert r.stderr.count("\n") == 1 and not out.exists()
    r = CliRunner().invoke(app, args)  # its holder killed: the lock went with it
    assert r.exit_code == 0, r.output
    assert out.exists()
    # let go at the command's end, its lock file removed (a kill's left file reused)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "t.parquet"])
    r = CliRunner().invoke(app, args)  # and free for the next run of this process
    assert r.exit_code == 0, r.output


def test_an_output_held_is_held_once_and_let_go(tmp_path):
    from shrink.folder_locks import hold_output, release_outputs

    out = tmp_path / "c.json"
    hold_output(out)
    hold_output(out)  # (a command that checks its output twice)
    lock = tmp_path / ".c.json.lock"
    assert lock.exists() and lock.stat().st_mode & 0o777 == 0o600
    release_outputs()
    assert not lock.exists()


def test_a_lock_file_planted_as_a_symlink_is_never_followed(tmp_path):
    from shrink.folder_locks import hold_output, release_outputs

    target = tmp_path / "target"
    (tmp_path / ".c.json.lock").symlink_to(target)
    hold_output(tmp_path / "c.json")  # unguarded, as a folder that cannot be locked
    release_outputs()
    assert not target.exists() and (tmp_path / ".c.json.lock").is_symlink()


def test_what_is_planted_at_a_lock_file_is_neither_held_nor_removed(tmp_path):
    """A FIFO, or a file not made for a lock (another user's, one with content), at
    ``.NAME.lock``: as root in a shared folder, a FIFO and a file ``nobody`` planted were
    opened, locked and removed at the command's end. Neither is touched now (a regular
    file is locked, not removed: another user's run locks against it)."""
    from shrink.folder_locks import hold_output, release_outputs

    os.mkfifo(tmp_path / ".a.json.lock")
    (tmp_path / ".b.json.lock").write_text("mine\n")
    other = tmp_path / ".c.json.lock"
    other.write_bytes(b"")
    if os.geteuid() == 0:
        os.chown(other, 65534, 65534)  # nobody's
    for name in ("a.json", "b.json", "c.json"):
        hold_output(tmp_path / name)
    release_outputs()
    assert stat.S_ISFIFO((tmp_path / ".a.json.lock").lstat().st_mode)
    assert (tmp_path / ".b.json.lock").read_text() == "mine\n"
    assert other.exists() == (os.geteuid() == 0)  # (a user's own empty one: its kill's)


def test_one_output_named_twice_by_two_names_is_this_runs_own(tmp_path):
    """``sweep -o d/x --runlogs link/x`` (link -> d): the second name's lock is the first's
    file, which this run holds; it was refused as 'another shrink run is writing this
    folder', not with the line that says the curve and the RunLogs share a path."""
    from shrink.errors import OutputBusyError
    from shrink.folder_locks import hold_output, release_outputs

    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to("d")
    try:
        hold_output(tmp_path / "d" / "x")
        hold_output(tmp_path / "link" / "x", "dir")
    except OutputBusyError as exc:
        pytest.fail(str(exc))
    finally:
        release_outputs()
    assert not (tmp_path / "d" / ".x.lock").exists()


def test_a_folder_named_by_its_dot_dot_or_a_symlink_is_held_as_the_folder_it_is(tmp_path):
    """``split -o d/..`` held the lock d/....lock, and ``split -o .`` run in that folder held
    its own; ``split -o link`` (link -> parts) held .link.lock beside ``split -o parts``'s
    .parts.lock: both ran, each replacing the other's parts."""
    from shrink.errors import OutputBusyError
    from shrink.folder_locks import hold_output, release_outputs

    (tmp_path / "d").mkdir()
    (tmp_path / "parts").mkdir()
    (tmp_path / "link").symlink_to("parts")  # (split writes its parts through it)
    other, theirs = _other_run(tmp_path), _other_run(tmp_path / "parts")
    try:
        with pytest.raises(OutputBusyError):
            hold_output(tmp_path / "d" / "..", "dir")
        with pytest.raises(OutputBusyError):
            hold_output(tmp_path / "link", "dir")
    finally:
        os.kill(theirs.pid, signal.SIGKILL)
        theirs.wait()
        os.kill(other.pid, signal.SIGKILL)
        other.wait()
        release_outputs()
    assert not (tmp_path / "d" / "....lock").exists()


def test_a_folder_named_through_another_users_symlink_is_not_held_where_it_leads(tmp_path):
    """The folder's own path is taken as the write reaches it: never through a symlink of
    another user's (the write refuses it), so the lock is not made beside its target."""
    from shrink.folder_locks import hold_output, release_outputs

    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink of another user's")
    (tmp_path / "away").mkdir()
    (tmp_path / "shared").mkdir(mode=0o1777)
    link = tmp_path / "shared" / "parts"
    link.symlink_to(tmp_path / "away" / "target")
    os.chown(link, 65534, 65534, follow_symlinks=False)
    (tmp_path / "away" / "target").mkdir()
    hold_output(link, "dir")
    try:
        assert (tmp_path / "shared" / ".parts.lock").exists()
        assert not (tmp_path / "away" / ".target.lock").exists()
    finally:
        release_outputs()


def test_another_users_run_in_a_shared_folder_is_refused_not_unguarded(tmp_path):
    """A lock file made 0600 in a folder others may write (1777, a group's 2770) could not
    be opened by another user's run there: it went on unguarded, beside the holder, and
    replaced its output. It is readable by those who may write the folder."""
    import tempfile

    from shrink import folder_locks
    from shrink.errors import OutputBusyError
    from shrink.folder_locks import hold_output, release_outputs

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    hold_output(private / "a.json")
    assert (private / ".a.json.lock").stat().st_mode & 0o777 == 0o600
    release_outputs()
    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    shared = Path(tempfile.mkdtemp())  # (reachable by nobody, as tmp_path is not)
    try:
        shared.chmod(0o777)
        hold_output(shared / "a.json")
        assert (shared / ".a.json.lock").stat().st_mode & 0o777 == 0o644
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 2
            try:
                folder_locks._OUTPUTS.clear()  # (the parent's: a run of its own now)
                os.setgid(65534)
                os.setuid(65534)
                hold_output(shared / "a.json")
                code = 1
            except OutputBusyError:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0  # refused, not unguarded
    finally:
        release_outputs()
        shutil.rmtree(shared)


def test_a_held_output_is_said_by_the_option_that_named_it(tmp_path):
    """Two `testbed up --state two.json` at once: the second said "name another output
    file (-o)", an option `testbed up` has none of; a sweep's `--runlogs` held by another
    run said "(-o)" too, of a folder -o did not name."""
    from shrink.folder_locks import claimed

    state = tmp_path / "two.json"
    other = _other_run(state)
    try:
        r = CliRunner().invoke(
            app, ["testbed", "up", "--docroot", str(tmp_path), "--state", str(state), "--port", "0"]
        )
    finally:
        os.kill(other.pid, signal.SIGKILL)
        other.wait()
    assert r.exit_code == 1, r.output
    assert "name another output file (--state), or wait" in r.stderr, r.stderr
    assert not state.exists()

    trace, logs = _trace(tmp_path), tmp_path / "logs"
    args = ["sweep", str(trace), "--target", "http://127.0.0.1:9", "--levels", "0.5",
            "--runlogs", str(logs), "-o", str(tmp_path / "c.json")]  # fmt: skip
    with claimed(logs):
        r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    assert "name another output folder (--runlogs), or wait" in r.stderr, r.stderr


def test_a_demos_work_folder_held_by_another_demo_is_said_by_its_out(tmp_path, monkeypatch):
    """Two `python -m shrink.demo --out D` at once: the second said "name another output
    folder (-o)", an option the demo has none of (``-o`` is refused by its parser)."""
    import shrink.demo as demo
    from shrink.errors import OutputBusyError

    work = tmp_path / "work"
    work.mkdir()
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code, str(work)], stdout=subprocess.PIPE, text=True
    )
    monkeypatch.setattr(demo, "_check_quiet", lambda console: {})
    # (never a demo run, whatever happens: the folder named, and nothing past the claim)
    monkeypatch.setattr(demo, "work_dir", lambda out, target: work)

    def no_demo(*args, **kwargs):
        raise AssertionError("went past the claim")

    monkeypatch.setattr(demo, "_synth", no_demo)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusyError) as err:
            demo.run_demo(tmp_path, quick=True)
    finally:
        os.kill(other.pid, signal.SIGKILL)
        other.wait()
    assert "name another output folder (--out), or wait" in str(err.value), str(err.value)
