"""The replay engine: an asyncio (uvloop) HTTP/1.1 client that keeps to a schedule.

One event loop per process. A dispatcher callback wakes when the next event is
due (a session start, the end of a think time, an open-loop request) through a
timerfd (:mod:`shrink.replay._timer`): libuv timers have millisecond resolution,
which would make every request up to 1 ms late. Times come from
``time.monotonic`` and are stored relative to the run's zero ``t0``.

Per request the engine records intended, sent, first-byte and done times; latency
is ``done - intended`` (coordinated omission). In session mode a request's
intended time is when the session's own rules made it sendable (its session
start, its burst's start after the think time, the first request's completion for
embedded requests, or a session connection becoming free); in open mode it is the
request's scheduled time, even if the connection pool makes it wait.

Failures are rows, not exceptions: ``refused``, ``reset``, ``closed``,
``timeout``, ``bad-response``, ``cut`` (still in flight when the run ended) and
``unsent`` (queued for a connection when the run ended). A keep-alive connection
the server closed while idle is retried once on a fresh connection, as browsers do.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import os
import signal
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, Unpack

import numpy as np

from shrink import interrupts
from shrink.procfs import run_queue_wait_us
from shrink.replay._config import EngineConfig
from shrink.replay._conn import _NAN, _Conn, _Req
from shrink.replay._http import build_request
from shrink.replay._owners import _Pool, _Session
from shrink.replay._timer import WakeTimer
from shrink.replay.contract import (
    EngineStats,
    RunOptions,
    run_stats,
    stopped_at,
    wants_signals,
    zero_time,
)
from shrink.replay.writer import RunLogWriter
from shrink.schedule import Schedule, session_hash
from shrink.wire import host_header

__all__ = ["EngineConfig", "EngineStats", "new_event_loop", "run_schedule"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop where uvloop is installed, else the standard one."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _Engine:
    def __init__(
        self,
        schedule: Schedule,
        cfg: EngineConfig,
        writer: RunLogWriter,
        t0: float,
    ) -> None:
        self.s = schedule
        self.cfg = cfg
        self.w = writer
        self.t0 = t0
        self.horizon = schedule.horizon  # nothing starts at or after it
        self.end = schedule.end  # no burst starts at or after it (inf: sessions run out)
        self.key_of_row = schedule.key_of_row.tolist()
        self.cls_of_row = schedule.cls_of_row.tolist()
        self.head_only = [schedule.keys[k][0] == "HEAD" for k in self.key_of_row]
        self.req_bytes: list[list[bytes]] = []
        self.tcodes: list[int] = []
        for addr, port in cfg.targets:
            host = host_header(addr, port)
            self.req_bytes.append(
                [build_request(m, p, host, b, ct) for m, p, b, ct in schedule.keys]
            )
            self.tcodes.append(writer.targets.code(f"{addr}:{port}"))
        self.ecodes = writer.errors
        self.conns: set[_Conn] = set()
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.inflight = 0
        self.recorded = 0
        self.sessions_live = 0
        self.pool_waits = 0
        self.due = 0.0  # intended time of the event being dispatched
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timer: WakeTimer | None = None
        self.armed = float("inf")  # run time of the dispatcher's next wake-up
        self.draining = False
        self.done_fut: asyncio.Future[None] | None = None
        self.interrupted = False
        self.stopped_at: float | None = None  # when the run was stopped (seconds from t0)
        self.stop_event: threading.Event | None = None  # set from another thread: stop
        n = len(cfg.targets)
        if schedule.mode == "open":
            self.pools = [_Pool(self, i) for i in range(n)]
        # The plan is read a chunk at a time (shrink.schedule.CHUNK entries): the engine
        # holds a few thousand entries as Python objects, not the whole run's.
        self.chunks = schedule.chunks()
        self.served = 0  # entries of the chunks already read: round-robin routing
        self.times: list[float] = []
        self.rows: list[int] = []
        self.ids: list[int] = []  # per entry: its session id
        self.route: list[int] = []
        self.plans: list[list[tuple[int, int, float]]] = []
        self.next_i = 0
        self.load()

    def load(self) -> bool:
        """The schedule's next chunk in place of the spent one; False when none is left."""
        for ch in self.chunks:
            n = len(self.cfg.targets)
            if self.cfg.routing == "hash":
                route = session_hash(ch.ids, 1) % np.uint64(n)
            else:
                route = (self.served + np.arange(ch.ids.size)) % n
            self.served += ch.ids.size
            self.route = route.astype(np.int64).tolist()
            self.times = ch.t.tolist()
            self.ids = ch.ids.tolist()
            if self.s.mode == "open":
                self.rows = self.s.base_rows[ch.unit].tolist()
            else:
                self.plans = self.s.bursts_of(ch.unit, ch.burst)
            self.next_i = 0
            return True
        self.times, self.next_i = [], 0
        return False

    # bookkeeping ------------------------------------------------------------
    def new_req(self, row: int, session: int, tidx: int, intended: float) -> _Req:
        self.inflight += 1
        return _Req(row, session, tidx, intended)

    def record(self, req: _Req, status: int, nbytes: int, done: float, error: str) -> None:
        self.inflight -= 1
        self.recorded += 1
        a = self.w.appends
        a[0](req.intended)
        a[1](req.sent)
        a[2](req.first_byte)
        a[3](done)
        a[4](status)
        a[5](nbytes)
        a[6](self.cls_of_row[req.row])
        a[7](req.session)
        a[8](self.tcodes[req.tidx])
        a[9](self.ecodes.code(error) if error else 0)
        a[10](req.dispatched)

    def open_conn(self, owner: Any, tidx: int) -> _Conn:
        conn = _Conn(self, owner, tidx)
        conn.task = self.loop.create_task(self._connect(conn))  # type: ignore[union-attr]
        return conn

    async def _connect(self, conn: _Conn) -> None:
        addr, port = self.cfg.targets[conn.tidx]
        try:
            await self.loop.create_connection(lambda: conn, addr, port)  # type: ignore[union-attr]
        except OSError as exc:
            conn.connect_failed(exc)
        except asyncio.CancelledError:
            pass

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at run time ``t`` (a think time's end): wakes the dispatcher if earlier."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn))
        if t < self.armed and self.timer is not None:
            self.armed = t
            self.timer.at(self.t0 + t)

    # dispatch -----------------------------------------------------------------
    def tick_open(self) -> None:
        """Open mode's dispatcher: the hot path of a high-rate run, kept lean."""
        t0 = self.t0
        now = monotonic() - t0
        times, rows, sess, route, pools = (
            self.times, self.rows, self.ids, self.route, self.pools,
        )  # fmt: skip
        i, n, horizon, budget = self.next_i, len(self.times), self.horizon, self.cfg.batch
        while budget:
            if i >= n:  # this chunk is spent: the next one
                if not self.load():
                    break
                times, rows, sess, route = self.times, self.rows, self.ids, self.route
                i, n = 0, len(times)
            t = times[i]
            if t > now or t >= horizon:
                break
            tidx = route[i]
            self.inflight += 1
            pools[tidx].submit(_Req(rows[i], sess[i], tidx, t))
            i += 1
            budget -= 1
        self.next_i = i
        if not budget:
            self.loop.call_soon(self.tick_open)  # type: ignore[union-attr]
        elif i >= n or times[i] >= horizon:
            if not self.draining:
                self.finish_when_drained()
        else:
            self.timer.at(t0 + times[i])  # type: ignore[union-attr]

    def next_start(self) -> float:
        """The start of the plan's next entry (a session, an open-loop request); inf at its end."""
        if self.next_i >= len(self.times) and not self.load():
            return float("inf")
        return self.times[self.next_i]

    def tick(self) -> None:
        loop = self.loop
        assert loop is not None
        self.armed = float("inf")
        t0 = self.t0
        now = monotonic() - t0
        horizon = self.horizon
        budget = self.cfg.batch
        heap = self.heap
        end = self.end
        inf = float("inf")
        while budget > 0:
            nxt_s = self.next_start()
            if nxt_s >= horizon:
                nxt_s = inf
            nxt_h = heap[0][0] if heap else inf
            if nxt_h >= end:
                nxt_h = inf
            if nxt_s == inf and nxt_h == inf:
                break
            if nxt_s <= nxt_h:
                if nxt_s > now:
                    break
                i = self.next_i
                self.next_i += 1
                self.due = nxt_s
                if self.s.mode == "open":
                    tidx = self.route[i]
                    self.pools[tidx].submit(self.new_req(self.rows[i], self.ids[i], tidx, nxt_s))
                else:
                    self.sessions_live += 1
                    _Session(self, self.ids[i], self.route[i], self.plans[i]).begin_burst()
            else:
                if nxt_h > now:
                    break
                _, _, fn = heapq.heappop(heap)
                self.due = nxt_h
                fn()
            budget -= 1
        if budget == 0:
            loop.call_soon(self.tick)  # more due: let responses in first
            return
        nxt_s = self.next_start()
        nxt_h = heap[0][0] if heap else inf
        nxt = min(nxt_s if nxt_s < horizon else inf, nxt_h if nxt_h < end else inf)
        if nxt == inf:
            if not self.draining:
                self.finish_when_drained()
            return
        self.armed = nxt
        self.timer.at(t0 + nxt)  # type: ignore[union-attr]

    def finish_when_drained(self) -> None:
        loop = self.loop
        assert loop is not None
        self.draining = True
        now = monotonic() - self.t0
        idle = self.inflight <= 0 and self.sessions_live <= 0
        # A single pass (end = inf) ends when its sessions have: every request is sent.
        if idle or now >= self.end + self.cfg.drain or self.interrupted:
            self.finish()
        else:
            loop.call_later(0.005, self.finish_when_drained)

    def sweep(self) -> None:
        """Every 100 ms: time out stuck requests, flush the RunLog."""
        if self.done_fut is None or self.done_fut.done():
            return
        now = monotonic() - self.t0
        timeout = self.cfg.timeout
        for c in list(self.conns):
            c.expire(now, timeout)
        self.w.maybe_flush()
        if self.stop_event is not None and self.stop_event.is_set() and not self.interrupted:
            self.interrupt()
        if self.w.error is not None and not self.interrupted:
            self.interrupt()  # nothing more can be recorded: stop sending load
        self.loop.call_later(0.1, self.sweep)  # type: ignore[union-attr]

    def finish(self) -> None:
        for c in list(self.conns):
            req = c.req or c.pending
            c.req = c.pending = None
            c._die()
            if c.transport is not None:
                c.transport.abort()
            if c.task is not None and not c.task.done():
                c.task.cancel()
            if req is not None:
                self.record(req, 0, -1, _NAN, "cut" if req.sent == req.sent else "unsent")
        if self.s.mode == "open":
            for p in self.pools:
                while p.waiting:
                    self.record(p.waiting.popleft(), 0, -1, _NAN, "unsent")
        if self.done_fut is not None and not self.done_fut.done():
            self.done_fut.set_result(None)

    def interrupt(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = monotonic() - self.t0
        self.interrupted = True
        self.horizon = min(self.horizon, monotonic() - self.t0)
        self.end = min(self.end, self.horizon)
        if self.loop is not None:  # do not wait for a wake-up that may be a think time away
            self.loop.call_soon(self.finish_when_drained)


def _stop_on(signum: int, eng: _Engine) -> None:
    """A stop signal during a run: recorded (it sets the exit status), the run stops."""
    interrupts.note(signum)
    eng.interrupt()


def run_schedule(
    schedule: Schedule, config: EngineConfig, writer: RunLogWriter, **options: Unpack[RunOptions]
) -> EngineStats:
    """Run ``schedule`` against ``config.targets``, rows into ``writer``; blocks until done.

    The options and the run's zero are the engine contract's
    (:mod:`shrink.replay.contract`): the zero is taken once the engine is built
    (request bytes and all). SIGINT/SIGTERM/SIGHUP stop the run early (``interrupted``),
    and so does a failed write of the RunLog (the writer's ``error``: the caller
    reports it); the writer is closed in every case.
    """
    loop = new_event_loop()
    eng = _Engine(schedule, config, writer, 0.0)
    eng.stop_event = options.get("stop")
    t0 = eng.t0 = zero_time(writer, options)
    eng.loop = loop
    eng.done_fut = loop.create_future()
    signals = wants_signals(options)
    installed: list[tuple[signal.Signals, Any]] = []
    cpu0 = os.times()
    wall0 = monotonic()
    wait0 = run_queue_wait_us()  # (over the run's wall time, which thread_wait divides by)
    # A collector pass over a big heap stalls the loop for milliseconds; the hot
    # path breaks its reference cycles itself (a session and its connections let go
    # of each other), so collect before and after, not during.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if signals:
            for sig in interrupts.handled():
                before = signal.getsignal(sig)
                try:
                    loop.add_signal_handler(sig, _stop_on, sig, eng)
                    installed.append((sig, before))
                except (ValueError, RuntimeError, NotImplementedError):
                    pass
        eng.timer = WakeTimer(
            loop, eng.tick_open if schedule.mode == "open" else eng.tick, config.spin
        )
        eng.timer.at(t0)
        loop.call_later(0.1, eng.sweep)
        loop.run_until_complete(eng.done_fut)
    finally:
        if not eng.done_fut.done():
            eng.finish()
        for sig, before in installed:
            loop.remove_signal_handler(sig)
            # Neither loop gives back the handler it replaced: asyncio leaves SIG_DFL
            # (a signal between two runs of a sweep kills shrink without a word), uvloop
            # its own closed loop's (the signal is lost). None: set outside Python.
            if before is not None:
                signal.signal(sig, before)
        if eng.timer is not None:
            eng.timer.close()
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        writer.close()
        if gc_was_enabled:
            gc.enable()
    extra: dict[str, Any] = {"pool_waits": eng.pool_waits, **stopped_at(eng.stopped_at)}
    wait1 = run_queue_wait_us()
    if wait0 is not None and wait1 is not None:
        # its event loop is this thread: what it waited for its CPU, as the native core's
        extra["loop"] = {"runq_wait_us": max(0, wait1 - wait0)}
    return run_stats(t0, wall0, cpu0, eng.recorded, interrupted=eng.interrupted, extra=extra)
