"""The replay engine's contract, stated once: its call, its options, its zero and its stats.

An engine (:func:`shrink.replay.engine.run_schedule`, the native core's
:func:`shrink.replay.native.run_native`, :class:`shrink.replay.fake.FakeEngine`)
is called as ``engine(schedule, config, writer, **options)`` with the keyword
options of :class:`RunOptions`, writes one row per request into ``writer``,
closes it, and returns :class:`EngineStats`. What every engine does the same way
around its loop lives here: when the run's zero is (:func:`zero_time`), whether
it takes SIGINT/SIGTERM/SIGHUP (:func:`wants_signals`), and what it measured
(:func:`run_stats`).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

if TYPE_CHECKING:
    from shrink.replay._config import EngineConfig
    from shrink.replay.writer import RunLogWriter
    from shrink.schedule import Schedule

__all__ = [
    "Engine",
    "EngineStats",
    "RunOptions",
    "StopOn",
    "run_stats",
    "wants_signals",
    "zero_time",
]

# Without t0 or on_ready, the zero is this far after the engine is built.
START_LEAD_S = 0.05


class RunOptions(TypedDict, total=False):
    """An engine's keyword options.

    ``t0``: the monotonic time of the schedule's zero. ``on_ready``: without
    ``t0``, called once the engine is built (request bytes and all); it returns
    the zero (processes of one scaled-out run share it). ``handle_signals``
    (default True): SIGINT/SIGTERM/SIGHUP stop the run early, when run on the main thread.
    ``stop``: an event another thread sets to stop the run early the same way (a
    generator off the main thread: a Ray actor's; a testbed's watch that saw its server
    stopped or gone), checked every 100 ms.
    ``awake``: keep the CPUs the engine may run on from halting for the run, so that
    its timed wake-ups come on time (the native core; see native/src/awake.rs). An
    engine without the means ignores it.
    ``may_poll`` (default True): False when the engine's CPUs are the server's too, where
    a real-time loop must not wait on the clock (that time is taken from the server; the
    native core, otherwise, does under pressure).
    """

    t0: float | None
    on_ready: Callable[[], float] | None
    handle_signals: bool
    stop: threading.Event | Any | None  # (or a multiprocessing Event: forked processes')
    awake: bool
    may_poll: bool


@dataclass
class EngineStats:
    """What the engine process itself measured about the run."""

    t0: float  # monotonic zero of the run
    t0_unix: float  # wall-clock time at t0
    wall: float
    cpu: float  # this process's user + system CPU seconds during the run
    requests: int
    interrupted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # the monotonic instant the run ended, before the engine's clean-up (the native
    # core's wait for its spinners, the GIL held): a stop is counted up to it, not later
    # (None: an engine that does not say)
    ended: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Engine(Protocol):
    """Runs a schedule against ``config.targets``, one row per request into ``writer``."""

    def __call__(
        self, schedule: Schedule, config: EngineConfig, writer: RunLogWriter,
        **options: Unpack[RunOptions],
    ) -> EngineStats: ...  # fmt: skip


@dataclass(frozen=True)
class StopOn:
    """An engine given ``event`` as its ``stop`` option: set, the run stops as on a stop
    signal (its rows so far are kept). A multiprocessing event reaches forked engine
    processes too."""

    engine: Any
    event: Any

    def __call__(self, *args: Any, **options: Any) -> EngineStats:
        return self.engine(*args, **{"stop": self.event, **options})


def zero_time(writer: RunLogWriter, options: RunOptions) -> float:
    """The run's zero: ``t0``, else ``on_ready()``, else 50 ms from now.

    In the last case the collector runs first (tens of ms on a big heap: before
    the zero, not after it). The zero and the wall-clock time it matches go into
    the RunLog's metadata.
    """
    t0 = options.get("t0")
    if t0 is None:
        on_ready = options.get("on_ready")
        if on_ready is not None:
            t0 = on_ready()
        else:
            gc.collect()
            t0 = monotonic() + START_LEAD_S
    writer.meta.update(t0=t0, t0_unix=time.time() - (monotonic() - t0))
    return t0


def wants_signals(options: RunOptions) -> bool:
    """Whether the engine takes SIGINT/SIGTERM/SIGHUP: asked to, and on the main thread."""
    main = threading.current_thread() is threading.main_thread()
    return options.get("handle_signals", True) and main


def stopped_at(at: float | None) -> dict[str, float]:
    """The stats' extra for a run stopped by a signal or its stop event: ``stopped_at``,
    the instant the engine was told to stop (seconds from the run's zero); nothing
    for a run not stopped, whose stats stay as they were."""
    return {} if at is None else {"stopped_at": float(at)}


def run_stats(
    t0: float,
    wall0: float,
    cpu0: os.times_result,
    requests: int,
    *,
    interrupted: bool = False,
    extra: dict[str, Any] | None = None,
) -> EngineStats:
    """The stats of a run that started at ``wall0`` (monotonic) with ``cpu0`` (os.times)."""
    cpu1 = os.times()
    ended = monotonic()
    return EngineStats(
        t0=t0,
        t0_unix=time.time() - (ended - t0),
        wall=ended - wall0,
        cpu=(cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
        requests=requests,
        interrupted=interrupted,
        extra=extra or {},
        ended=ended,
    )
