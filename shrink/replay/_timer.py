"""Sub-millisecond wake-ups for the event loop without busy waiting.

libuv (and so uvloop) keeps timers in whole milliseconds, which would make an
open-loop request up to 1 ms late. A Linux ``timerfd`` armed at an absolute
CLOCK_MONOTONIC time (the clock behind ``time.monotonic``) becomes readable at
that instant, with the kernel's high-resolution timers, and the loop watches it
like any socket. Before a sleep longer than 1 ms it is armed ``early`` (200 us) ahead and the
last stretch is polled, because a virtual CPU waking from deep idle is itself
tens of microseconds late; at most 200 us per such wake-up is spent polling
(20% of a core at 1,000 wake-ups/s, nothing at higher rates). Where timerfd is
missing, the loop's own timers are used with a short spin before each due time.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
from collections.abc import Callable
from time import monotonic

__all__ = ["WakeTimer"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.timerfd_create  # noqa: B018 - probe that the symbol exists
    except (OSError, AttributeError):
        return None
    return libc


class WakeTimer:
    """Calls ``callback`` at an absolute monotonic time (one pending wake-up at a time)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        callback: Callable[[], None],
        spin: float = 0.002,
        early: float = 200e-6,
    ) -> None:
        self.loop = loop
        self.callback = callback
        self.spin = spin
        self.early = early
        self.when = 0.0
        self.fd = -1
        self._spec = _Itimerspec()
        self._libc = _libc()
        if self._libc is not None:
            fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self.fd = fd
                loop.add_reader(fd, self._fired)

    @property
    def precise(self) -> bool:
        return self.fd >= 0

    def _fired(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            return  # a stale wake-up already consumed
        # Woken ``early`` ahead: a virtual CPU coming out of idle takes tens of
        # microseconds, so poll the last stretch rather than sleep through it.
        when = self.when
        while monotonic() < when:
            pass
        self.callback()

    def at(self, when: float) -> None:
        """Wake at monotonic time ``when`` (now if it has passed)."""
        delay = when - monotonic()
        if delay <= 20e-6:
            self.loop.call_soon(self.callback)
            return
        if self.fd >= 0:
            self.when = when
            # Only a long sleep is worth waking early for: that is when the
            # (virtual) CPU idles deeply, and polling then costs little; at high
            # rates polling would take the loop from the responses.
            if delay > 1e-3:
                when -= self.early
            sec = int(when)
            self._spec.it_value.tv_sec = sec
            self._spec.it_value.tv_nsec = int((when - sec) * 1e9)
            self._libc.timerfd_settime(  # type: ignore[union-attr]
                self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None
            )
        elif delay <= self.spin:
            self.loop.call_soon(self.callback)
        else:
            self.loop.call_later(delay - self.spin, self.callback)

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
