"""The spinners outside the root cpu cgroup: in an idle cgroup at the top of the hierarchy.

SCHED_IDLE is idle only within its task group, and inside a child cpu cgroup the
kernel's autogroups do not apply: a spinner there took 1.4-1.6 s of 3.6 s from a
CPU-bound neighbour in a sibling group. In a group of its own with cpu.idle = 1, made as
a child of the root, it took 0.01 s (bench/RESULTS.md, round 21b). So the default keeps
the CPUs awake there too, where such a group can be made, and not at all where not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.fake_engines import (
    HaltedByEvent,
    Part0Hangs,
    Part0Killed,
    Part0Stopped,
    Part0StoppedAfterReport,
    Part0Terminated,
)

from shrink.enforce.cfs import CgroupLayout
from shrink.enforce.idle_group import PREFIX, idle_group_place, make_idle_group, remove_stale
from shrink.replay import native, scaleout
from shrink.replay.live import LiveTarget
from shrink.replay.scaleout import default_awake
from shrink.target import GeneratorPlacement
from tests.conftest import require_root

in_group_core = pytest.mark.skipif(
    not getattr(native._core, "AWAKE_IN_GROUP", False),
    reason="the native core cannot put its spinners in a cgroup (built before it could)",
)


def _root(tmp_path: Path, version: int, subtree: str = "cpu") -> tuple[CgroupLayout, str]:
    """A fake hierarchy root (v1: cgroup.sane_behavior; v2: cgroup.subtree_control) and
    the mountinfo line showing it whole."""
    if version == 1:
        (tmp_path / "cgroup.sane_behavior").touch()
        (tmp_path / "cpu.idle").write_text("0\n")  # (a kernel of 5.15 or later)
    else:
        (tmp_path / "cgroup.subtree_control").write_text(subtree + "\n")
    line = f"32 31 0:29 / {tmp_path} rw,relatime - cgroup cgroup rw,cpu\n"
    return CgroupLayout(version, tmp_path, None, None), line


@pytest.mark.compute
@pytest.mark.parametrize("version", [1, 2])
def test_where_the_idle_group_can_be_made(tmp_path: Path, version: int) -> None:
    layout, mountinfo = _root(tmp_path, version)
    assert idle_group_place(layout, mountinfo) == (tmp_path, None)
    # not without a cpu controller, nor from a cgroup namespace (the root not shown)
    assert "no cpu cgroup" in str(idle_group_place(CgroupLayout(version, None, None, None))[1])
    ns = mountinfo.replace(" / ", " /.. ")
    assert "cgroup namespace" in str(idle_group_place(layout, ns)[1])


@pytest.mark.compute
def test_not_in_cgroup_v2_without_the_cpu_controller_below_the_root(tmp_path: Path) -> None:
    # (enabling it is a change to the whole machine's groups: not shrink's to make)
    layout, mountinfo = _root(tmp_path, 2, subtree="memory pids")
    place, why = idle_group_place(layout, mountinfo)
    assert place is None
    assert why == "cgroup v2's cpu controller is not enabled below the root"


@pytest.mark.compute
@pytest.mark.parametrize("version", [1, 2])
def test_not_where_the_kernel_has_no_cpu_idle(tmp_path: Path, version: int) -> None:
    # (before 5.15: the group was made, its cpu.idle missing, and the run went on without
    # spinners, on by default there, each run warning that 'the core could not start one
    # there (built without it, on more than 64 CPUs, or no process could be made)')
    layout, mountinfo = _root(tmp_path, version)
    if version == 1:
        (tmp_path / "cpu.idle").unlink()
    else:
        (tmp_path / "system.slice").mkdir()
        (tmp_path / "system.slice" / "cpu.weight").write_text("100\n")
    assert idle_group_place(layout, mountinfo) == (
        None,
        "the kernel has no cpu.idle (5.15 and later)",
    )
    if version == 2:
        (tmp_path / "system.slice" / "cpu.idle").write_text("0\n")
        assert idle_group_place(layout, mountinfo) == (tmp_path, None)


@pytest.mark.compute
def test_the_group_is_named_by_its_process_and_made_idle(tmp_path: Path) -> None:
    group, why = make_idle_group(tmp_path)
    assert why is None and group is not None
    start = (Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split())[19]
    assert group.path.name == f"{PREFIX}{os.getpid()}-{start}"
    assert (group.path / "cpu.idle").read_text() == "1"
    assert group.procs == group.path / "cgroup.procs"


@pytest.mark.compute
def test_stale_groups_of_processes_gone_are_removed_and_no_other(tmp_path: Path) -> None:
    # a kill -9 of shrink leaves its group (its spinners die with it): the next start
    # removes it, and no group of a process still running, nor one not named as shrink's
    me = os.getpid()
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    dead = _gone_pid()
    names = {
        f"{PREFIX}{dead}-123": False,  # its process is gone
        f"{PREFIX}{me}-{start + 1}": False,  # its PID reused by another process
        f"{PREFIX}{me}-{start}": True,  # this process's own
        f"{PREFIX}{dead}": True,  # not named as shrink names them
        f"other-{dead}-1": True,
    }
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / f"{PREFIX}{dead}-7").mkdir()
    (tmp_path / f"{PREFIX}{dead}-7" / "x").touch()  # still holding something: refused
    removed = remove_stale(tmp_path)
    assert sorted(removed) == sorted(n for n, kept in names.items() if not kept)
    assert all((tmp_path / n).exists() is kept for n, kept in names.items())
    assert (tmp_path / f"{PREFIX}{dead}-7").exists()


def _gone_pid() -> int:
    """The PID of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.compute
def test_the_default_outside_the_root_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scaleout, "smt_siblings", lambda cpu: ())
    monkeypatch.setattr(scaleout, "in_root_cpu_group", lambda: False)
    # an idle group can be made: on by default, as in the root group (it was off)
    monkeypatch.setattr(native, "idle_group_unavailable", lambda: None)
    assert default_awake(None, (0,), (1,)) is True
    assert default_awake(None, (0,), (0,)) is False  # (still not on the server's CPU)
    assert default_awake(True, (0,), (1,)) is True
    # none can be made: off, even asked for (each spinner would take its CPU time at the
    # group's full weight from the group's neighbours, and delay shrink's own wake-ups)
    monkeypatch.setattr(native, "idle_group_unavailable", lambda: "no permission")
    assert default_awake(None, (0,), (1,)) is False
    assert default_awake(True, (0,), (1,)) is False


def test_awake_asked_for_and_not_done_is_said_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from shrink.cli._replay_opts import note_realtime
    from shrink.replay.fake import FakeEngine

    monkeypatch.setattr(scaleout, "in_root_cpu_group", lambda: False)
    from shrink.replay import live

    for where in (native, live):
        monkeypatch.setattr(where, "idle_group_unavailable", lambda: "no permission to make one")
    for awake, said in ((True, 1), (None, 0)):
        placement = GeneratorPlacement(cpus=(0,), engine=FakeEngine(), realtime=0, awake=awake)
        target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)
        assert target.awake is False
        note_realtime(target)
        err = capsys.readouterr().err
        assert err.count("\n") == said
        assert ("--awake" in err and "no permission to make one" in err) is bool(said)


# Live, as root: a process moved into a child cpu cgroup, its spinners in the idle group.
_RUN = """
import os, sys, time, threading
from pathlib import Path
open(sys.argv[1] + "/cgroup.procs", "w").write(str(os.getpid()))
from shrink.replay import native, scaleout, EngineConfig, RunLogWriter, build_schedule
from shrink.replay import open_loop_trace
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})
print("default", scaleout.default_awake(None, (cpu,), ()), flush=True)
seen = []
def look():
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and os.sched_getscheduler(int(p.name)) == os.SCHED_IDLE and \\
                    int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                cg = [ln.split(":")[2] for ln in (p / "cgroup").read_text().splitlines()
                      if "cpu" in ln.split(":")[1].split(",")]
                seen.append((cg[0], os.sched_getaffinity(int(p.name))))
        except (OSError, IndexError):
            pass
    print("seen", seen, flush=True)
threading.Timer(0.3, look).start()
secs = float(sys.argv[2])
sched = build_schedule(open_loop_trace("/x", 200.0, secs), 1.0, secs, loop=False)
w = RunLogWriter(None)
stats = native.run_native(sched, EngineConfig(targets=[("127.0.0.1", 9)]), w,
                          handle_signals=True, awake=True)
print("group", w.meta["awake_group"], stats.extra["loop"]["awake_spinners"],
      stats.extra.get("awake_group"), flush=True)
"""


@pytest.fixture
def child_group():
    from shrink.enforce.cfs import cgroup_layout

    require_root("cpu cgroups")
    layout = cgroup_layout()
    place, why = idle_group_place(layout)
    if place is None:
        pytest.skip(f"no idle cgroup here: {why}")
    group = place / f"shrink-test-awake-{os.getpid()}"
    group.mkdir()
    yield place, group
    group.rmdir()


def _start(group: Path, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", _RUN, str(group), str(seconds)]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)


def _ours(place: Path) -> list[str]:
    return [p.name for p in place.iterdir() if p.name.startswith(PREFIX)]


@in_group_core
def test_in_a_child_cpu_group_the_spinners_run_in_the_idle_group_and_go(child_group) -> None:
    place, group = child_group
    before = _ours(place)
    proc = _start(group, 0.6)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert "default True" in out  # (it was False in a child group)
    seen = eval(out.split("seen ", 1)[1].splitlines()[0])
    assert seen, out
    name = out.split("group ", 1)[1].split()[0]
    assert name.startswith(f"{PREFIX}{proc.pid}-")
    # each spinner in the idle group (not the caller's), still on its own CPU
    assert all(cg == f"/{name}" and len(cpus) == 1 for cg, cpus in seen), seen
    assert out.split("group ", 1)[1].split()[1:] == [str(len(seen)), name]  # the record
    assert _ours(place) == before  # removed with the run


@in_group_core
def test_on_sigint_and_kill_9_the_group_goes(child_group) -> None:
    place, group = child_group
    before = _ours(place)
    for sig in (signal.SIGINT, signal.SIGKILL):
        proc = _start(group, 20.0)
        try:
            assert proc.stdout is not None
            assert "default True" in proc.stdout.readline()
            proc.stdout.readline()  # (the spinners were seen)
            proc.send_signal(sig)
            proc.communicate(timeout=30)
        finally:
            proc.kill()  # (ended already, unless an assertion failed)
            proc.wait()
        if sig == signal.SIGINT:
            assert _ours(place) == before
        else:  # left by a process gone, its spinners gone with it: the next start removes it
            left = [n for n in _ours(place) if n not in before]
            assert left == [f"{PREFIX}{proc.pid}-{n.rsplit('-', 1)[1]}" for n in left] != []
            deadline = time.monotonic() + 5
            while _ours(place) != before and time.monotonic() < deadline:
                remove_stale(place)  # (its spinners may take a moment to leave)
                time.sleep(0.05)
            assert _ours(place) == before


@in_group_core
def test_a_spinner_that_cannot_join_its_group_does_not_spin(tmp_path: Path) -> None:
    # (never at full weight in the caller's group: it ends at once, and is not counted)
    spinners = native._core.keep_awake(str(tmp_path / "gone" / "cgroup.procs"))
    time.sleep(0.1)
    assert spinners.stop()[0] == 0


def test_each_engine_process_s_group_is_recorded_and_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With --processes 2 each engine process makes its own group: the merged RunLog
    # named none, and the summary only the first ('2 spinners ... from the idle cpu
    # cgroup shrink-awake-A'), one of them having run in shrink-awake-B.
    from types import SimpleNamespace

    from shrink.cli.replay_cmd import _awake_text
    from shrink.replay.engine_parts import EngineRun
    from shrink.replay.engine_parts import parts_say as _parts_say
    from shrink.replay.fake import FakeEngine

    a, b = f"{PREFIX}10-1", f"{PREFIX}11-2"
    parts = [SimpleNamespace(meta={"awake": True, "awake_group": g}) for g in (a, b)]
    assert _parts_say(parts)["awake_group"] == [a, b]  # type: ignore[arg-type]
    one = [SimpleNamespace(meta={"awake": True, "awake_group": a})]
    assert _parts_say(one)["awake_group"] == a  # type: ignore[arg-type]

    monkeypatch.setattr(scaleout, "in_root_cpu_group", lambda: False)
    monkeypatch.setattr(native, "idle_group_unavailable", lambda: None)
    placement = GeneratorPlacement(cpus=(0,), engine=FakeEngine(), realtime=0, awake=True)
    target = LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)

    def stats(group: str) -> SimpleNamespace:
        loop = {"awake_spinners": 1}
        return SimpleNamespace(extra={"loop": loop, "awake_group": group}, cpu=0.0)

    run = EngineRun([stats(a), stats(b)], 0.0, [0, 1])  # type: ignore[list-item]
    monkeypatch.setattr(run.__class__, "interrupted", property(lambda self: False))
    engine = target._run_describe(run, 1.0)["engine"]
    assert engine["awake_group"] == [a, b]
    text = _awake_text(engine["awake_spinners"], engine["awake_group"])
    assert f"from the idle cpu cgroups {a}, {b})" in text
    assert _awake_text(1, a).endswith(f"from the idle cpu cgroup {a})")


class _KilledInItsGroup:
    """An engine process that makes its idle group (here under ``root``) and is killed
    there, part 0 of the run (kill -9, the OOM killer); the other runs to its end."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        from shrink.replay.contract import zero_time
        from shrink.replay.fake import FakeEngine

        if writer.meta.get("part") == 0:
            from shrink.enforce.idle_group import _start_time

            # (as make_idle_group names it; here no cpu.idle, which only cgroupfs drops)
            (self.root / f"{PREFIX}{os.getpid()}-{_start_time(os.getpid())}").mkdir()
            zero_time(writer, kw)  # (ready, and the run's zero told)
            os.kill(os.getpid(), signal.SIGKILL)
        kw.pop("awake", None)
        return FakeEngine()(schedule, config, writer, **kw)


def test_the_group_of_an_engine_process_killed_mid_run_goes_with_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it was left after the run (its process gone) until a later run outside the root
    # cpu cgroup made a group of its own
    from shrink.enforce import idle_group
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    root = tmp_path / "cpu"
    root.mkdir()
    # (outside the root cpu cgroup, the top of the hierarchy here: in the parent only)
    monkeypatch.setattr(idle_group, "in_root_cpu_group", lambda: False)
    monkeypatch.setattr(idle_group, "idle_group_place", lambda: (root, None))
    placement = GeneratorPlacement(
        processes=2, engine=_KilledInItsGroup(root), realtime=0, awake=True
    )
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2), EngineConfig(targets=[("127.0.0.1", 9)]),
        rate_factor=1.0, horizon=0.2, generator=placement,
    )  # fmt: skip
    assert run.extra["errors"]  # (part 0 was killed)
    assert not [p.name for p in root.iterdir() if p.name.startswith(PREFIX)]


@pytest.mark.compute
def test_a_group_whose_maker_holds_its_lock_is_never_removed(tmp_path: Path) -> None:
    # A PID names a process only in its own PID namespace: a run in a container that
    # shares the cpu hierarchy (its PIDs unknown here) had its group, just made and not
    # yet joined, removed as stale; its spinners then could not join it (none ran), or
    # its cpu.idle was said to be missing. The maker holds a lock on its group.
    import fcntl

    group, _ = make_idle_group(tmp_path)
    assert group is not None and group.fd >= 0
    other = os.open(group.path, os.O_RDONLY | os.O_DIRECTORY)
    with pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(other)
    (group.path / "cpu.idle").unlink()  # (cgroupfs drops its files with the folder)

    # another namespace's: named by a PID not known here, its maker's lock held
    theirs = tmp_path / f"{PREFIX}{_gone_pid()}-5"
    theirs.mkdir()
    held = os.open(theirs, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    assert remove_stale(tmp_path) == [] and theirs.exists()
    os.close(held)  # (its maker gone)
    assert remove_stale(tmp_path) == [theirs.name]
    assert group.remove() and group.fd == -1


def test_the_temporaries_of_an_engine_process_killed_mid_run_go_with_the_run(
    tmp_path: Path,
) -> None:
    # its writer's .r.part0.<run id>.parquet.HEX.tmp and .reserve (8 MiB) were left after
    # the run, until a later replay into the same file
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    placement = GeneratorPlacement(processes=2, engine=Part0Killed(), realtime=0)
    out = tmp_path / "r.parquet"
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2), EngineConfig(targets=[("127.0.0.1", 9)]),
        rate_factor=1.0, horizon=0.2, generator=placement, out=out,
    )  # fmt: skip
    assert run.extra["errors"]  # (part 0 was killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_the_last_engine_process_killed_mid_run_is_not_waited_for_for_ever(
    tmp_path: Path,
) -> None:
    # kill -9 (the OOM killer) of the last of --processes 2's engine processes: the parent
    # held that process's own end of its pipe, so its report was waited for for ever (no
    # end of file; process 0's killed was seen at once, its end closed with the loop)
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    def hung(signum, frame):  # type: ignore[no-untyped-def]
        raise TimeoutError("the run waited for a killed engine process's report")

    placement = GeneratorPlacement(processes=2, engine=Part0Killed(part=1), realtime=0)
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        _, run = scaleout.run_engines(
            open_loop_trace("/x", 100.0, 0.2), EngineConfig(targets=[("127.0.0.1", 9)]),
            rate_factor=1.0, horizon=0.2, generator=placement, out=tmp_path / "r.parquet",
        )  # fmt: skip
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert any("engine process 1" in e for e in run.extra["errors"]), run.extra
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_an_engine_process_stopped_and_never_continued_is_killed_after_the_run(
    tmp_path: Path,
) -> None:
    # SIGSTOP of one of --processes 2's engine processes: the parent waited for its report
    # for ever (a 4 s replay ran 50 s until killed)
    from shrink.replay.engine import EngineConfig
    from shrink.replay.waiting import STOPPED_PAST_END
    from shrink.schedule import open_loop_trace

    placement = GeneratorPlacement(processes=2, engine=Part0Stopped(), realtime=0)
    out = tmp_path / "r.parquet"
    began = time.monotonic()
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2),
        EngineConfig(targets=[("127.0.0.1", 9)], timeout=0.5),
        rate_factor=1.0, horizon=0.2, generator=placement, out=out,
    )  # fmt: skip
    assert time.monotonic() - began < 15  # 0.2 s + 0.5 s + 5 s, and the start
    assert any(STOPPED_PAST_END in e for e in run.extra["errors"]), run.extra
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_an_engine_process_stopped_after_its_report_is_not_waited_for(tmp_path: Path) -> None:
    # SIGSTOP of an engine process after its report, before its exit: the run waited 10 s
    # for it, then hung at its own exit (Python's exit sends its processes SIGTERM and
    # joins them; a stopped one does not end)
    import multiprocessing

    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    placement = GeneratorPlacement(processes=2, engine=Part0StoppedAfterReport(), realtime=0)
    began = time.monotonic()
    try:
        _, run = scaleout.run_engines(
            open_loop_trace("/x", 100.0, 0.2), EngineConfig(targets=[("127.0.0.1", 9)]),
            rate_factor=1.0, horizon=0.2, generator=placement, out=tmp_path / "r.parquet",
        )  # fmt: skip
        left = multiprocessing.active_children()
    finally:
        for proc in multiprocessing.active_children():
            proc.kill()
            proc.join()
    assert not left and time.monotonic() - began < 8
    assert not run.extra.get("errors")  # (both reported: the run is whole)


def test_an_engine_process_that_hangs_past_the_run_is_killed_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One that runs on but never reports (a hang inside its engine) was waited for without
    # end: only a stopped one was killed past the deadline.
    from shrink.replay import waiting
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    monkeypatch.setattr(waiting, "QUIET_PAST_END_S", 1.0, raising=False)  # (60 s)
    placement = GeneratorPlacement(processes=2, engine=Part0Hangs(), realtime=0)
    out = tmp_path / "r.parquet"
    began = time.monotonic()
    log, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2),
        EngineConfig(targets=[("127.0.0.1", 9)], timeout=0.5),
        rate_factor=1.0, horizon=0.2, generator=placement, out=out,
    )  # fmt: skip
    assert time.monotonic() - began < 15  # 0.2 s + 0.5 s + 5 s + 1 s, and the start
    said = [e for e in run.extra["errors"] if "engine process 0" in e]
    assert said and "without a report, and writing nothing for 1 s: hung, killed" in said[0]
    assert len(log) > 0  # the other process's rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_an_engine_process_still_writing_past_the_run_is_not_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shrink.replay import waiting
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    monkeypatch.setattr(waiting, "QUIET_PAST_END_S", 1.0, raising=False)
    placement = GeneratorPlacement(processes=2, engine=Part0Hangs(writing=3.0), realtime=0)
    trace = open_loop_trace("/x", 100.0, 0.2)
    log, run = scaleout.run_engines(
        trace,
        EngineConfig(targets=[("127.0.0.1", 9)], timeout=0.5),
        rate_factor=1.0, horizon=0.2, generator=placement, out=tmp_path / "r.parquet",
    )  # fmt: skip
    assert not run.extra.get("errors"), run.extra  # 3 s of writing past 1 s quiet
    assert len(log) >= len(trace)  # both parts' rows (the schedule may add one)


def test_a_stop_signal_sent_to_one_engine_process_alone_is_said_as_its(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kill -TERM of one of --processes 2's engine processes (not the command): it was said
    # "interrupted: the requests sent so far are kept", exit 130, as a Ctrl-C of the
    # command, and nothing named the process, while the other ran its part to the end.
    from shrink import interrupts
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    monkeypatch.setattr(interrupts, "_stopping", [False])  # (this process's own record)
    monkeypatch.setattr(interrupts, "_last", [int(signal.SIGINT)])
    placement = GeneratorPlacement(processes=2, engine=Part0Terminated(), realtime=0)
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2),
        EngineConfig(targets=[("127.0.0.1", 9)], timeout=0.5),
        rate_factor=1.0, horizon=0.2, generator=placement, out=tmp_path / "r.parquet",
    )  # fmt: skip
    said = " ".join(run.extra.get("errors") or [])
    assert "engine process 0 (PID " in said and "stopped by SIGTERM, sent to it alone" in said
    assert "the other process ran its part to the end" in said
    assert interrupts.stopped_by() == "stopped by SIGTERM" and interrupts.exit_status() == 143


def test_a_run_stopped_by_its_event_is_not_said_stopped_by_a_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A testbed's watch stops the run (a server went down) by an event, no signal sent:
    # each engine process reported the signal it had recorded, none, read as SIGINT, so
    # the run said "engine process 0 (PID N): stopped by SIGINT, sent to it alone" of
    # each and the command stopped as a Ctrl-C (exit 130), not on the server's crash.
    import multiprocessing as mp

    from shrink import interrupts
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    monkeypatch.setattr(interrupts, "_stopping", [False])  # (this process's own record)
    monkeypatch.setattr(interrupts, "_last", [int(signal.SIGINT)])
    halt = mp.get_context("fork").Event()
    halt.set()
    placement = GeneratorPlacement(processes=2, engine=HaltedByEvent(), realtime=0, stop=halt)
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2),
        EngineConfig(targets=[("127.0.0.1", 9)], timeout=0.5),
        rate_factor=1.0, horizon=0.2, generator=placement, out=tmp_path / "r.parquet",
    )  # fmt: skip
    assert run.interrupted
    assert not run.extra.get("errors"), run.extra
    assert not interrupts._stopping[0]  # the command was not stopped by a signal


class _AwakeThenPart0Killed:
    """Each engine process starts its spinners in a group of its own (as run_native
    records them before the run's zero), then process 0 is killed (kill -9). Process
    0's spinners are the core's, in the cgroup whose ``cgroup.procs`` is ``procs``
    (None: this one's)."""

    def __init__(self, procs: str | None = None) -> None:
        self.procs = procs

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        from shrink.replay.contract import zero_time
        from shrink.replay.fake import FakeEngine

        group = f"{PREFIX}{os.getpid()}-1"
        writer.meta.update(awake=True, awake_group=group)
        if writer.meta.get("part") == 0:
            spinners = native._core.keep_awake(self.procs)  # noqa: F841 (run till killed)
            zero_time(writer, kw)
            os.kill(os.getpid(), signal.SIGKILL)
        kw.pop("awake", None)
        stats = FakeEngine()(schedule, config, writer, **kw)
        stats.extra.setdefault("loop", {})["awake_spinners"] = 1
        stats.extra["awake_group"] = group
        return stats


@pytest.mark.skipif(
    not (native.available() and hasattr(native._core, "keep_awake")),
    reason="the native core is not built with keep_awake",
)
def test_the_spinners_of_an_engine_process_killed_mid_run_are_counted() -> None:
    # kill -9 of one of --processes 2's engines: awake_spinners and awake_group named
    # only the survivor's, although the killed one's spinners ran until it died; and its
    # error said only "exited without a report"
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    placement = GeneratorPlacement(processes=2, engine=_AwakeThenPart0Killed(), realtime=0)
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2), EngineConfig(targets=[("127.0.0.1", 9)]),
        rate_factor=1.0, horizon=0.2, generator=placement,
    )  # fmt: skip
    (error,) = run.extra["errors"]
    assert error.startswith("engine process 0 (PID ") and "killed by SIGKILL" in error
    # (unpinned, the killed one started one spinner per CPU it may run on)
    assert run.awake_spinners == 1 + len(os.sched_getaffinity(0))
    assert len(run.awake_groups) == 2 and len(set(run.awake_groups)) == 2
    target = LiveTarget([("127.0.0.1", 9)], idle_bound=0.0)
    engine = target._run_describe(run, 1.0)["engine"]
    assert engine["awake_spinners"] == run.awake_spinners
    assert engine["awake_group"] == run.awake_groups


@pytest.mark.skipif(
    not (native.available() and hasattr(native._core, "keep_awake")),
    reason="the native core is not built with keep_awake",
)
def test_the_spinners_that_exited_at_once_of_a_killed_engine_process_are_not_counted() -> None:
    # A killed engine process's spinners were counted as one per CPU it may run on,
    # although a spinner that could not join its group (or drop to idle priority) had
    # exited at once and kept no CPU awake: it now counts those that got going
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    engine = _AwakeThenPart0Killed("/nonexistent/shrink-test/cgroup.procs")
    placement = GeneratorPlacement(processes=2, engine=engine, realtime=0)
    _, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2), EngineConfig(targets=[("127.0.0.1", 9)]),
        rate_factor=1.0, horizon=0.2, generator=placement,
    )  # fmt: skip
    assert "killed by SIGKILL" in run.extra["errors"][0]
    assert run.awake_spinners == 1  # the survivor's (its stats say one); none of the killed's


@pytest.mark.compute
def test_a_group_whose_lock_another_holds_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The maker stopped waiting for its new group's lock after 0.1 s and used the group
    # with no lock held (another user may open the folder and flock it): a run in a PID
    # namespace of its own could then take it for stale and remove it mid-run.
    import fcntl

    from shrink.enforce import idle_group

    held: list[int] = []
    mkdir = Path.mkdir

    def made_and_taken(self: Path, *a, **k) -> None:  # type: ignore[no-untyped-def]
        mkdir(self, *a, **k)
        if self.name.startswith(PREFIX):  # another opens it and holds its lock
            held.append(os.open(self, os.O_RDONLY | os.O_DIRECTORY))
            fcntl.flock(held[-1], fcntl.LOCK_EX)

    monkeypatch.setattr(Path, "mkdir", made_and_taken)
    monkeypatch.setattr(idle_group, "LOCK_WAIT_S", 0.3, raising=False)
    start = time.monotonic()
    try:
        group, why = make_idle_group(tmp_path)
    finally:
        for fd in held:
            os.close(fd)
    assert group is None and why is not None
    assert "held the lock of the cgroup" in why and "not used without it" in why
    assert 0.25 < time.monotonic() - start < 5.0  # waited, within its bound
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(PREFIX)]  # not left


@pytest.mark.compute
def test_why_no_spinner_ran_without_an_idle_group_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    # _keep_awake dropped idle_group()'s reason: the summary gave the core's reasons
    # ("built without it, on more than 64 CPUs, ...") instead of the real one
    from shrink.cli.replay_cmd import _awake_text

    why = "another process held the lock of the cgroup shrink-awake-1-2 for over 1 s"
    monkeypatch.setattr(native, "_can_keep_awake", lambda: True)
    monkeypatch.setattr(native, "in_root_cpu_group", lambda: False)
    monkeypatch.setattr(native, "idle_group", lambda: (None, why))
    spinners, group, why_not = native._keep_awake({"awake": True})
    assert spinners is None and group is None and why_not is not None and why in why_not
    text = _awake_text(0, None, why_not)
    assert f"no spinner ran: no idle cpu cgroup for the spinners: {why}" in text
    assert "built without it" not in text


@pytest.mark.compute
def test_two_engine_processes_each_sent_a_signal_are_not_said_to_have_run_to_the_end() -> None:
    # kill -TERM of both engine processes of --processes 2: each was said "the other
    # process ran its part to the end", of the other one stopped too.
    from types import SimpleNamespace

    from shrink.replay.engine_parts import stopped_alone

    procs = [SimpleNamespace(pid=11), SimpleNamespace(pid=12)]
    term = SimpleNamespace(interrupted=True, extra={"stop_signal": int(signal.SIGTERM)})
    said, first = stopped_alone([term, term], [], procs)
    assert first == signal.SIGTERM and len(said) == 2
    assert not any("ran its part to the end" in s for s in said), said
    assert said[0].endswith("its part of the load ends there, the other one did not")
    whole = SimpleNamespace(interrupted=False, extra={})
    said, _ = stopped_alone([term, whole], [], procs)
    assert said == [
        "engine process 0 (PID 11): stopped by SIGTERM, sent to it alone (not to this "
        "command): its part of the load ends there, the other process ran its part to the end"
    ]
    # (one its stop event ended, no signal recorded, did not run its part to the end)
    halted = SimpleNamespace(interrupted=True, extra={})
    procs.append(SimpleNamespace(pid=13))
    said, _ = stopped_alone([term, halted, whole], [], procs)
    assert said[0].endswith("1 of the other 2 processes ran theirs to the end"), said


def test_a_report_that_comes_as_a_hung_process_is_killed_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kill of a process found quiet past the deadline raced with its report: one sent
    # between the last look at its pipe and the kill was dropped, its whole part said
    # "hung, killed" and not merged.
    import subprocess
    from collections import deque
    from types import SimpleNamespace

    from shrink.replay import waiting

    class Pipe:
        def __init__(self) -> None:
            self.q: deque[object] = deque()

        def send(self, obj: object) -> None:
            pass

        def poll(self, timeout: float = 0.0) -> bool:
            return bool(self.q)

        def recv(self) -> object:
            return self.q.popleft()

    pipe = Pipe()

    def hung(self: object) -> str:
        pipe.q.append(("done", "its stats"))  # (its report, just before the kill)
        return "hung, killed"

    monkeypatch.setattr(waiting._Quiet, "hung", hung)
    child = subprocess.Popen(["sleep", "30"])
    try:
        _, stats, ended, stopped = waiting.let_go(
            [pipe], [SimpleNamespace(pid=child.pid)], 0, None, deadline_s=0.0
        )
    finally:
        child.kill()
        child.wait()
    assert (stats, ended, stopped) == (["its stats"], [], False)
