"""A server the OOM killer ended is named so, not "crashed or killed": its cure is memory.
The witnesses: the replica's cgroup (v2 memory.events, v1 memory.oom_control) and the
kernel log."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from shrink import processes as process
from shrink.replay.live import server_problem
from shrink.testbed import oom
from tests.conftest import require_root
from tests.test_dead_server import _state


def _gone() -> tuple[int, int]:
    """A process that ran and is gone: its PID and kernel start time."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    start = process.proc_info(p.pid).starttime
    p.wait()
    return p.pid, start


@pytest.mark.compute
@pytest.mark.parametrize("name", ["memory.events", "memory.oom_control"])
def test_a_dead_server_whose_cgroup_counts_an_oom_kill_is_named_so(tmp_path, name, monkeypatch):
    monkeypatch.setattr(oom, "_records", lambda kmsg: iter(()))  # a log that says nothing
    pid, start = _gone()
    text = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n" if name == "memory.events" else (
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")  # fmt: skip
    group = tmp_path / "shrink" / "r0"  # under shrink's own hierarchy, as up makes it
    group.mkdir(parents=True)
    (group / name).write_text(text)
    monkeypatch.setattr("shrink.enforce.cfs.cgroup_mounts", lambda *a: {tmp_path})
    state = _state([pid], {pid: start})
    state["replicas"][0]["cgroup"] = {"name": "r0", "version": 2, "dirs": {"cpu": str(group)}}
    said = server_problem(state)
    assert said == (f"killed by the kernel's OOM killer (out of memory; its cgroup counts "
                    f"1 OOM kill): lighttpd PID {pid}")  # fmt: skip


@pytest.mark.compute
def test_the_kernel_log_names_the_pid_the_oom_killer_ended(monkeypatch):
    pid, start = _gone()
    other, _ = _gone()
    at = int((start / os.sysconf("SC_CLK_TCK") + 0.5) * 1e6)
    log = [
        f"3,100,{at},-;Memory cgroup out of memory: Killed process {pid} (lighttpd) total-vm:1kB",
        "6,101,1,-;Killed process 999999 (older) total-vm:1kB",  # before it started: not it
    ]
    monkeypatch.setattr(oom, "_records", lambda kmsg: iter(log))
    state = _state([pid, other], {pid: start})
    said = server_problem(state)
    assert said == (
        f"killed by the kernel's OOM killer (out of memory; the kernel log names it): "
        f"lighttpd PID {pid}; crashed or killed: lighttpd PID {other}"
    )


@pytest.mark.compute
@pytest.mark.parametrize("priority", ["12", "11", "14", "8", "", "x"])
def test_a_record_written_to_the_kernel_log_from_user_space_names_no_oom_kill(
    monkeypatch, priority
):
    # The kernel gives a record written to /dev/kmsg from user space facility LOG_USER
    # (priority 8 and up), whatever its <N> prefix said; journald's ForwardToKMsg writes
    # users' log lines there so. Such a line must not turn a crash into an OOM kill.
    pid, start = _gone()
    at = int((start / os.sysconf("SC_CLK_TCK") + 0.5) * 1e6)
    log = [f"{priority},100,{at},-;Killed process {pid} (lighttpd) total-vm:1kB"]
    monkeypatch.setattr(oom, "_records", lambda kmsg: iter(log))
    monkeypatch.setattr(oom, "cgroup_oom_kills", lambda folders: 0)
    assert server_problem(_state([pid], {pid: start})) == f"crashed or killed: lighttpd PID {pid}"
    # the kernel's own record (facility 0, any level) still names it
    log[0] = "0" + log[0][len(priority) :]
    assert "OOM killer" in server_problem(_state([pid], {pid: start}))


@pytest.mark.compute
def test_a_dead_server_with_no_witness_is_still_crashed_or_killed(monkeypatch):
    monkeypatch.setattr(oom, "_records", lambda kmsg: iter(()))
    pid, start = _gone()
    assert server_problem(_state([pid], {pid: start})) == f"crashed or killed: lighttpd PID {pid}"


def test_a_real_oom_kill_is_seen_in_the_kernel_log_and_the_cgroup():
    """A process over a 32 MiB memory cgroup's limit, killed by the kernel."""
    require_root("a memory cgroup")
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    base = Path("/sys/fs/cgroup") if v2.exists() else Path("/sys/fs/cgroup/memory")
    if not (base / ("memory.max" if v2.exists() else "memory.limit_in_bytes")).parent.exists():
        pytest.skip("no memory cgroup controller")
    group = base / f"shrink-oom-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        limit = group / ("memory.max" if v2.exists() else "memory.limit_in_bytes")
        limit.write_text(str(32 << 20))
        if not v2.exists():
            (group / "memory.memsw.limit_in_bytes").exists() and (
                group / "memory.memsw.limit_in_bytes").write_text(str(32 << 20))  # fmt: skip
        code = ("import sys, time; sys.stdin.readline(); x = []\n"
                "for _ in range(400): x.append(bytearray(1 << 20)); time.sleep(0)")  # fmt: skip
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        start = process.proc_info(p.pid).starttime
        (group / "cgroup.procs").write_text(str(p.pid))
        p.stdin.write(b"\n")
        p.stdin.close()
        assert p.wait(timeout=30) == -9
        started = {p.pid: start / os.sysconf("SC_CLK_TCK")}
        assert oom.kernel_oom_kills(started) == {p.pid}
        assert oom.cgroup_oom_kills([group]) == 1
    finally:
        group.rmdir()


@pytest.mark.compute
def test_a_process_gone_while_the_others_run_says_they_run(monkeypatch):
    """`kill -9` of nginx's worker: its master started another in its place and the server
    answered, but the sweep said "the server under test is down: crashed or killed: nginx
    PID ..." and no more."""
    monkeypatch.setattr(oom, "_records", lambda kmsg: iter(()))
    monkeypatch.setattr(oom, "cgroup_oom_kills", lambda folders: 0)
    pid, start = _gone()
    here = os.getpid()
    said = server_problem(_state([here, pid], {pid: start}))
    assert said.startswith(f"crashed or killed: lighttpd PID {pid} (its other 1 process still")
    assert "bring the testbed down and up again" in said
    assert server_problem(_state([pid], {pid: start})) == f"crashed or killed: lighttpd PID {pid}"
