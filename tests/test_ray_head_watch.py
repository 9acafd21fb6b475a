"""The watch on a ``ray:local`` cluster's head, and the end of the cluster's processes,
with stand-in processes (no Ray).

Live, the head stopped mid-level (SIGTERM or kill -9 of its gcs_server and raylet) left
the sweep waiting Ray's 60 s, then Ray's core ended it with its own line only: the kept
levels unsaid, the private Ray folder and the run logs' mark left, and the cluster's
agents running, orphaned, deaf to SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from shrink import interrupts
from shrink.replay import ray_local

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(autouse=True)
def _interrupts_as_they_were():
    """Each test's interrupts state and signal handlers put back after it: install()'s
    taken signals left behind made a later test's working() block end by setting them
    SIG_IGN in the test process, which every process the suite started after it then
    inherited (a sweep sent SIGTERM ran to its end: 20 tests failed in one CI run)."""
    handlers = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    state = {
        name: (value.copy() if isinstance(value, (list, dict)) else value)
        for name, value in vars(interrupts).items()
        if name.startswith("_") and isinstance(value, (list, dict)) and not name.startswith("__")
    }
    yield
    for name, value in state.items():
        current = getattr(interrupts, name)
        current.clear()
        current.update(value) if isinstance(current, dict) else current.extend(value)
    for s, h in handlers.items():
        signal.signal(s, h)


def _wait(cond, limit: float = 5.0) -> bool:
    until = time.monotonic() + limit
    while not cond() and time.monotonic() < until:
        time.sleep(0.02)
    return cond()


def test_the_watch_tells_a_head_process_that_ended_even_unreaped():
    head = subprocess.Popen(SLEEPER)
    seen: list[tuple[str, int]] = []
    watch = ray_local.HeadWatch({"gcs_server": head.pid}, lambda *a: seen.append(a), every=0.02)
    watch.start()
    try:
        time.sleep(0.2)
        assert seen == []  # running: nothing said
        head.kill()  # not waited for: a zombie, as the head is until Ray reaps it
        assert _wait(lambda: seen), "the head's end was not seen"
        assert seen == [("gcs_server", head.pid)] and watch.ended == seen[0]
    finally:
        watch.close()
        head.kill()
        head.wait()


def test_the_watch_tells_a_closed_gcs_port_while_its_process_runs():
    # a GCS stopped by SIGTERM closes its port seconds before its process ends
    head = subprocess.Popen(SLEEPER)
    srv = socket.create_server(("127.0.0.1", 0))
    seen: list[tuple[str, int]] = []
    watch = ray_local.HeadWatch(
        {"gcs_server": head.pid}, lambda *a: seen.append(a), every=0.02,
        port=srv.getsockname()[:2],
    )  # fmt: skip
    watch.start()
    try:
        time.sleep(0.2)
        assert seen == []
        srv.close()
        assert _wait(lambda: seen), "the closed port was not seen"
        assert seen == [("gcs_server", head.pid)]
    finally:
        watch.close()
        head.kill()
        head.wait()


def test_the_heads_end_stops_the_main_thread_with_its_own_reason(monkeypatch):
    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    head = subprocess.Popen(SLEEPER)
    monkeypatch.setattr(ray_local, "_watch", [])
    interrupts.install()
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt), interrupts.working():
            watch = ray_local.HeadWatch({"raylet": head.pid}, ray_local._stop_for_head, 0.02)
            ray_local._watch.append(watch.start())
            head.kill()
            time.sleep(20)  # the main thread's wait (Ray's get looks for signals so)
        assert time.monotonic() - start < 5
        assert ray_local.head_gone()
        assert interrupts.stopped_by() == (
            f"the local Ray cluster's head ended (its raylet, PID {head.pid}, is gone: "
            "stopped or killed) mid-run"
        )
        assert interrupts.exit_status() == 1
        ray_local.settle()  # seen: returns at once
    finally:
        head.wait()
        for s, h in saved.items():
            signal.signal(s, h)
        interrupts._reason[0] = ""


def test_no_stop_is_sent_outside_a_commands_work():
    assert not interrupts.stop_main("a reason")
    assert interrupts.stop_reason() == ""


DEAF = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "f = open(sys.argv[1], 'w')\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_every_process_of_the_cluster_is_ended_and_no_other(tmp_path):
    # The agents of a stopped head: orphaned (a session of their own), SIGTERM ignored,
    # a log file open in the cluster's session folder. Another process of this user,
    # with a file open elsewhere (another cluster's), stays.
    mine, other = tmp_path / "ray-a", tmp_path / "ray-b"
    (mine / "r" / "logs").mkdir(parents=True)
    (other / "logs").mkdir(parents=True)
    procs = [
        subprocess.Popen([sys.executable, "-c", DEAF, str(path)], stdout=subprocess.PIPE,
                         start_new_session=True)
        for path in (mine / "r" / "logs" / "agent.out", other / "logs" / "agent.out")
    ]  # fmt: skip
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        assert ray_local.cluster_pids(str(mine)) == [procs[0].pid]
        killed = ray_local.end_processes(ray_local.cluster_pids(str(mine)), wait=0.3)
        assert killed == [procs[0].pid]  # SIGTERM left it: SIGKILL
        assert procs[0].wait(5) == -signal.SIGKILL
        assert procs[1].poll() is None
    finally:
        for p in procs:
            p.kill()
            p.wait()


class _Ray:
    shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1


def test_at_exit_a_gone_head_is_not_waited_for(tmp_path, monkeypatch):
    # Ray's shutdown waits for the head without end: skipped; the folder still goes
    base = tmp_path / "ray-x"
    (base / "r").mkdir(parents=True)
    ended = ray_local.HeadWatch({}, lambda *a: None)
    ended.ended = ("gcs_server", 1)
    monkeypatch.setattr(ray_local, "_watch", [ended])
    ray = _Ray()
    ray_local.shutdown_and_remove(ray, str(base))
    assert ray.shutdowns == 0 and not base.exists()
    monkeypatch.setattr(ray_local, "_watch", [])
    base.mkdir()
    ray_local.shutdown_and_remove(ray, str(base))
    assert ray.shutdowns == 1 and not base.exists()


def test_a_ray_error_that_comes_before_the_watch_sees_the_head_end_is_the_heads_stop(
    monkeypatch,
):
    """Live, one stop in three: Ray's RPC CANCELLED came out of a call placing the next
    level's slot before the watch's next look, and the sweep ended 'internal error
    (RpcError ...); this is a bug in shrink', exit 70."""
    from shrink.replay import cluster

    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    head = subprocess.Popen(SLEEPER)
    monkeypatch.setattr(ray_local, "_watch", [])

    def placing(*_args):
        head.kill()  # the head ends; Ray's call fails at once, the watch not yet looking
        raise RuntimeError("RPC error: CANCELLED")

    monkeypatch.setattr(cluster, "_connect", placing)
    interrupts.install()
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.working():
            watch = ray_local.HeadWatch({"raylet": head.pid}, ray_local._stop_for_head, 0.3)
            ray_local._watch.append(watch.start())
            cluster.run_on_cluster(None, [], None, {}, {})  # type: ignore[arg-type]
        assert interrupts.stopped_by().startswith("the local Ray cluster's head ended")
        assert interrupts.exit_status() == 1
    finally:
        for watch in ray_local._watch:
            watch.close()
        head.wait()
        for s, h in saved.items():
            signal.signal(s, h)
        interrupts._reason[0] = ""


def test_a_ray_error_with_the_head_alive_is_said_after_one_wait_not_two(monkeypatch):
    """The placement's failure settles (up to 1 s) and raises; run_on_cluster's catch
    settled the same error again: 2 s before a Ray error with the head alive was said."""
    from shrink.replay import cluster

    head = subprocess.Popen(SLEEPER)
    monkeypatch.setattr(ray_local, "_watch", [])
    monkeypatch.setattr(ray_local, "_settled", [-1e9], raising=False)

    def placing(*_args):
        ray_local.settle()  # as the except of pg.ready's failure does
        raise RuntimeError("cannot place")

    monkeypatch.setattr(cluster, "_connect", placing)
    watch = ray_local.HeadWatch({"raylet": head.pid}, lambda *a: None, 0.05)
    ray_local._watch.append(watch.start())
    try:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="cannot place"):
            cluster.run_on_cluster(None, [], None, {}, {})  # type: ignore[arg-type]
        assert 0.9 < time.monotonic() - start < 1.5
    finally:
        watch.close()
        head.kill()
        head.wait()


def test_a_head_shut_down_by_this_process_stops_no_later_command(monkeypatch):
    """ray.shutdown() called outside shrink (a test's fixture, a program using shrink's
    API) ended the head with the watch still looking: the next command of the process
    was stopped 'the local Ray cluster's head ended', exit 1."""
    from types import SimpleNamespace

    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    head = subprocess.Popen(SLEEPER)
    monkeypatch.setattr(ray_local, "_watch", [])
    connected = [True]
    node = SimpleNamespace(all_processes={"raylet": [SimpleNamespace(process=head)]})
    ray = SimpleNamespace(
        _private=SimpleNamespace(worker=SimpleNamespace(_global_node=node)),
        is_initialized=lambda: connected[0],
    )
    watch = ray_local.start_watch(ray)
    assert watch is not None
    interrupts.install()
    try:
        connected[0] = False  # Ray's shutdown: disconnected first, then the head ended
        head.kill()
        try:
            with interrupts.working():
                time.sleep(1.0)  # a later command's work
        except KeyboardInterrupt:
            pytest.fail(f"the later command was stopped: {interrupts.stopped_by()}")
        assert not ray_local.head_gone() and interrupts.stop_reason() == ""
    finally:
        watch.close()
        head.wait()
        for s, h in saved.items():
            signal.signal(s, h)
        interrupts._reason[0] = ""
