"""One keep-alive HTTP/1.1 connection of the engine and its response parser.

At most one request is in flight per connection (no pipelining). A response is
read for its status, its length (Content-Length, chunked, or up to the close)
and whether the connection stays open; the body is counted, never kept. The
common case, a whole Content-Length response in one read, takes a fast path.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic
from typing import Any, Protocol

from shrink.replay._config import EngineConfig
from shrink.replay._http import CHUNK_LIMIT, HEAD_LIMIT, parse_head_cached, parse_int

_NAN = float("nan")
# response parser states
_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _UNTIL_CLOSE, _CHUNK_END = range(7)


def _within_limit(end: int) -> None:
    """A head, chunk-size line or trailer that ends (with its CRLFs) at ``end`` must
    end within HEAD_LIMIT, whether it came in one read or in many."""
    if end > HEAD_LIMIT:
        raise ValueError("response head, chunk-size line or trailer too long")


@dataclass(slots=True, eq=False)
class _Req:
    """A request of the trace in flight: its row, session, engine thread and intended
    send time, then the times it was dispatched, sent and answered, and its tries."""

    row: int
    session: int
    tidx: int
    intended: float
    sent: float = _NAN
    first_byte: float = _NAN
    dispatched: float = _NAN
    tries: int = 0


class EngineCore(Protocol):
    """What a connection and its owner use of the engine (``engine._Engine`` is the one).

    A protocol here, not an import of the engine: the engine builds connections
    and owners, so they must not import it back.
    """

    cfg: EngineConfig
    conns: set[_Conn]
    t0: float
    due: float
    horizon: float
    head_only: list[bool]
    key_of_row: list[int]
    req_bytes: list[list[bytes]]
    sessions_live: int
    pool_waits: int

    def new_req(self, row: int, session: int, tidx: int, intended: float) -> _Req: ...

    def record(self, req: _Req, status: int, nbytes: int, done: float, error: str) -> None: ...

    def open_conn(self, owner: Any, tidx: int) -> _Conn: ...

    def at(self, t: float, fn: Callable[[], None]) -> None: ...


class _Conn(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight (no pipelining)."""

    __slots__ = (
        "alive",
        "buf",
        "close_after",
        "e",
        "head_only",
        "nbytes",
        "owner",
        "pending",
        "remaining",
        "req",
        "served",
        "state",
        "status",
        "task",
        "tidx",
        "transport",
    )

    def __init__(self, engine: EngineCore, owner: Any, tidx: int) -> None:
        self.e = engine
        self.owner = owner
        self.tidx = tidx
        self.transport: asyncio.Transport | None = None
        self.req: _Req | None = None
        self.pending: _Req | None = None
        self.alive = True
        self.served = 0
        self.buf = b""
        self.state = _HEAD
        self.remaining = 0
        self.status = 0
        self.nbytes = 0
        self.close_after = False
        self.head_only = False
        self.task: asyncio.Task[Any] | None = None
        engine.conns.add(self)

    # sending -------------------------------------------------------------
    def submit(self, req: _Req) -> None:
        if req.dispatched != req.dispatched:
            req.dispatched = monotonic() - self.e.t0
        if self.transport is None:
            self.pending = req
        else:
            self._send(req)

    def _send(self, req: _Req) -> None:
        e = self.e
        self.req = req
        self.state = _HEAD
        self.status = 0  # not the last answer's: a bad head of this one records none
        self.nbytes = 0
        self.buf = b""
        self.head_only = e.head_only[req.row]
        req.sent = monotonic() - e.t0
        self.transport.write(e.req_bytes[self.tidx][e.key_of_row[req.row]])  # type: ignore[union-attr]

    # asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        req = self.pending
        if req is not None:
            self.pending = None
            self._send(req)

    def connect_failed(self, exc: BaseException) -> None:
        self.alive = False
        self.e.conns.discard(self)
        req, self.pending = self.pending, None
        if req is not None:
            name = "refused" if isinstance(exc, ConnectionRefusedError) else "connect"
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
                name = "files"  # the generator's open-file limit, not the server
            self.e.record(req, 0, -1, _NAN, name)
            self.owner.finished(self, req)

    def data_received(self, data: bytes) -> None:
        req = self.req
        if req is None:
            # Bytes no request asked for (a second answer, an answer before the
            # request): the connection is out of step, and its next answer could be
            # this one's. It is closed, as if the server had closed it while idle.
            if self.alive:
                self._die()
                if self.transport is not None:
                    self.transport.close()
                self.owner.lost_idle(self)
            return
        now = monotonic() - self.e.t0
        if req.first_byte != req.first_byte:
            req.first_byte = now
        if self.state == _HEAD and not self.buf:
            # fast path: a whole Content-Length response in one read
            i = data.find(b"\r\n\r\n")
            if 0 <= i <= HEAD_LIMIT - 4:  # a longer head is the parser's to refuse
                try:
                    status, clen, chunked, close = parse_head_cached(data[:i])
                except ValueError:
                    self._fail("bad-response", abort=True)
                    return
                if (
                    clen == len(data) - i - 4
                    and not chunked
                    and status >= 200
                    and not self.head_only
                    and status != 204
                    and status != 304
                ):
                    self.status = status
                    self.close_after = close
                    self.nbytes = clen
                    self._complete(now)
                    return
        buf = self.buf + data if self.buf else data
        try:
            self._parse(buf)
        except ValueError:
            self._fail("bad-response", abort=True)

    def _parse(self, buf: bytes) -> None:
        while True:
            state = self.state
            if state == _HEAD:
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    self._keep(buf)
                    return
                _within_limit(i + 4)
                status, clen, chunked, close = parse_head_cached(buf[:i])
                buf = buf[i + 4 :]
                if 100 <= status < 200:
                    if status == 101:  # a switch to a protocol no request asked for
                        raise ValueError("101 Switching Protocols without an Upgrade")
                    continue  # interim response: the real one follows
                self.status = status
                self.close_after = close
                if self.head_only or status in (204, 304):
                    self.close_after |= bool(buf)  # a body where none may be: out of step
                    self._complete()
                    return
                if chunked:
                    self.state = _CHUNK_SIZE
                elif clen >= 0:
                    self.state = _BODY
                    self.remaining = clen
                else:
                    self.state = _UNTIL_CLOSE
                    self.close_after = True
            elif state == _BODY:
                n = len(buf)
                if n >= self.remaining:
                    self.nbytes += self.remaining
                    self.close_after |= n > self.remaining  # more than its length
                    self._complete()
                    return
                self.remaining -= n
                self.nbytes += n
                self.buf = b""
                return
            elif state == _CHUNK_SIZE:
                j = buf.find(b"\r\n")
                if j < 0:
                    self._keep(buf)
                    return
                _within_limit(j + 2)
                size = parse_int(buf[:j].split(b";", 1)[0], 16)
                if size > CHUNK_LIMIT:
                    raise ValueError("chunk too large")
                buf = buf[j + 2 :]
                if size == 0:
                    self.state = _TRAILER
                else:
                    self.nbytes += size
                    self.remaining = size
                    self.state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                n = len(buf)
                if n < self.remaining:
                    self.remaining -= n
                    self.buf = b""
                    return
                buf = buf[self.remaining :]
                self.state = _CHUNK_END
            elif state == _CHUNK_END:  # the CRLF that ends a chunk's data
                if len(buf) < 2:
                    if buf not in (b"", b"\r"):
                        raise ValueError("chunk data longer than its size")
                    self.buf = buf
                    return
                if buf[:2] != b"\r\n":
                    raise ValueError("chunk data longer than its size")
                buf = buf[2:]
                self.state = _CHUNK_SIZE
            elif state == _TRAILER:
                i = buf.find(b"\r\n\r\n")
                end = 2 if buf.startswith(b"\r\n") else i + 4 if i >= 0 else -1
                if end > 0:
                    _within_limit(end)
                    self.close_after |= len(buf) > end  # bytes past the trailer
                    self._complete()
                    return
                self._keep(buf)
                return
            else:  # _UNTIL_CLOSE
                self.nbytes += len(buf)
                self.buf = b""
                return

    def _keep(self, buf: bytes) -> None:
        """Keep a partial head, chunk-size line or trailer, unless it cannot end
        within HEAD_LIMIT any more."""
        _within_limit(len(buf) + 1)
        self.buf = buf

    def _complete(self, now: float | None = None) -> None:
        req = self.req
        self.req = None
        self.buf = b""
        self.served += 1
        if self.close_after:
            self._die()
            if self.transport is not None:
                self.transport.close()
        assert req is not None
        done = monotonic() - self.e.t0 if now is None else now
        self.e.record(req, self.status, self.nbytes, done, "")
        self.owner.finished(self, req)

    def _die(self) -> None:
        self.alive = False
        self.e.conns.discard(self)

    def _fail(self, error: str, *, abort: bool) -> None:
        req = self.req
        self.req = None
        self._die()
        if abort and self.transport is not None:
            self.transport.abort()
        if req is not None:
            self.e.record(req, self.status if error == "bad-response" else 0, -1, _NAN, error)
            self.owner.finished(self, req)

    def connection_lost(self, exc: BaseException | None) -> None:
        # The collector is off during a run: the transport (which holds this protocol)
        # and the connect task are let go here, or every connection would stay.
        self.transport = self.task = None
        if not self.alive:
            return
        req = self.req
        self._die()
        if req is None:
            self.owner.lost_idle(self)
            return
        if self.state == _UNTIL_CLOSE:
            self._complete()
            return
        if req.first_byte != req.first_byte and self.served > 0 and req.tries == 0:
            # The server closed an idle keep-alive connection as we reused it.
            self.req = None
            req.tries += 1
            req.sent = _NAN
            self.owner.retry(self, req)
            return
        self._fail("reset" if isinstance(exc, ConnectionResetError) else "closed", abort=False)

    def expire(self, now: float, timeout: float) -> None:
        """Fail a request (or a connect) older than ``timeout``."""
        req = self.req
        if req is not None and now - req.sent > timeout:
            self._fail("timeout", abort=True)
        elif self.pending is not None and now - self.pending.intended > timeout:
            req, self.pending = self.pending, None
            self._die()
            if self.task is not None:
                self.task.cancel()
            self.e.record(req, 0, -1, _NAN, "timeout")
            self.owner.finished(self, req)
