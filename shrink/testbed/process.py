"""The testbed's processes: started pinned, tracked and stopped by PID.

The mechanism lives in :mod:`shrink.processes`, below both the testbed and the
share's enforcers (a co-runner starts and stops its spinners the same way), so
that neither has to import the other.
"""

from __future__ import annotations

from shrink.processes import (
    ProcInfo,
    allowed_cpus,
    children_map,
    cpu_seconds,
    descendants,
    die_with_parent,
    is_alive,
    proc_info,
    start_process,
    stop_processes,
)

__all__ = [
    "ProcInfo",
    "allowed_cpus",
    "children_map",
    "cpu_seconds",
    "descendants",
    "die_with_parent",
    "is_alive",
    "proc_info",
    "start_process",
    "stop_processes",
]
