"""Two runs with one ``-o`` at once: both passed the output's check, and the one that
ended first had its files replaced by the other's (two ``split`` runs into one folder
both exited 0, each naming its 300 parts; one's were gone). Now the output is held for
the run (:func:`shrink.folder_locks.hold_output`) and the second is refused in one line."""

from __future__ import annotations

import os
import signal
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
