"""What a scaled-out run's engine processes said of themselves, put together: how each
ran (from its part's RunLog), and how those that sent no report ended."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Sequence
from typing import Any

from shrink.runlog import RunLog

__all__ = ["parts_say", "say_lost"]


def parts_say(logs: Sequence[RunLog]) -> dict[str, Any]:
    """What each engine process recorded of how it ran (its engine, its CPUs kept
    awake, the idle cpu cgroup its spinners ran in: one of each process's own): the
    value they agree on, else each part's in turn."""
    out: dict[str, Any] = {}
    for key in ("engine", "awake", "awake_group"):
        said = [log.meta.get(key) for log in logs]
        if any(v is not None for v in said):
            out[key] = said[0] if all(v == said[0] for v in said) else said
    return out


def say_lost(
    ended: list[tuple[int, str | None]], procs: list[Any], started: list[dict[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    """The engine processes that sent no result, each in words: its error, or, when it
    ended without a word, how it ended (``kill -9``: killed by SIGKILL); and the spinners
    and idle cgroups those had started, which no report counts."""
    said: list[str] = []
    lost: dict[str, Any] = {}
    for i, error in ended:
        if error is not None:
            said.append(f"engine process {i} (PID {procs[i].pid}): {error}")
            continue
        code = procs[i].exitcode
        how = "exited" if code is None or code >= 0 else f"killed by signal {-code}"
        with contextlib.suppress(ValueError):  # (a real-time signal has no name)
            how = (
                f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else how
            )
        said.append(f"engine process {i} (PID {procs[i].pid}): {how} without a report")
        lost["lost_spinners"] = lost.get("lost_spinners", 0) + int(started[i].get("spinners", 0))
        if group := started[i].get("group"):
            lost.setdefault("lost_awake_groups", []).append(group)
    return said, lost
