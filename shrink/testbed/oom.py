"""Whether a server process that is gone was killed by the kernel's OOM killer.

A server the OOM killer ended was reported as "crashed or killed", which sends the user
to its error log; the cure is memory. Two witnesses are read, as facts:

- the replica's cgroup: ``oom_kill`` in ``memory.events`` (v2) or ``memory.oom_control``
  (v1), the processes of that group the OOM killer ended (a group shrink made for this
  testbed, so any there are this server's);
- the kernel log (``/dev/kmsg``, root's): ``Killed process PID (name)`` or
  ``oom-kill:...,pid=PID,``, no earlier than the process started (a PID is reused),
  in a record of the kernel's own (facility 0): a line written to /dev/kmsg from user
  space, or forwarded there by a logger (journald's ForwardToKMsg), is given another
  facility by the kernel, so no user can make a crash read as an OOM kill.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "cgroup_oom_kills",
    "dead_problem",
    "kernel_oom_kills",
    "oom_evidence",
    "replicas_gone",
]

KMSG = "/dev/kmsg"
# The most of the kernel log read (records); its ring buffer holds far fewer.
_MAX_RECORDS = 100_000
_KILLED = re.compile(r"(?:Killed process |oom-kill:.*\bpid=)(\d+)")


def _count(path: Path) -> int:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def cgroup_oom_kills(folders: Iterable[str | Path]) -> int:
    """Processes the OOM killer ended in these cgroup folders, by their own count."""
    total = 0
    for folder in {str(f) for f in folders}:
        total += max(_count(Path(folder) / "memory.events"),
                     _count(Path(folder) / "memory.oom_control"))  # fmt: skip
    return total


def _records(kmsg: str | Path) -> Iterator[str]:
    """The kernel log's records as they are now (each read of /dev/kmsg is one record);
    none where it cannot be read (not root, no /dev/kmsg)."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for _ in range(_MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return  # the end of the log
            except OSError as exc:  # EPIPE: a record overwritten while read; go on
                if exc.errno == errno.EPIPE:
                    continue
                return
            if not record:
                return
            yield record.decode("utf-8", "replace")
    finally:
        os.close(fd)


def _from_kernel(priority: str) -> bool:
    """Whether a record's syslog priority (facility * 8 + level) is the kernel's: the
    kernel gives a record written to /dev/kmsg from user space facility LOG_USER at
    least, to tell injected records from its own."""
    return priority.isdigit() and int(priority) >> 3 == 0


def kernel_oom_kills(started: Mapping[int, float], kmsg: str | Path = KMSG) -> set[int]:
    """Which of the PIDs in ``started`` (PID: seconds since boot it started at) the
    kernel log says the OOM killer ended after they started."""
    found: set[int] = set()
    if not started:
        return found
    for record in _records(kmsg):
        head, _, message = record.partition(";")
        m = _KILLED.search(message)
        if m is None or (pid := int(m.group(1))) not in started:
            continue
        fields = head.split(",")  # priority, sequence, microseconds since boot, flags
        if not _from_kernel(fields[0]):
            continue
        at = int(fields[2]) / 1e6 if len(fields) > 2 and fields[2].isdigit() else None
        if at is None or at >= started[pid] - 1.0:
            found.add(pid)
    return found


def _folders(replica: Any) -> list[str]:
    """The cgroup folders shrink made for a replica (its own, and its enforcer's)."""
    out: list[str] = []
    enforce = replica.enforce if isinstance(replica.enforce, Mapping) else {}
    for cg in (replica.cgroup, enforce.get("cgroup")):
        if isinstance(cg, Mapping) and isinstance(cg.get("dirs"), Mapping):
            out += [str(d) for d in cg["dirs"].values() if d]
    return out


def oom_evidence(replica: Any, dead: list[int]) -> tuple[set[int], str] | None:
    """Of a replica's ``dead`` PIDs, those the OOM killer ended and what says so; None
    if nothing does. A cgroup's count names no PID: then every dead one is meant."""
    ticks = os.sysconf("SC_CLK_TCK")
    started = {p: replica.starttimes.get(p, 0) / ticks for p in dead}
    named = kernel_oom_kills(started)
    if named:
        return named, "the kernel log names it"
    n = cgroup_oom_kills(_folders(replica))
    if n:
        kills = "1 OOM kill" if n == 1 else f"{n} OOM kills"
        return set(dead), f"its cgroup counts {kills}"
    return None


def dead_problem(replica: Any, dead: list[int], others: Iterable[str] = ()) -> str:
    """What is wrong with a replica whose recorded ``dead`` PIDs are gone (``others``:
    more gone, already named, as its co-runner's spinners): those the OOM killer ended
    said so, and why it is known; the rest "crashed or killed"."""
    evidence = oom_evidence(replica, dead) if dead else None
    oom, why = evidence if evidence is not None else (set(), "")
    parts = []
    if oom:
        named = ", ".join(f"{replica.role(p)} PID {p}" for p in dead if p in oom)
        parts.append(f"killed by the kernel's OOM killer (out of memory; {why}): {named}")
    rest = [f"{replica.role(p)} PID {p}" for p in dead if p not in oom] + list(others)
    if rest:
        parts.append("crashed or killed: " + ", ".join(rest))
    return "; ".join(parts)


def replicas_gone(replicas: Iterable[Any]) -> str | None:
    """What is wrong with replicas a recorded process of which is gone (their server's,
    or their co-runner's spinners), each said by :func:`dead_problem`; None if none is."""
    from shrink.processes import is_alive
    from shrink.testbed.state import SPINNER

    said = []
    for r in replicas:
        dead = [p for p in r.pids if not is_alive(p, r.starttimes.get(p))]
        spin = [f"{SPINNER} PID {p}" for p, t in r.spinners.items() if not is_alive(p, t)]
        if dead or spin:
            master = any(p in r.masters for p in dead)
            said.append(dead_problem(r, dead, spin) + _others_run(len(r.pids) - len(dead), master))
    return "; ".join(said) if said else None


def _others_run(alive: int, master: bool = False) -> str:
    """What to add when ``alive`` of a replica's recorded processes still run: an nginx
    worker killed was replaced by its master, and "down" alone read as if nothing
    answered, while the share's processes were no longer the ones recorded. A ``master``
    gone is replaced by no one: its workers run on without it (php-fpm's pool)."""
    if alive <= 0:
        return ""
    others = f"its other {alive} process{'es still run' if alive > 1 else ' still runs'}"
    if master:
        return (
            f" ({others}, without their master: nothing restarts or manages them as the "
            "server would; bring the testbed down and up again)"
        )
    return (
        f" ({others}: a server's master may have started another in its place, which the "
        "testbed's record does not know; bring the testbed down and up again)"
    )
