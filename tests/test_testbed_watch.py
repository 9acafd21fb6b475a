"""A server stopped, frozen, or whose share someone else changed, is a testbed error as a
dead one is: the sweep stops naming it, and ``testbed status`` says it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.fake_targets import live_target, steady_trace

import shrink.testbed.status  # noqa: F401 - read from sys.modules below
from shrink.errors import TestbedError
from shrink.procfs import proc_info
from shrink.replay import live
from shrink.replay.engine import EngineStats
from shrink.replay.live import LiveTarget
from shrink.replay.native import available
from shrink.replay.writer import RunLogRow
from shrink.target import GeneratorPlacement
from shrink.testbed import watch
from shrink.testbed.state import ReplicaState
from shrink.topology import format_cpulist

# The CPUs this process and its children may run on: a replica's, in these states.
CPUS = sorted(os.sched_getaffinity(0))
ALL = format_cpulist(CPUS)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _state(pid: int, **replica) -> dict:
    start = proc_info(pid).starttime
    return {
        "replicas": [
            {"name": "r0", "address": "127.0.0.1", "port": 9, "cpus": CPUS, "masters": [pid],
             "processes": {"lighttpd": [pid]}, "starttimes": {str(pid): start},
             "pinned": {}, "config": "", "errorlog": "", **replica}
        ]
    }  # fmt: skip


def _wait_state(pid: int, states: str) -> None:
    deadline = time.monotonic() + 5
    while proc_info(pid).state not in states and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_server_process_stopped_by_sigstop_is_named():
    """SIGSTOP of the server's master mid-sweep: its PIDs lived on, so the levels after
    ran against a server that answered nothing (0 req/s, a few timeouts, exit 0)."""
    srv = _sleeper()
    try:
        state = _state(srv.pid)
        assert live.testbed_problem(state) is None
        os.kill(srv.pid, signal.SIGSTOP)
        _wait_state(srv.pid, "T")
        problem = live.testbed_problem(state)
        assert problem == f"went wrong: r0: lighttpd PID {srv.pid} is stopped (SIGSTOP)"
        os.kill(srv.pid, signal.SIGCONT)
        _wait_state(srv.pid, "SR")
        assert live.testbed_problem(state) is None
    finally:
        srv.kill()
        srv.wait()


def _engine_that_stops(pid: int):
    """A replay engine that stops ``pid`` for a while in the middle of its run (the
    requests of the while time out) and lets it go on before the run ends."""

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        t0 = on_ready()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(4 * watch.POLL_S)
        os.kill(pid, signal.SIGCONT)
        _wait_state(pid, "SR")
        for i in range(200):
            tc = writer.targets.code("127.0.0.1:9")
            err = writer.errors.code("timeout")
            writer.add(RunLogRow(i / 100, i / 100, np.nan, np.nan, 0, 0, 0, i, tc, err))
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=2.0, cpu=0.0, requests=200)

    return engine


def test_a_server_stopped_and_resumed_within_a_level_is_a_testbed_error():
    """Stopped, then continued before the level ended: the check after the level found it
    running, and the level was kept as a slow server's. Then it was said as "is stopped
    (SIGSTOP)", running again when that was printed: it is now said in the past, with
    when the watch saw it so and when no longer."""
    srv = _sleeper()
    try:
        cpus = sorted(os.sched_getaffinity(0))
        target = LiveTarget(
            [("127.0.0.1", 9)], state=_state(srv.pid), share_cpus=cpus[-1:],
            generator=GeneratorPlacement(tuple(cpus[:1]), True, engine=_engine_that_stops(srv.pid)),
            idle_bound=0.1,
        )  # fmt: skip
        want = f"during the level, the server under test went wrong: r0: lighttpd PID {srv.pid} "
        with pytest.raises(TestbedError, match=want) as e:
            target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)
        said = str(e.value)
        assert "is stopped" not in said, said
        assert re.search(
            r"was stopped \(SIGSTOP\) \(seen [0-9.]+(-[0-9.]+)? s into the run; "
            r"no longer so at [0-9.]+ s\)$",
            said,
        ), said
    finally:
        srv.kill()
        srv.wait()


def test_a_frozen_cgroup_is_named(tmp_path):
    """A cgroup frozen (v2 ``cgroup.freeze``, v1 ``freezer.state``): its processes show
    as sleeping (v2) or in disk sleep (v1), never as stopped."""
    proc = tmp_path / "proc"
    (proc / "5").mkdir(parents=True)
    (proc / "5" / "cgroup").write_text("6:freezer:/held\n0::/jail\n")
    v2, v1 = tmp_path / "unified", tmp_path / "freezer"
    (v2 / "jail").mkdir(parents=True)
    (v1 / "held").mkdir(parents=True)
    (v2 / "jail" / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    (v1 / "held" / "freezer.state").write_text("THAWED\n")
    mounts = {"": v2, "freezer": v1}
    assert watch.frozen(5, mounts, proc) is None
    (v1 / "held" / "freezer.state").write_text("FROZEN\n")
    assert watch.frozen(5, mounts, proc) == f"{v1}/held/freezer.state"
    (v1 / "held" / "freezer.state").write_text("THAWED\n")
    (v2 / "jail" / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert watch.frozen(5, mounts, proc) == f"{v2}/jail/cgroup.freeze"


def _cgroup(tmp_path: Path, pid: int) -> dict:
    dirs = {}
    for c, files in {
        "cpu": {"cpu.cfs_quota_us": "4000", "cpu.cfs_period_us": "8000"},
        "cpuset": {"cpuset.cpus": ALL, "cpuset.effective_cpus": ALL},
    }.items():
        d = tmp_path / c / "shrink" / "g-r0"
        d.mkdir(parents=True)
        for name, text in {**files, "cgroup.procs": f"{pid}\n"}.items():
            (d / name).write_text(text + "\n")
        dirs[c] = str(d)
    cg = {"name": "g-r0", "version": 1, "dirs": dirs}
    return {"mechanism": "cfs", "cpu_fraction": 0.5, "quota_us": 4000, "period_us": 8000,
            "cgroup": cg}  # fmt: skip


def test_a_share_changed_under_the_testbed_is_named(tmp_path, monkeypatch):
    """Someone else's write to the share's cgroup mid-sweep (the quota lifted, a CPU
    added or taken from its cpuset, the server moved out): the levels after were
    measured, and filed, as the recorded share."""
    from shrink.enforce import cfs

    mounts = {tmp_path / "cpu", tmp_path / "cpuset"}
    monkeypatch.setattr(cfs, "cgroup_mounts", lambda text=None: mounts)
    me = os.getpid()
    enforce = _cgroup(tmp_path, me)
    state = _state(me, enforce=enforce)
    assert live.testbed_problem(state) is None
    cpu, cpuset = (Path(enforce["cgroup"]["dirs"][c]) for c in ("cpu", "cpuset"))
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    assert "its CFS quota is -1/8000 us, not the recorded 4000/8000 us" in live.testbed_problem(
        state
    )
    (cpu / "cpu.cfs_quota_us").write_text("4000\n")
    (cpuset / "cpuset.effective_cpus").write_text("4095\n")
    assert f"its cpuset's CPUs are 4095, not the recorded {ALL}" in live.testbed_problem(state)
    (cpuset / "cpuset.effective_cpus").write_text(ALL)
    (cpuset / "cgroup.procs").write_text("")
    assert f"lighttpd PID {me} moved out of its cgroup {cpuset}" in live.testbed_problem(state)
    r = ReplicaState.from_dict(state["replicas"][0])
    assert len(watch.replica_problems(r, {})) == 1


def test_status_names_a_stopped_server(monkeypatch):
    """``testbed status`` of a stopped server named no process (its health check timed
    out, if it was made)."""
    status_mod = sys.modules["shrink.testbed.status"]

    srv = _sleeper()
    try:
        os.kill(srv.pid, signal.SIGSTOP)
        _wait_state(srv.pid, "T")
        r = ReplicaState.from_dict(_state(srv.pid)["replicas"][0])
        monkeypatch.setattr(status_mod.TestbedState, "read", lambda p: _Fake([r]))
        monkeypatch.setattr(status_mod, "recipe_of", lambda st: None)
        (rep,) = status_mod.status("x.json", check_health=False)
        assert not rep.ok and rep.problem == f"lighttpd PID {srv.pid} is stopped (SIGSTOP)"
    finally:
        srv.kill()
        srv.wait()


class _Fake:
    """A testbed state read back: its replicas, running."""

    def __init__(self, replicas: list[ReplicaState]) -> None:
        self.replicas, self.stopped, self.notes, self.server = replicas, None, [], {}
        self.docroot = ""

    def elsewhere(self) -> None:
        return None  # brought up in this PID namespace


def test_a_co_runner_stopped_or_off_sched_fifo_is_named():
    """SIGSTOP of the co-runner's spinner (``--enforce corunner``) for 8 s of a ``mat
    --adaptive`` run: the server had the whole CPU, the MAT came out as the share's,
    exit 0, and ``status`` said ok. A spinner moved to SCHED_OTHER (``chrt -o``) yields
    the CPU the same way."""
    me, spin = os.getpid(), _sleeper()
    try:
        enforce = {"mechanism": "corunner", "cpu_fraction": 0.5, "period_us": 1000,
                   "spin_us": 500, "helper": "c", "cpus": [0],
                   "spinners": {str(spin.pid): proc_info(spin.pid).starttime}}  # fmt: skip
        state = _state(me, enforce=enforce)
        # a spinner under test runs SCHED_OTHER (SCHED_FIFO needs root): said so
        assert f"PID {spin.pid} no longer runs SCHED_FIFO" in live.testbed_problem(state)
        os.kill(spin.pid, signal.SIGSTOP)
        _wait_state(spin.pid, "T")
        assert (
            f"co-runner (the CPU-time share is not enforced without it) PID {spin.pid} is stopped"
            in (live.testbed_problem(state))
        )
    finally:
        spin.kill()
        spin.wait()


def _answering(status: int):
    """A replay engine whose every request is answered whole with ``status``."""

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        t0 = on_ready()
        for i in range(200):
            tc = writer.targets.code("127.0.0.1:9")
            ok = writer.errors.code("")
            row = RunLogRow(i / 100, i / 100, i / 100 + 1e-3, i / 100 + 2e-3, status, 100, 0, i,
                            tc, ok)  # fmt: skip
            writer.add(row)
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=2.0, cpu=0.0, requests=200)

    return engine


def test_a_server_that_answers_4xx_to_everything_is_a_testbed_error():
    """The docroot made unreadable (chmod 000) mid-sweep on nginx-php-fpm: the levels
    after were 100% 403, "FAILED (excluded)", the sweep ran on and exited 0, and `mat`
    gave a bound from the levels before. Now the level stops the sweep, naming the
    status and the error log."""
    state = _state(os.getpid(), errorlog="/run/x/error.log")
    with pytest.raises(
        TestbedError, match=r"200 of 200 requests were answered HTTP 403.*/run/x/error\.log"
    ):
        target = live_target(state, _answering(403))
        target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)
    # 5xx stay the level's failures (an overloaded server may answer so) ...
    res = live_target(state, _answering(503)).run(
        steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0
    )
    assert len(res.runlog) == 200
    # ... and 404s a trace recorded are the trace's.
    trace = steady_trace()
    trace = trace.with_column("status", np.full(len(trace), 404, dtype=np.int32))
    res = live_target(state, _answering(404)).run(trace, rate_factor=1.0, warmup=0.0, duration=2.0)
    assert len(res.runlog) == 200


def test_a_run_folder_removed_under_the_testbed_is_named(tmp_path):
    """The replica's run folder removed mid-sweep (nginx-php-fpm): PHP's socket went with
    it, the levels after had their PHP pages 502 (excluded as failed), exit 0."""
    run = tmp_path / "r0"
    run.mkdir()
    state = _state(os.getpid(), run_dir=str(run))
    assert live.testbed_problem(state) is None
    run.rmdir()
    assert live.testbed_problem(state) == f"went wrong: r0: its run folder {run} is gone"


class _Described:
    def __init__(self, d: dict) -> None:
        self.d = d

    def describe(self) -> dict:
        return self.d


def test_mat_adaptive_on_another_testbed_is_refused(tmp_path):
    """``mat --adaptive`` on a curve of lighttpd on CPU 1 whole, with ``--target`` an
    nginx-php-fpm testbed on 0@50%: the level measured there was added to the curve and
    a MAT given from the mix, exit 0."""
    from shrink.loadcurve import LoadCurve
    from shrink.measure import sweep
    from shrink.replay.adaptive import other_testbed
    from shrink.target import FakeTarget

    def testbed(server: str, cpus: list[int], fraction: float, port: int) -> dict:
        return {"target": "live", "addresses": [f"127.0.0.1:{port}"],
                "server": {"name": server, "source": "built-in"},
                "share": {"cpus": cpus, "cpu_fraction": fraction,
                          "enforce": {"mechanism": "cfs" if fraction < 1 else "none"}},
                "mapping": {"name": "1-replica", "replicas": [{"name": "r0", "cpus": cpus}]},
                "started": f"2026-01-01T00:00:0{port % 10}+00:00"}  # fmt: skip

    d = sweep(FakeTarget(servers=1, demand={"static": 0.001}), steady_trace(), [1, 2], reps=1,
              warmup=0.5, duration=1, seed=1).to_dict()  # fmt: skip
    d["meta"]["target"] = testbed("lighttpd-php-cgi", [1], 1.0, 8080)
    curve = LoadCurve.from_dict(d)
    why = other_testbed(curve, _Described(testbed("nginx-php-fpm", [0], 0.5, 8081)))
    assert why is not None and "server 'nginx-php-fpm', not 'lighttpd-php-cgi'" in why
    assert "share fraction 0.5, not 1.0" in why and "share CPUs [0], not [1]" in why
    # The same testbed brought up again (another port, another start) is the curve's,
    # and a plain URL says nothing of what serves it.
    assert other_testbed(curve, _Described(testbed("lighttpd-php-cgi", [1], 1.0, 9090))) is None
    assert (
        other_testbed(curve, _Described({"target": "live", "addresses": ["127.0.0.1:1"]})) is None
    )


def test_a_testbed_brought_down_under_a_sweep_is_said_so(tmp_path):
    """``testbed down`` of the testbed a sweep measures: the sweep said "crashed or
    killed: nginx PID ..., php-fpm PID ...", as of a crash. Its state file says it was
    brought down, and when: said so."""
    import json

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    state = _state(os.getpid())
    state["replicas"][0]["processes"] = {"nginx": [gone.pid]}
    state["replicas"][0]["starttimes"] = {}
    state["started"] = "2026-01-01T00:00:00+00:00"
    path = tmp_path / "tb.json"
    path.write_text(json.dumps({**state, "stopped": "2026-01-01T00:05:00+00:00"}))
    target = live_target(state, _answering(200))
    target.state_path = path
    with pytest.raises(TestbedError, match=r"brought down \(2026-01-01T00:05:00\+00:00\)"):
        target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)
    # Another testbed's state in its place (another start) says nothing of this one.
    path.write_text(json.dumps({**state, "started": "2026-02-02T00:00:00+00:00",
                                "stopped": "2026-02-02T00:05:00+00:00"}))  # fmt: skip
    with pytest.raises(TestbedError, match=f"crashed or killed: nginx PID {gone.pid}"):
        target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)


def test_a_co_runner_moved_off_its_cpu_is_named(monkeypatch):
    """The co-runner's spinner moved to another CPU (``taskset -pc 0``) under a sweep of
    a ``1@50%`` share: the server had CPU 1 whole, the level was measured as the 50%
    share, exit 0, and ``status`` said ok."""
    me, spin = os.getpid(), _sleeper()
    # SCHED_FIFO as root's spinner runs; the server (this process) normal
    monkeypatch.setattr(watch, "_policy", lambda pid: os.SCHED_FIFO if pid == spin.pid else 0)
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(spin.pid, {cpu})
        enforce = {"mechanism": "corunner", "cpu_fraction": 0.5, "period_us": 1000,
                   "spin_us": 500, "helper": "c", "cpus": [cpu],
                   "spinners": {str(spin.pid): proc_info(spin.pid).starttime}}  # fmt: skip
        assert live.testbed_problem(_state(me, enforce=enforce)) is None
        enforce["cpus"] = [4095]  # its CPU, as the record says, is not where it runs
        problem = live.testbed_problem(_state(me, enforce=enforce))
        assert f"PID {spin.pid} may run on CPUs {cpu}, not CPU 4095" in problem
    finally:
        spin.kill()
        spin.wait()


def test_a_server_process_off_the_replicas_cpus_is_named():
    """``taskset -pc 0-1`` of lighttpd's php-cgi parent (a testbed on CPU 1, without
    cgroups): only the processes the state records as pinned were checked, and the
    children it forks after run on both CPUs."""
    srv = _sleeper()
    try:
        state = _state(srv.pid)
        assert live.testbed_problem(state) is None
        state["replicas"][0]["cpus"] = [4095]
        want = f"lighttpd PID {srv.pid} may run on CPUs {ALL}, outside the replica's CPUs 4095"
        assert want in live.testbed_problem(state)
    finally:
        srv.kill()
        srv.wait()


def test_a_v2_share_changed_under_the_testbed_is_named(tmp_path, monkeypatch):
    """The same on a cgroup v2 tree: one folder, ``cpu.max`` and ``cpuset.cpus.effective``."""
    from shrink.enforce import cfs

    d = tmp_path / "shrink" / "g-r0"
    d.mkdir(parents=True)
    monkeypatch.setattr(cfs, "cgroup_mounts", lambda text=None: {tmp_path})
    me = os.getpid()
    for name, text in {"cpu.max": "4000 8000", "cpuset.cpus.effective": ALL,
                       "cgroup.procs": str(me)}.items():  # fmt: skip
        (d / name).write_text(text + "\n")
    cg = {"name": "g-r0", "version": 2, "dirs": {c: str(d) for c in ("cpu", "cpuacct", "cpuset")}}
    enforce = {"mechanism": "cfs", "cpu_fraction": 0.5, "quota_us": 4000, "period_us": 8000,
               "cgroup": cg}  # fmt: skip
    state = _state(me, enforce=enforce)
    assert live.testbed_problem(state) is None
    (d / "cpu.max").write_text("max 8000\n")
    assert "its CFS quota is max/8000 us, not the recorded 4000/8000 us" in live.testbed_problem(
        state
    )


def test_down_of_a_frozen_server_says_it_is_frozen(monkeypatch):
    """``testbed down`` of a testbed in a frozen v1 freezer: "PIDs [...] survived SIGKILL",
    exit 1, and no word of why (a frozen task dies only once thawed; thawed, ``down``
    again cleaned up)."""
    from shrink import processes
    from shrink.testbed import recipe

    srv = _sleeper()
    try:
        r = ReplicaState.from_dict(_state(srv.pid)["replicas"][0])
        held = "/sys/fs/cgroup/freezer/held/freezer.state"
        monkeypatch.setattr(processes, "stop_processes", lambda targets, **kw: [])  # it stays
        monkeypatch.setattr(recipe, "frozen", lambda pid, mounts: held)
        want = rf"PIDs \[{srv.pid}\] survived SIGKILL \(frozen by {held}: thaw it, then run down"
        with pytest.raises(TestbedError, match=want):
            recipe.stop_replica(r)
    finally:
        srv.kill()
        srv.wait()


@pytest.mark.parametrize("targets", [["a.json", "b.json"], ["a.json,http://127.0.0.1:8080"]])
def test_a_testbed_state_beside_another_target_is_refused(tmp_path, targets):
    """``sweep --target a.json --target b.json`` (two testbeds at once): "target a.json is
    not an IP address ...; pass allow_remote=True (--allow-remote)", advice that would
    have sent the load to a host named a.json."""
    from typer.testing import CliRunner

    from shrink.cli import app

    trace = tmp_path / "t.parquet"
    steady_trace().write_parquet(trace)
    args = ["sweep", str(trace), "--levels", "1", "-o", str(tmp_path / "c.json")]
    for t in targets:
        args += ["--target", t]
    r = CliRunner().invoke(app, args, terminal_width=250)
    assert r.exit_code == 2, r.output
    assert "a.json is a testbed state: give it alone" in r.output
    assert "allow-remote" not in r.output


def test_a_real_time_server_on_a_cpu_time_share_is_named(monkeypatch):
    """``chrt -f -p 10`` of lighttpd and php-cgi on a ``1@25%`` co-runner share: they
    ran over the spinner (mean 7.8 ms became 0.86 ms at the same load), exit 0,
    ``status`` ok. (A CFS group refuses real-time tasks: chrt got EPERM there.)"""
    me = os.getpid()
    monkeypatch.setattr(watch, "_policy", lambda pid: os.SCHED_FIFO if pid == me else 0)
    enforce = {"mechanism": "corunner", "cpu_fraction": 0.25, "period_us": 1000,
               "spin_us": 750, "helper": "c", "cpus": [0], "spinners": {}}  # fmt: skip
    problem = live.testbed_problem(_state(me, enforce=enforce))
    assert (
        problem
        == f"went wrong: r0: lighttpd PID {me} runs SCHED_FIFO, which the share does not hold"
    )
    # On a core share it holds its cores whatever its policy.
    assert live.testbed_problem(_state(me)) is None


def test_a_levels_watch_reads_the_state_once_not_every_look(monkeypatch):
    """Each look of a level's watch (four a second, on the generator's CPU) validated
    every replica twice: 1.28 ms of a look's CPU here, more than half of it that."""
    srv = _sleeper()
    try:
        target = LiveTarget([("127.0.0.1", 9)], state=_state(srv.pid))
        reads = []
        real = ReplicaState.from_dict.__func__

        def counted(cls, d, *a, **kw):
            reads.append(1)
            return real(cls, d, *a, **kw)

        monkeypatch.setattr(ReplicaState, "from_dict", classmethod(counted))
        for _ in range(5):
            assert target._problem() is None
        assert len(reads) == 1
        os.kill(srv.pid, signal.SIGSTOP)  # still seen, from the state read once
        _wait_state(srv.pid, "Tt")
        assert f"lighttpd PID {srv.pid} is stopped" in (target._problem() or "")
    finally:
        srv.kill()
        srv.wait()


def _http_server(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A plain HTTP server on a free loopback port, serving ``root``."""
    from helpers.servers import free_port, wait_listening

    port = free_port()
    args = [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(root), str(port)]
    srv = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, srv)
    except BaseException:
        srv.kill()
        srv.wait()
        raise
    return srv, port


@pytest.mark.parametrize(
    ("engine", "processes"),
    [
        ("python", None),
        pytest.param(
            "native",
            None,
            marks=pytest.mark.skipif(not available(), reason="the native core is not built"),
        ),
        ("python", 2),
    ],
)
def test_a_server_stopped_mid_level_ends_the_level_at_once(tmp_path, engine, processes):
    """The php-fpm pool SIGSTOPped mid-level: the watch named it, but only once the level
    had run to its end, its requests waiting out their timeout (14-20 s later in predict
    and validate). The watch now ends the run through the engines' stop event (engine
    processes of their own too), and the level is still a testbed error, not a level."""
    (tmp_path / "f").write_text("x" * 100)
    srv, port = _http_server(tmp_path)
    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        gen = cpus[:2] if processes else cpus[:1]
        target = LiveTarget(
            [("127.0.0.1", port)], state=_state(srv.pid), share_cpus=list(cpus[-1:]),
            generator=GeneratorPlacement(gen, True, realtime=0, processes=processes,
                                         engine=engine, awake=False),
            idle_bound=0.1,
        )  # fmt: skip
        stopper = threading.Timer(0.5, os.kill, (srv.pid, signal.SIGSTOP))
        start = time.monotonic()
        stopper.start()
        want = f"during the level, the server under test went wrong: r0: lighttpd PID {srv.pid} "
        with pytest.raises(TestbedError, match=want + r"is stopped \(SIGSTOP\)"):
            target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=8.0)
        took = time.monotonic() - start
        stopper.join()
        # (the run would have taken its 8 s; the watch looks every POLL_S, the engines
        # at their stop event every 100 ms)
        assert took < 3.0, took
    finally:
        os.kill(srv.pid, signal.SIGCONT)
        srv.kill()
        srv.wait()


@pytest.mark.compute
def test_a_problem_no_longer_so_is_said_in_the_past():
    """Each kind of watch finding in the past tense; a role's own words are left as they are."""
    found = (
        "went wrong: r0: php-fpm PID 5 is stopped (SIGSTOP); r0: co-runner (the CPU-time "
        "share is not enforced without it) PID 6 is frozen (/x/cgroup.freeze); r0: lighttpd "
        "PID 7 runs SCHED_FIFO, which the share does not hold; r0: lighttpd PID 7 may run on "
        "CPUs 0-1, not the recorded 1; r0: its CFS quota is 1/2 us, not the recorded 3/4 us (d)"
    )
    said = watch.was_so(found, (0.25, 0.75), 1.0)
    assert said == (
        "went wrong: r0: php-fpm PID 5 was stopped (SIGSTOP); r0: co-runner (the CPU-time "
        "share is not enforced without it) PID 6 was frozen (/x/cgroup.freeze); r0: lighttpd "
        "PID 7 ran SCHED_FIFO, which the share does not hold; r0: lighttpd PID 7 could run on "
        "CPUs 0-1, not the recorded 1; r0: its CFS quota was 1/2 us, not the recorded 3/4 us (d)"
        " (seen 0.25-0.75 s into the run; no longer so at 1.00 s)"
    )
    assert watch.was_so("went wrong: r0: x PID 1 is stopped (SIGSTOP)", (0.5, 0.5), 0.6).endswith(
        "was stopped (SIGSTOP) (seen 0.50 s into the run; no longer so at 0.60 s)"
    )


def test_a_server_stopped_mid_level_on_a_cluster_ends_the_level_at_once(monkeypatch):
    """On a Ray cluster (--cluster) the watch's stop event reached no actor (they run in
    processes of their own, which a multiprocessing event does not reach): a stopped
    server was said only when the level ended. The driver is now handed the event and
    tells its actors to stop (here a stand-in for the cluster's run that ends only so)."""
    from shrink.replay import cluster as cl
    from shrink.replay import scaleout
    from shrink.runlog import RUNLOG_SCHEMA, RunLog

    told: list[bool] = []

    def on_cluster(spec, parts, config, params, meta, *, avoid_cpus, engine, on_start, stop=None):
        on_start(time.monotonic())
        told.append(stop is not None and stop.wait(params["horizon"]))
        st = EngineStats(t0=0.0, t0_unix=0.0, wall=1.0, cpu=0.0, requests=0, interrupted=True)
        return RunLog(RUNLOG_SCHEMA.empty_table(), dict(meta)), cl.ClusterRun([st])

    monkeypatch.setattr(scaleout, "run_on_cluster", on_cluster)
    srv = _sleeper()
    try:
        cpus = sorted(os.sched_getaffinity(0))
        target = LiveTarget(
            [("127.0.0.1", 9)], state=_state(srv.pid), share_cpus=cpus[-1:],
            generator=GeneratorPlacement(cluster=cl.ClusterSpec("x", 1), awake=False),
            idle_bound=0.1,
        )  # fmt: skip
        stopper = threading.Timer(0.3, os.kill, (srv.pid, signal.SIGSTOP))
        start = time.monotonic()
        stopper.start()
        want = f"during the level, the server under test went wrong: r0: lighttpd PID {srv.pid} "
        with pytest.raises(TestbedError, match=want + r"is stopped \(SIGSTOP\)"):
            target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=8.0)
        stopper.join()
        assert told == [True]
        assert time.monotonic() - start < 3.0
    finally:
        os.kill(srv.pid, signal.SIGCONT)
        srv.kill()
        srv.wait()


def test_a_problem_of_two_findings_one_still_holding_says_which_went():
    """A problem of two findings of which one still held at the end was said as "... was
    stopped ...; php-fpm PID 6 was frozen (... no longer so ...); now ... PID 6 is frozen":
    the "no longer so" covered both. Only the finding gone is put in the past."""
    found = "went wrong: r0: lighttpd PID 5 is stopped (SIGSTOP); r0: php-fpm PID 6 is frozen (f)"
    now = "went wrong: r0: php-fpm PID 6 is frozen (f); r0: its run folder /r is gone"
    looks = [found]
    w = watch.Watch(lambda: looks[-1])
    w.start()
    deadline = time.monotonic() + 5.0
    while w.problem is None and time.monotonic() < deadline:
        time.sleep(0.01)
    looks.append(now)
    said = w.finish() or ""
    assert "; still so: r0: php-fpm PID 6 is frozen (f); now r0: its run folder /r is gone" in said
    assert said.startswith("went wrong: r0: lighttpd PID 5 was stopped (SIGSTOP) (seen ")
    assert watch.since(found, (0.25, 0.5), 1.0, now) == (
        "went wrong: r0: lighttpd PID 5 was stopped (SIGSTOP) (seen 0.25-0.50 s into the run; "
        "no longer so at 1.00 s); still so: r0: php-fpm PID 6 is frozen (f); now r0: its run "
        "folder /r is gone"
    )
    assert watch.since(found, (0.25, 0.25), 1.0, None) == (
        "went wrong: r0: lighttpd PID 5 was stopped (SIGSTOP); r0: php-fpm PID 6 was frozen (f) "
        "(seen 0.25 s into the run; no longer so at 1.00 s)"
    )


def test_a_look_that_cannot_be_made_does_not_end_the_watch(monkeypatch):
    """Under ``ulimit -n 40`` the generator's connections took every descriptor, and the
    watch's read of /proc/PID/stat raised EMFILE: the thread died with a traceback on
    the terminal, and nothing watched the server for the rest of the level. A look that
    cannot be made now finds nothing, and the next look finds what there is."""
    import errno

    looks = []
    died = []
    monkeypatch.setattr(threading, "excepthook", lambda a: died.append(a.exc_value))

    def check():
        looks.append(1)
        if len(looks) <= 2:
            raise OSError(errno.EMFILE, "Too many open files", "/proc/1/stat")
        return "went wrong: r0: lighttpd PID 1 is stopped (SIGSTOP)"

    w = watch.Watch(check)
    w.start()
    assert w.halt.wait(20 * watch.POLL_S), "the watch stopped looking"
    assert w.finish() == "went wrong: r0: lighttpd PID 1 is stopped (SIGSTOP)"
    assert died == []
    assert len(looks) >= 3


def _engine_that_waits(seconds: float):
    """A replay engine whose run lasts ``seconds`` (or until its stop event), then records
    200 timed-out requests."""

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        t0 = on_ready()
        if stop is not None:
            stop.wait(seconds)
        for i in range(200):
            tc = writer.targets.code("127.0.0.1:9")
            err = writer.errors.code("timeout")
            writer.add(RunLogRow(i / 100, i / 100, np.nan, np.nan, 0, 0, 0, i, tc, err))
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=seconds, cpu=0.0, requests=200)

    return engine


def test_a_testbed_whose_down_marks_its_state_after_the_watch_saw_it_go_is_said_down(tmp_path):
    """`testbed down` of the testbed 2.6 s into a sweep: the sweep said "crashed or killed:
    lighttpd PID ..., php-cgi PID ..." though the state said "stopped" a moment later;
    down stops the servers first and marks the state after, and the watch looked between.
    The server killed 0.4 s into the level and the state marked 0.6 s later: said as
    brought down."""
    import json

    srv = _sleeper()
    state = {**_state(srv.pid), "started": "2026-01-01T00:00:00+00:00"}
    path = tmp_path / "tb.json"
    path.write_text(json.dumps(state))
    later = json.dumps({**state, "stopped": "2026-01-01T00:05:00+00:00"})
    timers = [threading.Timer(0.4, srv.kill), threading.Timer(1.0, path.write_text, (later,))]
    target = LiveTarget(
        [("127.0.0.1", 9)], state=state, share_cpus=CPUS[-1:], idle_bound=0.1,
        generator=GeneratorPlacement(tuple(CPUS[:1]), True, engine=_engine_that_waits(2.0)),
    )  # fmt: skip
    target.state_path = path
    for t in timers:
        t.start()
    try:
        with pytest.raises(TestbedError) as e:
            target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=3.0)
    finally:
        for t in timers:
            t.cancel()
        srv.kill()
        srv.wait()
    said = str(e.value)
    assert said.startswith("during the level, the server under test is down: the testbed "), said
    assert "brought down (2026-01-01T00:05:00+00:00)" in said and "crashed" not in said, said
