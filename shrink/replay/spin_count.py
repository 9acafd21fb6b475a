"""How many spinners an engine process has running, counted by looking at its children.

The native core says how many spinners ran only when it stops them; an engine process
killed mid-run never says it. So each one counts, when it is ready, the spinners that
got going: its children (the spinners are its only ones) that reached a session of
their own (``setsid``, after joining their idle group and dropping to SCHED_IDLE) and
have not exited. One that could not do either exited at once and is a zombie until
the core reaps it: it kept no CPU awake, and is not counted. One still on its way
after :data:`SETTLE_S` is counted."""

from __future__ import annotations

import os
from pathlib import Path
from time import monotonic, sleep

__all__ = ["running_spinners"]

SETTLE_S = 0.05  # the longest wait for a spinner just forked to get going or exit


def _children(pid: int, proc: Path) -> set[int] | None:
    """``pid``'s children, from each of its threads' ``children`` file (None where the
    kernel keeps none)."""
    out: set[int] = set()
    try:
        tasks = os.listdir(proc / str(pid) / "task")
        for tid in tasks:
            text = (proc / str(pid) / "task" / tid / "children").read_text()
            out.update(int(c) for c in text.split())
    except (OSError, ValueError):
        return None
    return out


def _state_and_session(pid: int, proc: Path) -> tuple[str, int] | None:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    f = text.rpartition(")")[2].split()  # state ppid pgrp session ...
    return (f[0], int(f[3])) if len(f) > 3 and f[3].lstrip("-").isdigit() else None


def running_spinners(fallback: int, settle_s: float = SETTLE_S, proc: Path = Path("/proc")) -> int:
    """This process's spinners that got going and still run (see the module's words);
    ``fallback`` where its children cannot be read."""
    me = os.getpid()
    deadline = monotonic() + settle_s
    while True:
        kids = _children(me, proc)
        if kids is None:
            return fallback
        going = pending = 0
        for k in kids:
            got = _state_and_session(k, proc)
            if got is None or got[0] in ("Z", "X"):
                continue  # exited: kept nothing awake
            if got[1] == k:
                going += 1
            else:
                pending += 1  # forked, not yet in its own session
        if not pending or monotonic() >= deadline:
            # (one still on its way, at idle priority on a busy CPU, is taken as going)
            return going + pending
        sleep(0.001)
