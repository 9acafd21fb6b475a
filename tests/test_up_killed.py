"""A kill -9 of ``testbed up`` while it starts the servers: ``down --stale`` stops them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers.testbed import wait_gone

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


def _kill_up_while_starting(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """Run up with a server that never answers; kill -9 it once the server is recorded
    (up then waits for an answer that never comes). Its state file is never written."""
    run = Path(os.environ["SHRINK_RUN_DIR"])
    (tmp_path / "doc").mkdir()
    cpu = min(os.sched_getaffinity(0))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    up = subprocess.Popen(
        [sys.executable, "-c", _UP, str(tmp_path / "doc"), str(tmp_path / "s.json"), str(cpu)],
        env=env,
    )
    server: list[int] = []
    deadline = time.monotonic() + 30
    while not server and time.monotonic() < deadline and up.poll() is None:
        time.sleep(0.05)
        server = _children(up.pid)
    # before the fix no record came, and the kill was after 5 s
    entries: list[Path] = []
    while server and not entries and time.monotonic() < deadline - 25:
        time.sleep(0.05)
        entries = [p for p in run.glob("testbed-*.json") if str(server[0]) in p.read_text()]
    up.send_signal(signal.SIGKILL)
    up.wait()
    return up, server


def _kill_all(server: list[int]) -> None:
    for p in server:
        if process.is_alive(p):
            os.kill(p, signal.SIGKILL)


def test_down_stale_stops_what_a_killed_up_started(tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    up, server = _kill_up_while_starting(tmp_path)
    try:
        assert server, "up started no server"
        info = process.proc_info(server[0])
        assert info is not None
        stale = teardown.down_stale()
        assert [sb.reason for sb, _ in stale] == [f"its owner (PID {up.pid}) is gone"]
        assert not process.is_alive(server[0], info.starttime)
        assert not [p for p in run.iterdir() if p.name.startswith("testbed-")]
    finally:
        _kill_all(server)


def test_down_state_stops_what_a_killed_up_started_before_its_file(tmp_path, monkeypatch):
    """`down --state S` for an up killed before it wrote S said "no such testbed state
    file (was `testbed up` run?)" and stopped nothing, and `status` said the same,
    while its servers ran on; only `down --stale` found them."""
    run = tmp_path / "run"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    _up, server = _kill_up_while_starting(tmp_path)
    state = tmp_path / "s.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cli = [sys.executable, "-m", "shrink", "testbed"]
    try:
        assert server, "up started no server"
        assert not state.exists()
        info = process.proc_info(server[0])
        assert info is not None
        st = subprocess.run([*cli, "status", "--state", str(state)], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
        assert st.returncode == 1
        assert "not written" in st.stderr and str(server[0]) in st.stderr
        assert "testbed down --state" in st.stderr and "Traceback" not in st.stderr
        down = subprocess.run([*cli, "down", "--state", str(state)], env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert down.returncode == 0, down.stderr
        assert not process.is_alive(server[0], info.starttime)
        assert not [p for p in run.iterdir() if p.name.startswith("testbed-")]
        assert not state.exists()
    finally:
        _kill_all(server)


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


# up killed at the worst moment: after the server's fork, while its PID is being recorded.
_UP_KILLED_WHILE_RECORDING = """
import os, signal, sys
from shrink.machine import Machine
from shrink.share import Share
from shrink.testbed import ServerSettings, lifecycle, registry
from shrink.testbed.fake_recipe import FakeRecipe

def record(*args, **kw):
    with open(sys.argv[4], "w") as fh:  # the children up has forked so far
        fh.write(open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read())
    os.kill(os.getpid(), signal.SIGKILL)

registry.record = record
m = Machine("one", sockets=1, cores_per_socket=1, cpus=((int(sys.argv[3]),),))
lifecycle.up(sys.argv[1], m, Share.parse("all", m), state_path=sys.argv[2], port=0,
             cgroups="no", server=ServerSettings(FakeRecipe(fail="silent")))
"""


def test_a_server_forked_before_up_is_killed_never_starts(tmp_path, monkeypatch):
    """A kill -9 of up between a server's fork and its record left a server that no
    state and no registry entry named (1-2 in 10-15 kills); the fork now waits for its
    record before it becomes the server, and exits when up is gone."""
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "doc").mkdir()
    cpu = min(os.sched_getaffinity(0))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    forked = tmp_path / "forked"
    up = subprocess.run(
        [sys.executable, "-c", _UP_KILLED_WHILE_RECORDING, str(tmp_path / "doc"),
         str(tmp_path / "s.json"), str(cpu), str(forked)],
        env=env, timeout=60,
    )  # fmt: skip
    assert up.returncode == -signal.SIGKILL
    kids = [int(x) for x in forked.read_text().split()]
    assert kids, "up had forked no server when it recorded"
    try:
        # before: the fork was the fake server already, and served on after up died
        assert wait_gone(kids, 5.0) == []
        # and down --stale removes its run folder and its lock (before: left for good)
        from shrink.testbed import registry

        left = registry.clear_killed_ups()
        assert sorted(p.suffix == ".lock" for p in left) == [False, True], left
        assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith("up-")]
    finally:
        for p in kids:
            if process.is_alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_start_whose_record_fails_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    def refuse(proc: subprocess.Popen[bytes]) -> None:
        raise OSError(28, "No space left on device")

    try:
        process.start_process(["sh", "-c", f"touch {marker}"], recorded=refuse)
    except OSError as exc:
        assert exc.errno == 28
    else:
        raise AssertionError("the record's error was lost")
    time.sleep(0.2)
    assert not marker.exists()
    seen: list[int] = []
    proc = process.start_process(
        ["sh", "-c", f"touch {marker}"], recorded=lambda p: seen.append(p.pid)
    )
    assert proc.wait(timeout=10) == 0 and marker.exists() and seen == [proc.pid]
    assert proc.args == ["sh", "-c", f"touch {marker}"]


def test_a_gated_program_that_is_not_there_is_said_at_once(tmp_path):
    with pytest.raises(FileNotFoundError):
        process.start_process(["no-such-program-here"], recorded=lambda p: None)


def test_the_irq_lists_are_recorded_before_up_writes_one(tmp_path, monkeypatch, machine):
    """A kill -9 of up after ``--apply-irq`` wrote the lists but before its first server
    was recorded left IRQ 38 on CPU 1 (1 of 10 kills): nothing named the old lists. The
    registry entry now holds them before the first is written, so ``down --stale`` puts
    them back whenever the kill comes."""
    from shrink import irq
    from shrink.share import Share
    from shrink.testbed import lifecycle, registry, teardown
    from shrink.testbed.config import ServerSettings
    from shrink.testbed.fake_recipe import FakeRecipe

    # (a short folder: a socket's path under pytest's worker folders was too long)
    run = Path(tempfile.mkdtemp(prefix="sr-"))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    proc = tmp_path / "proc"
    (proc / "irq" / "41").mkdir(parents=True)
    (proc / "irq" / "41" / "smp_affinity_list").write_text("0-7\n")
    monkeypatch.setattr(irq, "PROC_ROOT", str(proc))
    plan = [irq.IrqAssignment(41, "eth0-TxRx-0", "r0", (0,))]
    state = tmp_path / "s.json"
    seen = {}

    def killed(p: list[irq.IrqAssignment]) -> dict[str, str]:
        seen["recorded"] = dict(registry.recorded(state).irq or {})
        irq.apply_plan(p)
        raise SystemExit("killed")  # no clean-up runs after a real kill: see below

    monkeypatch.setattr(lifecycle, "apply_plan", killed)
    monkeypatch.setattr(lifecycle, "restore_affinities", lambda before: [])
    monkeypatch.setattr(lifecycle, "stop_and_release", lambda recipe, rs: {})
    monkeypatch.setattr(registry, "forget", lambda path: None)
    (tmp_path / "doc").mkdir()
    with pytest.raises(SystemExit):
        lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
                     server=ServerSettings(FakeRecipe()), irq_plan=plan)  # fmt: skip
    assert seen["recorded"] == {"41": "0-7"}
    assert (proc / "irq" / "41" / "smp_affinity_list").read_text() == "0"
    # the owner gone (as after a kill), down --stale stops the servers and puts IRQ 41 back
    entry = registry._entry(state)
    doc = json.loads(entry.read_text())
    doc["owner"]["starttime"] = 1  # its PID now another process's: the owner is gone
    entry.write_text(json.dumps(doc))
    servers = [p for r in registry.recorded(state).replicas for p in r.pids]
    assert [sb.state_path for sb, _ in teardown.down_stale()] == [state.resolve()]
    assert not [p for p in servers if registry.process.is_alive(p)]
    assert (proc / "irq" / "41" / "smp_affinity_list").read_text() == "0-7"
    shutil.rmtree(run, ignore_errors=True)


def test_a_second_testbed_may_not_move_the_irqs_another_placed(tmp_path, monkeypatch, machine):
    """Two testbeds with --apply-irq on one IRQ: the second recorded the first's list as
    the one to put back, so `down` of the first and then the second left IRQ 41 on the
    first's CPU for good (and the first's down undid the second's plan under it)."""
    from shrink import irq
    from shrink.errors import TestbedError
    from shrink.share import Share
    from shrink.testbed import lifecycle
    from shrink.testbed.config import ServerSettings
    from shrink.testbed.fake_recipe import FakeRecipe

    # (a short folder: a socket's path under pytest's worker folders was too long)
    run = Path(tempfile.mkdtemp(prefix="sr-"))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    proc = tmp_path / "proc"
    for n in (41, 42):
        (proc / "irq" / str(n)).mkdir(parents=True)
        (proc / "irq" / str(n) / "smp_affinity_list").write_text("0-7\n")
    monkeypatch.setattr(irq, "PROC_ROOT", str(proc))
    (tmp_path / "doc").mkdir()
    first, second, third = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"

    def up(state, plan):
        return lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state,
                            port=0, server=ServerSettings(FakeRecipe()), irq_plan=plan)  # fmt: skip

    up(first, [irq.IrqAssignment(41, "eth0-TxRx-0", "r0", (0,))])
    try:
        with pytest.raises(TestbedError) as err:
            up(second, [irq.IrqAssignment(41, "eth0-TxRx-0", "r0", (1,))])
        msg = str(err.value)
        assert "IRQ 41" in msg and str(first) in msg and "--apply-irq" in msg
        assert not second.exists()
        assert (proc / "irq" / "41" / "smp_affinity_list").read_text() == "0"
        up(third, [irq.IrqAssignment(42, "eth0-TxRx-1", "r0", (1,))])  # another IRQ: fine
    finally:
        for state in (third, second, first):  # (second: when it was let up)
            if state.exists():
                lifecycle.down(state)
        shutil.rmtree(run, ignore_errors=True)
    for n in (41, 42):
        assert (proc / "irq" / str(n) / "smp_affinity_list").read_text() == "0-7"


def test_a_stop_signal_before_the_first_start_leaves_no_run_root(tmp_path, monkeypatch):
    """SIGTERM while up read its children in /proc, after it made its run root and
    before its clean-up began, left an empty ``up-<stem>-*`` folder in the run folder."""
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.testbed import ServerSettings, lifecycle
    from shrink.testbed.fake_recipe import FakeRecipe

    run = tmp_path / "run"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    (tmp_path / "doc").mkdir()

    def stopped() -> list[int]:
        raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle.process, "own_children", stopped)
    m = Machine("one", sockets=1, cores_per_socket=1, cpus=((min(os.sched_getaffinity(0)),),))
    with pytest.raises(KeyboardInterrupt):
        lifecycle.up(tmp_path / "doc", m, Share.parse("all", m), state_path=tmp_path / "s.json",
                     port=0, cgroups="no", server=ServerSettings(FakeRecipe()))  # fmt: skip
    assert not list(run.glob("up-s-*"))


def _left_by(base: Path, name: str, pid: int, started: int) -> Path:
    """A run root as a killed ``up`` left it: its maker named, nothing recorded."""
    from shrink.testbed.private import RUN_ROOT_MAKER

    root = base / name
    (root / "r0").mkdir(parents=True)
    (root / RUN_ROOT_MAKER).write_text(f"{pid} {started}\n")
    return root


def test_down_stale_removes_the_run_folders_and_locks_killed_ups_left(tmp_path, monkeypatch):
    """An ``up`` killed before it recorded a server left its run folder and its lock file
    in the run folder (10 folders, 16 locks after 36 kills), naming nothing ``--stale``
    could check; a run folder now names its maker (PID, start time), and ``--stale``
    removes those of makers gone that no entry names, and lock files no ``up`` holds."""
    import fcntl

    from shrink.testbed import registry
    from shrink.testbed.private import RUN_ROOT_MAKER, new_run_root

    run = Path(tempfile.mkdtemp(prefix="sr-"))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    try:
        base = registry.private_dir()
        mine = new_run_root(base, tmp_path / "s.json", None)  # an up still starting
        me = process.proc_info(os.getpid())
        assert (mine / RUN_ROOT_MAKER).read_text().split() == [str(me.pid), str(me.starttime)]
        gone = _left_by(base, "up-s-aaaaaaaa", me.pid, me.starttime + 1)  # PID reused since
        old_style = base / "up-s-bbbbbbbb"  # made before run folders named their maker
        old_style.mkdir()
        planted = base / "up-x-cccccccc"
        planted.symlink_to(_left_by(tmp_path, "elsewhere", me.pid, me.starttime + 1))
        free = base / "up-0123456789abcdef.lock"
        free.write_text("4242\n")
        held = base / "up-fedcba9876543210.lock"
        held.write_text(f"{os.getpid()}\n")
        fd = os.open(held, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            assert registry.clear_killed_ups() == [free, gone]
        finally:
            os.close(fd)
        assert mine.is_dir() and old_style.is_dir() and planted.is_symlink() and held.exists()
        assert (tmp_path / "elsewhere" / "r0").is_dir()
    finally:
        shutil.rmtree(run, ignore_errors=True)


def test_an_entry_that_cannot_be_read_keeps_every_run_folder(tmp_path, monkeypatch):
    from shrink.testbed import registry

    run = Path(tempfile.mkdtemp(prefix="sr-"))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    try:
        base = registry.private_dir()
        me = process.proc_info(os.getpid())
        gone = _left_by(base, "up-s-aaaaaaaa", me.pid, me.starttime + 1)
        (base / "testbed-0123456789abcdef.json").write_text("{")  # damaged
        assert registry.clear_killed_ups() == [] and gone.is_dir()
    finally:
        shutil.rmtree(run, ignore_errors=True)


def test_down_under_another_private_folder_names_the_run_folder_it_left(tmp_path, monkeypatch,
                                                                         machine):  # fmt: skip
    """``up`` under one SHRINK_RUN_DIR, ``down`` without it: the servers stopped ("r0:
    stopped 4 processes", exit 0), and the run folder with the servers' configs and logs
    was left in the other folder without a word."""
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.share import Share
    from shrink.testbed import lifecycle
    from shrink.testbed.config import ServerSettings
    from shrink.testbed.fake_recipe import FakeRecipe

    # (short folders: a socket's path under pytest's worker folders was too long)
    first, other = Path(tempfile.mkdtemp(prefix="sr-")), Path(tempfile.mkdtemp(prefix="sr-"))
    try:
        monkeypatch.setenv("SHRINK_RUN_DIR", str(first))
        (tmp_path / "doc").mkdir()
        state = tmp_path / "s.json"
        lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
                     cgroups="no", server=ServerSettings(FakeRecipe()))  # fmt: skip
        [root] = [p for p in first.iterdir() if p.name.startswith("up-")]
        monkeypatch.setenv("SHRINK_RUN_DIR", str(other))
        r = CliRunner().invoke(app, ["testbed", "down", "--state", str(state)])
        assert r.exit_code == 0, r.output
        assert f"note: left {root} (the servers' configs and logs)" in r.output
        monkeypatch.setenv("SHRINK_RUN_DIR", str(first))  # as the note says: nothing left
        r = CliRunner().invoke(app, ["testbed", "down", "--state", str(state)])
        assert r.exit_code == 0 and "note" not in r.output and not root.exists(), r.output
    finally:
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def test_a_state_that_cannot_be_marked_stopped_says_the_testbed_is_down(tmp_path, monkeypatch):
    """down with the state file immutable (chattr +i): it stopped the servers, then said
    only "error: s.json: cannot write (Operation not permitted, EPERM)", and left their
    entry in the private folder."""
    import errno

    from shrink.errors import TestbedError, WriteError
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.testbed import ServerSettings, lifecycle
    from shrink.testbed.fake_recipe import FakeRecipe
    from shrink.testbed.state import TestbedState

    run = tmp_path / "run"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    (tmp_path / "doc").mkdir()
    m = Machine("one", sockets=1, cores_per_socket=1, cpus=((min(os.sched_getaffinity(0)),),))
    state = tmp_path / "s.json"
    st = lifecycle.up(tmp_path / "doc", m, Share.parse("all", m), state_path=state, port=0,
                      cgroups="no", server=ServerSettings(FakeRecipe()))  # fmt: skip
    pids = [p for r in st.replicas for p in r.pids]

    def refused(self, path):
        raise WriteError(path, OSError(errno.EPERM, "Operation not permitted"))

    monkeypatch.setattr(TestbedState, "write", refused)
    with pytest.raises(TestbedError) as err:
        lifecycle.down(state)
    assert str(err.value) == (
        f"the testbed is down (stopped {len(pids)} process(es)), but {state}: cannot write "
        "(Operation not permitted, EPERM); the state file still says it runs"
    )
    assert pids and wait_gone(pids, 5) == []
    # its entry stays, noting the stop (so a second down knows), and counts as no testbed
    from shrink.testbed import registry

    assert registry.recorded(state).stopped is not None and registry.running() == []


def test_a_second_down_puts_back_no_irq_affinity(tmp_path, monkeypatch):
    """down put back the IRQ affinities up --apply-irq changed; a second down of the same
    (stopped) state wrote them again, over what a testbed up since had set, and moved its
    stop time."""
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.testbed import ServerSettings, lifecycle, teardown
    from shrink.testbed.fake_recipe import FakeRecipe
    from shrink.testbed.state import TestbedState

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "doc").mkdir()
    m = Machine("one", sockets=1, cores_per_socket=1, cpus=((min(os.sched_getaffinity(0)),),))
    state = tmp_path / "s.json"
    lifecycle.up(tmp_path / "doc", m, Share.parse("all", m), state_path=state, port=0,
                 cgroups="no", server=ServerSettings(FakeRecipe()))  # fmt: skip
    lifecycle.down(state)
    st = TestbedState.read(state)
    st.irq = {"5": "0"}  # as the first down leaves a state up --apply-irq wrote
    st.write(state)
    first = st.stopped
    assert first is not None
    written = []
    monkeypatch.setattr(teardown, "_restore_irq", lambda st: written.append(st.irq) or [])
    lifecycle.down(state)
    assert written == []
    assert TestbedState.read(state).stopped == first


def test_a_second_down_of_a_state_that_cannot_be_written_puts_back_no_irq(tmp_path, monkeypatch):
    """down with the state file immutable (chattr +i) put the IRQ affinities back, could
    not mark the file stopped and removed the entry in the private folder; a second down
    read the file, which still says it runs, and put them back again (over what a
    testbed up since had set). The stop is now noted in that entry."""
    import errno

    from shrink.errors import TestbedError, WriteError
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.testbed import ServerSettings, lifecycle, registry
    from shrink.testbed.fake_recipe import FakeRecipe
    from shrink.testbed.state import TestbedState

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "doc").mkdir()
    m = Machine("one", sockets=1, cores_per_socket=1, cpus=((min(os.sched_getaffinity(0)),),))
    state = tmp_path / "s.json"
    st = lifecycle.up(tmp_path / "doc", m, Share.parse("all", m), state_path=state, port=0,
                      cgroups="no", server=ServerSettings(FakeRecipe()))  # fmt: skip
    st.irq = {"5": "0"}  # as up --apply-irq records them
    st.write(state)
    registry.record(state, st, owned=False)
    written = []
    monkeypatch.setattr(teardown, "_restore_irq", lambda st: written.append(st.irq) or [])

    def refused(self, path):
        raise WriteError(path, OSError(errno.EPERM, "Operation not permitted"))

    monkeypatch.setattr(TestbedState, "write", refused)
    for _ in range(2):
        with pytest.raises(TestbedError, match="the state file still says it runs"):
            lifecycle.down(state)
    assert written == [{"5": "0"}]
    assert [p for p, _ in registry.running()] == [] and registry.stale() == []
    assert teardown.down_stale() == [] and written == [{"5": "0"}]
    monkeypatch.undo()  # (chattr -i): the next down writes the file and drops the entry
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run"))
    assert TestbedState.read(state).stopped is None
    lifecycle.down(state)
    assert TestbedState.read(state).stopped is not None
    assert not list((tmp_path / "run").glob("testbed-*.json"))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chattr") is None, reason="chattr +i")
def test_down_stale_says_a_run_root_it_could_not_remove(tmp_path, monkeypatch):
    """``down --state`` warned of a run root it could not remove (a chattr-locked file,
    a mount in it); ``down --stale`` removed what it could of one and said nothing."""
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.machine import Machine
    from shrink.share import Share
    from shrink.testbed import ServerSettings, lifecycle
    from shrink.testbed.fake_recipe import FakeRecipe

    run = Path(tempfile.mkdtemp(prefix="sr-"))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    (tmp_path / "doc").mkdir()
    m = Machine("one", sockets=1, cores_per_socket=1, cpus=((min(os.sched_getaffinity(0)),),))
    state = tmp_path / "s.json"
    st = lifecycle.up(tmp_path / "doc", m, Share.parse("all", m), state_path=state, port=0,
                      cgroups="no", server=ServerSettings(FakeRecipe()))  # fmt: skip
    root = Path(st.replicas[0].run_dir).parent
    locked = root / "kept.log"
    locked.write_text("x\n")
    state.unlink()  # stale: its state file is gone
    subprocess.run(["chattr", "+i", str(locked)], check=True)
    try:
        r = CliRunner().invoke(app, ["testbed", "down", "--stale"])
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
        shutil.rmtree(run, ignore_errors=True)
    assert r.exit_code == 0, r.output
    assert "its state file" in r.output and "is gone; stopped" in r.output, r.output
    said = f"warning: left {root} (the servers' configs and logs): {locked} is immutable"
    assert said in r.output, r.output
