"""shrink stopped (Ctrl-Z, SIGSTOP) during a run: its spinners stop spinning, and its
late sends are said to be its own stop, not the host's.

The spinners are processes in sessions of their own, so job control's SIGTSTP (sent to
shrink's process group) and a ``kill -STOP`` of shrink's PID left them spinning at 91%
of a CPU; and a send thread that waited on no run queue while its sends were late was
read as 'the delay was below the scheduler, interrupts or the host'.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.fake_engines import Part0Killed, fake_server_url, watched

from shrink.replay import native
from shrink.replay.selfcheck import generator_check
from shrink.replay.stopwatch import Continued, flag_if_stopped, stopped_for
from shrink.runlog import RunLog

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}

needs_spinners = pytest.mark.skipif(
    not (native.available() and hasattr(native._core, "keep_awake")),
    reason="the native core is not built with keep_awake",
)

_HOLDS_SPINNERS = """
import os, sys, shrink_core
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
spinners = shrink_core.keep_awake()
print("ready", flush=True)
sys.stdin.readline()
print(*spinners.stop(), flush=True)
"""


def _children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid
            ):
                out.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _state_and_cpu(pid: int) -> tuple[str, float]:
    f = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return f[0], (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _wait_state(pid: int, want: set[str], within: float = 2.0) -> str:
    deadline = time.monotonic() + within
    while True:
        state = _state_and_cpu(pid)[0]
        if state in want or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


def _in_pid_namespace() -> list[str]:
    """``unshare --pid --fork`` without a /proc of its own, where it can run."""
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    return ["unshare", "--pid", "--fork", "--kill-child"]


@needs_spinners
@pytest.mark.parametrize("namespace", [False, True], ids=["here", "pid-namespace"])
def test_a_spinner_sleeps_while_its_parent_is_stopped_and_counts_the_time(namespace) -> None:
    """In a PID namespace without its own /proc, shrink's PID (1 there) named the host's
    init in /proc: a spinner that looked its parent up by PID spun on through its stop."""
    wrap = _in_pid_namespace() if namespace else []
    proc = subprocess.Popen([*wrap, sys.executable, "-c", _HOLDS_SPINNERS], env=ENV,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline() == "ready\n"
        (shrink,) = _children(proc.pid) if namespace else (proc.pid,)
        (spinner,) = _children(shrink)
        assert _wait_state(spinner, {"R"}) == "R"  # spinning
        os.kill(shrink, signal.SIGSTOP)
        # it was left spinning ('R') for as long as shrink stayed stopped
        assert _wait_state(spinner, {"S"}) == "S"
        cpu0 = _state_and_cpu(spinner)[1]
        time.sleep(0.5)
        assert _state_and_cpu(spinner)[1] - cpu0 < 0.05
        os.kill(shrink, signal.SIGCONT)
        assert _wait_state(spinner, {"R"}) == "R"  # spinning again
        out, _ = proc.communicate("\n", timeout=10)
    finally:
        proc.kill()
        proc.wait()
    spun, _, stopped = (float(x) for x in out.split())
    assert spun == 1
    # the time it saw its parent stopped: at least the 0.5 s slept above, less a look
    # (5 ms) at each end, as it counts the stop at its looks (0.496 s was seen under load)
    assert 0.48 <= stopped < 5.0
    assert not _children(proc.pid)


def _late_log() -> RunLog:
    t = np.arange(1000) / 1000.0
    sent = np.where(t < 0.5, t + 1e-4, np.maximum(t, 0.9) + 1e-4)  # a 0.4 s hole
    n = len(t)
    return RunLog.from_columns(
        {"intended": t, "sent": sent, "done": sent + 1e-3, "status": np.full(n, 200)}
    )


@pytest.mark.compute
def test_a_late_run_of_a_stopped_generator_says_the_stop_not_the_host() -> None:
    log = _late_log()
    host = generator_check(log, (0.0, 1.0), thread_wait=0.0001, realtime=True)
    assert "below the scheduler" in host.reason and host.stopped is None
    stopped = generator_check(log, (0.0, 1.0), thread_wait=0.0001, realtime=True, stopped=0.4)
    assert stopped.behind and stopped.stopped == 0.4
    assert "shrink itself was stopped, by a signal or job control, for 0.4 s" in stopped.reason
    assert "host not running" not in stopped.reason
    # a stop shorter than the lag limit cannot have made the sends that late
    short = generator_check(log, (0.0, 1.0), thread_wait=0.0001, stopped=0.0005)
    assert "below the scheduler" in short.reason


@pytest.mark.compute
def test_a_stop_seen_by_the_spinners_alone_flags_the_level() -> None:
    """Ctrl-Z after the engine fixed its zero but before the watcher's first wake-up: the
    engine, continued past its horizon, ended at once with nothing sent (0 requests, no
    lag), the watcher saw no gap, and the level went into the curve unflagged."""
    empty = RunLog.from_columns(
        {"intended": np.zeros(0), "sent": np.zeros(0), "done": np.zeros(0), "status": np.zeros(0)}
    )
    check = generator_check(empty, (0.0, 1.0), stopped=2.34)
    assert not check.behind  # nothing was late: nothing was sent
    flagged = flag_if_stopped(check, 0.05, True, 2.34)
    assert flagged.behind and "stopped (by a signal or job control) for 2.3 s" in flagged.reason
    # a short stop (within the watcher's bound) is left to the send lag, as before
    assert not flag_if_stopped(check, 0.05, True, 0.5).behind
    # engines in processes of their own ran on while this one was stopped
    assert not flag_if_stopped(check, 0.05, False, 2.34).behind


@pytest.mark.compute
def test_a_stop_is_known_from_the_spinners_or_a_sigcont() -> None:
    from types import SimpleNamespace

    stats = [SimpleNamespace(extra={"loop": {"stopped_us": us}}) for us in (0, 1_200_000)]
    assert stopped_for(stats, 0.0, None) == pytest.approx(1.2)
    # no spinner: the watcher's missed time, when a SIGCONT says it was a stop
    plain = [SimpleNamespace(extra={"engine": "python"})]
    assert stopped_for(plain, 0.9, 1) == pytest.approx(0.9)
    assert stopped_for(plain, 0.9, 0) == 0.0  # frozen, or the host paused the VM
    assert stopped_for(plain, 0.9, None) == 0.0  # (not known off the main thread)
    # the spinners, at nice 19, see a stop under load only from their next turn on, and
    # its end at their first turn after it: when a SIGCONT came, the watcher's count
    late = [SimpleNamespace(extra={"loop": {"stopped_us": us}}) for us in (280_000, 0)]
    assert stopped_for(late, 0.76, 1) == pytest.approx(0.76)
    assert stopped_for(late, 0.76, 0) == pytest.approx(0.28)  # (no SIGCONT: spinners only)
    starved = [SimpleNamespace(extra={"loop": {"stopped_us": 11_000_000}})]
    assert stopped_for(starved, 0.76, 1) == pytest.approx(0.76)
    assert stopped_for(starved, 0.0, 1) == pytest.approx(11.0)  # (before the watcher ran)


def test_continued_counts_sigcont_in_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGCONT)
    with Continued() as seen:
        assert seen.count == 0
        os.kill(os.getpid(), signal.SIGCONT)
        time.sleep(0.01)  # (the handler runs at the next bytecode)
    assert seen.count == 1
    assert signal.getsignal(signal.SIGCONT) == before


@pytest.fixture(scope="module")
def fake():
    with fake_server_url() as url:
        yield url


@pytest.mark.parametrize("awake", ["--awake", "--no-awake"])
def test_replay_stopped_and_continued_says_it_was_stopped(tmp_path: Path, awake) -> None:
    """The stop is sent once the target has had the run's first sends, so it lands inside
    the run: sent a fixed time after the RunLog's file was made, under load it came before
    the run's zero, and the run (rightly) had no stop to report. The time said is bounded
    by the time this test held it stopped."""
    from shrink.testbed.fake import FakeServer

    if awake == "--awake" and not native.available():
        # (the Python engine refuses --awake, naming the core: make test failed here on a
        # machine without cargo, which make setup says it can run on)
        pytest.skip("the native core is not built (--awake needs it)")
    cpu = str(min(os.sched_getaffinity(0)))
    with FakeServer() as target:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shrink", "replay", "--target", target.url, "--rate", "300",
             "--path", "/x", "--duration", "2s", "--generator-cpus", cpu, "--realtime", "0",
             awake, "-o", str(tmp_path / "r.parquet")],
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while target.requests < 10 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)  # (the run's sends have begun: its zero is past)
        assert target.requests >= 10, proc.communicate(timeout=60)
        began = time.monotonic()
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.8)
        proc.send_signal(signal.SIGCONT)
        held = time.monotonic() - began
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    said = re.search(r"shrink itself was stopped, by a signal or job control, for (\S+) s", out)
    assert said is not None, out
    # (no longer than it was held, give or take the watcher's 50 ms wake-ups and the
    # two-digit rounding; at least half the 0.8 s sleep, which it was held for at least)
    assert 0.4 <= float(said[1]) <= held + 0.06, (held, out)
    assert "below the scheduler" not in out
    assert "other work on its CPU delays it" not in err  # (the hint is for other work)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_run_of_two_engine_processes_stopped_by_job_control_says_it_was_stopped(
    tmp_path: Path, fake, engine
) -> None:
    """Ctrl-Z stops the whole process group: with `--processes 2` the engines run in
    processes of their own, which this one's watcher cannot speak for, and the stop was
    said to be a send lag, "other work on its CPU" to blame. Each engine process now
    watches itself."""
    if engine == "native" and not native.available():
        pytest.skip("the native core is not built")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("two CPUs needed")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink", "replay", "--target", fake, "--rate", "300",
         "--path", "/x", "--duration", "3s", "--generator-cpus", ",".join(map(str, cpus)),
         "--processes", "2", "--engine", engine, "--realtime", "0", "--no-awake",
         "-o", str(tmp_path / "r.parquet")],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("*part*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # (the parts' temporary files: made before the run's zero)
    time.sleep(1.0)  # (inside the run, whatever the load: its zero comes after the parts')
    os.killpg(proc.pid, signal.SIGTSTP)  # (a group with a parent in this session: it stops)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "shrink itself was stopped, by a signal or job control, for " in out, out + err
    assert "other work on its CPU delays it" not in err


def test_a_sweep_whose_level_was_stopped_says_so_and_gives_no_other_work_hint(capsys) -> None:
    from helpers.fake_targets import steady_trace

    from shrink.cli.sweep_cmd import _print_sweep
    from shrink.measure import sweep
    from shrink.replay.fake import FakeEngine
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement

    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), engine=FakeEngine(), realtime=0, awake=False)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    curve = sweep(target, steady_trace(), [1.0, 2.0], reps=1, warmup=0.0, duration=0.1)
    assert [r.generator_stopped for lv in curve.levels for r in lv.reps] == [None, None]
    late = {"generator_behind": True, "send_lag_p99": 0.8}
    curve.levels[0].reps[0] = replace(curve.levels[0].reps[0], **late, generator_stopped=0.8)
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    out, err = capsys.readouterr()
    assert "GENERATOR BEHIND (shrink itself was stopped for 0.8 s: excluded)" in out
    assert "fell behind its schedule" not in err  # (that hint is for other work)
    # a level late for another cause still gets it
    curve.levels[1].reps[0] = replace(curve.levels[1].reps[0], **late)
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    out, err = capsys.readouterr()
    assert "GENERATOR BEHIND (send lag p99 800" in out
    assert "fell behind its schedule at 1 level" in err


@pytest.mark.compute
def test_a_wait_for_a_cpu_is_not_counted_as_a_stop(monkeypatch) -> None:
    """The watcher's missed time, said as 'shrink itself was stopped' once a SIGCONT came,
    counted every gap, also one spent waiting on a busy CPU's run queue: a SIGCONT to a
    running shrink (``fg`` of a background job) then blamed a loaded run on a stop."""

    clock = [0.0, 0.05, 0.1, 0.5, 0.55, 1.45, 1.5, 1.55]
    # seconds on a run queue: the 0.4 s gap spent waiting for a CPU, the 0.9 s one not
    queue = iter([0.0, 0.0, 0.0, 0.35, 0.35, 0.35, 0.35, 0.35])
    watch = watched(monkeypatch, clock, lambda: next(queue))
    assert watch.gap == pytest.approx(0.9)
    assert watch.missed == pytest.approx(0.85)  # the stop's, not the 0.4 s on a run queue
    # a kernel that does not say
    assert watched(monkeypatch, [0.0, 0.4], lambda: None).missed == pytest.approx(0.35)


def test_the_run_queue_wait_is_read() -> None:
    from shrink.replay.stopwatch import _run_delay

    assert _run_delay() is not None and _run_delay() >= 0.0


def test_a_stop_within_the_lag_limit_is_not_said_to_have_made_a_level_late(capsys) -> None:
    """With --lag-limit 50ms, a sweep level late for other work (p99 80 ms) with a 20 ms
    stop said 'shrink itself was stopped for 0.0 s' and gave no other-work hint, where
    the run's self-check (a stop within the limit made nothing that late) blamed not the
    stop; and a check with no stop at all never says one."""
    from helpers.fake_targets import steady_trace

    from shrink.cli.sweep_cmd import _print_sweep
    from shrink.measure import sweep
    from shrink.replay.fake import FakeEngine
    from shrink.replay.live import LiveTarget
    from shrink.schemas import GeneratorMeta
    from shrink.target import GeneratorPlacement

    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(
        cpus=(cpu,), engine=FakeEngine(), realtime=0, awake=False, lag_limit=0.05
    )
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    curve = sweep(target, steady_trace(), [1.0, 2.0], reps=1, warmup=0.0, duration=0.1)
    curve.sweep = curve.sweep.with_(generator=GeneratorMeta(lag_limit=0.05))  # as sweep_cmd
    late = {"generator_behind": True, "send_lag_p99": 0.08}
    curve.levels[0].reps[0] = replace(curve.levels[0].reps[0], **late, generator_stopped=0.02)
    curve.levels[1].reps[0] = replace(curve.levels[1].reps[0], **late, generator_stopped=0.3)
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    out, err = capsys.readouterr()
    assert "rate_factor 1: " in out and "GENERATOR BEHIND (send lag p99 80" in out, out
    assert "GENERATOR BEHIND (shrink itself was stopped for 0.3 s: excluded)" in out
    assert "stopped for 0.0" not in out
    assert "at 1 level" in err  # the other-work hint, for the first level only
    # (the self-check: no stop, or none past the limit, is never said)
    check = generator_check(_late_log(), (0.0, 1.0), lag_limit=0.0001, stopped=0.0)
    assert "shrink itself was stopped" not in check.reason


def _two_holes_log() -> RunLog:
    """Sends held twice: 0.2 s from 0.1 (a stop) and 0.3 s from 0.5 (the CPU taken)."""
    t = np.arange(1000) / 1000.0
    sent = np.where((t >= 0.1) & (t < 0.3), 0.3, t)
    sent = np.where((t >= 0.5) & (t < 0.8), 0.8, sent) + 1e-4
    return RunLog.from_columns(
        {"intended": t, "sent": sent, "done": sent + 1e-3, "status": np.full(1000, 200)}
    )


@pytest.mark.compute
def test_a_stop_and_a_cpu_taken_in_one_run_say_both() -> None:
    # a replay SIGSTOPped 0.3 s after a SCHED_FIFO 50 task had held its CPU 0.4 s said
    # "stopped for 0.27 s ...; not the host's doing": most of the late sends were not it
    both = generator_check(_two_holes_log(), (0.0, 1.0), thread_wait=0.3, stopped=0.2)
    assert "shrink itself was stopped, by a signal or job control, for 0.2 s" in both.reason
    assert "and its send thread waited for its CPU 30% of the run" in both.reason
    assert "not the host's doing" not in both.reason
    # the stop alone (its thread on no run queue meanwhile): the stop alone is said
    alone = generator_check(_late_log(), (0.0, 1.0), thread_wait=0.001, stopped=0.4)
    assert "not the host's doing" in alone.reason and "waited" not in alone.reason


@pytest.mark.compute
def test_a_send_thread_held_past_the_normal_tasks_share_names_a_real_time_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shrink.replay import selfcheck

    monkeypatch.setattr(selfcheck, "_rt_throttled", lambda: 0.05)  # the kernel's default
    # a SCHED_FIFO 50 loop on the generator's CPU for 0.5 s of a 2 s replay: "waited for
    # its CPU 25% of the run: under SCHED_FIFO the kernel still gives normal tasks up to
    # 50 ms a second" (they get at most 5%: the task was a real-time one)
    rt = generator_check(_late_log(), (0.0, 1.0), thread_wait=0.4, realtime=True)
    assert "a real-time task at or above the send thread's priority" in rt.reason
    assert "normal tasks up to 50 ms" not in rt.reason
    share = generator_check(_late_log(), (0.0, 1.0), thread_wait=0.04, realtime=True)
    assert "a real-time task" not in share.reason  # within the normal tasks' share


@pytest.mark.compute
def test_a_level_whose_engine_process_was_killed_is_behind() -> None:
    from shrink.replay.contract import EngineStats
    from shrink.replay.engine_parts import EngineRun
    from shrink.replay.live import LiveTarget

    # kill -9 (or the OOM killer) of one of --processes 2's engines mid-level: the sweep
    # said "rate 200: 78.0 req/s" unflagged, exit 0, from the other one's rows alone
    t = np.arange(100) / 100.0
    log = RunLog.from_columns(
        {"intended": t, "sent": t + 1e-4, "done": t + 1e-3, "status": np.full(100, 200)}
    )
    survivor = EngineStats(t0=0.0, t0_unix=0.0, wall=1.0, cpu=0.01, requests=100)
    lost = ["engine process 0 (PID 4242): exited without a report"]
    target = LiveTarget([("127.0.0.1", 9)], idle_bound=0.0)
    run = EngineRun([survivor], 0.0, None, {"errors": lost})
    check = target._generator_check(log, (0.0, 1.0), run, 1.0, ([], None))
    assert check.behind and check.reason.startswith(lost[0])
    assert "its part of the load was not sent or not recorded" in check.reason
    kept = target._generator_check(
        log, (0.0, 1.0), EngineRun([survivor], 0.0, None), 1.0, ([], None)
    )
    assert not kept.behind


def _short_hole_log() -> RunLog:
    """2% of the sends late: held 20 ms at 0.5 s."""
    t = np.arange(1000) / 1000.0
    sent = np.where((t >= 0.5) & (t < 0.52), 0.52, t) + 1e-4
    return RunLog.from_columns(
        {"intended": t, "sent": sent, "done": sent + 1e-3, "status": np.full(1000, 200)}
    )


@pytest.mark.compute
def test_the_normal_tasks_share_said_is_the_kernel_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kernel.sched_rt_runtime_us -1 (no share kept for normal tasks) still said "the kernel
    # still gives normal tasks up to 50 ms a second", as did a share of 20 ms; and a
    # SCHED_FIFO 10 task of another replay on the CPU (the default priority: equal, not
    # above) was said to be "a real-time task above the send thread's priority"
    from shrink.replay import selfcheck

    real = selfcheck._rt_throttled
    (tmp_path / "sched_rt_period_us").write_text("1000000\n")
    monkeypatch.setattr(selfcheck, "_rt_throttled", lambda: real(str(tmp_path)))
    for runtime, said in (("-1", "the kernel, ran there"), ("980000", "up to 20 ms a second")):
        (tmp_path / "sched_rt_runtime_us").write_text(runtime + "\n")
        check = generator_check(_short_hole_log(), (0.0, 1.0), thread_wait=0.01, realtime=True)
        assert said in check.reason and "50 ms" not in check.reason, check.reason
    assert real(str(tmp_path / "none")) == 0.05  # (unread: the kernel's default)
    (tmp_path / "sched_rt_runtime_us").write_text("-1\n")
    assert real(str(tmp_path)) == 0.0
    held = generator_check(_short_hole_log(), (0.0, 1.0), thread_wait=0.3, realtime=True)
    assert "a real-time task at or above the send thread's priority" in held.reason
    assert "normal tasks' share" not in held.reason  # (there is none)


@pytest.mark.compute
def test_a_run_missing_an_engine_process_gets_no_other_work_hint(capsys) -> None:
    """An engine process killed mid-run (kill -9, the OOM killer) flags the run behind,
    naming it; the hint under it said 'other work on its CPU delays it: give it a CPU
    nothing else runs on', which is not what happened."""
    from shrink.cli.replay_cmd import _part_lost, _print_summary

    killed = {"engine": {"errors": ["engine process 0 (PID 9): exited without a report"]}}
    assert _part_lost(killed) and _part_lost({"engine": {"lost_generators": [{}]}})
    assert not _part_lost({"engine": {"errors": []}}) and not _part_lost({})
    lat = dict.fromkeys(("mean", "p50", "p99", "p999"), 0.001)
    s = {
        "requests": 37, "runlog": "k.parquet", "engine": "native", "intended_rate": 9.2,
        "achieved_rate": 9.2, "throughput": 9.2, "errors": 0, "failures": 0, "failed": False,
        "latency": lat, "send_lag_p50": 0.001, "send_lag_p99": 0.002, "generator_cpu": None,
        "utilization": None, "generator_behind": True, "generator_stopped": None,
        "behind_reason": "engine process 0 (PID 9): exited without a report: its part of "
        "the load was not sent or not recorded",
    }  # fmt: skip
    for lost, hint in ((True, False), (False, True)):
        _print_summary({**s, "generator_lost": lost})
        out, err = capsys.readouterr()
        assert "GENERATOR BEHIND: engine process 0" in out
        assert ("other work on its CPU delays it" in err) is hint


def test_a_sweep_level_missing_an_engine_process_says_so_and_gives_no_other_work_hint(
    capsys,
) -> None:
    """A sweep level whose engine process was killed mid-run was flagged 'GENERATOR BEHIND
    (stopped or lost: excluded)' and followed by the hint 'other work on its CPU delays
    it: give it a CPU nothing else runs on', which replay no longer gives for it."""
    from helpers.fake_targets import steady_trace

    from shrink.cli.sweep_cmd import _print_sweep
    from shrink.measure import sweep
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement

    placement = GeneratorPlacement(processes=2, engine=Part0Killed(), realtime=0, awake=False)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    curve = sweep(target, steady_trace(), [1.0], reps=1, warmup=0.0, duration=0.2)
    rep = curve.levels[0].reps[0]
    assert rep.generator_behind and rep.generator_lost
    _print_sweep(curve, "rate_factor", Path("c.json"), [], True)
    assert json.loads(capsys.readouterr().out)["levels"][0]["generator_lost"] is True
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    out, err = capsys.readouterr()
    assert "GENERATOR BEHIND (part of the generator was gone mid-run" in out, out
    assert "fell behind its schedule" not in err


@pytest.mark.compute
def test_a_loops_wait_on_the_clock_is_not_a_saturated_generator() -> None:
    from shrink.replay.contract import EngineStats
    from shrink.replay.engine_parts import EngineRun
    from shrink.replay.live import LiveTarget

    # A real-time loop under pressure waits out its send windows on the clock: at
    # 150,000 req/s its process used 93-97% of a core over the run, 0.85-0.87 before
    # it did, and every such level was flagged "generator CPU 97% of a core > 90%"
    t = np.arange(100) / 100.0
    log = RunLog.from_columns(
        {"intended": t, "sent": t + 1e-4, "done": t + 1e-3, "status": np.full(100, 200)}
    )
    loop = {"loop": {"polled_us": 150_000}}
    polling = EngineStats(t0=0.0, t0_unix=0.0, wall=1.0, cpu=0.96, requests=100, extra=loop)
    target = LiveTarget([("127.0.0.1", 9)], idle_bound=0.0)
    check = target._generator_check(
        log, (0.0, 1.0), EngineRun([polling], 0.0, None), 1.0, ([], None)
    )
    assert not check.behind, check.reason
    assert check.cpu == pytest.approx(0.81)
    # the same CPU time spent working is a saturated generator
    working = replace(polling, extra={"loop": {"polled_us": 0}})
    check = target._generator_check(
        log, (0.0, 1.0), EngineRun([working], 0.0, None), 1.0, ([], None)
    )
    assert check.behind and "generator CPU 96% of a core > 90%" in check.reason


def test_a_prediction_s_report_says_which_level_shrink_was_stopped_in() -> None:
    """predict re-ran a repetition that a Ctrl-Z made late, and its report said only "1
    repetition(s) where it fell behind were left out": which level the stop hit, and that
    it was a stop (not the generator's host), was said nowhere."""
    from helpers.fake_targets import steady_trace

    from shrink.measure import sweep
    from shrink.replay.fake import FakeEngine
    from shrink.replay.live import LiveTarget
    from shrink.report.sections.self_checks import _generator_items
    from shrink.report.tables import level_table
    from shrink.selfchecks import self_checks
    from shrink.target import GeneratorPlacement

    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), engine=FakeEngine(), realtime=0, awake=False)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    curve = sweep(target, steady_trace(), [1.0, 2.0], reps=2, warmup=0.0, duration=0.1)
    late = {"generator_behind": True, "send_lag_p99": 0.6, "generator_stopped": 1.06}
    curve.levels[1].reps[0] = replace(curve.levels[1].reps[0], **late)
    checks = self_checks(curve, {})
    assert checks["levels_stopped"] == [[2.0, 1.06]]
    text = _generator_items(checks)[0][1]
    assert "shrink itself was stopped, by a signal or job control, at level 2 for 1.06 s" in text
    cells = [row[-1] for row in level_table(curve, {})[1]]
    assert cells == ["kept up", "kept up in 1 of 2 repetitions (the others excluded; shrink "
                     "itself was stopped for 1.06 s in one)"]  # fmt: skip
    # a repetition late for another cause is said as before
    curve.levels[1].reps[0] = replace(curve.levels[1].reps[0], generator_stopped=None)
    assert self_checks(curve, {})["levels_stopped"] == []
    assert level_table(curve, {})[1][1][-1].endswith("(the others excluded)")


def test_a_stop_is_said_in_seconds_and_only_for_the_repetitions_it_made_late() -> None:
    """A stop of 2 minutes was said 'stopped for 1.2e+02 s' (two significant digits in
    g form), in the checks and the levels table; and a level none of whose repetitions
    kept up, one of them stopped and the other late for another cause, was said
    '**shrink itself was stopped for ... : excluded**', its other late repetition put
    on the stop too."""
    from helpers.fake_targets import steady_trace

    from shrink.measure import sweep
    from shrink.replay.fake import FakeEngine
    from shrink.replay.live import LiveTarget
    from shrink.report.sections.self_checks import _generator_items
    from shrink.report.tables import level_table
    from shrink.selfchecks import self_checks
    from shrink.target import GeneratorPlacement

    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), engine=FakeEngine(), realtime=0, awake=False)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    curve = sweep(target, steady_trace(), [1.0, 2.0], reps=2, warmup=0.0, duration=0.1)
    stopped = {"generator_behind": True, "send_lag_p99": 0.6, "generator_stopped": 123.4}
    curve.levels[1].reps[0] = replace(curve.levels[1].reps[0], **stopped)
    text = _generator_items(self_checks(curve, {}))[0][1]
    assert "at level 2 for 123 s" in text and "e+02" not in text, text
    cell = level_table(curve, {})[1][1][-1]
    assert cell.endswith("(the others excluded; shrink itself was stopped for 123 s in one)")
    late = {"generator_behind": True, "send_lag_p99": 0.6, "generator_stopped": None}
    curve.levels[1].reps[1] = replace(curve.levels[1].reps[1], **late)
    cell = level_table(curve, {})[1][1][-1]
    assert cell == "**fell behind: excluded** (shrink itself was stopped for 123 s in one)"
    curve.levels[1].reps[1] = replace(curve.levels[1].reps[1], **stopped)
    assert level_table(curve, {})[1][1][-1] == "**shrink itself was stopped for 123 s: excluded**"


@pytest.mark.compute
def test_an_engine_process_stopped_past_the_run_s_zero_says_so() -> None:
    """An engine process of its own watches itself from the zero its parent hands it:
    a Ctrl-Z in the moment between the parent's choosing the zero and the process's
    reading it held it past the zero, its first sends that late, and its watcher (started
    only then) saw no gap: the stop went unsaid, the lag put on other work."""
    from dataclasses import dataclass, field

    from shrink.replay.stopwatch import note_stop, zero_watch

    @dataclass(frozen=True)
    class Stats:
        extra: dict = field(default_factory=dict)

    stats = Stats({"loop": {"sent": 10}})
    watch = zero_watch(time.monotonic() - 2.0)  # read 2 s after the zero
    said = note_stop(stats, [watch], 1)
    assert said.extra["loop"]["stopped_us"] == pytest.approx(2e6, rel=0.05), said.extra
    assert said.extra["loop"]["sent"] == 10
    # late with no SIGCONT (a slow start, not a stop), or read in time: nothing said
    assert note_stop(stats, [zero_watch(time.monotonic() - 2.0)], 0) is stats
    assert note_stop(stats, [zero_watch(time.monotonic() + 0.1)], 1) is stats
