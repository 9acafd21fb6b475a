"""A generator that did not run: stopped (SIGSTOP, Ctrl-Z) or frozen during a run.

Stopped past its horizon and continued, the engine ends at once: the requests due
meanwhile are neither sent nor late, and the level measured a fraction of its load
with a small send lag, unflagged. A thread that wakes every 50 ms sees the gap.

Stopped for less, the sends due meanwhile go out late when it goes on, and with its
send thread not waiting on a run queue the lateness read as the host's (a virtual CPU
not run). A stop is told from a frozen process or a paused VM by the SIGCONT that
ends it (:class:`Continued`), or by the spinners that keep the CPUs awake, which
watch this process's state and sleep while it is stopped (native/src/awake.rs).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from dataclasses import replace
from time import monotonic
from types import TracebackType
from typing import Any

from shrink import interrupts
from shrink.procfs import run_queue_wait_us
from shrink.target import GeneratorCheck

__all__ = [
    "STOPPED_GAP",
    "Continued",
    "StopWatch",
    "flag_if_stopped",
    "note_stop",
    "stopped_for",
    "zero_watch",
]


# A gap this long between a watcher's wake-ups (50 ms apart) is a process that did not
# run: stopped (SIGSTOP, Ctrl-Z) or frozen, never a busy CPU (its fair share comes at
# least every 50 ms; the send thread is SCHED_FIFO only on a CPU of its own).
STOPPED_GAP = 1.0


class StopWatch(threading.Thread):
    """The longest time this process did not run during a run. A generator stopped past
    its horizon and continued ends at once: the requests due meanwhile are neither sent
    nor late, and the level measured a fraction of its load, unflagged.

    It watches until told to ``stop``, and counts a gap up to the engine's own end
    (:meth:`ended`), not the planned horizon: a stop that spans the horizon is a stop
    (the sends due meanwhile never went), while the wait after the engine returned
    (the native core's for its spinners, the GIL held, 17 s under load) is not."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.end: float | None = None  # the engine's own end, once known
        self.late = 0.0  # missed before the watcher started (see zero_watch)
        self.stop = threading.Event()
        self._short = 0.0  # the longest of the gaps not kept below
        # the gaps of more than a moment: (from, to, seconds on a run queue meanwhile)
        self._gaps: list[tuple[float, float, float]] = []

    def ended(self, at: float | None) -> StopWatch:
        """The engine's own end (the monotonic instant it returned, before its clean-up;
        None: not known, every gap counts): no gap is counted past it."""
        self.end = at
        return self

    @property
    def gap(self) -> float:
        """The longest time between two wake-ups, up to the engine's end."""
        return max([self._short, *(b - a for a, b, _ in self._cut())])

    @property
    def missed(self) -> float:
        """The time of all the gaps past a wake-up's (this one's 50 ms), less their
        time on a run queue, up to the engine's end."""
        # Not the time it waited for a CPU (load, a CPU quota's throttling): a busy host
        # plus a SIGCONT to a running shrink (``fg`` of a background job sends one) read
        # as a stop, and the late sends were blamed on it.
        return self.late + sum(max(0.0, b - a - 0.05 - q) for a, b, q in self._cut())

    def _cut(self) -> list[tuple[float, float, float]]:
        end = self.end
        if end is None:
            return self._gaps
        return [(a, min(b, end), q) for a, b, q in self._gaps if a < end]

    def run(self) -> None:
        interrupts.leave_to_loop()
        last, waited = monotonic(), _run_delay()
        while not self.stop.wait(0.05):
            now, wait = monotonic(), _run_delay()
            if now - last > 0.15:
                queued = wait - waited if wait is not None and waited is not None else 0.0
                self._gaps.append((last, now, queued))
            else:
                self._short = max(self._short, now - last)
            last, waited = now, wait


def zero_watch(t0: float) -> StopWatch:
    """A watcher of a run whose zero ``t0`` this process was just told (not started): a
    stop that held it past the zero (Ctrl-Z in the moment between the parent's choosing it
    and this process's reading it) is counted as missed from the zero on, since the run's
    first sends went out that late; the watcher itself sees only what comes after."""
    watch = StopWatch()
    late = monotonic() - t0
    if late > 0.15:  # (as the watcher's own wake-ups: a moment's lateness is no stop)
        watch.late = late
    return watch


def _run_delay() -> float | None:
    """The seconds this thread has waited on a run queue (None where the kernel does not
    say). A stopped or frozen thread is on none."""
    us = run_queue_wait_us()
    return None if us is None else us / 1e6


class Continued:
    """Counts the SIGCONTs this process gets while entered (each ends a stop: Ctrl-Z,
    SIGSTOP); ``count`` None where it cannot be known (a handler is set in the main
    thread only). The kernel continues the process whatever the handler."""

    def __init__(self) -> None:
        self.count: int | None = None
        self._old: Any = None

    def _note(self, signum: int, frame: Any) -> None:
        self.count = (self.count or 0) + 1
        if callable(self._old) and self._old not in (signal.SIG_DFL, signal.SIG_IGN):
            self._old(signum, frame)

    def __enter__(self) -> Continued:
        if threading.current_thread() is threading.main_thread():
            try:
                self._old = signal.signal(signal.SIGCONT, self._note)
                self.count = 0
            except (ValueError, OSError):
                self.count = None
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.count is not None:
            signal.signal(signal.SIGCONT, self._old)


def stopped_for(stats: Iterable[Any], missed: float, continued: int | None) -> float:
    """The seconds the generator is known to have been stopped in a run: this process's
    watcher's ``missed`` time when a SIGCONT came, else the most its engines' spinners
    saw (``stats``: their EngineStats; 0: none known; a gap without a SIGCONT is a frozen
    process or a paused host, said as such). The spinners run at nice 19 (or in an idle
    group) and look at the process's state every 65,536 turns: under load they see a
    stop only from their next turn on, and count its end at their first turn after it.
    A 0.8 s stop was said to be 0.28 s, and 11 s. The watcher measures the gap in its own
    wake-ups, less its wait on a run queue; the spinners alone see a stop that came
    before it started."""
    if continued and missed > 0:
        return missed
    return max((_loop(st).get("stopped_us", 0) for st in stats), default=0) / 1e6


def note_stop(stats: Any, watch: list[StopWatch], continued: int | None) -> Any:
    """An engine process's ``stats`` with the time it is known to have been stopped
    (:func:`stopped_for`, from its own ``watch`` and SIGCONTs) as its loop's
    ``stopped_us``: its parent's watcher cannot tell (the engine processes may run on
    while the parent alone is stopped), and a Ctrl-Z in a `--processes 2` run was said to
    be a send lag with "other work on its CPU" to blame."""
    if not watch:
        return stats  # stopped before the run's zero
    watch[0].stop.set()
    watch[0].ended(getattr(stats, "ended", None))  # (not through the spinners' wait after)
    stopped = stopped_for([stats], watch[0].missed, continued)
    if stopped <= 0:
        return stats
    loop = {**_loop(stats), "stopped_us": int(stopped * 1e6)}
    return replace(stats, extra={**(getattr(stats, "extra", None) or {}), "loop": loop})


def _loop(stats: Any) -> dict[str, Any]:
    """An engine run's loop counts (none for an engine that keeps none)."""
    return dict(((getattr(stats, "extra", None) or {}).get("loop")) or {})


def flag_if_stopped(
    check: GeneratorCheck, gap: float, inline: bool, stopped: float = 0.0
) -> GeneratorCheck:
    """``check`` flagged behind when this process, running the engine (``inline``), did
    not run for longer than :data:`STOPPED_GAP` (``stopped``: the seconds it is known to
    have been stopped, see :func:`stopped_for`). The spinners' count is a gap too: a
    stop before the watcher started (between the engine's zero and its first wake-up,
    when the engine then ran out its horizon at once) is seen by them alone."""
    gap = max(gap, stopped)
    if gap <= STOPPED_GAP or not inline or check.behind:
        return check
    why = (
        f"shrink itself was stopped (by a signal or job control) for {stopped:.1f} s"
        if stopped > 0
        else f"the generator did not run for {gap:.1f} s (stopped, or frozen)"
    )
    return replace(check, behind=True, reason=why)
