"""The native replay core against the Python engine (the reference) and the fake server.

The differential tests send the same trace and seed through both engines against
the same recording server and compare what the server saw on each connection,
the order of each session's requests and the intended times. Each request's
path names its session and row and asks for a reply size unique to its row, so
both the server's log and the RunLog identify it.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from shrink.errors import ParameterError, ReplayError
from shrink.procfs import run_queue_wait_us
from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native, open_loop_trace
from shrink.runlog import RunLog
from shrink.trace import Trace

needs_core = pytest.mark.skipif(
    not native.available(), reason="the native core is not built (make setup: pip install ./native)"
)
ENGINES = {"python": native.run_python, "native": native.run_native}


class _Recorder:
    """A keep-alive HTTP/1.1 server in a thread that logs (connection, path) per request.

    ``bytes=N`` sets the reply body size, ``close=1`` closes after the reply.
    """

    def __init__(self, n_ports: int = 1) -> None:
        self.log: list[tuple[int, str]] = []
        self.ports: list[int] = []
        self._conns = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(n_ports, ready), daemon=True)
        self._thread.start()
        assert ready.wait(10)

    def _serve(self, n_ports: int, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        rec = self

        class Proto(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                rec._conns += 1
                self.cid = rec._conns
                self.t = transport
                self.buf = b""

            def data_received(self, data: bytes) -> None:
                self.buf += data
                while b"\r\n\r\n" in self.buf:
                    head, self.buf = self.buf.split(b"\r\n\r\n", 1)
                    target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
                    rec.log.append((self.cid, target))
                    q = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
                    n = int(q.get("bytes", "10"))
                    close = q.get("close") == "1"
                    hdr = f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n"
                    hdr += "Connection: close\r\n\r\n" if close else "\r\n"
                    self.t.write(hdr.encode() + b"x" * n)  # type: ignore[attr-defined]
                    if close:
                        self.t.close()
                        return

        async def start() -> None:
            for _ in range(n_ports):
                srv = await self._loop.create_server(Proto, "127.0.0.1", 0, backlog=512)
                self.ports.append(srv.sockets[0].getsockname()[1])

        self._loop.run_until_complete(start())
        ready.set()
        self._loop.run_forever()

    def take(self) -> list[tuple[int, str]]:
        time.sleep(0.05)  # the last replies' log lines
        out, self.log = self.log, []
        return out

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture(scope="module")
def recorder():
    rec = _Recorder(n_ports=2)
    yield rec
    rec.stop()


def _session_trace(seed: int, n_sessions: int = 30) -> Trace:
    """Sessions of 1-3 bursts of 1-3 requests (N=2 connections then place them
    deterministically); a fifth of the replies close their connection."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("session", "burst", "t", "think", "path", "cls")}
    row = 0
    for s in range(n_sessions):
        start = float(rng.uniform(0, 0.5))
        for b in range(int(rng.integers(1, 4))):
            think = float(rng.uniform(0.02, 0.1))
            for k in range(int(rng.integers(1, 4))):
                close = "&close=1" if rng.random() < 0.2 else ""
                cols["session"].append(s)
                cols["burst"].append(b)
                cols["t"].append(start)
                cols["think"].append(think)
                cols["path"].append(f"/s{s}/r{row}?bytes={100 + row}{close}")
                cols["cls"].append("dynamic" if k == 0 else "static")
                row += 1
    return Trace.from_columns(cols, meta={"mode": "session"})


def _replay(engine: str, trace: Trace, ports: list[int], horizon: float) -> RunLog:
    sched = build_schedule(trace, 1.0, horizon, loop=False)
    cfg = EngineConfig([("127.0.0.1", p) for p in ports], conns_per_session=2)
    w = RunLogWriter(None)
    stats = ENGINES[engine](sched, cfg, w, handle_signals=False)
    assert stats.extra["engine"] == engine and w.meta["engine"] == engine
    return w.runlog()


def _per_connection(log: list[tuple[int, str]]) -> list[tuple[str, ...]]:
    conns: dict[int, list[str]] = defaultdict(list)
    for cid, path in log:
        conns[cid].append(path)
    return sorted(tuple(v) for v in conns.values())


def _session_order(log: RunLog) -> dict[int, list[int]]:
    """Per session, its requests (reply size = 100 + row) in the order they were sent."""
    out: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for s, sent, n in zip(log.column("session"), log.column("sent"), log.column("bytes"),
                          strict=True):  # fmt: skip
        out[int(s)].append((float(sent), int(n)))
    return {s: [n for _, n in sorted(v)] for s, v in out.items()}


@needs_core
@pytest.mark.parametrize("seed", [1, 2])
def test_session_mode_both_engines_send_the_same_requests_on_each_connection(recorder, seed):
    tr = _session_trace(seed)
    got = {}
    for engine in ("python", "native"):
        log = _replay(engine, tr, recorder.ports, horizon=3.0)
        got[engine] = (log, recorder.take())
    (py_log, py_srv), (nat_log, nat_srv) = got["python"], got["native"]
    assert len(nat_log) == len(py_log) == len(tr)
    assert nat_log.ok_mask().all() and py_log.ok_mask().all()
    assert _per_connection(nat_srv) == _per_connection(py_srv)
    assert _session_order(nat_log) == _session_order(py_log)
    # a session's first request is intended at its scheduled start, in both
    sched = build_schedule(tr, 1.0, 3.0, loop=False)
    starts = dict(zip(sched.session_ids, sched.session_start, strict=True))
    for log in (py_log, nat_log):
        first: dict[int, float] = {}
        for s, t in zip(log.column("session"), log.column("intended"), strict=True):
            first[int(s)] = min(first.get(int(s), np.inf), float(t))
        assert first == {s: float(t) for s, t in starts.items()}
    # and each went to the replica its session hashes to, the same in both
    route = {e: dict(zip(lg.column("session"), lg.column("target"), strict=True))
             for e, lg in (("python", py_log), ("native", nat_log))}  # fmt: skip
    assert route["python"] == route["native"] and len(set(route["native"].values())) == 2


@needs_core
def test_open_mode_both_engines_keep_the_same_intended_times(recorder):
    tr = open_loop_trace("/o?bytes=64", 400.0, 1.0, arrival="poisson", seed=3)
    logs = {e: _replay(e, tr, recorder.ports, horizon=1.0) for e in ("python", "native")}
    srv = recorder.take()
    a, b = logs["python"], logs["native"]
    assert len(a) == len(b) == len(tr) and a.ok_mask().all() and b.ok_mask().all()
    assert np.array_equal(np.sort(a.column("intended")), np.sort(b.column("intended")))
    pairs = {e: sorted(zip(lg.column("session").tolist(), lg.column("target").tolist(),
                           lg.column("intended").tolist(), strict=True))
             for e, lg in logs.items()}  # fmt: skip
    assert pairs["python"] == pairs["native"]
    assert len(srv) == 2 * len(tr)


# --- the native core on its own: what the Python engine's tests check ----------------
def _start_fake(*extra: str) -> tuple[subprocess.Popen[str], int]:
    args = [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline().split()[2])


@pytest.fixture(scope="module")
def fake():
    proc, port = _start_fake()
    yield "127.0.0.1", port
    proc.kill()
    proc.wait()


def _native(trace: Trace, targets, *, horizon: float, loop: bool = False, **cfg) -> RunLog:
    sched = build_schedule(trace, 1.0, horizon, loop=loop)
    w = RunLogWriter(None)
    native.run_native(sched, EngineConfig(targets=targets, **cfg), w, handle_signals=False)
    return w.runlog()


def _paths_trace(paths: list[str], gap: float, method: list[str] | None = None) -> Trace:
    cols = {"session": list(range(len(paths))), "t": [i * gap for i in range(len(paths))],
            "path": paths}  # fmt: skip
    if method is not None:
        cols["method"] = method
    return Trace.from_columns(cols, meta={"mode": "open"})


@needs_core
def test_native_parses_chunked_close_status_and_head(fake):
    paths = ["/a?bytes=5000&chunked=1", "/b?bytes=10&close=1", "/c?bytes=0&status=404",
             "/d?bytes=70000", "/h?bytes=5000", "/e?bytes=3&chunked=1&close=1"]  # fmt: skip
    tr = _paths_trace(paths * 3, 0.01, ["GET", "GET", "GET", "GET", "HEAD", "GET"] * 3)
    log = _native(tr, [fake], horizon=1.0, timeout=0.5)
    # every response arrived whole; the 404s are failures of their own class
    assert not log.failure_masks()["transport"].any(), set(log.column("error"))
    assert log.failures() == {"transport": 0, "http_4xx": 3, "http_5xx": 0}
    got = sorted(zip(log.column("bytes").tolist(), log.column("status").tolist(), strict=True))
    want = sorted([(5000, 200), (10, 200), (0, 404), (70000, 200), (0, 200), (3, 200)] * 3)
    assert got == want


@needs_core
def test_native_errors_and_timeouts_are_rows(fake):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    log = _native(open_loop_trace("/x", 50.0, 0.5), [("127.0.0.1", dead)], horizon=0.5)
    assert len(log) == 25 and set(log.column("error")) == {"refused"}
    # a connection opened ahead of the start that is refused frees its pool place
    # (else, with one place, every request would wait and end unsent)
    log = _native(open_loop_trace("/x", 4000.0, 0.05), [("127.0.0.1", dead)], horizon=0.05,
                  max_pool=1)  # fmt: skip
    assert len(log) == 200 and set(log.column("error")) == {"refused"}
    tr = open_loop_trace("/x?delay_us=3000000", 20.0, 0.5)
    log = _native(tr, [fake], horizon=0.5, timeout=0.3)
    assert len(log) == 10 and set(log.column("error")) == {"timeout"}
    assert np.isnan(log.column("done")).all()
    # still in flight when a looped run's drain ends: cut, and kept (one pass waits
    # for its sessions to run out instead, as the Python engine does)
    log = _native(tr, [fake], horizon=0.5, loop=True, timeout=10.0, drain=0.2)
    assert len(log) == 10 and set(log.column("error")) == {"cut"}


@needs_core
def test_native_reopens_a_keep_alive_closed_during_think_time():
    proc, port = _start_fake("--idle-timeout", "0.1")
    try:
        cols: dict[str, list] = {k: [] for k in ("session", "burst", "t", "think", "path")}
        for s in range(6):
            for b in range(3):
                for p in ("/a?bytes=10", "/b?bytes=10", "/c?bytes=10"):
                    for k, v in zip(cols, (s, b, s * 0.05, 0.25, p), strict=True):
                        cols[k].append(v)
        tr = Trace.from_columns(cols, meta={"mode": "session"})
        log = _native(tr, [("127.0.0.1", port)], horizon=3.0)
        assert len(log) == 54 and log.ok_mask().all(), set(log.column("error"))
    finally:
        proc.kill()
        proc.wait()


@needs_core
def test_native_sigint_keeps_what_was_measured(tmp_path: Path, fake):
    out = tmp_path / "run.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink", "replay", "--rate", "200", "--duration", "60s",
         "--path", "/x?bytes=100", "--target", f"http://127.0.0.1:{fake[1]}", "-o", str(out),
         "--engine", "native"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # the writer opens its file (under a temporary name until the end) as the run
    # starts; waiting for the final name waited out the whole deadline
    deadline = time.monotonic() + 20
    while not any(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.5)
    t = time.monotonic()
    proc.send_signal(signal.SIGINT)
    so, se = proc.communicate(timeout=20)
    assert time.monotonic() - t < 5, "Ctrl-C was not prompt"
    log = RunLog.read_parquet(out)
    assert 100 <= len(log) < 12000 and log.ok_mask().mean() > 0.95
    assert log.meta["engine"] == "native" and "engine: native" in so
    assert "interrupted: the requests sent so far are kept in" in se, se
    assert proc.returncode == 130 and "interrupted" not in so


@needs_core
def test_engine_choice():
    assert native.select_engine("python") is native.run_python
    assert native.select_engine("native") is native.run_native
    assert native.select_engine("auto") is native.run_native  # built: see the skip mark
    with pytest.raises(ParameterError, match="must be one of auto, native, python"):
        native.select_engine("c")


@needs_core
def test_native_new_connection_per_request_sends_when_connected(fake):
    # open mode reads responses on its timer wake-ups; a connect must not wait for one
    tr = open_loop_trace("/x?bytes=10", 1000.0, 0.5)
    log = _native(tr, [fake], horizon=0.5, conn_per_request=True)
    assert len(log) == 500 and log.ok_mask().all(), set(log.column("error"))
    # from the connect's start to the send: the handshake, not the next due time
    # (1 ms away); the dispatch lag itself depends on the neighbours' load
    wait = log.column("sent") - log.column("dispatched")
    assert np.median(wait) < 0.5e-3, np.median(wait)


def test_without_the_core_auto_is_the_python_engine(monkeypatch):
    monkeypatch.setattr(native, "_core", None)
    assert not native.available()
    assert native.select_engine("auto") is native.run_python
    with pytest.raises(ReplayError, match="native replay core is not built"):
        native.select_engine("native")
    with pytest.raises(ReplayError, match="not built"):
        native.run_native(build_schedule(open_loop_trace("/x", 10.0, 0.1), 1.0, 0.1),
                          EngineConfig([("127.0.0.1", 1)]), RunLogWriter(None))  # fmt: skip


def test_a_writer_without_typed_columns_gets_the_rows_one_by_one():
    # the adapter's slow path, for a writer laid out otherwise than in typed arrays
    class Stub:
        def __init__(self) -> None:
            self.rows: list[tuple] = []
            self.flushes = 0

        def add(self, row: tuple) -> None:
            self.rows.append(row)

        def maybe_flush(self) -> None:
            self.flushes += 1

    w = Stub()
    cols = [np.array([0.5, 1.5]), np.array([0.6, np.nan]), np.array([0.7, np.nan]),
            np.array([0.8, np.nan]), np.array([200, 0], np.int32), np.array([10, -1]),
            np.array([1, 0], np.int8), np.array([7, 8]), np.array([0, 0], np.int32),
            np.array([0, 3], np.int32), np.array([0.55, 1.55])]  # fmt: skip
    stop = [False]
    on_rows = native._appender(w, stop)  # type: ignore[arg-type]
    assert on_rows([c.tobytes() for c in cols]) is False and w.flushes == 1
    assert [r[:1] + r[4:8] + r[9:] for r in w.rows] == [
        (0.5, 200, 10, 1, 7, 0, 0.55), (1.5, 0, -1, 0, 8, 3, 1.55)]  # fmt: skip
    stop[0] = True
    assert on_rows([c[:0].tobytes() for c in cols]) is True and len(w.rows) == 2


@needs_core
def test_native_requests_waiting_for_a_connection_go_in_order(fake):
    # a burst of 200 at once against a slow server, 4 connections: most wait for
    # one (opened at most a few at a time), and go out in their intended order
    tr = _paths_trace([f"/w{i}?bytes={100 + i}&delay_us=2000" for i in range(200)], 1e-6)
    log = _native(tr, [fake], horizon=0.5, max_pool=4, drain=5.0)
    assert len(log) == 200 and log.ok_mask().all(), set(log.column("error"))
    by_sent = log.column("bytes")[np.argsort(log.column("sent"), kind="stable")]
    assert by_sent.tolist() == sorted(by_sent.tolist())
    lag = log.column("dispatched") - log.column("intended")
    assert np.median(lag) < 5e-3  # a wait for a connection is latency, not send lag


@needs_core
def test_native_reports_its_loop_threads_run_queue_wait(fake):
    sched = build_schedule(open_loop_trace("/x", 400.0, 0.5), 1.0, 0.5, loop=False)
    w = RunLogWriter(None)
    stats = native.run_native(sched, EngineConfig(targets=[fake]), w, handle_signals=False)
    loop = stats.extra["loop"]
    assert loop["sends"] == len(w.runlog()) > 150
    # the thread's own counters over the run, read from /proc: a wait and a count, each
    # bounded by the run (a field read off by one would be the thread's CPU time, or
    # its time slices, and a counter not taken as a difference would be the process's)
    assert 0 <= loop["runq_wait_us"] <= 1e6 * stats.wall
    # (a turn may be preempted more than once: by its server's wake-up, and at each timer
    # tick, at most 1,000 a second; under load 49% of turns were, so turns alone was no
    # bound; the process's count, not taken as a difference, runs to thousands)
    assert 0 <= loop["preempted"] <= 2 * loop["turns"] + 1000 * stats.wall
    # at 400/s the loop is far from busy: it sleeps between sends, never polls for them
    assert loop["polled_us"] == 0


def test_the_python_engine_reports_its_threads_run_queue_wait(fake, tmp_path: Path):
    sched = build_schedule(open_loop_trace("/x", 400.0, 0.5), 1.0, 0.5, loop=False)
    w = RunLogWriter(None)
    stats = native.run_python(sched, EngineConfig(targets=[fake]), w, handle_signals=False)
    assert 0 <= stats.extra["loop"]["runq_wait_us"] <= 1e6 * stats.wall
    # the field read is the wait, not the time on the CPU before it or the slices after
    fake_stat = tmp_path / "schedstat"
    fake_stat.write_text("123456789 987654321 42\n")
    assert run_queue_wait_us(str(fake_stat)) == 987654
    fake_stat.write_text("")
    assert run_queue_wait_us(str(fake_stat)) is None


def test_the_python_engines_run_queue_wait_is_over_the_runs_wall_time(fake, monkeypatch):
    """The wait was read around the whole engine call, its set-up and its wait for the
    run's zero too, and divided by the run's wall time (from the zero): under load the
    thread's wait read 634 ms of a 554 ms run (a fresh clone's CI). A wait counter that
    runs with the clock must read no more than the run's wall time."""
    from time import monotonic, sleep

    from shrink.replay import engine

    def clock_wait() -> int:
        return int(monotonic() * 1e6)

    real_zero = engine.zero_time

    def late_zero(*args: object, **kw: object) -> float:
        sleep(0.3)
        return real_zero(*args, **kw)

    for mod in (engine, native):
        monkeypatch.setattr(mod, "run_queue_wait_us", clock_wait, raising=False)
    monkeypatch.setattr(engine, "zero_time", late_zero)
    sched = build_schedule(open_loop_trace("/x", 400.0, 0.3), 1.0, 0.3, loop=False)
    stats = native.run_python(sched, EngineConfig(targets=[fake]), RunLogWriter(None))
    assert stats.extra["loop"]["runq_wait_us"] <= 1e6 * stats.wall + 2000


@pytest.mark.compute
def test_an_older_cores_loop_counts_keep_their_names():
    # A core built before polled_us reports the widest window, then the run-queue wait
    # and the involuntary switches: read as the newer core's order, its run-queue wait
    # was taken for polled_us and its switches for the run-queue wait.
    from shrink.replay.native import loop_counts

    old = loop_counts([10, 5, 7, 3, 1, 9, 120, 4500, 12])
    assert old["runq_wait_us"] == 4500 and old["preempted"] == 12
    assert "polled_us" not in old
    new = loop_counts([10, 5, 7, 3, 1, 9, 120, 4500, 12, 800])
    assert (new["runq_wait_us"], new["preempted"], new["polled_us"]) == (4500, 12, 800)
