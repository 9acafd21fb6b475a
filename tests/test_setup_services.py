"""scripts/stop_service.sh: set-up stops a system service by its own pidfile, and nothing
else. "/etc/init.d/php8.2-fpm stop" without a pidfile matched every php-fpm on the
machine: a set-up run beside a prediction killed the testbed's PHP."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require_root

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "stop_service.sh"


def _stop(run: Path, unit: str, path: Path | None = None) -> str:
    """``stop_by_pidfile run unit``'s output, with only the commands in ``path`` if given."""
    env = None if path is None else {"PATH": str(path)}
    bash = shutil.which("bash") or "bash"
    out = subprocess.run(
        [bash, "-c", f'. "{SCRIPT}"; stop_by_pidfile "$1" "$2"', "_", str(run), unit],
        capture_output=True, text=True, check=True, timeout=30, env=env,
    )  # fmt: skip
    return out.stdout.strip()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _fake_lighttpd(tmp_path: Path) -> Path:
    """A program named lighttpd (sleep's copy) in ``tmp_path``/bin."""
    sleep = shutil.which("sleep")
    if sleep is None or not Path("/proc/self/exe").exists():
        pytest.skip("needs sleep and /proc")
    lighttpd = tmp_path / "bin" / "lighttpd"
    lighttpd.parent.mkdir()
    shutil.copy(sleep, lighttpd)
    return lighttpd


def _orphan(exe: Path) -> int:
    """``exe 60`` started by a child that exits at once: a daemon, its parent now init
    (or the nearest subreaper)."""
    out = subprocess.run(
        ["bash", "-c", f'setsid "{exe}" 60 >/dev/null 2>&1 < /dev/null & echo $!'],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return int(out.stdout)


def test_only_a_daemon_running_a_server_named_by_the_pidfile_is_stopped(tmp_path):
    lighttpd = _fake_lighttpd(tmp_path)
    run = tmp_path / "run"
    (run / "php").mkdir(parents=True)
    # A testbed's server: the right executable, but a child of shrink, not a daemon.
    child = subprocess.Popen([str(lighttpd), "60"])
    other = _orphan(Path(shutil.which("sleep") or "sleep"))  # a daemon, not a server's executable
    daemon = _orphan(lighttpd)
    try:
        (run / "lighttpd.pid").write_text(f"{child.pid}\n")
        assert _stop(run, "lighttpd") == "" and child.poll() is None
        (run / "lighttpd.pid").write_text(f"{other}\n")
        assert _stop(run, "lighttpd") == "" and _alive(other)
        (run / "php" / "php8.2-fpm.pid").write_text("12x\n")
        assert _stop(run, "php8.2-fpm") == ""
        assert _stop(run, "nginx") == ""  # no pidfile at all
        ppid = int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if ppid != 1:
            pytest.skip(f"an orphan's parent here is PID {ppid} (a subreaper), not init")
        (run / "lighttpd.pid").write_text(f"{daemon}\n")
        assert _stop(run, "lighttpd") == "stopped"
        deadline = time.monotonic() + 10
        while _alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(daemon)
    finally:
        child.kill()
        child.wait()
        for pid in (other, daemon):
            if _alive(pid):
                os.kill(pid, 9)


def test_the_daemon_is_stopped_where_ps_is_not_installed(tmp_path):
    # A minimal Debian (debootstrap's minbase) has no procps: without ps the parent read
    # as nothing, and set-up left the service running.
    coreutils = ("cat", "readlink", "head", "timeout", "stat")
    tools = {n: shutil.which(n) for n in ("sleep", *coreutils)}
    if None in tools.values() or not Path("/proc/self/exe").exists():
        pytest.skip(f"needs sleep, {', '.join(coreutils)} (coreutils) and /proc")
    path = tmp_path / "path"
    path.mkdir()
    for name in coreutils:
        (path / name).symlink_to(tools[name])
    lighttpd = tmp_path / "bin" / "lighttpd"
    lighttpd.parent.mkdir()
    shutil.copy(tools["sleep"], lighttpd)
    run = tmp_path / "run"
    run.mkdir()
    daemon = _orphan(lighttpd)
    try:
        ppid = int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if ppid != 1:
            pytest.skip(f"an orphan's parent here is PID {ppid} (a subreaper), not init")
        (run / "lighttpd.pid").write_text(f"{daemon}\n")
        assert _stop(run, "lighttpd", path) == "stopped"
    finally:
        if _alive(daemon):
            os.kill(daemon, 9)


def test_a_pidfile_that_is_a_fifo_or_a_symlink_is_passed_over_at_once(tmp_path):
    """/run/php is www-data's on Debian: a FIFO put there as php8.2-fpm.pid hung root's
    ``make setup`` in cat, waiting for a writer (a symlink to /dev/zero did too)."""
    run = tmp_path / "run"
    (run / "php").mkdir(parents=True)
    fifo = run / "php" / "php8.2-fpm.pid"
    os.mkfifo(fifo)
    (run / "php8.2-fpm.pid").symlink_to(os.devnull)
    t0 = time.monotonic()
    try:
        assert _stop(run, "php8.2-fpm") == ""
        assert time.monotonic() - t0 < 10
    finally:  # a reader still waiting (the test failing) gets its end of file
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _a_lighttpd_daemon(tmp_path: Path) -> int:
    lighttpd = _fake_lighttpd(tmp_path)
    daemon = _orphan(lighttpd)
    ppid = int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1])
    if ppid != 1:
        os.kill(daemon, 9)
        pytest.skip(f"an orphan's parent here is PID {ppid} (a subreaper), not init")
    return daemon


def test_a_server_started_after_its_pidfile_was_written_is_left_running(tmp_path):
    """A stale /run/lighttpd.pid whose PID is now a testbed's lighttpd, which ``shrink
    testbed up`` left running as a daemon: set-up stopped it, and the testbed with it."""
    daemon = _a_lighttpd_daemon(tmp_path)
    try:
        run = tmp_path / "run"
        run.mkdir()
        (run / "lighttpd.pid").write_text(f"{daemon}\n")
        an_hour_ago = time.time() - 3600
        os.utime(run / "lighttpd.pid", (an_hour_ago, an_hour_ago))
        assert _stop(run, "lighttpd") == ""
        assert _alive(daemon)
        os.utime(run / "lighttpd.pid")  # written now, after it started: the service's
        assert _stop(run, "lighttpd") == "stopped"
    finally:
        if _alive(daemon):
            os.kill(daemon, 9)


def test_a_pidfile_another_user_wrote_is_not_followed(tmp_path):
    """/run/php is www-data's on Debian: a pidfile there they wrote could name any server
    daemon (a testbed's), which root's set-up then stopped."""
    require_root("chown a pidfile to another user")
    daemon = _a_lighttpd_daemon(tmp_path)
    try:
        run = tmp_path / "run"
        (run / "php").mkdir(parents=True)
        (run / "php" / "lighttpd.pid").write_text(f"{daemon}\n")
        os.chown(run / "php" / "lighttpd.pid", 4242, 4242)
        assert _stop(run, "lighttpd") == ""
        assert _alive(daemon)
    finally:
        if _alive(daemon):
            os.kill(daemon, 9)
