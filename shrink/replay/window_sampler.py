"""The /proc snapshots at a level's window edges (:class:`_WindowSampler`), and another
client seen loading the server meanwhile (:func:`_other_load`); what the window took of
the CPUs is read from them by :mod:`shrink.replay.window_cpu`."""

from __future__ import annotations

import contextlib
import threading
from time import monotonic, sleep

from shrink import interrupts
from shrink.procfs import cpu_seconds, cpu_times, steal_times
from shrink.replay.clients import ClientSampler

__all__ = ["_WindowSampler", "_other_load"]


class _WindowSampler(threading.Thread):
    """Takes /proc/stat snapshots at two monotonic instants (the window's edges); a run
    stopped inside its window ends it at the stop (:meth:`cut`)."""

    def __init__(
        self,
        at: tuple[float, float],
        pids: list[int],
        clients: ClientSampler | None = None,
        spinners: list[int] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.at = at
        self.pids = pids
        self.spinners = spinners or []  # a co-runner share's own SCHED_FIFO spinners
        self.spinner_cpu: list[float] = []
        self.clients = clients  # looks for other clients at the edges and the middle
        self.snaps: list[dict[int, tuple[int, int]]] = []
        self.server_cpu: list[float] = []
        self.steal: list[dict[int, tuple[int, int]]] = []
        self.taken: list[float] = []  # when each snapshot was taken (monotonic)
        self.stop = threading.Event()
        self._cut = False

    def cut(self) -> None:
        """The run was stopped: take the closing snapshot now, not at the planned end."""
        self._cut = True
        self.stop.set()

    def span(self, planned: float) -> float:
        return self.taken[1] - self.taken[0] if self._cut and len(self.taken) == 2 else planned

    def run(self) -> None:
        interrupts.leave_to_loop()
        # /proc refused (no file descriptor left: `ulimit -n`): the window goes unsampled,
        # its utilization unknown, rather than a thread's traceback on stderr.
        with contextlib.suppress(OSError):
            self._sample()

    def _sample(self) -> None:
        mid = (self.at[0] + self.at[1]) / 2
        for t in (self.at[0], mid, self.at[1]):
            while not self.stop.is_set():
                left = t - monotonic()
                if left <= 0:
                    break
                sleep(min(left, 0.05))
            if self.stop.is_set():
                if self._cut and len(self.snaps) == 1:  # the window ends at the stop
                    self._snapshot()
                return
            if self.clients is not None:
                self.clients.look()
            if t != mid:
                self._snapshot()

    def _snapshot(self) -> None:
        self.taken.append(monotonic())
        self.snaps.append(cpu_times())
        self.steal.append(steal_times())
        # a PID that is gone loses its time; the run says which PIDs died
        self.server_cpu.append(cpu_seconds(self.pids))
        if self.spinners:
            self.spinner_cpu.append(cpu_seconds(self.spinners))


def _other_load(sampler: _WindowSampler | None) -> str | None:
    """Another client loading the server beside the run, as the window's looks saw it."""
    clients = sampler.clients if sampler is not None else None
    return clients.problem() if clients is not None else None
