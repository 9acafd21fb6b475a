"""What /proc says about CPUs and processes: the one reader of /proc/stat and /proc/PID/stat.

``/proc/stat`` gives per-CPU jiffies (user nice system idle iowait irq softirq
steal); a window's busy or steal fraction is the difference of two snapshots
(:func:`utilization`). ``/proc/PID/stat`` gives a process's state, parent, CPU
ticks and start time (the start time tells a reused PID from the one we started);
``/proc/PID/task/*/schedstat`` a process's CPU time in nanoseconds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ProcInfo",
    "cpu_seconds",
    "cpu_times",
    "flock_holders",
    "flock_holding_processes",
    "proc_info",
    "process_cpu_seconds",
    "steal_times",
    "utilization",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcInfo:
    """The fields of ``/proc/PID/stat`` we use."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    starttime: int


def _stat(pid: int | str) -> ProcInfo:
    """Parse ``/proc/PID/stat`` (``pid`` may be ``self``); OSError if it cannot be read."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # comm is in parentheses and may itself hold spaces or parentheses.
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    f = rest.split()
    number = os.getpid() if pid == "self" else int(pid)
    return ProcInfo(number, comm, f[0], int(f[1]), int(f[11]), int(f[12]), int(f[19]))


def flock_holders(dev: int, ino: int, locks: str | Path = "/proc/locks") -> list[int]:
    """The PIDs that took a ``flock`` held on the file ``(dev, ino)``, from ``/proc/locks``;
    [] where it cannot be read. A waiter's line (``->``) holds nothing. The PID is the
    one that took the lock, which may since be gone, or another process's: a child forked
    with the open file holds the lock on (:func:`flock_holding_processes` finds it)."""
    want = _file_key(dev, ino)
    try:
        text = Path(locks).read_text()
    except OSError:
        return []
    return [int(f[4]) for f in (line.split() for line in text.splitlines()) if _flock(f, want)]


def _file_key(dev: int, ino: int) -> str:
    return f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"


def _flock(f: list[str], want: str) -> bool:
    """``f`` (a lock line's words: "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF") is a
    held ``flock`` on the file ``want``."""
    return len(f) >= 6 and f[1] == "FLOCK" and f[5] == want and f[4].isdigit()


def flock_holding_processes(
    dev: int, ino: int, proc: str | Path = "/proc", *, first: bool = False
) -> list[int]:
    """The processes whose open files hold a ``flock`` on the file ``(dev, ino)`` now, as
    their ``/proc/PID/fdinfo`` shows it, among those this user may look into; [] when
    ``/proc/locks`` shows no such lock. :func:`flock_holders` names the process that took
    the lock: a demo's forked child held it on after its parent ended, and that parent's
    PID, gone or reused by another user's process, was taken for the holder.

    ``first``: one holder other than this process is enough (a busy output's name): a
    process that took the lock and holds it still is looked into before all others.
    Every process's every open file was read (~130 us a file on a loaded host: seconds
    where a million files are open) before a busy output was refused; of the others,
    sockets, pipes and anonymous files are passed over unread."""
    takers = flock_holders(dev, ino, Path(proc) / "locks")
    if not takers:
        return []
    want, root = _file_key(dev, ino), Path(proc)
    if first:
        for pid in takers:
            if pid != os.getpid() and _holds(root / str(pid), want):
                return [pid]
    try:
        pids = sorted(int(n) for n in os.listdir(proc) if n.isdigit())
    except OSError:
        return []
    if first:
        pids = [pid for pid in pids if pid != os.getpid()]
        return next(([p] for p in pids if _holds(root / str(p), want)), [])
    return [pid for pid in pids if _holds(root / str(pid), want)]


# What /proc/PID/fd/N reads as for an open file that is no file of a file system.
_NOT_FILES = ("socket:", "pipe:", "anon_inode:")


def _holds(process: Path, want: str) -> bool:
    """One of the open files of ``process`` (its /proc folder) holds a ``flock`` on
    ``want``. Sockets, pipes and the kernel's anonymous files are passed over by their
    link's text; no open file is stat()ed: that asks its file system, and one open on a
    hung NFS server or a stopped FUSE daemon would hang the refusal of a busy output."""
    try:
        names = os.listdir(process / "fdinfo")
    except OSError:
        return False  # gone, or another user's
    for name in names:
        with contextlib.suppress(OSError):  # (not seen: its fdinfo says)
            if os.readlink(process / "fd" / name).startswith(_NOT_FILES):
                continue
        try:
            text = (process / "fdinfo" / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("lock:") and _flock(line.split()[1:], want):
                return True
    return False


def proc_info(pid: int) -> ProcInfo | None:
    """Parse ``/proc/PID/stat``; None if the process does not exist."""
    try:
        return _stat(pid)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def _schedstat_seconds(pid: int | str) -> float | None:
    """CPU seconds of ``pid``'s live threads from the scheduler's nanosecond count.

    ``/proc/PID/stat`` counts in clock ticks (10 ms): over a few seconds of a 25%
    share that is an error of tens of percent per process, so the scheduler's own
    count (``/proc/PID/task/*/schedstat``, CONFIG_SCHED_INFO) comes first. None
    where the kernel keeps none (or a thread exited while read).
    """
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as fh:
                total += int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9 if total > 0 else None


def run_queue_wait_us(path: str = "/proc/thread-self/schedstat") -> int | None:
    """The calling thread's time on a run queue so far, us (None where /proc does not say):
    schedstat's second field (the first is its time on the CPU, the third its slices)."""
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().split()[1]) // 1000
    except (OSError, ValueError, IndexError):
        return None


def process_cpu_seconds(pid: int | str = "self") -> float:
    """CPU seconds of a process (schedstat's ns, else stat's ticks); OSError if it is gone."""
    precise = _schedstat_seconds(pid)
    if precise is not None:
        return precise
    info = _stat(pid)
    return (info.utime + info.stime) / _CLK_TCK


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds used so far by the live ones among ``pids`` (as process_cpu_seconds)."""
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu_seconds(pid)
        except (OSError, ValueError):
            continue  # gone: its time is lost, and the run says which PIDs died
    return total


def _cpu_fields() -> dict[int, list[int]]:
    """Per CPU: user nice system idle iowait irq softirq steal jiffies from /proc/stat."""
    out: dict[int, list[int]] = {}
    with open("/proc/stat", encoding="ascii") as fh:
        for line in fh:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *vals = line.split()
            v = [int(x) for x in vals[:8]]
            out[int(name[3:])] = v + [0] * (8 - len(v))
    return out


def cpu_times() -> dict[int, tuple[int, int]]:
    """Per CPU (busy, total) jiffies from /proc/stat; idle and iowait count as not busy."""
    return {c: (sum(v) - v[3] - v[4], sum(v)) for c, v in _cpu_fields().items()}


def steal_times() -> dict[int, tuple[int, int]]:
    """Per CPU (steal, total) jiffies from /proc/stat, for :func:`utilization`.

    Steal is time the hypervisor ran something else while this CPU wanted to run;
    /proc/stat counts it as busy.
    """
    return {c: (v[7], sum(v)) for c, v in _cpu_fields().items()}


def utilization(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], cpus: list[int]
) -> dict[int, float]:
    """Busy fraction of each of ``cpus`` between two :func:`cpu_times` snapshots."""
    out = {}
    for c in cpus:
        if c in before and c in after:
            busy = after[c][0] - before[c][0]
            total = after[c][1] - before[c][1]
            out[c] = busy / total if total > 0 else 0.0
    return out
