"""Who owns the engine's connections: a session (wsesslog rules) or an open-loop pool.

An owner hears from its connections when a request has finished (``finished``),
when a reused keep-alive connection turned out closed (``retry``) and when an
idle one died (``lost_idle``).
"""

from __future__ import annotations

from collections import deque
from time import monotonic

from shrink.replay._conn import EngineCore, _Conn, _Req


class _Session:
    """httperf wsesslog: first request alone, embedded ones over N connections, think."""

    __slots__ = ("bi", "bursts", "conns", "e", "outstanding", "queue", "sid", "tidx")

    def __init__(
        self, engine: EngineCore, sid: int, tidx: int, bursts: list[tuple[int, int, float]]
    ) -> None:
        self.e = engine
        self.sid = sid
        self.tidx = tidx
        self.bursts = bursts
        self.bi = 0
        self.conns: list[_Conn | None] = [None] * engine.cfg.conns_per_session
        self.queue: deque[int] = deque()
        self.outstanding = 0

    def _conn(self, slot: int) -> _Conn:
        c = self.conns[slot]
        if c is None or not c.alive:
            c = self.conns[slot] = self.e.open_conn(self, self.tidx)
        return c

    def begin_burst(self) -> None:
        e = self.e
        now = monotonic() - e.t0
        if self.bi >= len(self.bursts) or now >= e.end:
            self.close()
            return
        first, end, _ = self.bursts[self.bi]
        self.queue.extend(range(first + 1, end))
        self.outstanding = 1
        self._conn(0).submit(e.new_req(first, self.sid, self.tidx, e.due))

    def finished(self, conn: _Conn, req: _Req) -> None:
        self.outstanding -= 1
        e = self.e
        now = monotonic() - e.t0
        if self.queue and now < e.end:
            if self.outstanding == 0 and req.row == self.bursts[self.bi][0]:
                # the first request is back: embedded requests go out over N connections
                for slot in range(len(self.conns)):
                    if not self.queue:
                        break
                    self.outstanding += 1
                    row = self.queue.popleft()
                    self._conn(slot).submit(e.new_req(row, self.sid, self.tidx, now))
                return
            slot = self.conns.index(conn) if conn in self.conns else 0
            self.outstanding += 1
            row = self.queue.popleft()
            self._conn(slot).submit(e.new_req(row, self.sid, self.tidx, now))
            return
        if self.outstanding > 0:
            return
        self.queue.clear()
        think = self.bursts[self.bi][2]
        self.bi += 1
        if self.bi < len(self.bursts) and now + think < e.end:
            e.at(now + think, self.begin_burst)
        else:
            self.close()

    def retry(self, conn: _Conn, req: _Req) -> None:
        slot = self.conns.index(conn) if conn in self.conns else 0
        self._conn(slot).submit(req)

    def lost_idle(self, conn: _Conn) -> None:
        pass  # the slot reopens on next use

    def close(self) -> None:
        for c in self.conns:
            if c is not None and c.alive and c.req is None and c.transport is not None:
                c._die()
                c.transport.close()
        # A connection names its session (its owner): with the collector off during a
        # run, the session lets go of its connections, or both would stay for the run.
        self.conns = [None] * len(self.conns)
        self.e.sessions_live -= 1


class _Pool:
    """Open mode: keep-alive connections to one address, most recently used first."""

    __slots__ = ("e", "idle", "n", "tidx", "waiting")

    def __init__(self, engine: EngineCore, tidx: int) -> None:
        self.e = engine
        self.tidx = tidx
        self.idle: list[_Conn] = []
        self.n = 0
        self.waiting: deque[_Req] = deque()

    def submit(self, req: _Req) -> None:
        idle = self.idle
        while idle:
            c = idle.pop()
            if c.alive:
                c.submit(req)
                return
        if self.n < self.e.cfg.max_pool:
            self.n += 1
            self.e.open_conn(self, self.tidx).submit(req)
        else:
            # The generator is on time; the server holds every connection. The
            # wait shows in the latency, not as the generator's lag.
            req.dispatched = monotonic() - self.e.t0
            self.e.pool_waits += 1
            self.waiting.append(req)

    def finished(self, conn: _Conn, req: _Req) -> None:
        if conn.alive and self.e.cfg.conn_per_request and conn.transport is not None:
            conn._die()
            conn.transport.close()
        if not conn.alive:
            self.n -= 1
            if self.waiting:
                self.submit(self.waiting.popleft())
            return
        if self.waiting:
            conn.submit(self.waiting.popleft())
        else:
            self.idle.append(conn)

    def retry(self, conn: _Conn, req: _Req) -> None:
        self.n -= 1
        self.submit(req)

    def lost_idle(self, conn: _Conn) -> None:
        self.n -= 1
        if conn in self.idle:
            self.idle.remove(conn)
