"""``shrink testbed status``: which recorded processes still run, and whether each
replica answers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shrink import processes as process
from shrink.errors import TestbedError
from shrink.testbed.oom import dead_problem
from shrink.testbed.problems import docroot_mount_problem
from shrink.testbed.state import SPINNER, TestbedState
from shrink.testbed.teardown import enforcer_of, recipe_of
from shrink.testbed.watch import replica_problems

__all__ = ["ReplicaStatus", "status"]


@dataclass
class ReplicaStatus:
    """What ``status`` found for one replica."""

    name: str
    address: str
    port: int
    cpus: list[int]
    pids: list[int]
    alive: list[int]
    dead: list[int]
    answering: bool
    problem: str | None = None
    usage_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.dead and self.answering and self.problem is None

    def to_dict(self) -> dict[str, Any]:
        """``status --json``'s replica: the fields (``usage_s`` as ``cpu_seconds``) and ``ok``.

        The state's notes are left out: the command prints them once, not per replica.
        """
        d = asdict(self)
        del d["notes"]
        d["cpu_seconds"] = d.pop("usage_s")
        return d | {"ok": self.ok}


def status(state_path: str | Path, *, check_health: bool = True) -> list[ReplicaStatus]:
    """Which recorded processes still run and whether each replica answers."""
    st = TestbedState.read(state_path)
    if (why := st.elsewhere()) is not None:  # its PIDs name other processes here
        raise TestbedError(f"{state_path}: {why}; nothing was looked at")
    recipe = recipe_of(st)
    mounted = (
        docroot_mount_problem(st.docroot, st.replicas)
        if st.stopped is None and st.docroot
        else None
    )
    out = []
    for r in st.replicas:
        alive = [p for p in r.pids if process.is_alive(p, r.starttimes.get(p))]
        dead = [p for p in r.pids if p not in alive]
        servers_dead = list(dead)
        spun: list[str] = []
        for pid, start in r.spinners.items():  # the share's enforcer, when it co-runs
            if not process.is_alive(pid, start):
                dead.append(pid)
                spun.append(f"{SPINNER} PID {pid}")
        gone = servers_dead or spun
        problem = None
        if st.stopped is not None:
            # Gone because `down` stopped them: not a crash. One still running is named.
            problem = f"stopped by `shrink testbed down` at {st.stopped}"
            if alive:
                problem += "; still running: " + ", ".join(f"{r.role(p)} PID {p}" for p in alive)
        elif gone:  # the OOM killer's named as such (its cure is memory, not a fix)
            problem = dead_problem(r, servers_dead, spun)
        elif st.stopped is None and (changed := replica_problems(r)):
            problem = "; ".join(changed)  # stopped, frozen, or its share changed
        answering = False
        if check_health and st.stopped is None:
            err = (
                recipe.health(r.address, r.port)
                if recipe is not None
                else f"recipe {st.server.get('source')} cannot be read to check health"
            )
            answering = err is None
            if err and not problem:
                problem = err
        problem = problem or mounted  # (a mount under its docroot since up: served)
        enf = enforcer_of(r)
        usage = enf.usage_s() if enf is not None else None
        if usage is None:
            usage = process.cpu_seconds(alive)
        out.append(
            ReplicaStatus(
                r.name,
                r.address,
                r.port,
                r.cpus,
                r.pids,
                alive,
                dead,
                answering,
                problem,
                usage,
                list(st.notes),
            )
        )
    return out
