"""Which CPUs root's testbeds run on, for another user's ``up`` to warn of.

Root records its testbeds in /run/shrink, mode 0711: another user's ``up`` could not
read them, so it started on CPUs a testbed of root's was running on without a word
(root's ``up`` warns of other users' testbeds: :func:`registry.others_running`). Root's
``up`` and ``down`` now also write :data:`SUMMARY`, readable by everyone: for each of
its running testbeds the CPUs, the time it started, and the PIDs and start times of
its servers (what ``ps`` shows every user anyway; a reader counts a testbed only while
one of them still runs as recorded, so one whose servers died is not warned of), and the
PID namespace they were recorded in (a testbed of another one is counted: its PIDs
cannot be looked at from here). No
state file, run folder, configuration or document root is named there. Only a summary
of root's, in root's folder that no one else may write, is read; with /proc mounted
``hidepid``, root's servers cannot be seen and nothing is warned of.

Root's commands with ``SHRINK_RUN_DIR`` set (a run folder of their own) write no
summary. That is by design: the summary is the list of the usual run folder's
testbeds (/run/shrink's), and there is one. Written from another run folder, it would
be replaced by that folder's list (a test's, say), and the testbeds of /run/shrink
would go unwarned of until root's next ``up`` or ``down`` there. A testbed under a run
folder of its own is a world apart for everyone: root's own ``up`` without the
variable does not see it either (it reads only its run folder's records).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shrink import processes as process

if TYPE_CHECKING:
    from collections.abc import Callable

    from shrink.testbed.state import TestbedState

__all__ = ["SUMMARY", "publish", "roots_testbeds"]

SUMMARY = Path("/run/shrink/cpus-in-use.json")
_MAX_BYTES = 1 << 20


def publish(run_dir: Path, running: Callable[[], list[TestbedState]]) -> None:
    """As root, with the usual run folder (``run_dir``): write :data:`SUMMARY` from the
    ``running`` testbeds (never fails the command: a summary not written warns no one).
    From another run folder (``SHRINK_RUN_DIR``), nothing: see the module's notes."""
    from shrink.atomic import write_text
    from shrink.errors import ShrinkError
    from shrink.jsonout import dumps
    from shrink.kept_records import record_only

    if not _as_root() or run_dir != SUMMARY.parent:
        return
    with contextlib.suppress(OSError, ShrinkError):
        beds = []
        for st in running():
            cpus = sorted({c for r in st.replicas for c in r.cpus})
            procs = [[p, r.starttimes.get(p)] for r in st.replicas for p in r.pids]
            bed = {"cpus": cpus, "started": st.started, "processes": procs}
            ns = st.pid_ns
            if ns is not None and ns != process.pid_namespace() and st.elsewhere() is None:
                ns = None  # (its namespace ended: else counted by every reader for good)
            beds.append(bed | ({"pid_ns": ns} if ns else {}))
        write_text(SUMMARY, dumps({"testbeds": beds}) + "\n", perm=0o644)
        # shrink's own bookkeeping: a stopped command said "kept /run/shrink/cpus-in-use.json"
        record_only(SUMMARY)


def roots_testbeds(summary: Path | None = None) -> list[tuple[list[int], str]]:
    """As another user: (CPUs, start time) of each testbed of root's that still runs, from
    root's :data:`SUMMARY`; [] as root (it reads root's records), or when there is none
    to trust (not a plain file of root's in a folder of root's, damaged, too long)."""
    if _as_root():
        return []
    doc = _read(SUMMARY if summary is None else summary)
    out = []
    for bed in doc.get("testbeds", []) if isinstance(doc, dict) else []:
        if not isinstance(bed, dict) or not _valid(bed):
            continue
        # up ran in another PID namespace: its PIDs name other processes here
        elsewhere = type(ns := bed.get("pid_ns")) is int and ns != process.pid_namespace()
        if elsewhere or any(process.is_alive(p, t) for p, t in bed["processes"]):
            out.append((sorted(set(bed["cpus"])), str(bed["started"])))
    return out


def _as_root() -> bool:
    return os.geteuid() == 0


def _valid(bed: dict[str, Any]) -> bool:
    cpus, procs = bed.get("cpus"), bed.get("processes")
    return (
        isinstance(cpus, list)
        and all(type(c) is int and c >= 0 for c in cpus)
        and isinstance(procs, list)
        and all(
            isinstance(p, list)
            and len(p) == 2
            and type(p[0]) is int
            and p[0] > 0
            and (p[1] is None or type(p[1]) is int)
            for p in procs
        )
        and isinstance(bed.get("started"), str)
    )


def _root_only(st: os.stat_result) -> bool:
    return st.st_uid == 0 and not st.st_mode & 0o022


def _read(summary: Path) -> Any:
    """The summary's document, or None: read only from a plain file of root's that no one
    else may write, in a folder of root's that no one else may write (never through a
    symlink, a FIFO, or without end)."""
    import json

    try:
        if not _root_only(os.stat(summary.parent, follow_symlinks=False)):
            return None
        fd = os.open(summary, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _root_only(st):
            return None
        data = f.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None
