"""A kill -9 of ``testbed up`` while it starts the servers: ``down --stale`` stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shrink import processes as process
from shrink.testbed import teardown

# Starts a server that never answers, so up waits in its health check until killed.
_UP = """
import sys
from shrink.machine import Machine
from shrink.share import Share
from shrink.testbed import ServerSettings, lifecycle
from shrink.testbed.fake_recipe import FakeRecipe
m = Machine("one", sockets=1, cores_per_socket=1, cpus=((int(sys.argv[3]),),))
lifecycle.up(sys.argv[1], m, Share.parse("all", m), state_path=sys.argv[2], port=0,
             cgroups="no", server=ServerSettings(FakeRecipe(fail="silent")))
"""


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_down_stale_stops_what_a_killed_up_started(tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    (tmp_path / "doc").mkdir()
    cpu = min(os.sched_getaffinity(0))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    up = subprocess.Popen(
        [sys.executable, "-c", _UP, str(tmp_path / "doc"), str(tmp_path / "s.json"), str(cpu)],
        env=env,
    )
    server = []
    try:
        deadline = time.monotonic() + 30
        while not server and time.monotonic() < deadline and up.poll() is None:
            time.sleep(0.05)
            server = _children(up.pid)
        assert server, "up started no server"
        # Killed once the server is recorded (up then waits for an answer that never
        # comes); before the fix no record came, and the kill was after 5 s.
        entries: list[Path] = []
        while not entries and time.monotonic() < deadline - 25:
            time.sleep(0.05)
            entries = [p for p in run.glob("testbed-*.json") if str(server[0]) in p.read_text()]
        up.send_signal(signal.SIGKILL)
        up.wait()
        info = process.proc_info(server[0])
        assert info is not None
        stale = teardown.down_stale()
        assert [sb.reason for sb, _ in stale] == [f"its owner (PID {up.pid}) is gone"]
        assert not process.is_alive(server[0], info.starttime)
        assert not [p for p in run.iterdir() if p.name.startswith("testbed-")]
    finally:
        if up.poll() is None:
            up.kill()
        for p in server:
            if process.is_alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_killed_writers_temporary_entry_is_removed(tmp_path, monkeypatch):
    # up killed between writing its registry entry's temporary file and the rename
    from shrink.testbed import registry

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run"))
    registry.private_dir()
    state = tmp_path / "s.json"
    entry = registry._entry(state)
    left = entry.with_name(f".{entry.name}.0123456789ab.tmp")
    other = entry.with_name(".testbed-0000000000000000.json.0123456789ab.tmp")
    left.write_text("{}")
    other.write_text("{}")
    registry.forget(state)
    assert not left.exists()
    assert other.exists()  # another entry's: left to its own up or down
