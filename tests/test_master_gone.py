"""A server's master killed while its workers run on: said as a master gone, not as a
worker its master may have replaced."""

from __future__ import annotations

import os
import subprocess

from shrink import processes as process
from shrink.testbed.oom import replicas_gone
from shrink.testbed.state import ReplicaState


def _replica(dead_role_is_master: bool) -> ReplicaState:
    """php-fpm: a PID that is gone (the master, or a worker) and this test's, running."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = process.proc_info(os.getpid())
    assert me is not None
    master, worker = (gone.pid, me.pid) if dead_role_is_master else (me.pid, gone.pid)
    return ReplicaState(
        name="r0", address="127.0.0.1", port=80, cpus=[0], masters=[master],
        processes={"php-fpm": [master, worker]}, starttimes={gone.pid: 1, me.pid: me.starttime},
        pinned={}, config="c", errorlog="e", run_dir="d",
    )  # fmt: skip


def test_a_killed_master_is_not_said_as_a_worker_replaced():
    """kill -9 of php-fpm's master mid-sweep: "crashed or killed: php-fpm PID 29184 (its
    other 3 processes still run: a server's master may have started another in its
    place ...)": no master starts another master, and its workers ran on without one."""
    text = replicas_gone([_replica(dead_role_is_master=True)])
    assert text is not None and "may have started another" not in text, text
    assert "without their master" in text and "bring the testbed down and up again" in text
    worker = replicas_gone([_replica(dead_role_is_master=False)])
    assert worker is not None and "may have started another in its place" in worker
