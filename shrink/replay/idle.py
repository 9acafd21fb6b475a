"""A server's processes idle before a level starts (:func:`wait_idle`)."""

from __future__ import annotations

from time import monotonic, sleep

from shrink.procfs import proc_info

__all__ = ["wait_idle"]


def _running(pids: list[int]) -> list[int]:
    """The PIDs that are on a CPU or in uninterruptible sleep (state R or D)."""
    return [p for p in pids if (i := proc_info(p)) is not None and i.state in ("R", "D")]


def wait_idle(pids: list[int], bound: float, *, checks: int = 3) -> tuple[float, bool]:
    """Wait until none of the server's ``pids`` runs (``checks`` looks in a row, 5 ms
    apart), at most ``bound`` seconds. Returns (seconds waited, idle).

    A level must start on an idle server: a PHP request the last level abandoned
    (the client timed out) would otherwise still hold a php-cgi child and its CPU.
    """
    start = monotonic()
    quiet = 0
    while True:
        quiet = quiet + 1 if not _running(pids) else 0
        if quiet >= checks:
            return monotonic() - start, True
        if monotonic() - start >= bound:
            return monotonic() - start, False
        sleep(0.005 if quiet else 0.05)
