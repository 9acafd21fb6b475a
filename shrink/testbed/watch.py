"""A running testbed's server gone wrong without dying: stopped, frozen, or its share
changed by someone else since ``testbed up`` recorded it.

A server stopped by SIGSTOP (or a freezer) still has its PIDs, so the liveness check
passes; its requests wait, and a sweep measured a slow server where there was none.
A share whose quota, CPU list or members were changed under a sweep is no longer the
share its levels are filed under. Each is a testbed error, as a dead process is:
:func:`replica_problems` names what changed, and :class:`Watch` looks for it while a
level runs.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from shrink import interrupts
from shrink import processes as process
from shrink.procfs import proc_info
from shrink.testbed.state import SPINNER, ReplicaState
from shrink.topology import format_cpulist, parse_cpulist

__all__ = [
    "POLL_S",
    "Watch",
    "freezer_mounts",
    "frozen",
    "replica_problems",
    "say_unwatched",
    "state_problems",
    "was_so",
]

POLL_S = 0.25  # how often a level's watch looks: a stop shorter than this may pass unseen


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return None


def freezer_mounts() -> dict[str, Path]:
    """Cgroup mount points: ``freezer`` (v1) and ``""`` (the v2 tree), where mounted."""
    out: dict[str, Path] = {}
    for line in (_read(Path("/proc/self/mounts")) or "").splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        if f[2] == "cgroup2":
            out.setdefault("", Path(f[1]))
        elif f[2] == "cgroup" and "freezer" in f[3].split(","):
            out.setdefault("freezer", Path(f[1]))
    return out


def frozen(pid: int, mounts: dict[str, Path], proc: Path = Path("/proc")) -> str | None:
    """The freezer holding ``pid`` frozen (v1 ``freezer.state``, v2 ``cgroup.events``),
    or None."""
    for line in (_read(proc / str(pid) / "cgroup") or "").splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "" and "" in mounts:
            d = mounts[""] / path.lstrip("/")
            if "frozen 1" in (_read(d / "cgroup.events") or "").splitlines():
                return f"{d}/cgroup.freeze"
        elif "freezer" in controllers.split(",") and "freezer" in mounts:
            d = mounts["freezer"] / path.lstrip("/")
            if _read(d / "freezer.state") in ("FROZEN", "FREEZING"):
                return f"{d}/freezer.state"
    return None


def _share_changes(r: ReplicaState, alive: list[int]) -> list[str]:
    """How the replica's cgroup differs from its record: quota, period, CPUs, members."""
    enf: dict[str, Any] = r.enforce or {}
    cg: dict[str, Any] = enf.get("cgroup") or r.cgroup or {}
    dirs: dict[str, str] = cg.get("dirs") or {}
    v2 = cg.get("version") == 2
    out = []
    quota, period = enf.get("quota_us"), enf.get("period_us")
    if "cpu" in dirs and quota is not None and enf.get("mechanism") == "cfs":
        d = Path(dirs["cpu"])
        if v2:
            now = tuple((_read(d / "cpu.max") or "").split())
        else:
            now = (_read(d / "cpu.cfs_quota_us") or "", _read(d / "cpu.cfs_period_us") or "")
        if now != (str(quota), str(period)):
            out.append(
                f"its CFS quota is {'/'.join(now) or 'unreadable'} us, not the recorded "
                f"{quota}/{period} us ({d})"
            )
    if "cpuset" in dirs and r.cpus:
        d = Path(dirs["cpuset"])
        name = "cpuset.cpus.effective" if v2 else "cpuset.effective_cpus"
        text = _read(d / name)
        text = _read(d / "cpuset.cpus") if text is None else text
        cpus = parse_cpulist(text) if text else ()
        if sorted(cpus) != sorted(r.cpus):
            out.append(
                f"its cpuset's CPUs are {format_cpulist(cpus) or 'none'}, not the recorded "
                f"{format_cpulist(r.cpus)} ({d})"
            )
    for d in dict.fromkeys(dirs.values()):
        text = _read(Path(d) / "cgroup.procs")
        if text is None:
            out.append(f"its cgroup {d} is gone")
            continue
        members = {int(x) for x in text.split() if x.isdigit()}
        moved = [p for p in alive if p not in members]
        if moved:
            out.append(
                ", ".join(f"{r.role(p)} PID {p}" for p in moved) + f" moved out of its cgroup {d}"
            )
    return out


_REALTIME: dict[int | None, str] = {
    os.SCHED_FIFO: "SCHED_FIFO",
    os.SCHED_RR: "SCHED_RR",
    6: "SCHED_DEADLINE",
}


def _policy(pid: int) -> int | None:
    try:
        return os.sched_getscheduler(pid)
    except OSError:
        return None


def _spinner_problems(r: ReplicaState, mounts: dict[str, Path]) -> list[str]:
    """A co-runner stopped, frozen, taken off SCHED_FIFO or moved off its CPU: each gives
    the server its CPU whole. The spinners run one a share CPU, in the record's order."""
    cpus = list((r.enforce or {}).get("cpus") or [])
    out = []
    for i, (p, start) in enumerate(r.spinners.items()):
        info = proc_info(p) if process.is_alive(p, start) else None
        if info is None:
            continue  # dead: said by the liveness check
        if info.state in ("T", "t"):
            out.append(f"{SPINNER} PID {p} is stopped")
        elif (where := frozen(p, mounts)) is not None:
            out.append(f"{SPINNER} PID {p} is frozen ({where})")
        elif _policy(p) not in (None, os.SCHED_FIFO):
            out.append(f"{SPINNER} PID {p} no longer runs SCHED_FIFO")
        elif i < len(cpus) and (now := _allowed(p)) is not None and list(now) != [cpus[i]]:
            out.append(
                f"{SPINNER} PID {p} may run on CPUs {format_cpulist(now)}, not CPU {cpus[i]}"
            )
    return out


def _allowed(pid: int) -> tuple[int, ...] | None:
    try:
        return process.allowed_cpus(pid)
    except OSError:
        return None


def replica_problems(r: ReplicaState, mounts: dict[str, Path] | None = None) -> list[str]:
    """What is wrong with a replica whose processes still run: a process stopped or
    frozen, its share's cgroup changed, a process's CPUs not the recorded ones, its run
    folder removed."""
    mounts = freezer_mounts() if mounts is None else mounts
    alive = [p for p in r.pids if process.is_alive(p, r.starttimes.get(p))]
    out = []
    for p in alive:
        info = proc_info(p)
        if info is not None and info.state in ("T", "t"):
            how = "by a tracer" if info.state == "t" else "(SIGSTOP)"
            out.append(f"{r.role(p)} PID {p} is stopped {how}")
        elif (where := frozen(p, mounts)) is not None:
            out.append(f"{r.role(p)} PID {p} is frozen ({where})")
    out += _spinner_problems(r, mounts)
    if float((r.enforce or {}).get("cpu_fraction") or 1.0) < 1.0:
        # A real-time server runs over the co-runner (and past a CFS quota): no share.
        for p in alive:
            if (name := _REALTIME.get(_policy(p))) is not None:
                out.append(f"{r.role(p)} PID {p} runs {name}, which the share does not hold")
    for p in alive:
        # Pinned to its record, or (a process not recorded so) inside the replica's CPUs.
        want, now = r.pinned.get(p), _allowed(p)
        if now is None or (sorted(now) == sorted(want) if want else set(now) <= set(r.cpus)):
            continue
        where = (
            f"not the recorded {format_cpulist(want)}"
            if want
            else (f"outside the replica's CPUs {format_cpulist(r.cpus)}")
        )
        out.append(f"{r.role(p)} PID {p} may run on CPUs {format_cpulist(now)}, {where}")
    if r.run_dir and not Path(r.run_dir).is_dir():
        # Its sockets (php-fpm's, php-cgi's), health page and configs went with it.
        out.append(f"its run folder {r.run_dir} is gone")
    return out + _share_changes(r, alive)


def state_problems(state: dict[str, Any], replicas: list[ReplicaState] | None = None) -> str | None:
    """:func:`replica_problems` of every replica of a testbed state (``replicas``: read
    from it already), in one line, or None."""
    mounts = freezer_mounts()
    found = []
    if replicas is None:
        replicas = [ReplicaState.from_dict(d) for d in state.get("replicas") or []]
    for r in replicas:
        found += [f"{r.name}: {p}" for p in replica_problems(r, mounts)]
    return "; ".join(found) if found else None


_PAST = (
    (re.compile(r" is (stopped|frozen)\b"), r" was \1"),
    (re.compile(r" runs (SCHED_\w+)"), r" ran \1"),
    (re.compile(r" no longer runs SCHED_FIFO"), " no longer ran SCHED_FIFO"),
    (re.compile(r" may run on CPUs"), " could run on CPUs"),
    (re.compile(r"its CFS quota is "), "its CFS quota was "),
    (re.compile(r"its cpuset's CPUs are "), "its cpuset's CPUs were "),
    (re.compile(r" is gone\b"), " was gone"),
)


def was_so(problem: str, seen: tuple[float, float], now: float) -> str:
    """A watch's ``problem`` said in the past: it was found ``seen`` (the first and last
    looks that found it, in seconds since the watch began) and no longer holds ``now``
    (a server continued before the words were printed is not "stopped")."""
    for pattern, repl in _PAST:
        problem = pattern.sub(repl, problem)
    a, b = seen
    when = f"{a:.2f} s" if b - a < 0.005 else f"{a:.2f}-{b:.2f} s"
    return f"{problem} (seen {when} into the run; no longer so at {now:.2f} s)"


class Watch(threading.Thread):
    """Looks at a testbed every POLL_S while a level runs; ``problem`` is the first
    thing :func:`check` found wrong (a server stopped and resumed within the level
    measured as slow what was stopped). Found, it sets ``halt``, the run's engines' stop
    event (a multiprocessing one: forked engine processes see it too): the level is no
    level, and its requests need not wait out their timeout before that is said.
    ``seen``: the first and last looks that found it (seconds since the watch began)."""

    def __init__(self, check: Any) -> None:
        import multiprocessing

        super().__init__(daemon=True, name="testbed-watch")
        self.check = check
        self.problem: str | None = None
        self.seen = (0.0, 0.0)
        self.began = time.monotonic()
        self.stop = threading.Event()
        self.halt = multiprocessing.get_context("fork").Event()
        self.looks = 0  # (made or tried)
        self.failed: OSError | None = None  # the last look that could not be made
        self.failures = 0

    @property
    def unwatched(self) -> OSError | None:
        """Why no look of the run could be made (each failed: EMFILE under a low ``ulimit
        -n``), or None: a server stopped or frozen meanwhile would not have been seen."""
        return self.failed if self.looks and self.failures == self.looks else None

    def run(self) -> None:
        interrupts.leave_to_loop()
        while not self.stop.wait(POLL_S):
            self.looks += 1
            try:
                found = self.check()
            except OSError as exc:
                # A look that could not be made (EMFILE: the generator's connections
                # took every descriptor) finds nothing; the next one may. Raised here,
                # it ended the watch with a traceback and nothing watched the rest.
                self.failed, self.failures = exc, self.failures + 1
                continue
            at = time.monotonic() - self.began
            if self.problem is None and found is not None:
                self.problem, self.seen = found, (at, at)
                self.halt.set()
            elif found is not None and found == self.problem:
                self.seen = (self.seen[0], at)  # (looked on, to say for how long)

    def finish(self) -> str | None:
        """The problem found, in words true now: looked at again, and said in the past
        (:func:`was_so`) when it no longer holds."""
        self.stop.set()
        self.join(timeout=5.0)
        if self.problem is None or not self.problem.startswith("went wrong: "):
            return self.problem
        try:
            now = self.check()
        except OSError:  # no new look to be had: the problem as it was found
            return self.problem
        if now == self.problem:
            return now
        return since(self.problem, self.seen, time.monotonic() - self.began, now)


def _findings(words: str) -> list[str]:
    """A "went wrong: " problem's findings (each "REPLICA: ...", joined by "; ")."""
    return re.split(r"; (?=[^\s;:]+: )", words.removeprefix("went wrong: "))


def since(problem: str, seen: tuple[float, float], at: float, now: str | None) -> str:
    """A watch's ``problem`` (found ``seen``), said as it stands ``at`` seconds into the
    run when a new look finds ``now``: the findings gone in the past (:func:`was_so`),
    those that still hold as they are ("still so: ..."), new ones after "now"."""
    if now is not None and not now.startswith("went wrong: "):
        return f"{was_so(problem, seen, at)}; now it {now}"
    was, still = _findings(problem), _findings(now) if now is not None else []
    gone = [f for f in was if f not in still]
    if not gone:
        return now or problem
    said = was_so("went wrong: " + "; ".join(gone), seen, at)
    if held := [f for f in was if f in still]:
        said += "; still so: " + "; ".join(held)
    if new := [f for f in still if f not in was]:
        said += "; now " + "; ".join(new)
    return said


_SAID_UNWATCHED: list[bool] = []


def say_unwatched(watch: Watch | None) -> None:
    """Say once a command (on standard error) that a run's testbed went unwatched: every
    look of its watch failed (:attr:`Watch.unwatched`). Nothing said it: with ``ulimit -n``
    low, a server stopped mid-run went unseen and the level stood."""
    import sys

    from shrink.report.text import unwatched_text

    if watch is not None and (why := watch.unwatched) is not None and not _SAID_UNWATCHED:
        _SAID_UNWATCHED.append(True)
        sys.stderr.write(unwatched_text(watch.looks, why) + "\n")
