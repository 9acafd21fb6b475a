"""A fake in-process target: a tiny HTTP/1.1 keep-alive server on loopback.

For unit tests of later stages (replay engine, measurement) that need something
to send requests to without lighttpd. It serves with the protocol of
:mod:`shrink.replay.fakeserver` (the same query string steers it: a body of
``bytes=N`` bytes, default 100 here), after an optional service time, in a
background thread, and counts what it served (``paths``, ``bodies``: the bytes each
request carried, and ``content_types``: their Content-Type headers)::

    with FakeServer(service_time_s=0.001) as fake:
        httpx.get(f"http://{fake.address}:{fake.port}/app/x.php?bytes=512")
        assert fake.requests == 1
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from shrink.replay.fakeserver import FakeHTTP

__all__ = ["FakeServer"]


class FakeServer:
    """An asyncio HTTP server in a background thread; a context manager."""

    def __init__(self, *, address: str = "127.0.0.1", port: int = 0, service_time_s: float = 0.0):
        self.address = address
        self.port = port
        self.service_time_s = service_time_s
        self.requests = 0
        self.paths: list[str] = []
        self.bodies: list[bytes] = []  # each request's, in the order served
        self.content_types: list[str | None] = []  # each request's header (None: none)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None

    def _served(self, target: str) -> None:
        self.requests += 1
        self.paths.append(target)

    def _body(self, target: str, body: bytes, content_type: str | None) -> None:
        self.bodies.append(body)
        self.content_types.append(content_type)

    def _protocol(self) -> FakeHTTP:
        return FakeHTTP(
            default_bytes=100,
            service_time=self.service_time_s,
            on_request=self._served,
            on_body=self._body,
        )

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._server = loop.run_until_complete(
            loop.create_server(self._protocol, self.address, self.port)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        self._server.close()
        loop.run_until_complete(self._server.wait_closed())
        loop.close()

    def start(self) -> FakeServer:
        """Start serving; ``port`` then holds the bound port."""
        self._thread = threading.Thread(target=self._run, name="shrink-fake-target", daemon=True)
        self._thread.start()
        self._ready.wait(5)
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
