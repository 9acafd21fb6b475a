"""Two ``predict --target testbed`` at once: each brought up its own testbed on the
same server CPUs (``up`` only warned, into the state's notes, which predict does not
print), and each measured about half a server without a word. A predict now refuses to
start a testbed on CPUs another running testbed holds (its own paired full run's
excepted)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from shrink import processes
from shrink.errors import TestbedError
from shrink.providers import refuse_crowded
from shrink.testbed import registry
from shrink.testbed.state import TestbedState


def _running_on_cpu_1(tmp_path, monkeypatch, state, pid=None):
    """A testbed recorded running (this process its server, or ``pid``) on CPU 1, at
    ``state``."""
    from tests.helpers.testbed import lighttpd_replica

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "private"))
    pid = os.getpid() if pid is None else pid
    live = replace(lighttpd_replica(), cpus=[1], masters=[pid], processes={"lighttpd": [pid]},
                   starttimes={pid: processes.proc_info(pid).starttime}, pinned={})  # fmt: skip
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{}\n")
    registry.record(state, TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t0"),
                    owned=False)  # fmt: skip


@pytest.mark.compute
def test_a_predicts_testbed_on_cpus_another_testbed_holds_is_refused(tmp_path, monkeypatch):
    other = tmp_path / "first" / "testbed-0.json"  # (another predict's)
    _running_on_cpu_1(tmp_path, monkeypatch, other)
    run = tmp_path / "second"
    run.mkdir()
    with pytest.raises(TestbedError) as err:
        refuse_crowded((1,), run / "testbed-0.json", run)
    assert str(err.value) == (
        f"CPU(s) [1] also run the testbed of {other.resolve()} (started t0); the two disturb "
        "each other's measurements: the testbed this run would start there is not started "
        "(two servers on one CPU each measure part of it); wait for the other to end, bring "
        "it down, or give --server-cpus apart from its CPUs"
    )
    refuse_crowded((0,), run / "testbed-0.json", run)  # (other CPUs: fine)
    registry.forget(other)


@pytest.mark.compute
def test_a_predicts_own_paired_testbed_is_not_another(tmp_path, monkeypatch):
    run = tmp_path / "pred"
    _running_on_cpu_1(tmp_path, monkeypatch, run / "testbed-0.json")  # its scaled-down one
    refuse_crowded((0, 1), run / "testbed-1.json", run)  # its full one, opened beside it
    registry.forget(run / "testbed-0.json")


@pytest.mark.compute
def test_a_testbed_whose_servers_are_all_gone_holds_no_cpu(tmp_path, monkeypatch):
    # A testbed brought up, then its servers killed (the OOM killer, a kill -9): recorded
    # until brought down, it was said to run on CPU 1, and a predict there was refused
    # ("wait for the other to end") for as long as nobody brought it down.
    server = subprocess.Popen(["sleep", "60"])
    other = tmp_path / "first" / "testbed-0.json"
    _running_on_cpu_1(tmp_path, monkeypatch, other, server.pid)
    run = tmp_path / "second"
    run.mkdir()
    with pytest.raises(TestbedError):
        refuse_crowded((1,), run / "testbed-0.json", run)  # (while it runs)
    server.kill()
    server.wait()
    refuse_crowded((1,), run / "testbed-0.json", run)
    registry.forget(other)


def test_two_predicts_starting_at_once_do_not_both_pass_the_check(tmp_path, monkeypatch):
    """The check was made before ``up``, not held: a predict whose check came while
    another's ``up`` was starting its servers (not yet recorded) passed it, and both ran on
    one CPU. Now the check waits for the other's testbed to be recorded, and finds it."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    from shrink import testbed
    from shrink.providers import TestbedProvider
    from shrink.share import Share
    from shrink.target import GeneratorPlacement
    from shrink.topology import discover

    private = tmp_path / "private"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    registry.private_dir()
    other = tmp_path / "first" / "testbed-0.json"
    # The other predict: in its critical section (the folder's lock), its testbed recorded
    # only after a while, as ``up`` records it once its first server runs.
    code = textwrap.dedent("""
        import fcntl, os, sys, time
        from dataclasses import replace
        from pathlib import Path
        from tests.helpers.testbed import lighttpd_replica
        from shrink import processes
        from shrink.testbed import registry
        from shrink.testbed.state import TestbedState

        fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(0.5)
        pid = os.getpid()
        live = replace(lighttpd_replica(), cpus=[1], masters=[pid], pinned={},
                       processes={"lighttpd": [pid]},
                       starttimes={pid: processes.proc_info(pid).starttime})
        p = Path(sys.argv[2])
        p.parent.mkdir(parents=True)
        p.write_text("{}")
        st = TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t0")
        registry.record(p, st, owned=False)
        os.close(fd)
        time.sleep(60)
    """)
    root = Path(__file__).resolve().parents[1]
    first = subprocess.Popen(
        [sys.executable, "-c", code, str(private), str(other)], stdout=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": f"{root}:{root / 'tests'}"}, cwd=root,
    )  # fmt: skip
    ups: list[Path] = []
    monkeypatch.setattr(testbed, "up", lambda *a, state_path, **kw: ups.append(state_path))
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        machine = discover()
        (tmp_path / "doc").mkdir()
        provider = TestbedProvider(tmp_path / "doc", machine=machine, server_cpus=(1,),
                                   generator=GeneratorPlacement((0,), True),
                                   run_dir=tmp_path / "second")  # fmt: skip
        opened = provider.open(Share.parse("1", machine), "1-replica")
        with pytest.raises(TestbedError, match=r"CPU\(s\) \[1\] also run the testbed of "):
            opened.__enter__()
        assert ups == [] and not (tmp_path / "second").exists()
    finally:
        first.kill()
        first.wait()
        registry.forget(other)


@pytest.mark.compute
def test_the_start_lock_held_by_this_process_itself_is_not_waited_on(tmp_path, monkeypatch):
    """The private folder locked by this very process under another open (SHRINK_RUN_DIR
    naming the predict's own -o folder, which the run holds by its own flock) was waited
    on for 120 s, then said held by "a process this user cannot see": a process cannot
    wait for itself. It goes on unguarded, at once."""
    import time

    from shrink.folder_locks import hold_output, release_outputs
    from shrink.providers import starting_alone

    private = tmp_path / "pred"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    registry.private_dir()  # (made by an earlier testbed up)
    hold_output(private, "dir")
    try:
        began = time.monotonic()
        with starting_alone(wait=3.0):
            pass
        assert time.monotonic() - began < 2.0
    finally:
        release_outputs()


@pytest.mark.compute
def test_a_private_folder_replaced_after_its_check_is_not_an_internal_error(tmp_path, monkeypatch):
    """The private folder swapped for a symlink (or removed) between its check and the
    lock's open: the open's OSError (ELOOP, ENOENT) left starting_alone uncaught, where a
    folder that cannot be locked goes on unguarded."""
    from shrink.providers import starting_alone

    (tmp_path / "real").mkdir()
    (tmp_path / "swapped").symlink_to(tmp_path / "real")
    monkeypatch.setattr(registry, "private_dir", lambda: tmp_path / "swapped")
    with starting_alone(wait=1.0):
        pass
    monkeypatch.setattr(registry, "private_dir", lambda: tmp_path / "gone")
    with starting_alone(wait=1.0):
        pass


def _holding_start_lock(private, expect: float, hold: float) -> subprocess.Popen:
    """A child process in ``starting_alone(expect=...)`` on ``private`` for ``hold`` s."""
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent("""
        import sys, time
        from shrink.providers import starting_alone
        with starting_alone(expect=float(sys.argv[1])):
            print("held", flush=True)
            time.sleep(float(sys.argv[2]))
    """)
    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(expect), str(hold)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root), "SHRINK_RUN_DIR": str(private)}, cwd=root,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_wait_for_the_start_lock_is_said_and_ends_at_the_holders_own_bound(
    tmp_path, monkeypatch, capsys
):
    """The second predict waited for the start lock without a word, for a fixed 120 s
    whatever the holder did. It now says so at once, naming the holder (PID, command),
    and waits as long as the holder's own start may take (noted by the holder: here
    1.5 s, a stuck holder), not its own fixed bound (here 20 s)."""
    import time

    from shrink.providers import starting_alone

    private = tmp_path / "private"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    registry.private_dir()
    child = _holding_start_lock(private, expect=1.5, hold=60)
    try:
        began = time.monotonic()
        held = rf"another run \(PID {child.pid} \(.*python"
        with pytest.raises(TestbedError, match=held), starting_alone(wait=20.0):
            pass
        assert time.monotonic() - began < 10.0
        said = capsys.readouterr().err
        assert (
            said.startswith(f"waiting for another run (PID {child.pid} (") and said.count("\n") == 1
        )
    finally:
        child.kill()
        child.wait()


def test_a_holder_whose_start_takes_longer_than_the_fixed_wait_is_waited_for(tmp_path, monkeypatch):
    """A holder starting many replicas (its bound: 15 s each) took longer than the fixed
    wait, and the second predict refused it as stuck. Here the fixed wait is 1 s, the
    holder's own bound 30 s, and it is done at 2.5 s: the second goes on."""
    import time

    from shrink.providers import starting_alone

    private = tmp_path / "private"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    registry.private_dir()
    child = _holding_start_lock(private, expect=30, hold=2.5)
    try:
        with starting_alone(wait=1.0):
            took = time.monotonic()
        assert child.wait(timeout=30) == 0 and time.monotonic() - took < 1.0
        assert not (private / ".starting").exists()  # (the holder's note gone with it)
    finally:
        child.kill()
        child.wait()


def _late_noting_holder(private, note: str, hold: float) -> subprocess.Popen:
    """A child process holding the start lock on ``private`` for ``hold`` s, that writes
    ``note`` (its PID for ``{pid}``, a bound ``{until}`` 30 s on) 0.5 s after taking it."""
    import sys
    import textwrap

    code = textwrap.dedent("""
        import fcntl, os, sys, time
        fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(0.5)
        note = sys.argv[2].format(pid=os.getpid(), until=time.time() + 30)
        with open(os.path.join(sys.argv[1], ".starting"), "w") as f:
            f.write(note)
        time.sleep(float(sys.argv[3]))
    """)
    child = subprocess.Popen([sys.executable, "-c", code, str(private), note, str(hold)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_holders_note_written_after_the_first_look_is_read_before_refusing(tmp_path, monkeypatch):
    """The holder takes the lock, then notes its bound: a second predict that looked in
    between found no note, took the fixed wait (here 1 s) and refused a holder whose own
    bound (30 s) was far off and that was done at 2.5 s."""
    import time

    from shrink.providers import starting_alone

    private = tmp_path / "private"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    registry.private_dir()
    child = _late_noting_holder(private, "{pid} {until}\n", hold=2.0)
    try:
        with starting_alone(wait=1.0):
            took = time.monotonic()
        assert child.wait(timeout=30) == 0 and time.monotonic() - took < 1.0
    finally:
        child.kill()
        child.wait()


def _hung(signum, frame):  # type: ignore[no-untyped-def]
    raise AssertionError("waited for ever")


def test_a_holders_note_of_no_finite_bound_is_not_waited_on_for_ever(tmp_path, monkeypatch):
    """A note whose bound is 'nan' (or 'inf'): time.time() > nan is never true, and the
    second predict waited for ever; it is read as no note (the fixed wait)."""
    import signal
    import time

    from shrink.errors import TestbedError
    from shrink.providers import starting_alone

    private = tmp_path / "private"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    registry.private_dir()
    child = _late_noting_holder(private, "{pid} nan\n", hold=30.0)
    try:
        time.sleep(1.0)  # (noted)
        signal.signal(signal.SIGALRM, _hung)
        signal.alarm(15)  # (waited for ever without the fix: a failure, not a hang)
        with pytest.raises(TestbedError), starting_alone(wait=1.0):
            pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        child.kill()
        child.wait()


@pytest.mark.compute
def test_an_older_state_without_start_times_does_not_count_a_reused_pid_as_its_server():
    """A state of an older ``up`` records PIDs and no start times: a PID reused since by
    another process (after a reboot, or days later) counted the testbed running, and a
    predict on its CPUs was refused for good. What it does record is when it was
    written ("started", once its servers ran): a process begun well after that is not
    its server. Here the "server" is this test's process, begun seconds ago."""
    from datetime import UTC, datetime, timedelta

    from tests.helpers.testbed import lighttpd_replica

    pid = os.getpid()
    old = replace(lighttpd_replica(), cpus=[1], masters=[pid], processes={"lighttpd": [pid]},
                  starttimes={}, pinned={})  # fmt: skip

    def state(started: datetime) -> TestbedState:
        when = started.isoformat(timespec="seconds")
        return TestbedState([old], {}, {"name": "1-replica"}, {}, "doc", {}, when)

    now = datetime.now(UTC)
    assert not registry.serving(state(now - timedelta(days=2)))  # (its PID taken since)
    assert registry.serving(state(now))  # (this process could be the one it records)
    assert registry.serving(TestbedState([old], {}, {"name": "1-replica"}, {}, "doc", {}, "?"))
