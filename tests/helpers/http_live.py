"""The parser fuzz's cases through both real engines, from a scripted loopback server.

For each case the server answers the first connection's requests with the case's
answers, read by read (TCP_NODELAY, a short pause between reads so that each is a
read of its own, mostly), then ends as the case says: closes, resets (SO_LINGER 0)
or holds the connection until the client gives up. A later connection (the engine
reopening one) is closed at once. Both engines replay a one-session trace (one
request a burst, HEAD where the case says) against it; their rows must agree with
each other and with what ``shrink_core.parse_stream`` predicted.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from typing import Any

from helpers.http_fuzz import Case, make_case, native_stream

_PAUSE = 0.001


def _read_request(s: socket.socket) -> bool:
    """Read a request; False at the client's close. Waits a fifth of a second at
    most: an answer the client is still reading (not whole yet) gets the next
    answer's bytes regardless, as the fuzz's cases have them."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            got = s.recv(65536)
        except TimeoutError:
            return True
        except OSError:
            return False
        if not got:
            return False
        buf += got
    return True


def _serve_one(s: socket.socket, case: Case) -> None:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for answer in case.answers:
            s.settimeout(0.2)
            if not _read_request(s):
                return
            for data in answer:
                s.sendall(data)
                time.sleep(_PAUSE)
        s.settimeout(5.0)
        if case.end == "hold":
            while s.recv(65536):
                pass
        elif case.end == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    finally:
        s.close()


def _close_after_request(s: socket.socket) -> None:
    s.settimeout(1.0)
    _read_request(s)
    s.close()


class ScriptedServer:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.case: Case | None = None
        self.conns = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            if self.conns == 1 and self.case is not None:
                threading.Thread(target=_serve_one, args=(s, self.case), daemon=True).start()
            else:  # read its request first: a close with it unread would be a reset
                threading.Thread(target=_close_after_request, args=(s,), daemon=True).start()

    def serve(self, case: Case) -> None:
        self.case = case
        self.conns = 0

    def close(self) -> None:
        self.sock.close()


def _replay(engine: str, case: Case, port: int) -> list[tuple[str, int, int]]:
    from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native
    from shrink.trace import Trace

    n = len(case.head_only)
    cols = {"session": [0] * n, "burst": list(range(n)), "t": [0.0] * n,
            "think": [0.0] * n, "path": [f"/r{i}" for i in range(n)],
            "method": ["HEAD" if h else "GET" for h in case.head_only]}  # fmt: skip
    trace = Trace.from_columns(cols, meta={"mode": "session"})
    sched = build_schedule(trace, 1.0, 0.1, loop=False)
    # long enough for the server's pauses between reads
    timeout = 0.8 + 4 * _PAUSE * len(case.reads)
    cfg = EngineConfig([("127.0.0.1", port)], timeout=timeout, drain=timeout + 1.0)
    w = RunLogWriter(None)
    run = native.run_native if engine == "native" else native.run_python
    run(sched, cfg, w, handle_signals=False)
    log = w.runlog()
    errors = [e or "ok" for e in log.column("error").tolist()]
    return list(zip(errors, log.column("status").tolist(), log.column("bytes").tolist(),
                    strict=True))  # fmt: skip


def confirm(k: int, seed: int, core: Any) -> None:
    """K cases (no retried request: its new connection is the server's to script)
    through both engines; prints each disagreement and the counts."""
    rnd = random.Random(seed + 1)
    srv = ScriptedServer()
    agree = differ = unlike_hook = tried = 0
    try:
        while tried < k:
            case = make_case(rnd)
            want, _ = native_stream(core, case)
            if any(r[0] == "retry" for r in want) or len(case.reads) > 300:
                continue
            tried += 1
            got = {}
            for engine in ("python", "native"):
                srv.serve(case)
                got[engine] = _replay(engine, case, srv.port)
            if got["python"] == got["native"]:
                agree += 1
            else:
                differ += 1
                print(f"  live: python {got['python']} native {got['native']}: {case}")
            if got["native"][: len(want)] != [tuple(r) for r in want]:
                unlike_hook += 1
                print(f"  live unlike the hook: {got['native']} / {want}: {case}"[:600])
    finally:
        srv.close()
    print(f"live: {tried} cases, engines agree {agree}, differ {differ}, "
          f"native unlike the hook's prediction {unlike_hook}")  # fmt: skip
