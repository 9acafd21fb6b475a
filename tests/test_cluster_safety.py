"""The Ray path's checks that need no cluster: fakes stand in for Ray and its actors.

What a live probe found: ``ray:local`` as root made /tmp/ray world-writable, ``ray:auto``
joined any user's cluster, a mistyped port (a web server's) hung for minutes, a
generator in another network namespace sent a loopback target's load to its own
loopback, SIGTERM ended shrink with Ray's stack dump, and Ctrl-C lost every row the
actors had sent (and left their temporary folders on their nodes)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import types

import pytest

from shrink import interrupts
from shrink.errors import ParameterError, ReplayError
from shrink.replay import (
    EngineConfig,
    RunLogWriter,
    build_schedule,
    native,
    open_loop_trace,
    ray_local,
)
from shrink.replay import cluster as cl
from shrink.replay.engine import run_schedule
from shrink.runlog import RUNLOG_SCHEMA


# --- the address --------------------------------------------------------------------------
@pytest.mark.compute
def test_a_ray_client_address_is_taken_as_ray_init_takes_it():
    # it was cut to '//host:10001' and refused as "Name or service not known"
    assert cl.parse_cluster("ray://10.0.0.5:10001").address == "ray://10.0.0.5:10001"
    with pytest.raises(ParameterError, match="ray:ADDRESS"):
        cl.parse_cluster("ray://")


def _listener(answer: bytes | None) -> tuple[socket.socket, threading.Thread]:
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(64)
            if answer is None:
                time.sleep(2)  # accepts, says nothing
            else:
                conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, t


def test_a_port_that_does_not_speak_grpc_is_refused_at_once(monkeypatch):
    # A web server's port (a typo of the head's): ray.init waited on it for minutes.
    monkeypatch.setattr(cl, "PROBE_TIMEOUT", 1.0)
    for answer in (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", None):
        srv, t = _listener(answer)
        with srv:
            start = time.monotonic()
            with pytest.raises(ReplayError, match=r"does not answer as a Ray head's GCS does"):
                cl._check_reachable(f"127.0.0.1:{srv.getsockname()[1]}")
            assert time.monotonic() - start < 3
        t.join(5)
    # an HTTP/2 server's SETTINGS frame (as Ray's GCS sends first) passes
    srv, t = _listener(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    with srv:
        cl._check_reachable(f"127.0.0.1:{srv.getsockname()[1]}")
    t.join(5)


# --- joining ------------------------------------------------------------------------------
class _FakeRay(types.ModuleType):
    def __init__(self, on_init=None) -> None:
        super().__init__("ray")
        self.inits: list[dict] = []
        self._on_init = on_init

    shutdowns = 0

    def is_initialized(self) -> bool:
        return False

    def shutdown(self) -> None:
        self.shutdowns += 1

    def init(self, **kwargs) -> None:
        self.inits.append(kwargs)
        if self._on_init is not None:
            self._on_init()


@pytest.fixture
def fake_ray(monkeypatch):
    ray = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(cl, "ray_available", lambda: True)
    return ray


def test_auto_as_root_is_refused(fake_ray, monkeypatch):
    # auto joins the cluster in /tmp/ray/ray_current_cluster or any user's gcs_server
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ReplayError, match=r"ray:auto as root would join any Ray cluster"):
        cl._connect(cl.ClusterSpec("auto", 1))
    assert fake_ray.inits == []
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    cl._connect(cl.ClusterSpec("auto", 1))
    assert fake_ray.inits[0]["address"] == "auto"


def test_a_local_cluster_keeps_its_files_in_a_private_folder(fake_ray, monkeypatch, tmp_path):
    # Ray's default, as root: /tmp/ray, mode 0777, with a session_latest symlink
    run = tmp_path / "run"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    cl._connect(cl.ClusterSpec("local", 1))
    temp = fake_ray.inits[0].get("_temp_dir")
    assert temp is not None and os.path.dirname(os.path.dirname(temp)) == str(run)
    # Ray makes its folder 0777 (and its path shows in ps): the one above it keeps others out
    assert os.stat(os.path.dirname(temp)).st_mode & 0o777 == 0o700
    os.makedirs(temp)
    ray_local.shutdown_and_remove(fake_ray, os.path.dirname(temp))  # what runs at exit
    assert fake_ray.shutdowns == 1 and os.listdir(run) == []


def test_the_stop_signals_are_taken_back_from_ray(monkeypatch):
    # Ray's init put its own SIGTERM handler: a stack dump and exit 1, nothing kept
    ray = _FakeRay(on_init=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(cl, "ray_available", lambda: True)
    monkeypatch.setattr(cl, "_check_reachable", lambda address: None)
    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    taken = list(interrupts._taken)
    try:
        interrupts.install()
        with interrupts.working():
            cl._connect(cl.ClusterSpec("127.0.0.1:6379", 1))
            assert signal.getsignal(signal.SIGTERM) is interrupts._stop
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        interrupts._taken[:] = taken


# --- where the generators run -------------------------------------------------------------
@pytest.mark.compute
def test_a_generator_elsewhere_is_refused_a_loopback_target():
    here = cl.place()
    loop = [("127.0.0.1", 8080)]
    cl.check_places([here, dict(here)], loop)
    other_ns = {**here, "netns": here["netns"] + 1}
    # before: "another machine or network namespace" of either; the boot id tells them
    ns = r"^generator slot 1 runs on .*, another network namespace of this machine \(net:\["
    with pytest.raises(ReplayError, match=ns):
        cl.check_places([here, other_ns], loop)
    other_host = {**here, "host": "b", "boot": "x"}
    with pytest.raises(ReplayError, match=r"'b', another machine \(another boot id\): the loop"):
        cl.check_places([other_host], loop)
    with pytest.raises(ReplayError, match=r"loopback target 127\.0\.0\.1:8080 there is not"):
        cl.check_places([other_host], loop)
    cl.check_places([here, other_ns, other_host], [("10.0.0.1", 80)])  # (with --allow-remote)


@pytest.mark.compute
def test_a_generator_elsewhere_is_refused_a_link_local_target_with_a_zone():
    """The zone is checked against the driver's interfaces alone: before, a slot on
    another node was sent ``fe80::1%eth0``, where eth0 names that node's interface, if
    it has one, and fe80::1 a host on its own link (or every request failed to connect)."""
    here = cl.place()
    linked = [("fe80::1%lo", 8080)]
    cl.check_places([here, dict(here)], linked)
    other_host = {**here, "host": "b", "boot": "x"}
    with pytest.raises(ReplayError, match=r"link-local target \[fe80::1%lo\]:8080 is reached"):
        cl.check_places([here, other_host], linked)


@pytest.mark.compute
def test_a_generator_whose_actor_died_is_not_told_to_install_shrink():
    # kill -9 of a Ray process mid-sweep (its raylet went, and the actors with it): "a
    # generator slot could not say where it runs (ActorDiedError): install the same
    # shrink on every node of the cluster"
    pytest.importorskip("ray")
    from ray.exceptions import ActorDiedError, RayTaskError

    class _Ray:
        def __init__(self, exc):
            self.exc = exc

        def get(self, _refs, timeout=None):
            raise self.exc

    actor = types.SimpleNamespace(where=types.SimpleNamespace(remote=lambda: None))
    dead = ActorDiedError()
    dead.error_msg += "\n\tpid: 7\nThe actor is dead because its node has died."
    with pytest.raises(ReplayError) as died:
        cl._places(_Ray(dead), [actor])
    said = str(died.value)
    assert "Ray actor died before its run started (ActorDiedError: The actor is dead " in said
    assert "killed or crashed" in said and "install" not in said
    init = ActorDiedError(RayTaskError("where", "tb", ModuleNotFoundError("shrink")))
    with pytest.raises(ReplayError, match="install the same shrink on every node"):
        cl._places(_Ray(init), [actor])


@pytest.mark.compute
def test_a_generator_that_did_not_answer_in_time_is_not_told_to_install_shrink():
    # A slot whose worker was still starting (a runtime environment being installed,
    # a loaded node) when the 60 s ran out: "could not say where it runs
    # (GetTimeoutError): install the same shrink on every node", a cause it did not show
    from ray.exceptions import GetTimeoutError

    class _Ray:
        def get(self, _refs, timeout=None):
            raise GetTimeoutError("Get timed out: some object(s) not ready.")

    actor = types.SimpleNamespace(where=types.SimpleNamespace(remote=lambda: None))
    with pytest.raises(ReplayError) as late:
        cl._places(_Ray(), [actor])
    said = str(late.value)
    assert "did not say where it runs within 60 s (GetTimeoutError)" in said, said
    assert "install" not in said.replace("installed", "")


@pytest.mark.compute
def test_a_generator_running_another_shrink_is_refused():
    here = cl.place()
    with pytest.raises(ReplayError, match=r"^generator slot 0 on .* runs shrink '0\.0\.1'"):
        cl.check_places([{**here, "version": "0.0.1"}], [("10.0.0.1", 80)])


# --- a stop while the actors run -----------------------------------------------------------
class _Method:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args):
        self.calls.append(self.name)


class _Actor:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stop = _Method(self.calls, "stop")


class _StoppedRay:
    """ray.get: a Ctrl-C on the first wait, then each actor's rows."""

    def __init__(self) -> None:
        self.gets = 0

    def get(self, ref, timeout=None):
        self.gets += 1
        if self.gets == 1:
            raise KeyboardInterrupt
        return RUNLOG_SCHEMA.empty_table(), f"stats {ref}"

    def kill(self, actor) -> None:
        raise AssertionError("a stopped actor is not killed before it reports")


def test_a_stop_while_actors_run_stops_them_and_keeps_their_rows():
    actors = [_Actor(), _Actor()]
    cfg = EngineConfig(targets=[("127.0.0.1", 1)])
    tables, stats, lost = cl._collect(
        _StoppedRay(), actors, ["r0", "r1"], ["a", "b"], time.monotonic() + 60, cfg
    )
    assert [a.calls for a in actors] == [["stop"], ["stop"]]
    assert stats == ["stats r0", "stats r1"] and len(tables) == 2 and lost == []


ENGINES = [run_schedule]
if native.available():
    ENGINES.append(native.run_native)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_the_engines_stop_when_the_stop_event_is_set(engine):
    # an actor runs the engine off the main thread, where no signal reaches it
    port = socket.create_server(("127.0.0.1", 0))
    addr = port.getsockname()
    port.close()  # nothing listens: each request fails at once
    sched = build_schedule(open_loop_trace("/x", 200.0, 10.0), 1.0, 10.0, loop=False)
    stop = threading.Event()
    out: dict = {}

    def run() -> None:
        w = RunLogWriter(None)
        cfg = EngineConfig(targets=[addr], drain=0.5)
        out["stats"] = engine(sched, cfg, w, handle_signals=False, stop=stop)

    t = threading.Thread(target=run)
    start = time.monotonic()
    t.start()
    time.sleep(0.5)
    stop.set()
    t.join(30)
    assert time.monotonic() - start < 5
    assert out["stats"].interrupted


def test_realtime_reaches_the_cluster_actors(monkeypatch):
    # --realtime 10 with --cluster: the actors ran at normal scheduling, without a word
    from helpers.session_traces import session_trace

    from shrink.replay import FakeEngine, run_engines, scaleout
    from shrink.runlog import RunLog
    from shrink.target import GeneratorPlacement

    seen: dict = {}

    def on_cluster(spec, parts, config, params, meta, *, avoid_cpus, engine, on_start, stop=None):
        seen["engine"] = engine
        on_start(0.0)
        return RunLog(RUNLOG_SCHEMA.empty_table()), cl.ClusterRun([])

    monkeypatch.setattr(scaleout, "run_on_cluster", on_cluster)
    placement = GeneratorPlacement(realtime=7, cluster=cl.ClusterSpec("x", 2), engine=FakeEngine())
    cfg = EngineConfig(targets=[("127.0.0.1", 1)])
    run_engines(session_trace(4, gap=0.1, think=0.1, bursts=1), cfg, rate_factor=1.0,
                horizon=1.0, generator=placement)  # fmt: skip
    engine = seen["engine"]
    assert isinstance(engine, scaleout.RealtimeEngine) and engine.priority == 7
    calls: list = []
    monkeypatch.setattr(scaleout, "set_realtime", lambda p: calls.append(("set", p)) or "old")
    monkeypatch.setattr(scaleout, "restore_scheduler", lambda old: calls.append(("back", old)))
    wrapped = scaleout.RealtimeEngine(lambda *a, **k: calls.append("run") or "stats", 7)
    assert wrapped("sched", stop=None) == "stats"
    assert calls == [("set", 7), "run", ("back", "old")]


@pytest.mark.parametrize(
    ("sig", "start"),
    [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "stopped by SIGTERM"),
     (signal.SIGHUP, "stopped by SIGHUP")],
)  # fmt: skip
def test_replay_says_which_signal_stopped_it(sig, start, capsys):
    # SIGTERM and SIGHUP said "interrupted:", though they exit 143 and 129; and the
    # line was on stdout (none with --json), where the exit statuses say stderr
    from shrink.cli.replay_cmd import _print_summary, _say_stopped

    lat = {"mean": 0.001, "p50": 0.001, "p99": 0.002, "p999": 0.003}
    s = {
        "requests": 10, "runlog": "r.parquet", "engine": "native", "intended_rate": 5.0,
        "achieved_rate": 5.0, "throughput": 5.0, "errors": 0, "failures": None,
        "latency": lat, "send_lag_p50": 0.0, "send_lag_p99": 0.0, "generator_cpu": None,
        "utilization": None, "generator_behind": False, "failed": False, "interrupted": True,
    }  # fmt: skip
    last = interrupts.received()
    try:
        interrupts.note(sig)
        _print_summary(s)
        _say_stopped(s)
    finally:
        interrupts.note(last)
    said = capsys.readouterr()
    assert "kept" not in said.out
    assert said.err.splitlines() == [f"{start}: the requests sent so far are kept in r.parquet"]


class _RunningRay:
    """ray.wait/get of actors that run until told to stop (their ``stop`` method)."""

    def __init__(self, actors) -> None:
        self.actors = actors

    def _stopped(self) -> bool:
        return all(a.calls for a in self.actors)

    def wait(self, refs, num_returns=1, timeout=None):
        if self._stopped():
            return refs, []
        time.sleep(timeout or 0)
        return [], refs

    def get(self, ref, timeout=None):
        if not self._stopped():
            time.sleep(min(timeout or 0, 2.0))
            raise TimeoutError("GetTimeoutError")
        return RUNLOG_SCHEMA.empty_table(), f"stats {ref}"

    def kill(self, actor) -> None:
        raise AssertionError("a stopped actor is not killed before it reports")


def test_the_runs_stop_event_stops_the_actors():
    """On a cluster the testbed's watch did not end a level early: its stop event (a
    multiprocessing one, for forked engine processes) reached no actor, and the driver
    waited for the run's end, a server seen stopped said only then. The wait now looks
    at the event and tells every actor to stop, as a stop signal does."""
    actors = [_Actor(), _Actor()]
    cfg = EngineConfig(targets=[("127.0.0.1", 1)], drain=0.5)
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    start = time.monotonic()
    timer.start()
    try:
        tables, stats, lost = cl._collect(
            _RunningRay(actors), actors, ["r0", "r1"], ["a", "b"], time.monotonic() + 60, cfg,
            stop,
        )  # fmt: skip
    finally:
        timer.cancel()
    assert time.monotonic() - start < 2.0
    assert [a.calls for a in actors] == [["stop"], ["stop"]]
    assert stats == ["stats r0", "stats r1"] and len(tables) == 2 and lost == []
