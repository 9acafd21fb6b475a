"""Servers the live tests start themselves on loopback: a free port, the wait for it, a
static site's lighttpd config (bench_replay's too), and a scripted stand-in server."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# lighttpd 1.4.79 (Debian 13) reads these as short integers and exits 255 on a larger
# value (1.4.69 took one): a keep-alive "without end" is this many requests
LIGHTTPD_SHORT_MAX = 65535
LIGHTTPD_SHORT_SETTINGS = frozenset({
    "max_keep_alive_requests", "max_keep_alive_idle", "max_read_idle", "max_write_idle",
    "max_connections", "max_fds",
})  # fmt: skip


def static_lighttpd(root: Path, **settings: int) -> tuple[Path, int]:
    """``root/www`` with one 1 KiB file, ``static/file1k.bin``, and a lighttpd config that
    serves it on a free loopback port: (the config, the port). ``settings``: more
    ``server.*`` lines, underscores for dashes (``max_keep_alive_idle=30``); one that
    lighttpd 1.4.79 would refuse (above ``LIGHTTPD_SHORT_MAX``) raises ValueError here,
    whichever lighttpd is installed."""
    for k, v in settings.items():
        if k in LIGHTTPD_SHORT_SETTINGS and not 0 <= v <= LIGHTTPD_SHORT_MAX:
            raise ValueError(f"server.{k.replace('_', '-')} = {v}: lighttpd takes 0 ... 65535")
    (root / "www" / "static").mkdir(parents=True)
    (root / "www" / "static" / "file1k.bin").write_bytes(bytes(range(256)) * 4)
    port = free_port()
    lines = [
        f'server.document-root = "{root / "www"}"',
        f"server.port = {port}",
        'server.bind = "127.0.0.1"',
        *(f"server.{k.replace('_', '-')} = {v}" for k, v in settings.items()),
    ]
    conf = root / "lighttpd.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf, port


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Return once ``proc`` accepts on ``port``; fail the test if it exits or takes too long."""
    name = proc.args[0] if isinstance(proc.args, list) else proc.args
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with {proc.returncode} (PID {proc.pid})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{name} (PID {proc.pid}) did not listen on {port} within {timeout} s")


@contextmanager
def fake_server(*extra: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """shrink's own loopback HTTP server on a free port: yields the port, kills it on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0", *extra],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline().split()[2])
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def scripted_server(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback TCP listener on a free port whose every connection is handed to
    ``answer`` (in a thread of its own, the connection closed after): yields the port,
    stops listening on exit. For servers that answer as no real one would (a status
    999, a body that never ends)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve(c: socket.socket) -> None:
        with c:
            answer(c)

    def accept() -> None:
        with srv:
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()
