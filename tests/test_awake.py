"""The generator's CPUs kept awake for a run: by default where they are the generator's own.

A CPU with nothing to run halts, and a timed wake-up on it comes late by the time
it takes to resume (on a VM, tens to a hundred microseconds at p99). The native
core can keep each CPU it may run on busy with a spinner at the kernel's idle
priority for the run; the default does so when the generator is pinned apart from
the server (and from the other hardware threads of the server's cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from time import monotonic
from typing import Any

import pytest
from helpers.fake_engines import fake_server_address, options_seen

from shrink.errors import OptionError, ReplayError
from shrink.replay import (
    EngineConfig,
    RunLogWriter,
    build_schedule,
    native,
    open_loop_trace,
    scaleout,
)
from shrink.replay.fake import FakeEngine
from shrink.replay.live import LiveTarget
from shrink.replay.scaleout import default_awake
from shrink.runlog import RunLog
from shrink.target import GeneratorPlacement
from shrink.topology import smt_siblings
from tests.conftest import require_root

needs_core = pytest.mark.skipif(not native.available(), reason="the native core is not built")


@pytest.mark.compute
@pytest.mark.parametrize(
    ("requested", "gen", "server", "overlap", "expected"),
    [
        (None, (0,), (1,), False, True),  # pinned, apart from the server
        (None, (0,), (), False, True),  # a URL target: the user pinned it
        (None, (0, 1), (1,), False, False),  # shares a CPU with the server
        (None, (0,), (1,), True, False),  # --allow-overlap
        (None, None, (1,), False, False),  # unpinned: it could run on the server's CPU
        (False, (0,), (1,), False, False),  # --no-awake
        (True, None, (), False, True),  # --awake is kept as given
    ],
)
def test_the_default(
    monkeypatch: pytest.MonkeyPatch,
    requested: bool | None,
    gen: tuple[int, ...] | None,
    server: tuple[int, ...],
    overlap: bool,
    expected: bool,
) -> None:
    monkeypatch.setattr(scaleout, "smt_siblings", lambda cpu: ())
    monkeypatch.setattr(scaleout, "in_root_cpu_group", lambda: True)
    assert default_awake(requested, gen, server, allow_overlap=overlap) is expected


@pytest.mark.compute
def test_not_by_default_inside_a_cpu_cgroup_without_an_idle_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # there the spinners are idle only within the group, which competes as if busy
    # (where an idle group can be made they run in it: tests/test_awake_idle_group.py)
    monkeypatch.setattr(scaleout, "smt_siblings", lambda cpu: ())
    monkeypatch.setattr(scaleout, "in_root_cpu_group", lambda: False)
    monkeypatch.setattr(native, "idle_group_unavailable", lambda: "no permission")
    assert default_awake(None, (0,), (1,)) is False
    assert default_awake(True, (0,), (1,)) is False  # asked for: said why (one line)


@pytest.mark.compute
@pytest.mark.parametrize(
    ("version", "text", "expected"),
    [
        (1, "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n", True),
        (1, "3:cpu,cpuacct:/user.slice/session-1.scope\n0::/\n", False),
        (2, "0::/\n", True),
        (2, "0::/system.slice/ssh.service\n", False),
        (2, "", True),  # no line: in none of the controller's groups
    ],
)
def test_the_root_cpu_group_is_read_from_proc(
    tmp_path: Path, version: int, text: str, expected: bool
) -> None:
    from shrink.enforce.cfs import CgroupLayout, in_root_cpu_group

    layout = CgroupLayout(version, _hierarchy_root(tmp_path, version), None, None)
    assert in_root_cpu_group(text, layout, _mountinfo(layout.cpu, "/")) is expected
    # no cpu controller mounted at all: groups do not weigh CPU time
    assert in_root_cpu_group(text, CgroupLayout(version, None, None, None)) is True


def _hierarchy_root(tmp_path: Path, version: int) -> Path:
    """A folder with the files of a cgroup hierarchy's root (v1: cgroup.sane_behavior;
    v2: no cpu.weight, which every group but the root has)."""
    (tmp_path / ("cgroup.sane_behavior" if version == 1 else "cgroup.controllers")).touch()
    return tmp_path


def _mountinfo(where: Path | None, root: str) -> str:
    """/proc/self/mountinfo's line of a cgroup mount at ``where`` showing ``root``."""
    return f"32 31 0:29 {root} {where} rw,relatime - cgroup cgroup rw,cpu\n"


@pytest.mark.compute
@pytest.mark.parametrize("version", [1, 2])
def test_a_cgroup_namespace_s_root_is_not_the_root_group(tmp_path: Path, version: int) -> None:
    # unshare --cgroup from a child group: /proc/self/cgroup says '/', and the default
    # kept the CPUs awake inside a group where idle priority holds only within it
    from shrink.enforce.cfs import CgroupLayout, in_root_cpu_group

    root = _hierarchy_root(tmp_path, version)
    layout = CgroupLayout(version, root, None, None)
    text = "1:cpu:/\n0::/\n"
    assert in_root_cpu_group(text, layout, _mountinfo(root, "/")) is True
    # the host's mount seen from a namespace below its root, or a bind mount of a group
    assert in_root_cpu_group(text, layout, _mountinfo(root, "/..")) is False
    assert in_root_cpu_group(text, layout, _mountinfo(root, "/docker/abc")) is False
    assert in_root_cpu_group(text, layout, "") is False  # not mounted as it says: unknown
    # the namespace's own mount of its root group shows '/', without the root's files
    (root / ("cpu.weight" if version == 2 else "x")).touch()
    (root / "cgroup.sane_behavior").unlink(missing_ok=True)
    assert in_root_cpu_group(text, layout, _mountinfo(root, "/")) is False


def _root_group_seen(*wrap: str, group: Path) -> str:
    """in_root_cpu_group() in a process put in ``group`` and run through ``wrap``."""
    code = "from shrink.enforce.cfs import in_root_cpu_group as f; print(f())"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    script = f'echo $$ > {group}/cgroup.procs && exec "$@"'
    args = ["sh", "-c", script, "sh", *wrap, sys.executable, "-c", code]
    return subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout


@pytest.mark.root
def test_unshare_cgroup_from_a_child_group_keeps_the_default_off() -> None:
    from shrink.enforce.cfs import cgroup_layout

    require_root("a cpu cgroup, unshare --cgroup")
    layout = cgroup_layout()
    if layout.cpu is None or not shutil.which("unshare"):
        pytest.skip("no cpu controller mounted, or no unshare")
    group = layout.cpu / f"shrink-test-ns-{os.getpid()}"
    group.mkdir()
    try:
        assert _root_group_seen(group=group) == "False\n"
        assert _root_group_seen("unshare", "--cgroup", group=group) == "False\n"  # was True
        assert _root_group_seen("unshare", "--cgroup", group=layout.cpu) == "True\n"
    finally:
        group.rmdir()


@pytest.mark.compute
def test_not_on_the_other_hardware_thread_of_a_server_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPUs 0 and 4 are one core's two threads: a spinner on 0 would take 4's cycles
    monkeypatch.setattr(scaleout, "smt_siblings", lambda cpu: {0: (4,), 4: (0,)}.get(cpu, ()))
    assert default_awake(None, (0,), (4,)) is False
    assert default_awake(None, (1,), (4,)) is True


@pytest.mark.compute
def test_smt_siblings_from_sysfs(tmp_path: Path) -> None:
    for cpu, listed in ((0, "0,4\n"), (4, "0,4\n"), (1, "1\n"), (2, "garbage\n")):
        topo = tmp_path / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(listed)
    assert smt_siblings(0, tmp_path) == (4,)
    assert smt_siblings(4, tmp_path) == (0,)
    assert smt_siblings(1, tmp_path) == ()
    assert smt_siblings(2, tmp_path) == ()  # unreadable: none known
    assert smt_siblings(3, tmp_path) == ()  # missing


@pytest.mark.parametrize(("awake", "expected"), [(None, True), (False, False), (True, True)])
def test_a_live_target_asks_the_engine_for_it(
    monkeypatch: pytest.MonkeyPatch, awake: bool | None, expected: bool
) -> None:
    monkeypatch.setattr(scaleout, "in_root_cpu_group", lambda: True)  # (as in CI; see above)
    engine = options_seen()
    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), engine=engine, realtime=0, awake=awake)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    target.run(open_loop_trace("/x", 100.0, 0.2), rate_factor=1.0, warmup=0.0, duration=0.2)
    assert [o.get("awake", False) for o in engine.options] == [expected]
    assert target.describe()["awake"] is expected  # recorded with the curve


def test_beside_the_server_it_is_not_asked_for() -> None:
    engine = options_seen()
    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), allow_overlap=True, engine=engine, realtime=0)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
    target.run(open_loop_trace("/x", 100.0, 0.2), rate_factor=1.0, warmup=0.0, duration=0.2)
    assert [o.get("awake", False) for o in engine.options] == [False]


def _spinners() -> dict[int, tuple[int, set[int], bool, str, int]]:
    """This process's spinners (its children at idle priority): by PID, their policy,
    CPUs, whether each leads a session of its own, its autogroup, and the files it holds."""
    out = {}
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            pid = int(proc.name)
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != me or os.sched_getscheduler(pid) != os.SCHED_IDLE:
                continue
            group = (
                (proc / "autogroup").read_text().strip() if (proc / "autogroup").exists() else ""
            )
            # it must hold none of ours (only its own look at our state, opened after)
            fds = [os.readlink(proc / "fd" / fd) for fd in os.listdir(proc / "fd")]
            held = len([f for f in fds if f != f"/proc/{me}/stat"])
            out[pid] = (os.sched_getscheduler(pid), os.sched_getaffinity(pid),
                        os.getsid(pid) == pid, group, held)  # fmt: skip
        except (OSError, ValueError, IndexError):
            continue  # (a process that ended meanwhile)
    return out


def _run_native(awake: bool, fake: tuple[str, int]) -> tuple[Any, RunLogWriter, dict, float]:
    """A short run of the core; its stats, writer, the spinners seen in it, and the
    CPU seconds of this process's children reaped over it."""
    seen: dict[int, tuple[int, set[int], bool, str, int]] = {}
    sched = build_schedule(open_loop_trace("/x", 400.0, 0.6), 1.0, 0.6, loop=False)
    w = RunLogWriter(None)
    look = threading.Timer(0.3, lambda: seen.update(_spinners()))
    look.start()
    cpu0 = os.times()
    try:
        stats = native.run_native(
            sched, EngineConfig(targets=[fake]), w, handle_signals=False, awake=awake
        )
    finally:
        cpu1 = os.times()
        look.join()
    reaped = (cpu1.children_user - cpu0.children_user) + (
        cpu1.children_system - cpu0.children_system
    )
    return stats, w, seen, reaped


@pytest.fixture(scope="module")
def fake():
    with fake_server_address() as address:
        yield address


@needs_core
def test_the_core_spins_at_idle_priority_on_each_cpu_and_stops(fake) -> None:
    old = os.sched_getaffinity(0)
    cpus = set(sorted(old)[:2])
    os.sched_setaffinity(0, cpus)
    try:
        stats, w, seen, reaped = _run_native(True, fake)
    finally:
        os.sched_setaffinity(0, old)
    # one spinner per CPU the run may use, each on its own CPU, never above idle priority
    assert sorted(c for _, one, _, _, _ in seen.values() for c in one) == sorted(cpus)
    assert all(policy == os.SCHED_IDLE for policy, _, _, _, _ in seen.values())
    # each in a session of its own, whose autogroup runs at nice 19: with the kernel's
    # autogroups, SCHED_IDLE in this process's session took half the CPU from another's
    assert all(leader for _, _, leader, _, _ in seen.values())
    assert all(g == "" or g.endswith("nice 19") for _, _, _, g, _ in seen.values()), seen
    # none of this process's files: its sockets read as another client of the server
    # (a sweep stopped so), its locks and pipes would be held past their close
    assert all(held == 0 for *_, held in seen.values()), seen
    assert not _spinners()  # all ended with the run
    loop = stats.extra["loop"]
    assert loop["awake_spinners"] == len(cpus)
    # their time is theirs (processes of their own), not the generator's
    assert loop["awake_cpu_us"] / 1e6 == pytest.approx(reaped, abs=0.02)
    assert w.meta["awake"] is True
    assert len(w.runlog()) == 240


@needs_core
def test_without_it_nothing_spins(fake) -> None:
    stats, w, seen, _ = _run_native(False, fake)
    assert seen == {}
    assert stats.extra["loop"]["awake_spinners"] == 0
    assert w.meta["awake"] is False


@pytest.mark.parametrize("siblings", [{}, {0: (1,), 1: (0,)}])
def test_awake_asked_for_on_the_share_s_cpus_is_refused(
    monkeypatch: pytest.MonkeyPatch, siblings: dict[int, tuple[int, ...]]
) -> None:
    # /proc/stat counts the spinners' time as busy: every level's utilization read
    # 100% (a sweep --allow-overlap --awake on a share of CPUs 0-1: 1.0 at each rep)
    monkeypatch.setattr(scaleout, "smt_siblings", lambda cpu: siblings.get(cpu, ()))
    share = [1] if siblings else [0]
    placement = GeneratorPlacement(cpus=(0,), allow_overlap=True, engine=options_seen(),
                                   realtime=0, awake=True)  # fmt: skip
    with pytest.raises(OptionError, match=r"--awake: it would run spinners .* server's \[\d\]"):
        LiveTarget([("127.0.0.1", 9)], share_cpus=share, generator=placement, idle_bound=0.0)
    # apart from the share (and its cores) it is kept as asked
    target = LiveTarget([("127.0.0.1", 9)], share_cpus=[3], generator=placement, idle_bound=0.0)
    assert target.awake is True


@needs_core
def test_on_more_cpus_than_the_core_keeps_awake_the_record_says_asleep(
    monkeypatch: pytest.MonkeyPatch, fake
) -> None:
    # an unpinned --awake on a 96-CPU machine: the core starts no spinner past 64
    # CPUs, and the RunLog (and so the curve) said awake all the same
    many = set(range(65))
    monkeypatch.setattr(native.os, "sched_getaffinity", lambda pid: many)
    stats, w, seen, _ = _run_native(True, fake)
    assert w.meta["awake"] is False
    assert seen == {}  # (and the core is not asked for spinners it would not start)
    assert stats.extra["loop"]["awake_spinners"] == 0


class _RecordsAwake(FakeEngine):
    """A fake engine that records in its RunLog whether it was asked to keep awake."""

    def __call__(self, schedule: Any, config: Any, writer: RunLogWriter, **kw: Any) -> Any:
        writer.meta["engine"] = "fake"
        writer.meta["awake"] = bool(kw.pop("awake", False))
        return super().__call__(schedule, config, writer, **kw)


@pytest.mark.parametrize("awake", [True, False])
def test_a_run_over_engine_processes_records_it(tmp_path: Path, awake: bool) -> None:
    # each process's RunLog said it; the merged one (replay -o, a sweep's RunLogs) lost it
    placement = GeneratorPlacement(processes=2, engine=_RecordsAwake(), realtime=0, awake=awake)
    trace = open_loop_trace("/x", 100.0, 0.2)
    out = tmp_path / "run.parquet"
    log, _ = scaleout.run_engines(
        trace, EngineConfig(targets=[("127.0.0.1", 9)]), rate_factor=1.0, horizon=0.2,
        generator=placement, out=out,
    )  # fmt: skip
    assert (log.meta["awake"], log.meta["engine"]) == (awake, "fake")
    assert RunLog.read_parquet(out).meta["awake"] is awake


@needs_core
def test_the_spinners_are_forked_before_the_run_s_zero_is_chosen(fake) -> None:
    # A fork copies this process's page tables and holds malloc's locks meanwhile: forked
    # inside the run, with its loop thread started 50 ms before its zero, they made the
    # first sends of a process holding 3 GB of small objects 70-90 ms late. Started
    # before the zero is chosen (on_ready), that time is before the run's schedule.
    seen: dict[int, tuple[int, set[int], bool, str, int]] = {}

    def on_ready() -> float:
        # (a child forked a moment ago may not have run yet to drop to idle priority: on a
        # loaded machine one of two was not yet SCHED_IDLE here)
        deadline = monotonic() + 2.0
        while len(_spinners()) < len(os.sched_getaffinity(0)) and monotonic() < deadline:
            time.sleep(0.005)
        seen.update(_spinners())
        return monotonic() + 0.05

    sched = build_schedule(open_loop_trace("/x", 400.0, 0.2), 1.0, 0.2, loop=False)
    stats = native.run_native(sched, EngineConfig(targets=[fake]), RunLogWriter(None),
                              handle_signals=False, awake=True, on_ready=on_ready)  # fmt: skip
    assert len(seen) == len(os.sched_getaffinity(0)) <= native.AWAKE_MAX_CPUS
    assert stats.extra["loop"]["awake_spinners"] == len(seen)
    assert not _spinners()  # ended with the run


@needs_core
def test_spinners_end_when_the_run_never_starts(fake) -> None:
    # (a cluster slot whose driver never gave the start time raises in on_ready)
    def on_ready() -> float:
        raise ReplayError("the driver never gave the start time")

    sched = build_schedule(open_loop_trace("/x", 400.0, 0.2), 1.0, 0.2, loop=False)
    with pytest.raises(ReplayError):
        native.run_native(sched, EngineConfig(targets=[fake]), RunLogWriter(None),
                          handle_signals=False, awake=True, on_ready=on_ready)  # fmt: skip
    assert not _spinners()


_SLOW_DEATH = """
import os, sys, threading, time
import shrink_core
os.sched_setaffinity(0, {0})
spinners = shrink_core.keep_awake()  # one spinner, on CPU 0, at idle priority
os.sched_setaffinity(0, {1})
hog = os.fork()
if hog == 0:  # CPU 0 taken by a real-time loop: the killed spinner cannot run to die
    os.sched_setaffinity(0, {0})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        pass
    os._exit(0)
time.sleep(0.05)
gap, done = [0.0], threading.Event()
def watch():  # as the stop watcher does: the longest time it could not run
    last = time.monotonic()
    while not done.is_set():
        now = time.monotonic()
        gap[0], last = max(gap[0], now - last), now
threading.Thread(target=watch, daemon=True).start()
time.sleep(0.01)
t = time.monotonic()
spinners.stop()
took = time.monotonic() - t
done.set()
os.waitpid(hog, 0)
print(took, gap[0])
"""


@needs_core
@pytest.mark.root
def test_the_spinners_are_ended_without_holding_python_s_other_threads() -> None:
    """A spinner killed on a CPU that something else holds (a loaded host: the spinner is
    at idle priority) takes as long to die: its stop held the GIL meanwhile, and the
    RunLog's writer and the stop watcher waited (a watcher woke to a gap of seconds)."""
    require_root("a real-time loop holds CPU 0")
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    out = subprocess.run(
        [sys.executable, "-c", _SLOW_DEATH], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    took, gap = (float(x) for x in out.stdout.split())
    assert took > 0.15, took  # the spinner did wait for the CPU (else nothing is shown)
    assert gap < 0.1, (took, gap)
