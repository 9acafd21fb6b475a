"""What is wrong with a testbed's server, from its state: brought down, a process gone,
or running but stopped, frozen or with its share changed since it was recorded."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shrink.testbed.oom import replicas_gone
from shrink.testbed.state import ReplicaState, elsewhere
from shrink.testbed.watch import state_problems

__all__ = ["docroot_mount_problem", "pids_alive", "server_problem", "settled", "testbed_problem"]


def _spinners(replica: dict[str, Any]) -> list[int]:
    """The PIDs of a replica's co-runner spinners (none unless its share is co-run)."""
    return [int(p) for p in ReplicaState.from_dict(replica).spinners]


def server_problem(state: dict[str, Any], replicas: list[ReplicaState] | None = None) -> str | None:
    """What a testbed's state says is wrong with its server: brought down, or a process
    of it gone (the check ``shrink testbed status`` makes), or None. ``replicas``: the
    state's replicas read already (a level's watch reads them once, not every look)."""
    if not state.get("replicas"):
        return None
    if state.get("stopped"):
        return f"the testbed was brought down ({state['stopped']}); bring it up again"
    return replicas_gone(replicas if replicas is not None else _replicas(state))


def _replicas(state: dict[str, Any]) -> list[ReplicaState]:
    return [ReplicaState.from_dict(d) for d in state.get("replicas") or []]


def testbed_problem(
    state: dict[str, Any], replicas: list[ReplicaState] | None = None
) -> str | None:
    """What is wrong with a testbed's server, as the end of "the server under test ...":
    down (:func:`server_problem`), or running but stopped, frozen or with its share
    changed since it was recorded (:mod:`shrink.testbed.watch`); None if nothing is."""
    replicas = _replicas(state) if replicas is None else replicas
    if (
        why := elsewhere(state.get("pid_ns"), state.get("started"), state.get("replicas"))
    ) is not None:  # a stop could not be seen
        return f"cannot be watched from here: {why}"
    if (down := server_problem(state, replicas)) is not None:
        return f"is down: {down}"
    changed = state_problems(state, replicas) if state.get("replicas") else None
    return f"went wrong: {changed}" if changed is not None else None


def docroot_mount_problem(docroot: str, replicas: list[ReplicaState] | None = None) -> str | None:
    """A mount under a running testbed's document root that ``up`` would have refused
    (``mount --bind /etc doc/x`` made after it: ``GET /x/passwd`` was served), or None.
    Asked before and after each run, and by ``testbed status``: one read of the mount
    table."""
    from shrink.testbed.mounts import whole_fs_mount

    if (what := whole_fs_mount(Path(docroot), _a_server(replicas or []))) is None:
        return None
    return (
        f"{what}, mounted since `testbed up`, whose files the servers serve to "
        "any client: unmount it, or bring the testbed down"
    )


def _a_server(replicas: list[ReplicaState]) -> int | None:
    """A running master of the testbed (as recorded: PID and start time), whose mount
    namespace is the servers' (shrink's may be another: ``unshare --mount``), or None."""
    from shrink.processes import is_alive

    for r in replicas:
        for pid in r.masters:
            if is_alive(pid, r.starttimes.get(pid)):
                return pid
    return None


def pids_alive(state: dict[str, Any]) -> dict[int, bool]:
    """Each recorded server PID of a testbed's state, and whether it is alive."""
    out = {}
    for pid in [int(p) for r in state.get("replicas", []) for p in r.get("pids", [])]:
        try:
            os.kill(pid, 0)
            out[pid] = True
        except ProcessLookupError:
            out[pid] = False
        except PermissionError:
            out[pid] = True
    return out


# How long a crash seen under a level waits for `testbed down` to say it was it: down
# marks the state once every replica is stopped and its cgroups released (seconds).
DOWN_SETTLE_S = 3.0


def settled(
    problem: str | None, look: Callable[[], str | None], wait_s: float = DOWN_SETTLE_S
) -> str | None:
    """``problem``, or for processes found gone ("is down: crashed or killed"), what
    ``look`` says once `testbed down` marked the state stopped, within ``wait_s``.
    Down stops the servers first and writes "stopped" after: a sweep whose watch saw
    them go in between said "crashed or killed" of a testbed brought down."""
    if problem is None or not problem.startswith("is down: crashed"):
        return problem
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = look()
        if now is not None and not now.startswith("is down: crashed"):
            return now
    return problem
