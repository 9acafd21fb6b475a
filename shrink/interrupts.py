"""SIGINT, SIGTERM and SIGHUP stop a command the same way: as Ctrl-C.

Each raises KeyboardInterrupt (or, inside a run, stops the replay engine, which
then returns what it measured), so the same code keeps the finished levels and
says what it kept, whichever signal came. The exit status tells them apart:
128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as
a shell reports a command killed by it.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["STOP_SIGNALS", "exit_status", "handled", "install", "note", "received", "stopped_by"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_last = [int(signal.SIGINT)]


def note(signum: int) -> None:
    """Record that ``signum`` stopped the command (a handler of one of STOP_SIGNALS)."""
    _last[0] = int(signum)


def received() -> int:
    """The last stop signal recorded (SIGINT if none: a KeyboardInterrupt of Python's)."""
    return _last[0]


def stopped_by() -> str:
    """``interrupted`` (Ctrl-C), or ``stopped by SIGTERM`` / ``SIGHUP``: the message's start."""
    sig = received()
    return "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"


def exit_status() -> int:
    """The exit status of a command stopped by a signal: 128 + its number."""
    return 128 + received()


def _stop(signum: int, frame: FrameType | None) -> None:
    note(signum)
    raise KeyboardInterrupt


def handled() -> list[signal.Signals]:
    """The stop signals this process takes: those not ignored. A signal ignored when
    the command started (``nohup`` ignores SIGHUP) stays ignored: the user asked so."""
    return [s for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN]


def install() -> None:
    """Make every stop signal raise KeyboardInterrupt (on the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in handled():
        signal.signal(sig, _stop)
