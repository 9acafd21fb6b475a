"""Is a replica answering? A static file and a PHP page (or a recipe's URL), within a timeout."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from shrink.errors import TestbedError
from shrink.testbed.config import HEALTH_BODY, HEALTH_PHP, HEALTH_STATIC
from shrink.wire import is_loopback, loopback_url_host

__all__ = ["check", "probe", "url", "wait_healthy"]


def url(address: str, port: int, path: str) -> str:
    """``http://ADDRESS:PORT/PATH``, with an IPv6 address in brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}{path}"


def probe(target: str, *, timeout_s: float = 1.0) -> str | None:
    """None if ``target`` answers 2xx or 3xx; else what went wrong, in words. A target
    off loopback is never probed."""
    why = loopback_url_host(target)
    if why is not None:
        return f"{target}: {why}, not probed"
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        try:
            resp = client.get(target)
        except httpx.HTTPError as exc:
            return f"{target}: {type(exc).__name__}: {exc}"
    if not 200 <= resp.status_code < 400:
        return f"{target}: HTTP {resp.status_code}"
    return None


def check(address: str, port: int, *, timeout_s: float = 2.0) -> str | None:
    """None if both probes answer ``shrink-ok``; else what went wrong, in words.

    ``address`` comes from a state file (``testbed status``), which anyone may have
    written: one off loopback is never probed (root's requests would reach another
    machine, or a cloud's metadata service)."""
    if not is_loopback(address):
        return f"{address} is not a loopback address, not probed"
    # trust_env=False: a proxy from the environment must never see loopback traffic.
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        for path in (HEALTH_STATIC, HEALTH_PHP):
            where = url(address, port, path)
            try:
                resp = client.get(where)
            except httpx.HTTPError as exc:
                return f"{where}: {type(exc).__name__}: {exc}"
            if resp.status_code != 200 or resp.text.strip() != HEALTH_BODY:
                return f"{where}: HTTP {resp.status_code} {resp.text[:80]!r}"
    return None


def wait_healthy(
    address: str,
    port: int,
    *,
    timeout_s: float = 15.0,
    still_running: object = None,
    checker: Callable[[str, int], str | None] | None = None,
) -> None:
    """Poll :func:`check` (or a recipe's ``checker``) until it passes; raise TestbedError
    with the last problem.

    ``still_running``, a zero-argument callable, lets the caller stop waiting as
    soon as the server has died.
    """
    checker = checker or (lambda a, p: check(a, p, timeout_s=1.0))
    deadline = time.monotonic() + timeout_s
    problem = "not checked"
    while time.monotonic() < deadline:
        if callable(still_running) and not still_running():
            raise TestbedError(f"{address}:{port} exited before answering ({problem})")
        problem = checker(address, port) or ""
        if not problem:
            return
        time.sleep(0.05)
    raise TestbedError(f"{address}:{port} did not answer within {timeout_s:g} s: {problem}")
