"""A ``sweep --cluster ray:local`` whose Ray head is stopped mid-level, live (a local
Ray cluster, shrink's fake server on loopback, a few seconds of load).

Before: Ray's 60 s wait, then Ray's own line only ("Failed to connect to GCS within 60
seconds ... The program will terminate"), the kept levels unsaid, the private Ray
folder and the run logs' ``.shrink-made`` left, and the cluster's ``DashboardAgent``
and ``RuntimeEnvAgent`` running, orphaned."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from shrink.replay.cluster import ray_available
from shrink.replay.ray_local import cluster_pids, end_processes

pytestmark = pytest.mark.skipif(
    not ray_available(), reason="ray is not installed (shrink-capacity[ray])"
)


def _children(pid: int, name: str) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1]
        if int(rest.split()[1]) == pid and comm.startswith(name[:15]):
            out.append(int(entry.name))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_head_ends_the_sweep_at_once_said_and_tidied(tmp_path, sig):
    from shrink.synth.tcp import synth_tcp

    synth_tcp(20, 30.0).write_parquet(tmp_path / "t.parquet")
    # short: the session folder's sockets must fit an AF_UNIX path (107 bytes)
    run = Path(tempfile.mkdtemp(prefix="shr", dir="/tmp"))
    srv = subprocess.Popen([sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    sweep = None
    try:
        assert srv.stdout is not None
        port = int(srv.stdout.readline().split()[2])
        sweep = subprocess.Popen(
            [sys.executable, "-m", "shrink", "sweep", str(tmp_path / "t.parquet"),
             "--target", f"http://127.0.0.1:{port}", "--levels", "1,2,3", "--reps", "1",
             "--warmup", "0s", "--duration", "2s", "--cluster", "ray:local",
             "--generators", "1", "-o", str(tmp_path / "c.json"),
             "--runlogs", str(tmp_path / "rl")],
            env={**os.environ, "SHRINK_RUN_DIR": str(run)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        until = time.monotonic() + 180
        while not (tmp_path / "c.partial.json").exists() and time.monotonic() < until:
            assert sweep.poll() is None, sweep.communicate()[1]
            time.sleep(0.1)
        time.sleep(0.5)  # into the next level (its slot being placed)
        head = _children(sweep.pid, "gcs_server") + _children(sweep.pid, "raylet")
        assert len(head) == 2
        for pid in head:
            os.kill(pid, sig)
        stopped = time.monotonic()
        _, err = sweep.communicate(timeout=90)
        took = time.monotonic() - stopped
        last = err.strip().splitlines()[-1]
        assert sweep.returncode == 1, err
        assert took < 15, f"{took:.1f} s: {err}"
        assert last.startswith("the local Ray cluster's head ended (its "), err
        assert "kept " in last and "c.partial.json (1 finished level)" in last, err
        assert "Failed to connect to GCS" not in err
        assert os.listdir(run) == []  # the private Ray folder went
        assert not (tmp_path / "rl" / ".shrink-made").exists()
        assert cluster_pids(str(run)) == []
    finally:
        if sweep is not None and sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        end_processes(cluster_pids(str(run)))  # none left to load the tests after this one
        srv.terminate()
        srv.wait()
        shutil.rmtree(run, ignore_errors=True)
