"""The driver's wait for a Ray cluster's generator actors (:mod:`shrink.replay.cluster`):
every actor's rows and figures, or why it has none.

A run's stop reaches the actors from here: a stop signal (Ctrl-C, SIGTERM) raised in
the wait, and the run's own stop event (``stop``: its testbed's watch's, set when the
server under test is seen stopped or gone). The actors run in processes of their own,
which neither a signal to the driver nor a multiprocessing event reaches: each is told
to stop (its ``stop`` method, as a signal stops a local engine), and its rows so far
come back within the engine's drain."""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic
from typing import Any

from shrink.replay.engine import EngineConfig, EngineStats
from shrink.replay.ray_local import head_gone
from shrink.runlog import RunLog

__all__ = ["GRACE", "LOOK_S", "STOP_WAIT", "LostGenerator", "collect"]

GRACE = 30.0  # s past a run's horizon before a silent actor counts as lost

STOP_WAIT = 5.0  # s past the engine's drain for a stopped actor to hand back its rows
LOOK_S = 0.1  # s between looks at the run's stop event while an actor runs


@dataclass(frozen=True)
class LostGenerator:
    """A generator slot whose rows did not come back."""

    slot: int
    node: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"slot": self.slot, "node": self.node, "reason": self.reason}


def _stop_event_set(stop: Any, ray: Any, ref: Any, wait_until: float) -> bool:
    """Wait for ``ref`` up to LOOK_S at a time until it is done, the run's ``stop`` event
    is set (True), or ``wait_until`` has passed (without an event: no wait, False)."""
    while stop is not None and not stop.is_set():
        left = wait_until - monotonic()
        if left <= 0:
            return False
        done, _ = ray.wait([ref], num_returns=1, timeout=min(LOOK_S, left))
        if done:
            return False
    return stop is not None


def collect(
    ray: Any,
    actors: list[Any],
    runs: list[Any],
    nodes: list[str],
    wait_until: float,
    config: EngineConfig,
    stop: Any = None,
) -> tuple[list[RunLog], list[EngineStats], list[LostGenerator]]:
    """Every actor's rows and figures, or why it has none (a LostGenerator). A stop signal
    here, or the run's ``stop`` event set, stops every actor as it would a local engine:
    the rows sent so far come back (the stats say ``interrupted``), within the engine's
    drain."""
    tables, stats, lost = [], [], []
    stopping = False

    def stop_all() -> None:
        nonlocal stopping, wait_until
        stopping = True
        for a in actors:
            a.stop.remote()
        wait_until = min(wait_until, monotonic() + config.drain + STOP_WAIT)

    for i, ref in enumerate(runs):
        while True:
            try:
                if (
                    stop is not None
                    and not stopping
                    and _stop_event_set(stop, ray, ref, wait_until)
                ):
                    stop_all()
                table, st = ray.get(ref, timeout=max(1.0, wait_until - monotonic()))
                tables.append(RunLog(table))
                stats.append(st)
            except KeyboardInterrupt:
                if head_gone():
                    raise  # the local cluster's head ended: no actor can answer
                if not stopping:
                    stop_all()
                continue
            except Exception as exc:  # RayActorError, GetTimeoutError, a task error
                reason = type(exc).__name__
                if "Timeout" in reason:
                    ray.kill(actors[i])
                    reason = f"no report within {GRACE:g} s of the run's end"
                lost.append(LostGenerator(i, nodes[i], reason))
            break
    if stopping and not stats:
        raise KeyboardInterrupt
    return tables, stats, lost
