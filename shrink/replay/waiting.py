"""The thread that waits for a scaled-out run's engine processes (:func:`let_go`,
:func:`waiting_above`)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from time import monotonic
from typing import Any

from shrink import interrupts

__all__ = ["SILENT_PAST_END", "STOPPED_PAST_END", "let_go", "reap", "waiting_above"]

STOPPED_PAST_END = (
    "stopped (SIGSTOP or SIGTSTP) past the run's end and its requests' timeout: killed"
)
# Past the run's end and its requests' timeout a process has only its part's last rows
# and footer to write (the rows before went out in row groups during the run): one that
# writes not a byte (its /proc/PID/io wchar) for this long is hung, not writing.
QUIET_PAST_END_S = 60.0
SILENT_PAST_END = (
    "running past the run's end and its requests' timeout without a report, and writing "
    "nothing for {quiet:g} s: hung, killed"
)
# Where its writes cannot be read (/proc/PID/io refused, or a kernel without
# CONFIG_TASK_IO_ACCOUNTING), its CPU time is the sign (/proc/PID/stat: writing its part
# takes some); where neither can be read, a bound on the wall time past the deadline.
IDLE_PAST_END = (
    "running past the run's end and its requests' timeout without a report, and using "
    "no CPU time for {quiet:g} s (its writes cannot be read, /proc/PID/io): hung, killed"
)
WALL_PAST_END_S = 600.0
BUSY_PAST_END = (
    "running {wall:g} s past the run's end and its requests' timeout without a report, "
    "using CPU time but its writes cannot be read (/proc/PID/io): taken for hung (a busy "
    "loop), killed"
)
UNSEEN_PAST_END = (
    "running {wall:g} s past the run's end and its requests' timeout without a report, "
    "and nothing of its progress can be read (/proc/PID/io, /proc/PID/stat): taken for "
    "hung, killed"
)


@contextlib.contextmanager
def waiting_above(realtime: int) -> Iterator[None]:
    """The calling thread, which waits for the engine processes, SCHED_FIFO one step above
    their ``realtime`` inside (nothing at 0), as it was after: a stop signal sent to this
    process alone is passed on at once. At normal priority beside real-time engines on
    every CPU it may use, it passed one on up to 21 ms late, and they sent on meanwhile.
    It sleeps but for a signal or an engine's report. Without CAP_SYS_NICE, as before."""
    old = (os.sched_getscheduler(0), os.sched_getparam(0))
    top = os.sched_get_priority_max(os.SCHED_FIFO)
    raised = False
    if realtime > 0:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(min(realtime + 1, top)))
            raised = True
    try:
        yield
    finally:
        if raised:
            os.sched_setscheduler(0, old[0], old[1])


def let_go(
    pipes: Sequence[Any],
    procs: Sequence[Any],
    realtime: int,
    on_start: Callable[[float], Any] | None,
    deadline_s: float | None = None,
) -> tuple[float, list[Any], list[tuple[int, str | None]], bool]:
    """Send the engine processes (ready, on ``pipes``) the run's zero and wait for each one's
    report: (the zero, the stats of those done, (index, what it said) of the others, whether
    a stop signal came to this process meanwhile).

    A process found stopped (SIGSTOP, SIGTSTP) ``deadline_s`` after the zero, when its run
    and its last request's timeout are over, is killed and said so: this process waited
    for its report for ever, and a 4 s replay hung (50 s, until it was killed). So is one
    running past that time that writes nothing (no byte, its ``wchar``) for
    ``QUIET_PAST_END_S``: one that writes its part is waited for as long as it writes.
    Where its writes cannot be read, one using no CPU time for as long is, and one still
    running ``WALL_PAST_END_S`` past that time, CPU time or not (a busy loop uses it);
    so is one of which neither can be read (:class:`_Quiet`)."""
    stats: list[Any] = []  # (EngineStats)
    ended: list[tuple[int, str | None]] = []  # (None: it ended without a word)
    stopped = False  # a stop signal came to this process
    # (above them before they are let go: else a real-time engine on this CPU runs first)
    with waiting_above(realtime):  # (a signal to this process, passed on at once)
        t0 = monotonic() + 0.1
        if on_start is not None:
            on_start(t0)
        for pipe in pipes:
            pipe.send(t0)
        for i, pipe in enumerate(pipes):
            quiet = _Quiet(procs[i].pid)
            while True:
                try:
                    if deadline_s is None or pipe.poll(0.25):
                        kind, payload = pipe.recv()
                        break
                    if monotonic() > t0 + deadline_s and (said := quiet.hung()) is not None:
                        os.kill(procs[i].pid, signal.SIGKILL)
                        kind, payload = _last_word(pipe, said)
                        break
                except KeyboardInterrupt:
                    stopped = True
                    # A terminal's Ctrl-C reaches the children too; a signal sent to this
                    # process alone must stop them as well: the one it took, which they
                    # take too (a SIGINT, ignored by a script's background job and so by
                    # them, left a SIGTERM'd run going to its end). Then wait for their rows.
                    for proc in procs:
                        if proc.pid is not None and proc.is_alive():
                            os.kill(proc.pid, interrupts.received())
                    continue
                except EOFError:
                    kind, payload = "lost", None
                    break
            if kind == "done":
                stats.append(payload)
            else:
                ended.append((i, payload))
    return t0, stats, ended, stopped


def reap(procs: Sequence[Any], wait_s: float = 10.0) -> None:
    """Wait up to ``wait_s`` for each engine process to exit, once let go and heard from;
    one stopped (SIGSTOP) after its report is killed: left stopped, the run waited for
    it 10 s, then hung at its exit (Python's exit terminates and joins its processes,
    and a stopped one does not end on SIGTERM)."""
    for proc in procs:
        end = monotonic() + wait_s
        while proc.is_alive() and monotonic() < end:
            if _stopped(proc.pid):
                proc.kill()  # (its part was written and closed before its report)
            proc.join(timeout=0.05)


def _last_word(pipe: Any, said: str) -> tuple[str, Any]:
    """What a process killed as hung had sent: a report that came between the last look
    at its pipe and the kill (its part written whole) was lost, and the process said
    hung; else ("lost", ``said``)."""
    try:
        if pipe.poll(0):
            kind, payload = pipe.recv()
            return kind, payload
    except (EOFError, OSError, ValueError):  # (a report cut by the kill)
        pass
    return "lost", said


class _Quiet:
    """Whether an engine process past the deadline is to be killed: stopped, or making no
    progress for ``QUIET_PAST_END_S`` (what to say of it then, else None). Its progress is
    the bytes it writes; where they cannot be read, its CPU time, within
    ``WALL_PAST_END_S`` (a busy loop moves it for ever); where neither can be read, it is
    given ``WALL_PAST_END_S``."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.seen: tuple[str, int] | None = None
        self.since = 0.0
        self.first: float | None = None

    def hung(self) -> str | None:
        if _stopped(self.pid):
            return STOPPED_PAST_END
        now = monotonic()
        if self.first is None:
            self.first = now
        seen = _progress(self.pid)
        if seen is None:
            if self.pid is not None and now - self.first >= WALL_PAST_END_S:
                return UNSEEN_PAST_END.format(wall=WALL_PAST_END_S)
            return None
        if seen[0] == "cpu" and self.pid is not None and now - self.first >= WALL_PAST_END_S:
            # CPU time moves in a busy loop too: a hung one spinning was waited for ever
            return BUSY_PAST_END.format(wall=WALL_PAST_END_S)
        if seen != self.seen:
            self.seen, self.since = seen, now
            return None
        if now - self.since < QUIET_PAST_END_S:
            return None
        said = SILENT_PAST_END if seen[0] == "written" else IDLE_PAST_END
        return said.format(quiet=QUIET_PAST_END_S)


def _progress(pid: int | None) -> tuple[str, int] | None:
    """Process ``pid``'s sign of progress: ("written", its bytes written), else ("cpu",
    its CPU ticks), else None."""
    written = _written(pid)
    if written is not None:
        return "written", written
    ticks = _cpu_ticks(pid)
    return None if ticks is None else ("cpu", ticks)


def _cpu_ticks(pid: int | None) -> int | None:
    """Process ``pid``'s CPU time so far, user and system, in clock ticks (/proc/PID/stat),
    or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # (utime, stime: the stat's 14th and 15th)
    except (OSError, ValueError, IndexError):
        return None


def _written(pid: int | None) -> int | None:
    """Bytes process ``pid`` has written so far (``wchar`` of /proc/PID/io), or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            for line in f:
                if line.startswith(b"wchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped by a signal now (``T`` in /proc/PID/stat)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state == b"T"
