"""The native core's loop thread keeps its schedule at default scheduling: nice -20 and
a 0.1 ms slice.

At SCHED_OTHER the loop shares its CPU with whatever else the kernel puts there:
the thread that moves its rows and flushes the RunLog, and any other process
allowed on that CPU. Its sends were then late by the time slices of the others:
with one CPU-bound neighbour at the same nice value, send-lag p99 was 27 ms at
60,000 requests/s where SCHED_FIFO keeps 0.1 ms. Two settings of the loop thread
alone, taken at the start of its run, remove that:

* **nice -20** (where allowed: root or CAP_SYS_NICE, or an RLIMIT_NICE that allows
  it) weighs the loop 87 times a nice-0 task, so that a neighbour holds the CPU
  only while the loop sleeps (each still gets at least about 1%: nothing starves,
  unlike under SCHED_FIFO);
* **a 0.1 ms slice** (``sched_setattr``'s ``sched_runtime`` for SCHED_OTHER, the
  EEVDF scheduler of Linux 6.12 and later; ignored before) gives the woken loop an
  earlier deadline than the running task, so its wake-up preempts it at once
  instead of after the other's slice (0.75-3 ms).

The row-moving thread is left as it is: at SCHED_IDLE (tried before) it starved
behind any busy neighbour on its CPU, and the run could not end.

Under SCHED_FIFO (``--realtime``) the loop is left alone: it already preempts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct
import threading
from pathlib import Path

__all__ = ["LOOP_NICE", "LOOP_SLICE_NS", "LoopPriority", "loop_threads"]

LOOP_NICE = -20
LOOP_SLICE_NS = 100_000  # the kernel's shortest custom slice
_LOOP_NAME = "shrink-core"  # the core's loop thread (native/src/lib.rs)
_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "riscv64": 274}
_ATTR = "IIQiIQQQII"  # struct sched_attr, version 1 (56 bytes)


def loop_threads(task_dir: Path = Path("/proc/self/task")) -> list[int]:
    """The thread ids of this process's running core loops (found by their name)."""
    out = []
    with contextlib.suppress(OSError):
        for task in task_dir.iterdir():
            with contextlib.suppress(OSError, ValueError):
                if (task / "comm").read_text().strip() == _LOOP_NAME:
                    out.append(int(task.name))
    return out


def _set_slice(tid: int, nice: int, slice_ns: int) -> bool:
    """SCHED_OTHER with ``nice`` and a slice of ``slice_ns`` for thread ``tid``."""
    number = _SYS_SCHED_SETATTR.get(platform.machine())
    if number is None:
        return False
    attr = ctypes.create_string_buffer(
        struct.pack(_ATTR, struct.calcsize(_ATTR), os.SCHED_OTHER, 0, nice, 0, slice_ns, 0, 0, 0, 0)
    )
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(number, tid, attr, 0) == 0


class LoopPriority:
    """Raises the core's loop thread for a run, from before it starts.

    :meth:`begin`, before the core starts its loop: this thread takes the settings, so
    that the loop thread inherits them from its first send. At the first of the
    core's callbacks (``__call__``) the loop threads get them again (where
    inheritance did not carry the slice) and this thread goes back to its own nice
    value and the default slice; :meth:`end` makes sure of that. ``applied`` holds
    what each loop thread has: ``(nice, slice_ns)``, ``slice_ns`` 0 where no slice
    was set.
    """

    def __init__(self) -> None:
        self.tried = False
        self.applied: dict[int, tuple[int, int]] = {}
        self._own: tuple[int, int] | None = None  # (thread id, its nice before)

    def begin(self) -> None:
        tid = threading.get_native_id()
        try:
            if os.sched_getscheduler(tid) != os.SCHED_OTHER:
                return  # SCHED_FIFO: the core arranges its threads itself
            nice = os.getpriority(os.PRIO_PROCESS, tid)
        except (OSError, AttributeError):
            return
        self._own = (tid, nice)
        raise_loop(tid)

    def __call__(self) -> None:
        if self.tried:
            return
        self.tried = True
        for tid in loop_threads():
            self.applied[tid] = raise_loop(tid)
        self.end()

    def end(self) -> None:
        if self._own is None:
            return
        tid, nice = self._own
        self._own = None
        with contextlib.suppress(OSError):
            if not _set_slice(tid, nice, 0):
                os.setpriority(os.PRIO_PROCESS, tid, nice)


def raise_loop(tid: int) -> tuple[int, int]:
    """Give thread ``tid`` nice -20 (if allowed) and a 0.1 ms slice; what it has after."""
    try:
        if os.sched_getscheduler(tid) != os.SCHED_OTHER:
            return os.getpriority(os.PRIO_PROCESS, tid), 0
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, tid, LOOP_NICE)
        nice = os.getpriority(os.PRIO_PROCESS, tid)
        return nice, LOOP_SLICE_NS if _set_slice(tid, nice, LOOP_SLICE_NS) else 0
    except (OSError, AttributeError):  # the thread ended, or no such call here
        return 0, 0
