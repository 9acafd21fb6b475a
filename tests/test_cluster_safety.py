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
from shrink.replay import cluster as cl


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

    def is_initialized(self) -> bool:
        return False

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
    assert temp is not None and os.path.dirname(temp) == str(run)
    assert os.stat(temp).st_mode & 0o777 == 0o700


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
