"""The native core's loop thread sees a stop signal itself; a real-time loop on the
server's CPU never waits on the clock.

The Python thread that runs the signal handlers runs below a real-time loop on its
CPU: under load it saw a SIGTERM up to 1.65 s late, and the sends went on meanwhile.
The core now watches the pipe Python's C-level handler writes each signal's number to
(``signal.set_wakeup_fd``), and the kernel hands the stop signals to its loop thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.fake_engines import fake_server_address, options_seen
from helpers.realtime import realtime_allowed
from helpers.servers import LIGHTTPD_SHORT_MAX, static_lighttpd, wait_listening

from shrink import interrupts
from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native, open_loop_trace
from shrink.replay.fake import FakeEngine
from shrink.replay.live import _WindowSampler
from shrink.replay.scaleout import run_engines
from shrink.replay.stopwatch import StopWatch
from shrink.target import GeneratorPlacement

new_core = pytest.mark.skipif(
    not getattr(native._core, "SIGNAL_FD", False),
    reason="the native core is not built, or was built before it watched a signal pipe",
)


@pytest.fixture(scope="module")
def fake():
    with fake_server_address() as address:
        yield address


class _HeldUp(RunLogWriter):
    """A writer whose first flush after ``at`` s of the run holds the Python thread for
    ``hold`` s (a slow disk), with ``signum`` sent to this process meanwhile."""

    def __init__(self, signum: int, at: float = 0.4, hold: float = 1.0) -> None:
        super().__init__(None)
        self.signum, self.at, self.hold = signum, at, hold
        self.sent_at: float | None = None  # monotonic

    def _send(self) -> None:
        self.sent_at = time.monotonic()
        os.kill(os.getpid(), self.signum)

    def maybe_flush(self) -> None:
        super().maybe_flush()
        t0 = self.meta.get("t0")
        if self.sent_at is None and t0 is not None and time.monotonic() - t0 > self.at:
            self.sent_at = -1.0
            threading.Timer(0.05, self._send).start()
            time.sleep(self.hold)


def _run(writer: RunLogWriter, fake: tuple[str, int], rate: float = 1000.0, **kw: Any):
    sched = build_schedule(open_loop_trace("/x", rate, 3.0), 1.0, 3.0, loop=False)
    return native.run_native(sched, EngineConfig(targets=[fake]), writer, **kw)


@new_core
def test_a_stop_signal_ends_the_sends_while_the_python_thread_is_held_up(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interrupts, "_last", [int(signal.SIGINT)])  # (the stop's noted there)
    # an event loop's wake-up descriptor, held before the run: given back after, with
    # the signal's byte passed on to it
    r, w = os.pipe2(os.O_NONBLOCK)
    before = signal.set_wakeup_fd(w)
    try:
        writer = _HeldUp(signal.SIGTERM)
        stats = _run(writer, fake)
        assert signal.set_wakeup_fd(before) == w
        assert bytes([signal.SIGTERM]) in os.read(r, 64)
    finally:
        signal.set_wakeup_fd(before)
        os.close(r)
        os.close(w)
    assert writer.sent_at is not None and writer.sent_at > 0
    log = writer.runlog()
    last = float(np.nanmax(log.column("sent"))) + stats.t0
    # before, the sends went on until the Python thread came back from its flush (1 s)
    assert last - writer.sent_at < 0.3, last - writer.sent_at
    assert stats.interrupted and 300 < len(log) < 2000
    # Python's own handler still ran: the stop is said as SIGTERM's
    # the stop's instant is the loop's (it ends the run's window), not the Python
    # thread's handler's, a second later
    assert 0 <= stats.t0 + stats.extra["stopped_at"] - writer.sent_at < 0.3
    assert "signal_stop_us" not in stats.extra["loop"]
    assert interrupts.received() == signal.SIGTERM


@new_core
def test_a_signal_that_is_not_a_stop_leaves_the_run_alone(fake) -> None:
    # (a signal with a Python handler writes the pipe too: SIGCONT's after a Ctrl-Z)
    seen: list[int] = []
    old = signal.signal(signal.SIGWINCH, lambda s, f: seen.append(s))
    try:
        writer = _HeldUp(signal.SIGWINCH, hold=0.2)
        stats = _run(writer, fake, rate=300.0)
    finally:
        signal.signal(signal.SIGWINCH, old)
    assert seen == [signal.SIGWINCH]
    assert not stats.interrupted and len(writer.runlog()) == 900
    assert signal.set_wakeup_fd(-1) == -1  # (none was held before the run: none after)


@pytest.mark.skipif(not realtime_allowed(), reason="needs SCHED_FIFO (root)")
@pytest.mark.parametrize(("shared", "may_poll"), [(True, False), (False, None)])
def test_an_explicit_realtime_on_the_servers_cpu_is_told_not_to_poll(
    shared: bool, may_poll: bool | None
) -> None:
    cpu = min(os.sched_getaffinity(0))
    engine = options_seen()
    gen = GeneratorPlacement(cpus=(cpu,), allow_overlap=True, realtime=10, engine=engine)
    cfg = EngineConfig(targets=[("127.0.0.1", 9)])
    avoid = {cpu} if shared else set()
    run_engines(open_loop_trace("/x", 100.0, 0.2), cfg, rate_factor=1.0, horizon=0.2,
                generator=gen, avoid_cpus=frozenset(avoid))  # fmt: skip
    assert engine.options[0].get("may_poll") == may_poll


@pytest.mark.live
@new_core
@pytest.mark.skipif(not realtime_allowed(), reason="needs SCHED_FIFO (root)")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_real_time_loop_on_the_servers_cpu_never_waits_on_the_clock(tmp_path: Path) -> None:
    if not Path("/usr/sbin/lighttpd").exists():
        pytest.skip("lighttpd is not installed (make setup installs it as root)")
    cpu = sorted(os.sched_getaffinity(0))[1]
    conf, port = static_lighttpd(tmp_path, max_keep_alive_requests=LIGHTTPD_SHORT_MAX)
    proc = subprocess.Popen(["/usr/sbin/lighttpd", "-D", "-f", str(conf)],
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        os.sched_setaffinity(proc.pid, {cpu})
        wait_listening(port, proc)
        gen = GeneratorPlacement(cpus=(cpu,), allow_overlap=True, realtime=10, engine="native")
        trace = open_loop_trace("/static/file1k.bin", 90_000.0, 2.0)
        cfg = EngineConfig(targets=[("127.0.0.1", port)])
        _, run = run_engines(trace, cfg, rate_factor=1.0, horizon=2.0, generator=gen,
                             avoid_cpus=frozenset({cpu}))  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # before, it polled 6,000+ us of 2 s there, time taken from the server
    assert [s.extra["loop"]["polled_us"] for s in run.stats] == [0]


@new_core
def test_engine_processes_stopped_before_their_zero_end_at_once(fake) -> None:
    """The engine processes wait for the run's zero with the stop signals blocked (the
    loop thread takes them once it runs): a stop in the parent before it sent the zero
    left them waiting for it forever, its SIGTERM held, and the stopped command hung at
    its exit joining them. Now the parent closes their pipes: they end at once."""
    from shrink.processes import own_children

    before = own_children()

    def stopped(t0: float) -> None:
        raise KeyboardInterrupt  # a stop signal between the handshake and the zero

    gen = GeneratorPlacement(processes=2, engine="native")
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_engines(open_loop_trace("/x", 100.0, 1.0), EngineConfig(targets=[fake]),
                        rate_factor=1.0, horizon=1.0, generator=gen, on_start=stopped)  # fmt: skip
        took = time.monotonic() - start
        left = own_children() - before
    finally:
        for pid in own_children() - before:  # (without the fix: never to end)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert left == set() and took < 5.0, (left, took)


class _ParentsPolicy:
    """A stand-in engine that notes, once its run began, the scheduling of the thread that
    waits for it in the parent (the parent's main thread: its PID)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, schedule: Any, config: Any, writer: Any, **options: Any) -> Any:
        stats = FakeEngine()(schedule, config, writer, **options)
        parent = os.getppid()
        policy, prio = os.sched_getscheduler(parent), os.sched_getparam(parent).sched_priority
        self.path.with_name(f"{self.path.name}.{os.getpid()}").write_text(f"{policy} {prio}")
        return stats


@pytest.mark.skipif(not realtime_allowed(), reason="needs SCHED_FIFO (root)")
def test_the_parent_waits_for_real_time_engines_above_them(tmp_path: Path) -> None:
    """A SIGTERM to a scaled-out run's parent is passed on to its engine processes by its
    waiting thread: at normal priority, beside real-time engines on every CPU it may use,
    they sent on 0-21 ms after it (median 7 ms at 150,000/s); it now waits above them."""
    cpu = min(os.sched_getaffinity(0))
    engine = _ParentsPolicy(tmp_path / "policy")
    gen = GeneratorPlacement(cpus=(cpu, cpu), processes=2, realtime=10, engine=engine)
    before = (os.sched_getscheduler(0), os.sched_getparam(0))
    run_engines(open_loop_trace("/x", 100.0, 0.3), EngineConfig(targets=[("127.0.0.1", 9)]),
                rate_factor=1.0, horizon=0.3, generator=gen)  # fmt: skip
    seen = sorted(p.read_text() for p in tmp_path.iterdir())
    assert seen == [f"{os.SCHED_FIFO} 11"] * 2, seen
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == before  # as it was after


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop


@new_core
def test_a_stop_signal_while_the_zero_is_awaited_stops_at_once(fake) -> None:
    # The stop signals were blocked on this thread from before the zero: one that came
    # while it was awaited (on_ready: another engine process's readiness) was held
    # until the loop ran, 3 s here
    def ready() -> float:
        time.sleep(3.0)
        return time.monotonic() + 0.05

    old = signal.signal(signal.SIGTERM, _raise_stop)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    began = time.monotonic()
    try:
        timer.start()
        with pytest.raises(_Stop):
            _run(RunLogWriter(None), fake, on_ready=ready)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert time.monotonic() - began < 1.5


@new_core
def test_a_stop_signal_while_engine_processes_get_ready_stops_them_at_once(fake) -> None:
    # One engine process ready, waiting for the other's zero with its SIGTERM blocked:
    # the parent's clean-up terminated it and waited 5 s per process (10.5 s here)
    def engine(sched: Any, config: EngineConfig, writer: RunLogWriter, **kw: Any) -> Any:
        if writer.meta.get("part") == 1:
            time.sleep(3.0)  # (a big schedule to build)
        return native.run_native(sched, config, writer, **kw)

    gen = GeneratorPlacement(processes=2, engine=engine, realtime=0, awake=False)
    old = signal.signal(signal.SIGTERM, _raise_stop)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    began = time.monotonic()
    try:
        timer.start()
        with pytest.raises(_Stop):
            run_engines(open_loop_trace("/x", 100.0, 1.0), EngineConfig(targets=[fake]),
                        rate_factor=1.0, horizon=1.0, generator=gen)  # fmt: skip
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert time.monotonic() - began < 3.0


def _blocked(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk")


@pytest.mark.parametrize(
    "make",
    [
        lambda: StopWatch(),
        lambda: _WindowSampler((time.monotonic() + 0.5,) * 2, []),
    ],
)
def test_a_runs_helper_threads_leave_the_stop_signals_to_others(make: Any) -> None:
    # (they inherited the block from a run's zero; now, started outside one, they block
    # them themselves, or the kernel may hand a SIGTERM to them, below the loop)
    thread = make()
    thread.start()
    try:
        time.sleep(0.1)
        assert thread.native_id is not None
        mask = _blocked(thread.native_id)
        for sig in interrupts.STOP_SIGNALS:
            assert mask & (1 << (sig - 1)), sig.name
        assert not _blocked(threading.get_native_id()) & (1 << (signal.SIGTERM - 1))
    finally:
        thread.stop.set()
        thread.join(timeout=5)


_SECOND_STOP_IN_AN_ENGINE_PROCESS = """
import os, signal, time
from shrink.replay import scaleout

def stop(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, stop)  # as the parent's handler, inherited by the fork

class Writer:
    meta, error = {}, None
    def __init__(self, *args):
        pass
    def discard(self):  # the second stop comes while it tidies up
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)

class Pipe:
    def send(self, message):
        print("sent", message[0])
    def close(self):
        print("closed")

def engine(*args, **options):
    raise KeyboardInterrupt  # the first stop

scaleout.build_schedule = lambda trace, **params: None
scaleout.RunLogWriter = Writer
scaleout._child(Pipe(), None, None, {}, None, "x", {}, engine=engine)
print("returned")
"""


def test_an_engine_process_stopped_twice_reports_without_a_traceback() -> None:
    """`sweep --processes 2 --engine python` under `timeout -s TERM`: an engine process
    got the stop twice (timeout's to the process group, and the parent's), and the second
    one, raised while it tidied up after the first, ended it with a traceback, its
    report to the parent unsent."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", _SECOND_STOP_IN_AN_ENGINE_PROCESS], cwd=root,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.stdout.split("\n")[:3] == ["sent error", "closed", "returned"], r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


class _EndsOnTheGroupsStop:
    """An engine process the stop to the process group ended in its zero wait, before its
    engine took stop signals: it reports an error, not a stopped run. Its parent gets the
    same stop (here: sent to it by each process)."""

    def __call__(self, schedule: Any, config: Any, writer: Any, **options: Any) -> Any:
        options["on_ready"]()
        os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(0.3)
        raise KeyboardInterrupt


def test_a_stop_that_ends_the_engine_processes_before_their_engines_took_it_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
):
    """`timeout -s TERM 2.2 shrink sweep ... --processes 2 --engine python`: the stop came
    as the engine processes waited for their zero, ended both with an error, and the
    parent, which had taken the stop and passed it on, returned as if two generators
    were lost: the sweep went on to its last level and exited 0 ("0.0 req/s",
    "part of the generator was gone"). The stop is the run's now."""
    monkeypatch.setattr(interrupts, "_last", [int(signal.SIGINT)])  # noted below, put back
    cpus = sorted(os.sched_getaffinity(0))[:2]
    gen = GeneratorPlacement(cpus=tuple(cpus), allow_overlap=True, processes=2,
                             engine=_EndsOnTheGroupsStop())  # fmt: skip
    cfg = EngineConfig(targets=[("127.0.0.1", 9)])

    def stop(signum: int, frame: Any) -> None:
        interrupts.note(signum)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_engines(open_loop_trace("/x", 100.0, 0.5), cfg, rate_factor=1.0, horizon=0.5,
                        generator=gen)  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.compute
def test_a_run_whose_parent_took_the_stop_is_interrupted_whatever_its_processes_said():
    """The same stop with one engine process's log kept: the run must read as stopped,
    though no process's stats say so (the one the stop ended reported an error)."""
    from shrink.replay.engine_parts import EngineRun

    assert EngineRun([], 0.0, None, {"interrupted": True}).interrupted
    assert not EngineRun([], 0.0, None, {}).interrupted
