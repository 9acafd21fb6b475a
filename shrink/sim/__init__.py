"""A discrete-event simulator of the papers' multi-socket web server.

NIC ports with RSS queues, one event-driven worker per core serving its
connections by processor sharing, PHP processes per core for dynamic requests,
per-class CPU demands, cross-socket penalties and a last-level-cache model
(:mod:`shrink.sim.params` names and sources every parameter). It produces the
same RunLogs and LoadCurves as the live testbed, so every later stage runs on
it unchanged (``SimTarget`` implements :class:`shrink.target.Target`).

Rates are simulated at their real values (146,000 req/s for tcp on 8 cores):
the event loop does about 240,000 requests per second of wall time, so no
time scaling is needed; only the Support workload's think times are compressed
(:mod:`shrink.sim.workloads` says why and by how much).
"""

from shrink.sim.params import SimParams
from shrink.sim.scaling import THRESHOLDS, compare_mappings, find_mats, scaling
from shrink.sim.target import SimTarget
from shrink.sim.workloads import support_trace, tcp_trace

__all__ = [
    "THRESHOLDS",
    "SimParams",
    "SimTarget",
    "compare_mappings",
    "find_mats",
    "scaling",
    "support_trace",
    "tcp_trace",
]
