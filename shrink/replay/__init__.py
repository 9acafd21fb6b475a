"""The replay engine and live measurement.

An asyncio + uvloop HTTP/1.1 client (:mod:`shrink.replay.engine`) replays a
Trace on a schedule (:mod:`shrink.schedule`), one process per generator
core (:mod:`shrink.replay.scaleout`), writing the RunLog incrementally
(:mod:`shrink.replay.writer`) and checking itself (:mod:`shrink.replay.selfcheck`).
The native core (Rust, ``native/``, :mod:`shrink.replay.native`) runs the same
schedule with the same rules, faster; :func:`select_engine` picks one
(``auto``: the core when built). :class:`LiveTarget` puts either behind the
:class:`shrink.target.Target` protocol for sweeps against the testbed.
"""

from __future__ import annotations

from shrink.replay.contract import Engine, EngineStats
from shrink.replay.engine import EngineConfig, run_schedule
from shrink.replay.engine_parts import EngineRun
from shrink.replay.fake import FakeEngine
from shrink.replay.live import LiveTarget
from shrink.replay.native import select_engine
from shrink.replay.scaleout import run_engines, split_sessions
from shrink.replay.selfcheck import generator_check
from shrink.replay.writer import RunLogRow, RunLogWriter
from shrink.schedule import Schedule, build_schedule, open_loop_trace

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineRun",
    "EngineStats",
    "FakeEngine",
    "LiveTarget",
    "RunLogRow",
    "RunLogWriter",
    "Schedule",
    "build_schedule",
    "generator_check",
    "open_loop_trace",
    "run_engines",
    "run_schedule",
    "select_engine",
    "split_sessions",
]
