"""A testbed brought up in another PID namespace (``unshare --pid``, a container sharing
this file system) records PIDs that name other processes here, or none. Looked at from
here, ``status`` said its running servers "crashed or killed", ``down`` stopped nothing,
said "nothing was running" and removed their run folder, a sweep against it said the
server was down, and another ``up`` on its CPUs was not warned of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from shrink import processes
from shrink.errors import TestbedError
from shrink.testbed import problems, registry
from shrink.testbed.state import TestbedState
from shrink.testbed.status import status
from shrink.testbed.teardown import down

ROOT = Path(__file__).resolve().parents[1]

# Run inside the namespace: start a stand-in server, record it as `up` does (the state
# file and the registry entry, its run folder made), then wait on it.
_INSIDE = """
import os, subprocess, sys
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.helpers.testbed import lighttpd_replica
from shrink import processes
from shrink.testbed import problems, registry
from shrink.testbed.state import TestbedState
state, run = Path(sys.argv[2]), Path(sys.argv[3])
server = subprocess.Popen(["sleep", "60"])
info = processes.proc_info(server.pid)
run.mkdir(parents=True)
r = replace(lighttpd_replica(), cpus=[0], masters=[server.pid],
            processes={"lighttpd": [server.pid]}, starttimes={server.pid: info.starttime},
            pinned={}, run_dir=str(run / "r0"))
st = TestbedState([r], {}, {"name": "1-replica"}, {}, "doc", {}, "t0",
                  pid_ns=processes.pid_namespace())
st.write(state)
registry.record(state, st, owned=False)
print(server.pid, flush=True)
server.wait()
"""


@pytest.fixture
def inside(tmp_path, monkeypatch):
    """A testbed recorded in a PID namespace of its own: (its state file, its run folder,
    the stand-in server's PID here, the namespace's end: kill its init and wait)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a PID namespace of its own needs root and unshare")
    run = tmp_path / "priv"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    state, root = tmp_path / "tb.json", run / "up-tb-x"
    cmd = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount",
           sys.executable, "-c", _INSIDE, str(ROOT), str(state), str(root)]  # fmt: skip
    env = os.environ | {"SHRINK_RUN_DIR": str(run)}
    ns = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, cwd=tmp_path)
    here: list[int] = []

    def end() -> None:
        ns.kill()  # (--kill-child: its init, and with it the namespace)
        ns.wait()
        deadline = time.monotonic() + 5
        ours = TestbedState.read(state).pid_ns if state.exists() else None
        while time.monotonic() < deadline and (
            (here and processes.is_alive(here[0]))
            or (ours and not processes.pid_namespace_gone(ours))  # its init still ends
        ):
            time.sleep(0.02)

    try:
        inner = int(ns.stdout.readline())
        here += [p for p in processes.descendants(ns.pid) if processes.proc_info(p).comm == "sleep"]
        assert inner != here[0]  # the same process, another number
        yield state, root, here[0], end
    finally:
        end()


def test_a_testbed_of_another_pid_namespace_is_neither_said_dead_nor_brought_down(inside):
    state, root, server, _ = inside
    with pytest.raises(TestbedError) as info:
        status(state)
    assert "brought up in another PID namespace" in str(info.value)
    assert "nothing was looked at" in str(info.value)
    with pytest.raises(TestbedError) as info:
        down(state)
    assert "nothing was stopped" in str(info.value) and "\n" not in str(info.value)
    assert root.is_dir() and processes.is_alive(server)  # its run folder, its server
    assert TestbedState.read(state).stopped is None
    problem = problems.testbed_problem(TestbedState.read(state).to_dict())
    assert problem is not None and problem.startswith("cannot be watched from here: ")
    # another up on its CPUs is warned of it (counted as running), and --stale leaves it
    ((_, st),) = registry.running()
    assert registry.serving(st) and registry.stale() == []


def test_a_testbed_whose_pid_namespace_ended_is_looked_at_and_brought_down(inside):
    # gone with its namespace, as a testbed whose servers were killed: counted on its
    # CPUs no more (else for good), said so by status, and down clears what it left
    state, root, server, end = inside
    end()
    assert not processes.is_alive(server)
    ((_, st),) = registry.running()
    assert not registry.serving(st) and st.elsewhere() is None
    (rep,) = status(state, check_health=False)
    assert rep.alive == [] and "crashed or killed" in rep.problem
    down(state)
    assert not root.exists() and registry.running() == []


def _this_process_as_testbed(tmp_path, monkeypatch, run_dir=None):
    """A state of this namespace whose one server is this test's process (its PID and
    start time), the private folder under ``tmp_path``."""
    from tests.helpers.testbed import lighttpd_replica

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "priv"))
    me = os.getpid()
    r = replace(lighttpd_replica(), cpus=[0], masters=[me], processes={"lighttpd": [me]},
                starttimes={me: processes.proc_info(me).starttime}, pinned={})  # fmt: skip
    if run_dir is not None:
        r = replace(r, run_dir=run_dir)
    return TestbedState([r], {}, {"name": "1-replica"}, {}, "doc", {}, "t0",
                        pid_ns=processes.pid_namespace())  # fmt: skip


def test_a_state_of_this_pid_namespace_is_looked_at_as_before(tmp_path, monkeypatch):
    st = _this_process_as_testbed(tmp_path, monkeypatch)
    assert st.elsewhere() is None and registry.serving(st)
    assert TestbedState.from_dict(st.to_dict()).pid_ns == processes.pid_namespace()


_LOOK = """
import sys
sys.path.insert(0, sys.argv[1])
from shrink.errors import TestbedError
from shrink.testbed.status import status
from shrink.testbed.teardown import down
for look in (status, down):
    try:
        look(sys.argv[2])
        print("looked")
    except TestbedError as exc:
        print(exc)
"""


def test_a_testbed_of_the_parent_pid_namespace_is_not_looked_at_from_a_child(tmp_path, monkeypatch):
    # the reverse: up here, status and down inside `unshare --pid` (where its PIDs are
    # none, or the namespace's own): not said crashed, nothing removed

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a PID namespace of its own needs root and unshare")
    root = tmp_path / "priv" / "up-tb-x"
    root.mkdir(parents=True)
    st = _this_process_as_testbed(tmp_path, monkeypatch, run_dir=str(root / "r0"))
    state = tmp_path / "tb.json"
    st.write(state)
    registry.record(state, st, owned=False)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--mount",
           sys.executable, "-c", _LOOK, str(ROOT), str(state)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    lines = out.splitlines()
    assert len(lines) == 2 and all("brought up in another PID namespace" in x for x in lines)
    assert root.is_dir() and TestbedState.read(state).stopped is None


def test_a_process_that_joined_a_child_pid_namespace_does_not_take_it_for_the_top(
    tmp_path, monkeypatch
):
    # `nsenter --pid` (as `docker exec`): the joining process's parent is outside, so
    # PID 2 there may show parent 0, as kthreadd does in the top namespace; told the
    # top by that, shrink inside took every testbed of the parent namespace for gone:
    # status said it crashed, and down removed its run folder under its servers

    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("a PID namespace of its own needs root, unshare and nsenter")
    root = tmp_path / "priv" / "up-tb-x"
    root.mkdir(parents=True)
    st = _this_process_as_testbed(tmp_path, monkeypatch, run_dir=str(root / "r0"))
    state = tmp_path / "tb.json"
    st.write(state)
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
                           "--mount", "sleep", "60"])  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not (init := processes.descendants(ns.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        cmd = ["nsenter", "-t", str(init[0]), "--pid", "--mount",
               sys.executable, "-c", _LOOK, str(ROOT), str(state)]  # fmt: skip
        env = os.environ | {"SHRINK_RUN_DIR": str(tmp_path / "priv")}
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60, env=env)
    finally:
        ns.kill()
        ns.wait()
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all("brought up in another PID namespace" in x for x in lines)
    assert root.is_dir() and TestbedState.read(state).stopped is None


def test_a_namespace_that_took_an_ended_ones_number_is_not_the_testbeds(tmp_path, monkeypatch):
    # the kernel gives an ended namespace's inode to the next one made (the lowest free
    # number: the next container's): a testbed whose namespace ended was refused by
    # status and down ("brought up in another PID namespace"), and counted on its CPUs,
    # for as long as that other namespace lived
    from datetime import UTC, datetime, timedelta

    from tests.helpers.testbed import lighttpd_replica

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a PID namespace of its own needs root and unshare")
    if processes.pid_namespace() != processes._TOP_PID_NS:
        pytest.skip("needs the top PID namespace")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "priv"))
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while not (init := processes.descendants(ns.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        other = os.stat(f"/proc/{init[0]}/ns/pid").st_ino  # made now: the number's new holder
        p = init[0]
        r = replace(lighttpd_replica(), cpus=[0], masters=[p], processes={"lighttpd": [p]},
                    starttimes={p: 1}, pinned={})  # fmt: skip
        hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        st = TestbedState([r], {}, {"name": "1-replica"}, {}, "doc", {}, hour_ago, pid_ns=other)
        assert st.elsewhere() is None and not registry.serving(st)  # its own, ended
        st.write(tmp_path / "tb.json")
        (rep,) = status(tmp_path / "tb.json", check_health=False)
        assert "crashed or killed" in rep.problem
        now = datetime.now(UTC).isoformat()  # its namespace was there by then
        assert replace(st, started=now).elsewhere() is not None
    finally:
        ns.kill()
        ns.wait()


_GONE = """
import sys
sys.path.insert(0, sys.argv[1])
from shrink import processes
print(processes.pid_namespace_gone(int(sys.argv[2])))
"""


def test_root_that_may_not_look_at_a_namespaces_processes_does_not_take_it_for_gone():
    # root without CAP_SYS_PTRACE (capsh --drop, a container) may not stat another
    # user's /proc/PID/ns/pid: a namespace of only such processes (servers that dropped
    # root) was taken for gone, its testbed said crashed and its run folder removed
    capsh, setpriv = shutil.which("capsh"), shutil.which("setpriv")
    if os.geteuid() != 0 or not (capsh and setpriv and shutil.which("unshare")):
        pytest.skip("needs root, capsh, setpriv and unshare")
    if processes.pid_namespace() != processes._TOP_PID_NS:
        pytest.skip("needs the top PID namespace")
    nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"]
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", *nobody])
    try:
        deadline = time.monotonic() + 10
        while not (init := processes.descendants(ns.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        theirs = os.stat(f"/proc/{init[0]}/ns/pid").st_ino
        cmd = [capsh, "--drop=cap_sys_ptrace", "--", "-c", 'exec "$0" -c "$1" "$2" "$3"',
               sys.executable, _GONE, str(ROOT), str(theirs)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    finally:
        ns.kill()
        ns.wait()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_living_namespace_is_not_taken_for_gone_after_the_clock_stepped_forward(
    tmp_path, monkeypatch
):
    # The boot time (btime) moves with the wall clock: stepped an hour forward since `up`
    # (NTP's first sync on a machine with no clock), the testbed's living namespace's
    # processes read as begun after its "started" plus a minute, and it was taken for
    # another that took its number: status said crashed, down cleared its run folder.
    import json
    from datetime import UTC, datetime

    from shrink.testbed.state import elsewhere
    from tests.helpers.testbed import lighttpd_replica

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a PID namespace of its own needs root and unshare")
    if processes.pid_namespace() != processes._TOP_PID_NS:
        pytest.skip("needs the top PID namespace")
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while not (init := processes.descendants(ns.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        p = init[0]
        mine = os.stat(f"/proc/{p}/ns/pid").st_ino
        tick = processes.proc_info(p).starttime
        r = replace(lighttpd_replica(), cpus=[0], masters=[p], processes={"lighttpd": [p]},
                    starttimes={p: tick}, pinned={})  # fmt: skip
        now = datetime.now(UTC).isoformat()
        st = TestbedState([r], {}, {"name": "1-replica"}, {}, "doc", {}, now, pid_ns=mine)
        assert st.elsewhere() is not None  # (its own namespace, living)
        boot = processes._boot_time()
        monkeypatch.setattr(processes, "_boot_time", lambda: boot + 3600.0)
        assert st.elsewhere() is not None
        d = json.loads(st.write(tmp_path / "tb.json").read_text())  # (as the JSON's readers)
        assert elsewhere(d["pid_ns"], d["started"], d["replicas"]) is not None
    finally:
        ns.kill()
        ns.wait()


def test_servers_start_times_of_an_earlier_boot_do_not_keep_a_namespace(monkeypatch):
    # A testbed's state outlives a reboot; the kernel hands out namespace numbers anew,
    # and one made at boot takes the testbed's. Its servers' recorded start times (ticks
    # since the earlier boot) read on this boot's clock put the testbed's namespace there
    # until long after the new one began: it was taken for the testbed's, living, and the
    # testbed said "brought up in another PID namespace", never judged.
    from datetime import UTC, datetime

    from shrink.testbed import state

    hz = os.sysconf("SC_CLK_TCK")
    boot = 1_800_000_000.0
    monkeypatch.setattr(processes, "_boot_time", lambda: boot)
    monkeypatch.setattr(state, "_uptime", lambda: 100.0)  # (rebooted 100 s ago)
    started = datetime.fromtimestamp(boot - 86400, UTC).isoformat()  # a day before
    replicas = [{"starttimes": {"7": 3600 * hz}}]  # an hour after that earlier boot
    assert state._began_by(started, replicas) == pytest.approx(boot - 86400 + 60)
    # (this boot's: the later of the two, as a forward step of the clock needs)
    replicas = [{"starttimes": {"7": 50 * hz}}]
    assert state._began_by(started, replicas) == pytest.approx(boot + 51)
