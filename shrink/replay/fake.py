"""An in-memory fake of the replay engine (:class:`shrink.replay.contract.Engine`).

:func:`shrink.replay.engine.run_schedule` is the real engine. :class:`FakeEngine`
plays the same schedule with the same session rules (first request alone,
embedded requests over N connections, think time) against an imaginary server
of unlimited capacity and fixed per-class service times, instantly and without
sockets, so that the code around the engine (partitioning, merging, windows,
self-check) can be tested deterministically.
"""

from __future__ import annotations

from typing import Unpack

from shrink.replay._config import EngineConfig
from shrink.replay.contract import EngineStats, RunOptions, zero_time
from shrink.replay.writer import RunLogRow, RunLogWriter
from shrink.schedule import Schedule, session_hash

__all__ = ["FakeEngine"]


class FakeEngine:
    """Every request takes ``service[cls]`` seconds; nothing queues, nothing fails."""

    def __init__(self, service: dict[str, float] | None = None) -> None:
        self.service = service or {"static": 0.001, "dynamic": 0.005}

    def __call__(
        self, schedule: Schedule, config: EngineConfig, writer: RunLogWriter,
        **options: Unpack[RunOptions],
    ) -> EngineStats:  # fmt: skip
        t0 = zero_time(writer, options)
        svc = (self.service.get("static", 0.001), self.service.get("dynamic", 0.005))
        n = len(config.targets)
        codes = [writer.targets.code(f"{a}:{p}") for a, p in config.targets]
        cls = schedule.cls_of_row
        count = 0

        def row(row: int, session: int, tidx: int, start: float) -> float:
            nonlocal count
            done = start + svc[int(cls[row])]
            writer.add(RunLogRow(start, start, done, done, 200, 0, int(cls[row]), session,
                                 codes[tidx], 0, start))  # fmt: skip
            count += 1
            return done

        if schedule.mode == "open":
            route = session_hash(schedule.open_sessions, 1) % n
            for t, r, s, k in zip(
                schedule.times, schedule.rows, schedule.open_sessions, route, strict=True
            ):
                row(int(r), int(s), int(k), float(t))
        else:
            ids = schedule.session_ids
            route = session_hash(ids, 1) % n if ids else []
            for sid, start, plan, k in zip(
                ids, schedule.session_start, schedule.session_bursts, route, strict=True
            ):
                t = float(start)
                for first, end, think in plan:
                    if t >= schedule.end:
                        break
                    ready = row(first, sid, int(k), t)
                    slots = [ready] * config.conns_per_session
                    for r in range(first + 1, end):
                        i = min(range(len(slots)), key=slots.__getitem__)
                        slots[i] = row(r, sid, int(k), slots[i])
                    t = max(slots) + think
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=0.0, cpu=0.0, requests=count)
