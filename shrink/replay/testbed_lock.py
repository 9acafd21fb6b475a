"""One run at a time against a testbed: the run holds its testbed's lock from its start.

Two runs against one testbed state (``sweep``, ``replay``, ``predict``'s levels) each
loaded the server the other was measuring; each level's client sampler saw the other's
connections only at the level's end, and both lost that level. A run now holds the
kernel's ``flock`` on the testbed's run root (the folder ``testbed up`` made for it, one
an ``up``: the same testbed by whichever state file names it, the registry's copy or the
user's) for as long as its target lives, so a second run is refused at its start, naming
the first by its PID and command, and the first keeps its level.

The lock goes with its process (a kill -9 too) and leaves no file behind. Runs in one
process share it (a predict's targets, tests). Where the run root cannot be opened (a
state of an older ``up``, a testbed another user brought up whose run root this user
may not read, one already down) or locked, the run goes on unguarded, as before: the
level's own look for other clients still names a second run then.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shrink.errors import TestbedError, printable

__all__ = ["hold_testbed", "holder", "let_go", "run_root"]

# The testbeds this process holds: the run root's (device, inode) -> [its descriptor,
# how many targets of this process hold it].
_HELD: dict[tuple[int, int], list[int]] = {}


def run_root(state: Mapping[str, Any]) -> str | None:
    """The run root ``up`` made for the testbed of ``state`` (its replicas' run folders'
    folder, named ``up-...``), or None where the state names none (an older one). A
    state file is not trusted: nothing but a folder of that name is ever locked."""
    for r in state.get("replicas") or []:
        run_dir = r.get("run_dir") if isinstance(r, Mapping) else None
        if isinstance(run_dir, str) and run_dir:
            root = Path(run_dir).parent
            return str(root) if root.name.startswith("up-") else None
    return None


def holder(fd: int) -> str:
    """The run that holds the lock on ``fd``: "PID 1234 (shrink sweep t.parquet ...)"."""
    from shrink.procfs import flock_holders, flock_holding_processes
    from shrink.replay.clients import _command

    st = os.fstat(fd)
    pids = flock_holding_processes(st.st_dev, st.st_ino, first=True) or [
        p for p in flock_holders(st.st_dev, st.st_ino) if p != os.getpid()
    ]
    if not pids:
        return "a process this user cannot see"
    return f"PID {pids[0]} ({_command(pids[0])})"


def hold_testbed(state: Mapping[str, Any], path: str | Path) -> tuple[int, int] | None:
    """Hold the testbed of ``state`` (read from ``path``) for this run: its key, to
    :func:`let_go` of, or None when it cannot be held (unguarded). Raises
    :class:`TestbedError` when another run holds it."""
    root = run_root(state)
    if root is None:
        return None
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # (down already: the run's own check says so; or not this user's)
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    if key in _HELD:  # (this process's own run holds it already)
        os.close(fd)
        _HELD[key][1] += 1
        return key
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = holder(fd)
        os.close(fd)
        raise TestbedError(
            f"{printable(path)}: another run is measuring this testbed: {who}; two runs "
            "at once each load the server the other measures, and both lose their levels: "
            "wait for it to end, or bring up a testbed of this run's own (testbed up "
            "--state ... on other CPUs)"
        ) from None
    except OSError:
        os.close(fd)
        return None
    _HELD[key] = [fd, 1]
    return key


def let_go(key: tuple[int, int] | None) -> None:
    """One target of this process lets go of the testbed ``key`` (:func:`hold_testbed`);
    the lock goes with the last."""
    held = _HELD.get(key) if key is not None else None
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _HELD[key]
        with contextlib.suppress(OSError):
            os.close(held[0])
