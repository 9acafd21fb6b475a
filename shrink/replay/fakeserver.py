"""A tiny HTTP/1.1 server for testing the engine without lighttpd.

Run it as ``python -m shrink.replay.fakeserver --port 8099`` (it prints
``listening HOST PORT`` once ready). The query string steers each reply:
``bytes=N`` body size (default 1024), ``delay_us=D`` answer after D microseconds,
``chunked=1`` chunked encoding, ``close=1`` close after the reply, ``status=S``.
``--idle-timeout S`` closes keep-alive connections idle for S seconds, as
lighttpd's ``server.max-keep-alive-idle`` does. The in-process
:class:`shrink.testbed.fake.FakeServer` serves with the same protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeHTTP", "main", "serve"]


IDLE_TIMEOUT: float | None = None  # close keep-alive connections idle this long


class FakeHTTP(asyncio.Protocol):
    """One connection of the fake server.

    ``default_bytes`` is the body size without ``bytes=N``; ``service_time`` is
    added to every reply's ``delay_us``; ``on_request(target)`` hears of each, and
    ``on_body(target, body, content_type)`` of its body (the Content-Length bytes after
    the head) and its Content-Type header's value (None: it sent none).
    """

    def __init__(
        self,
        *,
        default_bytes: int = 1024,
        service_time: float = 0.0,
        on_request: Callable[[str], None] | None = None,
        on_body: Callable[[str, bytes, str | None], None] | None = None,
    ) -> None:
        self.default_bytes = default_bytes
        self.service_time = service_time
        self.on_request = on_request
        self.on_body = on_body
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._arm()

    def _arm(self) -> None:
        if IDLE_TIMEOUT is not None:
            if self.idle is not None:
                self.idle.cancel()
            loop = asyncio.get_running_loop()
            self.idle = loop.call_later(IDLE_TIMEOUT, self._idle_close)

    def _idle_close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._arm()
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            # A request's body is read past: taken for the next request's head, a POST
            # body became a request for its text, answered twice.
            length = _CONTENT_LENGTH.search(self.buf, 0, i)
            end = i + 4 + (int(length[1]) if length else 0)
            if len(self.buf) < end:
                return  # the rest of the body is still to come
            head, body, self.buf = self.buf[:i], self.buf[i + 4 : end], self.buf[end:]
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split(" ")
            target = parts[1] if len(parts) > 1 else "/"
            q = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
            q.setdefault("bytes", str(self.default_bytes))
            delay = int(q.get("delay_us", "0")) / 1e6 + self.service_time
            reply = _reply(q, head_only=parts[0] == "HEAD")
            close = q.get("close") == "1" or b"connection: close" in head.lower()
            if self.on_request is not None:
                self.on_request(target)
            if self.on_body is not None:
                typ = _CONTENT_TYPE.search(head)
                self.on_body(target, body, None if typ is None else typ[1].decode("latin-1"))
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self._write, reply, close)
            else:
                self._write(reply, close)

    def _write(self, reply: bytes, close: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(reply)
        if close:
            self.transport.close()


_CACHE: dict[tuple[tuple[str, str], ...], bytes] = {}
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]{1,9})", re.IGNORECASE)
_CONTENT_TYPE = re.compile(rb"\r\ncontent-type:[ \t]*([^\r\n]*?)[ \t]*(?:\r\n|$)", re.IGNORECASE)


def _reply(q: dict[str, str], *, head_only: bool) -> bytes:
    key = (*sorted(q.items()), ("head", str(head_only)))
    out = _CACHE.get(key)
    if out is not None:
        return out
    n = int(q["bytes"])
    status = int(q.get("status", "200"))
    body = b"x" * n
    headers = [f"HTTP/1.1 {status} OK", "Server: shrink-fake", "Content-Type: text/plain"]
    if q.get("close") == "1":
        headers.append("Connection: close")
    if q.get("chunked") == "1":
        headers.append("Transfer-Encoding: chunked")
        half = n // 2
        chunks = [body[:half], body[half:]]
        payload = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"
    else:
        headers.append(f"Content-Length: {n}")
        payload = body
    out = ("\r\n".join(headers) + "\r\n\r\n").encode() + (b"" if head_only else payload)
    if len(_CACHE) < 10000:
        _CACHE[key] = out
    return out


async def serve(host: str, port: int) -> None:
    """Serve until cancelled; prints ``listening HOST PORT`` when bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FakeHTTP, host, port, reuse_address=True, backlog=1024)
    sock = server.sockets[0]
    print("listening", host, sock.getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    p.add_argument("--idle-timeout", type=float, default=None, help="close idle connections")
    a = p.parse_args(argv)
    global IDLE_TIMEOUT
    IDLE_TIMEOUT = a.idle_timeout
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    try:
        import uvloop

        uvloop.run(serve(a.host, a.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
