"""What a scaled-out run's engine processes said of themselves, put together: what
they reported (:class:`EngineRun`), how each ran (from its part's RunLog), and how
those that sent no report ended."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shrink.replay.engine import EngineStats
from shrink.runlog import RunLog

__all__ = ["EngineRun", "parts_say", "say_lost"]


@dataclass
class EngineRun:
    """What the engine processes of one run reported."""

    stats: list[EngineStats]
    t0: float
    cpus: list[int] | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_seconds(self) -> float:
        return sum(s.cpu for s in self.stats)

    @property
    def work_cpu_seconds(self) -> float:
        """:attr:`cpu_seconds` less the time the native loops waited on the clock by
        choice (their ``polled_us``: a real-time loop under pressure waits out its
        send window so, leaving 7% of its CPU's time free): not the generator's
        work, so not a sign that it was saturated."""
        polled = sum(int((s.extra.get("loop") or {}).get("polled_us", 0)) for s in self.stats)
        return max(0.0, self.cpu_seconds - polled / 1e6)

    @property
    def wall(self) -> float:
        return max((s.wall for s in self.stats), default=0.0)

    @property
    def interrupted(self) -> bool:
        return any(s.interrupted for s in self.stats) or bool(self.extra.get("interrupted"))

    @property
    def stopped_at(self) -> float | None:
        """The first instant an engine process was told to stop (seconds from the run's
        zero; None: not stopped, or stopped by an engine that did not record when)."""
        at = [float(a) for s in self.stats if (a := s.extra.get("stopped_at")) is not None]
        return min(at) if at else None

    @property
    def awake_spinners(self) -> int:
        """The spinners that kept the generator's CPUs awake: each reporting process's,
        and those an engine process killed mid-run had started (``lost_spinners``: it
        could not report them, and they spun until it died)."""
        spun = (int((s.extra.get("loop") or {}).get("awake_spinners", 0)) for s in self.stats)
        return sum(spun) + int(self.extra.get("lost_spinners", 0))

    @property
    def awake_groups(self) -> list[str]:
        """The idle cpu cgroups their spinners ran in, the killed processes' too."""
        gs = [g for s in self.stats if (g := s.extra.get("awake_group"))]
        return gs + list(self.extra.get("lost_awake_groups", []))


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


def stopped_alone(
    stats: list[Any], ended: list[tuple[int, str | None]], procs: list[Any]
) -> tuple[list[str], int | None]:
    """The engine processes a stop signal was sent to alone (not to this process), each in
    words, and the first one's signal: a SIGTERM to one of `--processes 2` was said as
    "interrupted: the requests sent so far are kept", exit 130, as a Ctrl-C of the command,
    while the other process ran its part to the end. ``stats``: those that reported, in
    the order of ``procs`` less ``ended``."""
    gone = {i for i, _ in ended}
    reported = [i for i in range(len(procs)) if i not in gone]
    alone = [
        (i, int(sig))
        for i, st in zip(reported, stats, strict=False)
        if getattr(st, "interrupted", False)
        and (sig := (getattr(st, "extra", None) or {}).get("stop_signal")) is not None
    ]
    # (those that ran to the end: "the other process ran its part to the end" was said of
    # each of two processes both sent a signal)
    # (nor those a stop of another kind ended: their stop event, a signal not recorded)
    ran = sum(not getattr(st, "interrupted", False) for st in stats)
    others = len(procs) - 1
    rest = (
        ("the other process ran its part to the end" if ran else "the other one did not")
        if others == 1
        else f"{ran} of the other {others} processes ran theirs to the end"
    )
    said = [
        f"engine process {i} (PID {procs[i].pid}): stopped by {_name(sig)}, sent to it alone "
        f"(not to this command): its part of the load ends there, {rest}"
        for i, sig in alone
    ]
    return said, (alone[0][1] if alone else None)


def _name(sig: int) -> str:
    return signal.Signals(sig).name if sig in set(signal.Signals) else str(sig)
