"""Servers the live tests start themselves on loopback: a free port, and the wait for it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
