"""Engines and servers for the tests of scaled-out runs: fakes, never measured."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any


class Part0Killed:
    """An engine whose process 0 (or ``part``) is killed once the run's zero is told
    (kill -9, the OOM killer), with its part's writer open (its .tmp and 8 MiB .reserve
    beside the output); the other processes run to their end."""

    def __init__(self, part: int = 0) -> None:
        self.part = part

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        from shrink.replay.contract import zero_time
        from shrink.replay.fake import FakeEngine

        if writer.meta.get("part") == self.part:
            zero_time(writer, kw)
            os.kill(os.getpid(), signal.SIGKILL)
        kw.pop("awake", None)
        return FakeEngine()(schedule, config, writer, **kw)


class Part0Stopped:
    """An engine whose process 0 stops itself (SIGSTOP) once the run's zero is told, and
    is never continued; the other processes run to their end."""

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        from shrink.replay.contract import zero_time
        from shrink.replay.fake import FakeEngine

        if writer.meta.get("part") == 0:
            zero_time(writer, kw)
            os.kill(os.getpid(), signal.SIGSTOP)
        kw.pop("awake", None)
        return FakeEngine()(schedule, config, writer, **kw)


class Part0StoppedAfterReport:
    """An engine whose process 0 stops itself (SIGSTOP) after its report, before it
    exits, and is never continued; the other processes run to their end."""

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        import threading
        import time

        from shrink.replay.fake import FakeEngine

        if writer.meta.get("part") == 0:

            def stop_later() -> None:  # (the process's exit waits for this thread)
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGSTOP)

            threading.Thread(target=stop_later).start()
        kw.pop("awake", None)
        return FakeEngine()(schedule, config, writer, **kw)


class Part0Terminated:
    """An engine whose process 0 takes a SIGTERM sent to it alone once the run's zero is
    told: it stops as the native engine does (its rows so far kept, ``interrupted``);
    the other processes run to their end."""

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        from shrink import interrupts
        from shrink.replay.fake import FakeEngine

        kw.pop("awake", None)
        stats = FakeEngine()(schedule, config, writer, **kw)
        if writer.meta.get("part") != 0:
            return stats
        interrupts.note(signal.SIGTERM)  # (what the engine's handler records)
        return replace(stats, interrupted=True)


class Part0Hangs:
    """An engine whose process 0 hangs once the run's zero is told (a deadlock inside an
    engine: running, never reporting, writing nothing); with ``writing`` (seconds) it
    writes a byte to a file beside its part every 0.2 s for that long, then runs its part
    as the others do (a slow writer, never hung)."""

    def __init__(self, writing: float | None = None) -> None:
        self.writing = writing

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        import time

        from shrink.replay.contract import zero_time
        from shrink.replay.fake import FakeEngine

        kw.pop("awake", None)
        if writer.meta.get("part") != 0:
            return FakeEngine()(schedule, config, writer, **kw)
        t0 = zero_time(writer, kw)
        if self.writing is None:
            while True:
                time.sleep(1)
        # past the deadline (the run's end, its timeout, 5 s), still writing
        time.sleep(max(0.0, t0 + 6.0 - time.monotonic()))
        with open(f"{writer.path}.slow", "wb", buffering=0) as f:
            for _ in range(int(self.writing / 0.2)):
                f.write(b"x")
                time.sleep(0.2)
        os.unlink(f"{writer.path}.slow")
        kw.pop("on_ready", None)  # (the zero is told once)
        return FakeEngine()(schedule, config, writer, **{**kw, "t0": t0})


@contextlib.contextmanager
def fake_server_address() -> Iterator[tuple[str, int]]:
    """shrink's fake HTTP server on a free loopback port, as (host, port)."""
    args = [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield "127.0.0.1", int(proc.stdout.readline().split()[2])
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def fake_server_url() -> Iterator[str]:
    """shrink's fake HTTP server on a free loopback port, as its URL."""
    with fake_server_address() as (host, port):
        yield f"http://{host}:{port}"


def options_seen() -> Any:
    """A fake engine that notes the options it was called with (``.options``)."""
    from shrink.replay.fake import FakeEngine

    class OptionsSeen(FakeEngine):
        def __init__(self) -> None:
            super().__init__()
            self.options: list[dict[str, Any]] = []

        def __call__(self, *args: Any, **kw: Any) -> Any:
            self.options.append(dict(kw))
            return super().__call__(*args, **kw)

    return OptionsSeen()


def watched(monkeypatch: Any, clock: list[float], run_delay: Any = None) -> Any:
    """A stop watcher run over wake-ups at the monotonic instants ``clock`` (its start's
    first), told to stop after the last. Its thread's time on a run queue is
    ``run_delay()`` (none by default: the real one, read from /proc, moved by a few ms
    under load and failed a gap's exact figure)."""
    from shrink.replay import stopwatch

    monkeypatch.setattr(stopwatch, "_run_delay", run_delay or (lambda: 0.0))

    ticks = iter(clock)
    left = [len(clock)]

    def now() -> float:
        left[0] -= 1
        return next(ticks)

    monkeypatch.setattr(stopwatch, "monotonic", now)
    watch = stopwatch.StopWatch()
    monkeypatch.setattr(watch.stop, "wait", lambda timeout: left[0] == 0)
    watch.run()
    return watch


class HeldAfterItsEnd:
    """A fake engine that, once its run is over (``ended`` said), holds the GIL for
    ``hold`` seconds (as the native core's wait for its starved spinners does), then
    sends this process the signals ``then`` (a SIGCONT with no stop before it)."""

    def __init__(self, hold: float, then: tuple[signal.Signals, ...] = ()) -> None:
        self.hold, self.then = hold, then

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        import ctypes
        import time

        from shrink.replay.fake import FakeEngine

        kw.pop("awake", None)
        stats = FakeEngine()(schedule, config, writer, **kw)
        time.sleep(0.3)  # (the watcher started at the zero has woken meanwhile)
        stats.ended = time.monotonic()
        # a call through PyDLL keeps the GIL: no other thread of this process runs
        ctypes.PyDLL(None).usleep(int(self.hold * 1e6))
        for sig in self.then:
            os.kill(os.getpid(), sig)
        return stats


class HaltedByEvent:
    """An engine stopped by its ``stop`` event (a testbed's watch sets it when a server
    goes down), as the native engine is: its rows so far kept, ``interrupted``, and no
    stop signal taken."""

    def __call__(self, schedule, config, writer, **kw):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        from shrink.replay.fake import FakeEngine

        kw.pop("awake", None)
        stop = kw.pop("stop", None)
        stats = FakeEngine()(schedule, config, writer, **kw)
        return replace(stats, interrupted=bool(stop is not None and stop.is_set()))
