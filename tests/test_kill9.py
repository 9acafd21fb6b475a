"""kill -9 of a shrink command leaves nothing running: children die with their parent,
and ``shrink testbed down --stale`` cleans what is left (cgroups)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import require_lighttpd
from helpers.testbed import wait_gone

from shrink import processes as process
from shrink.testbed import registry

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SHRINK_RUN_DIR": str(tmp_path / "runs")}


def test_engine_processes_die_with_a_killed_replay(tmp_path):
    server = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=_env(tmp_path),
    )  # fmt: skip
    try:
        port = int(server.stdout.readline().split()[2])
        cpus = sorted(os.sched_getaffinity(0))
        replay = subprocess.Popen(
            [sys.executable, "-m", "shrink", "replay", "--rate", "100", "--duration", "60s",
             "--path", "/x?bytes=10", "--target", f"http://127.0.0.1:{port}",
             "--processes", "2", "--generator-cpus", f"{cpus[0]},{cpus[-1]}",
             "-o", str(tmp_path / "r.parquet")],
            env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        kids: list[int] = []
        while time.monotonic() < deadline and len(kids) < 2:
            kids = process.descendants(replay.pid)
            time.sleep(0.1)
        assert len(kids) >= 2, "the engine processes did not start"
        time.sleep(1.0)
        replay.send_signal(signal.SIGKILL)
        replay.wait()
        # before: both kept sending load until the schedule ended (60 s)
        assert wait_gone(kids, 10.0) == []
    finally:
        server.kill()
        server.wait()


def test_an_owned_testbed_dies_with_its_owner_and_down_stale_cleans_up(tmp_path):
    require_lighttpd()
    doc = tmp_path / "doc"
    doc.mkdir()
    (doc / "index.html").write_text("hi")
    state = tmp_path / "tb.json"
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from shrink.share import Share
            from shrink.testbed import up
            from shrink.topology import discover
            m = discover()
            up({str(doc)!r}, m, Share.all_of(m), state_path={str(state)!r}, port=0, owned=True)
            print("up", flush=True)
            time.sleep(120)
        """)],
        env=_env(tmp_path), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert owner.stdout.readline().strip() == "up"
        st = json.loads(state.read_text())
        pids = [p for r in st["replicas"] for p in r["pids"]]
        assert pids and all(process.is_alive(p) for p in pids)
        os.environ["SHRINK_RUN_DIR"] = str(tmp_path / "runs")
        assert registry.stale() == []  # its owner still runs
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        # lighttpd got SIGTERM from the kernel and stopped php-cgi with it
        assert wait_gone(pids, 10.0) == []
        found = registry.stale()
        assert [s.state_path for s in found] == [state.resolve()] and "owner" in found[0].reason
        out = subprocess.run(
            [sys.executable, "-m", "shrink", "testbed", "down", "--stale"],
            env=_env(tmp_path), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0 and str(state.resolve()) in out.stdout
        assert registry.stale() == []
        for r in st["replicas"]:
            if r.get("cgroup"):
                assert not any(Path(d).exists() for d in r["cgroup"]["dirs"].values())
    finally:
        os.environ.pop("SHRINK_RUN_DIR", None)
        if owner.poll() is None:
            owner.kill()
        for p in (
            [p for r in json.loads(state.read_text())["replicas"] for p in r["pids"]]
            if (state.exists())
            else []
        ):
            if process.is_alive(p):
                os.kill(p, signal.SIGKILL)
