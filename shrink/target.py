"""The Target protocol: something that runs a trace at a load level and measures it.

Three kinds implement it: the live testbed driven by the replay engine
(:mod:`shrink.replay`), the simulator (:mod:`shrink.sim`), and :class:`FakeTarget`
below, a tiny in-process queue for unit tests of later stages.

A run replays ``trace`` with session start times divided by ``rate_factor``; what
is measured are the requests whose *intended* send time falls in the measurement
window ``[warmup, warmup + duration)`` seconds after the run's start (the first
``warmup`` seconds fill the system).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from shrink.runlog import RunLog
from shrink.schedule import build_schedule
from shrink.trace import Trace

if TYPE_CHECKING:
    from shrink.replay.cluster import ClusterSpec

__all__ = ["FakeTarget", "GeneratorCheck", "GeneratorPlacement", "RunResult", "Target"]


@dataclass(frozen=True)
class GeneratorCheck:
    """The load generator's self-check: did it keep to its schedule?"""

    intended_rate: float
    achieved_rate: float
    send_lag_p50: float
    send_lag_p99: float
    send_lag_max: float
    cpu: float | None = None  # generator CPU seconds per wall second, summed over its cores
    behind: bool = False
    reason: str = ""
    # The send thread's time on this machine's run queue over the run's time (the most
    # over the generator's processes; None: the engine does not say).
    thread_wait: float | None = None
    # The seconds the generator's process is known to have been stopped (a signal, job
    # control) during the run (None: none known).
    stopped: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GeneratorPlacement:
    """Where and how the load generator runs: its CPUs on this machine (None: the testbed
    keeps the lowest CPU, a replay every CPU off the share's), whether it may share the
    server's CPUs (a core subset on a small machine), its send thread's SCHED_FIFO
    priority (0: normal; None: SCHED_FIFO as root on CPUs the server does not use, see
    :func:`shrink.replay.scaleout.default_realtime`), its engine processes (None: one per
    CPU), the engine (``auto``, ``native``, ``python`` or a stand-in such as
    :class:`shrink.replay.fake.FakeEngine`; None: ``auto``), or Ray actors on a
    ``cluster`` instead (:mod:`shrink.replay.cluster`), and the send-lag p99 past which
    a run is behind (seconds; None: :data:`shrink.replay.selfcheck.LAG_LIMIT`), and whether
    the generator's CPUs are kept awake for a run (None: as
    :func:`shrink.replay.scaleout.default_awake` picks), and an event that stops a run
    early as a stop signal does (a testbed's watch sets it; not on a ``cluster``)."""

    cpus: tuple[int, ...] | None = None
    allow_overlap: bool = False
    realtime: int | None = None
    processes: int | None = None
    engine: Any = None
    cluster: ClusterSpec | None = None
    lag_limit: float | None = None
    awake: bool | None = None
    stop: Any = None


@dataclass
class RunResult:
    """One run at one load level."""

    runlog: RunLog
    window: tuple[float, float]
    generator: GeneratorCheck
    # Busy fraction of what the share may use (a 25% CPU-time share busy 25% -> 1.0).
    utilization: float | None = None
    per_cpu_utilization: dict[int, float] = field(default_factory=dict)
    describe: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Target(Protocol):
    """Runs a trace at a load level (live testbed, simulator, fake)."""

    def describe(self) -> dict[str, Any]:
        """Machine, mapping, share and versions: recorded in every result file."""
        ...

    def run(
        self,
        trace: Trace,
        *,
        rate_factor: float,
        warmup: float,
        duration: float,
        seed: int,
    ) -> RunResult:
        """Replay ``trace`` sped up by ``rate_factor``; measure ``[warmup, warmup+duration)``."""
        ...


class FakeTarget:
    """An in-process FIFO multi-server queue with exponential per-class demands.

    For unit tests only: deterministic for a seed, instant, no sockets. Every
    request is sent at its burst's scaled ``t`` (pure open loop: the trace planned
    in open mode by :func:`shrink.schedule.build_schedule`, one pass).
    """

    def __init__(
        self,
        *,
        servers: int = 1,
        demand: dict[str, float] | None = None,
        generator_capacity: float = float("inf"),
    ) -> None:
        self.servers = servers
        self.demand = demand or {"static": 0.001, "dynamic": 0.005}
        self.generator_capacity = generator_capacity

    def describe(self) -> dict[str, Any]:
        return {"target": "fake", "servers": self.servers, "demand": self.demand}

    def run(
        self, trace: Trace, *, rate_factor: float, warmup: float, duration: float, seed: int
    ) -> RunResult:
        rng = np.random.default_rng(seed)
        horizon = warmup + duration
        sched = build_schedule(trace, rate_factor, horizon, mode="open", loop=False)
        keep = sched.times < horizon  # a pass includes its horizon; the window does not
        idx, intended = sched.rows[keep], sched.times[keep]
        cls = np.asarray(trace.table.column("cls").take(idx).to_pylist(), dtype=object)
        means = np.array([self.demand.get(c, self.demand["static"]) for c in cls])
        service = rng.exponential(means)
        rate = len(intended) / (warmup + duration) if len(intended) else 0.0
        behind = rate > self.generator_capacity
        sent = intended.copy()
        if behind:  # a generator that cannot keep up sends late, evenly spaced
            sent = np.maximum(intended, np.arange(len(intended)) / self.generator_capacity)
        done = np.asarray(_fifo_done(sent.tolist(), service.tolist(), self.servers), np.float64)
        sessions = trace.table.column("session").take(idx).to_numpy()
        log = RunLog.from_columns(
            {
                "intended": intended,
                "sent": sent,
                "first_byte": done,
                "done": done,
                "status": np.full(len(idx), 200, np.int32),
                "bytes": np.full(len(idx), 1024, np.int64),
                "cls": cls,
                "session": sessions,
                "target": ["fake:0"] * len(idx),
                "error": [""] * len(idx),
            },
            meta={"target": "fake", "rate_factor": rate_factor, "seed": seed},
        )
        lag = sent - intended
        window = (warmup, warmup + duration)
        in_win = (intended >= window[0]) & (intended < window[1])
        busy = float(np.sum(service[in_win])) / (duration * self.servers) if duration else 0.0
        gen = GeneratorCheck(
            intended_rate=float(in_win.sum() / duration) if duration else 0.0,
            achieved_rate=float(((sent >= window[0]) & (sent < window[1])).sum() / duration),
            send_lag_p50=float(np.quantile(lag, 0.5)) if lag.size else 0.0,
            send_lag_p99=float(np.quantile(lag, 0.99)) if lag.size else 0.0,
            send_lag_max=float(lag.max()) if lag.size else 0.0,
            behind=bool(behind),
            reason="offered rate above generator capacity" if behind else "",
        )
        return RunResult(log, window, gen, utilization=min(1.0, busy), describe=self.describe())


def _fifo_done(sent: list[float], service: list[float], servers: int) -> list[float]:
    """Completion times of a FIFO queue with ``servers`` servers: each request starts on
    the server free first (the lowest index among ties) at ``max(sent, free)``.

    A heap of (free time, server) in plain floats: a test replays hundreds of thousands
    of requests through this fake, and a numpy call per request was most of its time."""
    if servers == 1:  # one server needs no heap
        free, done = 0.0, []
        for s, d in zip(sent, service, strict=True):
            free = max(s, free) + d
            done.append(free)
        return done
    heap = [(0.0, k) for k in range(servers)]
    done = []
    for s, d in zip(sent, service, strict=True):
        free, k = heapq.heappop(heap)
        end = max(s, free) + d
        heapq.heappush(heap, (end, k))
        done.append(end)
    return done
