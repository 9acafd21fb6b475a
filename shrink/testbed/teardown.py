"""``down``: stop a testbed ``up`` started, and everything it left.

What is stopped is what ``up`` recorded (PIDs with their start times and programs,
and the replicas' cgroups), read from shrink's own copy where there is one; a state
file another user could have written is not trusted. A damaged state file still
stops the processes it names, never a stranger. See :mod:`shrink.testbed.lifecycle`.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shrink import processes as process
from shrink.enforce import Enforcer, enforcer_from_dict
from shrink.errors import RecipeError, StateError, TestbedError, WriteError
from shrink.share import Cgroup
from shrink.testbed import registry
from shrink.testbed.private import forgeable, user_name
from shrink.testbed.recipe import ServerRecipe, replica_pids, stop_replica
from shrink.testbed.run_root import remove_run_root, why_left
from shrink.testbed.servers import load_recipe
from shrink.testbed.state import ReplicaState, TestbedState, salvage_pids

__all__ = [
    "down",
    "down_stale",
    "enforcer_of",
    "recipe_of",
    "release",
    "remove_groups",
    "stop_and_release",
]


def recipe_of(st: TestbedState) -> ServerRecipe | None:
    """The recipe that started a testbed; None if it can no longer be read (a recipe
    file since deleted): the state file alone still suffices to stop it."""
    spec = st.server.get("source")
    if spec in (None, "built-in", "fake"):
        spec = st.server.get("name")
    try:
        return load_recipe(spec)
    except RecipeError:
        return None


_SERVER_COMMS = ("lighttpd", "php-cgi", "php", "nginx")


def _refuse_if_forgeable(state_path: str | Path) -> None:
    why = forgeable(state_path)
    if why is None:
        return
    here = os.path.realpath(state_path)
    for uid, path, _ in registry.others_running():
        if os.path.realpath(path) == here:
            # root, at another user's testbed: its record, run folder and cgroups are
            # that user's, and that user's ``down`` reads them
            who = user_name(uid)
            raise TestbedError(
                f"{state_path}: a testbed {who} started (in that user's records, not "
                f"root's): run `shrink testbed down` as {who}; nothing was stopped"
            )
    raise StateError(
        f"{state_path}: shrink keeps no record of this testbed, and another user could "
        f"have written the file ({why}): nothing it names is touched"
    )


def _refuse_if_anothers(state_path: str | Path, pids: list[int] | None = None) -> None:
    """A testbed another user started (root's, when this user is not root) cannot be
    stopped by this one: its processes refuse our signals, its cgroups and state file
    our writes. Say so before touching any of it, not stop part of it and end on
    "Operation not permitted" naming nothing. Before the file is read, by its owner;
    once read, by its processes (a copy of root's state is this user's file)."""
    me = os.geteuid()
    if me == 0:
        _refuse_without_cap_kill(state_path, pids or [])
        _refuse_from_another_namespace(state_path, pids or [])
        return
    theirs: list[int] = []
    for p in pids or []:
        try:
            os.kill(p, 0)
        except PermissionError:
            theirs.append(p)
        except ProcessLookupError:
            pass
    try:
        owner = os.stat(f"/proc/{theirs[0]}" if theirs else state_path).st_uid
    except OSError:
        return  # gone, or the file's reader says what is wrong with it
    if owner == me:
        return
    who = user_name(owner)
    if theirs:  # the servers' user, when root started them: not who can stop them
        why, by = f"its processes {theirs[:8]} run as {who}, not as you", "the user who started it"
    else:
        why, by = f"it was started by {who}, not by you", who
    raise TestbedError(
        f"{state_path}: {why} (UID {me}), so you may not stop it: run "
        f"`shrink testbed down` as {by}; nothing was stopped"
    )


_CAP_KILL = 5


def _refuse_without_cap_kill(state_path: str | Path, pids: list[int]) -> None:
    """Root signals the servers (which dropped root) through CAP_KILL; without it (a
    container, ``capsh --drop``) down ended on "Operation not permitted", naming
    nothing. Said, with whose processes they are, before any is touched."""
    if not pids or process.has_capability(_CAP_KILL):
        return
    theirs: dict[int, int] = {}
    for p in pids:
        with contextlib.suppress(OSError):
            if (uid := os.stat(f"/proc/{p}").st_uid) != 0:
                theirs[p] = uid
    if theirs:
        who = ", ".join(sorted({user_name(u) for u in theirs.values()}))
        raise TestbedError(
            f"{state_path}: its processes {list(theirs)[:8]} run as {who}, and signalling "
            "another user's process needs the capability CAP_KILL, which this process runs "
            "without (dropped, as in a container or under capsh --drop): run `shrink "
            "testbed down` with it; nothing was stopped"
        )


def _refuse_from_another_namespace(state_path: str | Path, pids: list[int]) -> None:
    """Root of a user namespace holds CAP_KILL only over the processes of its own: a
    testbed up started in another (a second ``unshare -U -r``) ended down on "error:
    Operation not permitted", naming nothing, its servers left running."""
    barred = []
    for p in pids:
        try:
            os.kill(p, 0)
        except PermissionError:
            barred.append(p)
        except OSError:
            pass
    if barred:
        raise TestbedError(
            f"{state_path}: its processes {barred[:8]} may not be signalled from here "
            "(Operation not permitted): root of a user namespace (unshare -U) may signal "
            "only its own namespace's processes, and these were started from another; run "
            "`shrink testbed down` where `up` ran, or as the machine's root; nothing was stopped"
        )


def _down_damaged(state_path: str | Path, why: TestbedError) -> dict[str, list[int]]:
    """Stop what a damaged state file still names, by PID, never a stranger.

    A PID with its recorded start time is stopped if that process still runs; one
    without (the start times were lost) never is: a name such as ``nginx`` does not
    make a process ours. The file is left as it is, for the user to look at. A file
    that names no PID at all is no testbed's state (``--state /etc/shadow``): an
    error saying why it could not be read, not "nothing was running".
    """
    found = salvage_pids(state_path)
    if not found:
        raise TestbedError(f"{why}; it names no process either: nothing was stopped")
    targets: dict[int, int | None] = {}
    for pid, start in found.items():
        info = process.proc_info(pid)
        if info is None or pid == os.getpid():
            continue
        if start is not None and info.starttime == start:
            targets[pid] = start
    for pid, start in list(targets.items()):
        if process.is_alive(pid, start):
            for d in process.descendants(pid):
                if (info := process.proc_info(d)) and info.comm.startswith(_SERVER_COMMS):
                    targets.setdefault(d, info.starttime)
    _refuse_if_anothers(state_path, list(targets))
    stopped = process.stop_processes(targets) if targets else []
    return {"damaged state (PIDs it still names)": stopped}


def stop_and_release(recipe: ServerRecipe | None, r: ReplicaState, sig: int = 15) -> list[int]:
    """Stop the replica's processes through its recipe (or, where the recipe can no longer
    be read, by the state file and its stop signal); then remove its cgroup."""
    stopped = recipe.stop(r) if recipe is not None else stop_replica(r, sig)
    enf = enforcer_of(r)
    if enf is not None:
        release(enf, r.cgroup)
    return stopped


def enforcer_of(r: ReplicaState) -> Enforcer | None:
    if r.enforce:
        return enforcer_from_dict(r.enforce)
    # a state file from before the mechanisms: its cgroup was a CFS group
    return enforcer_from_dict({"mechanism": "cfs", "cgroup": r.cgroup}) if r.cgroup else None


def release(enf: Enforcer, record: dict[str, Any] | None, wait_s: float = 3.0) -> None:
    """Stop the share's enforcement and remove the replica's groups once empty. A killed
    worker whose master died first is reaped by init, not by us, and stays a member
    until then (a while on a busy host)."""
    enf.stop()
    deadline = time.monotonic() + wait_s
    while record:
        Cgroup.from_dict(record).remove()
        if not any(Path(d).exists() for d in record.get("dirs", {}).values()):
            return
        if time.monotonic() > deadline:
            return  # left for `testbed down` to retry; status shows its members
        time.sleep(0.02)


def down(state_path: str | Path) -> dict[str, list[int]]:
    """Stop every process ``up`` recorded (and their descendants); return what was stopped.

    A state file that no longer validates (damaged, hand-edited) is not a dead
    end: the PIDs it still names are stopped (see :func:`_down_damaged`).

    What is stopped is read from the copy ``up`` kept in shrink's private folder
    (:func:`registry.recorded`), or, without one, from the state file only if no
    other user could have written it (:func:`forgeable`): its PIDs, start times and
    programs can all be read in /proc, so a file another user wrote could name any
    process on the machine.
    """
    _refuse_if_anothers(state_path)
    try:
        st = TestbedState.read(state_path)
    except StateError:
        raise  # names what shrink did not make: touch nothing
    except TestbedError as exc:
        kept = registry.recorded(state_path)
        if not Path(state_path).is_file():
            if kept is None:
                raise
            # ``up`` killed while it started the servers: it recorded them before the
            # file was written, and only ``down --stale`` stopped them.
            return _down_unwritten(state_path, kept)
        if kept is None:
            _refuse_if_forgeable(state_path)
            return _down_damaged(state_path, exc)
        st = kept
    else:
        kept = registry.recorded(state_path)
        if kept is None:
            _refuse_if_forgeable(state_path)
        else:
            # What up started, and how it stops (the recipe, its signal), not what the
            # file says now.
            st.replicas, st.server, st.irq = kept.replicas, kept.server, kept.irq
            st.pid_ns = kept.pid_ns
            # a down whose state file could not be written (chattr +i) noted its stop here
            st.stopped = st.stopped or kept.stopped
    if (why := st.elsewhere()) is not None:
        # stopped nothing, said "nothing was running" and removed the servers' run folder
        raise TestbedError(f"{state_path}: {why}; nothing was stopped")
    _refuse_if_anothers(state_path, [p for r in st.replicas for p in replica_pids(r)])
    recipe = recipe_of(st)
    sig = int(st.server.get("stop_signal", 15))
    out = {r.name: stop_and_release(recipe, r, sig) for r in st.replicas}
    _remove_run_dirs(st)
    # A state already marked stopped had its IRQs put back by that down: a second one
    # wrote them again, over what a testbed up since (--apply-irq) had set.
    left = _restore_irq(st) if st.stopped is None else []
    st.stopped = st.stopped or datetime.now(UTC).isoformat(timespec="seconds")
    try:
        st.write(state_path)
    except WriteError as exc:
        # (chattr +i on it: "cannot write (Operation not permitted, EPERM)" was all down
        # said, of servers it had stopped, and their entry in the private folder was left.)
        # The stop is noted in that entry instead: a second down, reading the file that
        # still says it runs, put the IRQ affinities back again.
        registry.record(state_path, st, owned=False)
        from shrink.files import lock_of

        at = Path(state_path)
        why = next((f": {q} is {lock}" for q in (at, at.parent) if (lock := lock_of(q))), "")
        stopped = sum(len(pids) for pids in out.values())
        raise TestbedError(
            f"the testbed is down (stopped {stopped} process(es)), but {exc}{why}; the "
            "state file still says it runs"
        ) from None
    registry.forget(state_path)
    if left:
        raise TestbedError(f"the testbed is down, but could not restore {'; '.join(left)}")
    return out


def _down_unwritten(state_path: str | Path, st: TestbedState) -> dict[str, list[int]]:
    """Stop a testbed whose ``up`` was killed before it wrote ``state_path``, by the
    record it kept in shrink's private folder; no state file is written for it."""
    recipe = recipe_of(st)
    sig = int(st.server.get("stop_signal", 15))
    out = {r.name: stop_and_release(recipe, r, sig) for r in st.replicas}
    _remove_run_dirs(st)
    left = _restore_irq(st)
    registry.forget(state_path)
    if left:
        raise TestbedError(f"the testbed is down, but could not restore {'; '.join(left)}")
    return out


def _restore_irq(st: TestbedState) -> list[str]:
    """Put back the IRQ affinities ``up --apply-irq`` changed; those that could not be."""
    if not st.irq:
        return []
    from shrink.irq import restore_affinities

    return restore_affinities(dict(st.irq))


def run_roots_left(state_path: str | Path) -> list[tuple[Path, str | None]]:
    """The run roots of the testbed ``state_path`` names that are still there after its
    ``down``, each with why: made under another private folder (``up`` under another
    SHRINK_RUN_DIR), which ``down`` does not remove (:func:`remove_run_root`): None; one
    under this private folder it could not remove (a mount point or a chattr-locked file
    inside it): :func:`why_left`'s reason. ``down`` dropped that second kind unsaid."""
    try:
        st = TestbedState.read(state_path)
    except (StateError, TestbedError):
        return []
    return _roots_left(st)


def _roots_left(st: TestbedState) -> list[tuple[Path, str | None]]:
    base = registry.run_dir().resolve()
    roots = {Path(r.run_dir).parent for r in st.replicas if r.run_dir}
    return [
        (r, None if r.parent.resolve() != base else why_left(r))
        for r in sorted(roots)
        if r.name.startswith("up-") and r.is_dir() and not r.is_symlink()
    ]


def _remove_run_dirs(st: TestbedState) -> None:
    """Remove the run roots ``up`` made (only those under shrink's private folder)."""
    base = registry.run_dir()
    for r in st.replicas:
        remove_run_root(r.run_dir, base)


def remove_groups(groups: list[Path]) -> list[Path]:
    """Remove empty cgroups (:func:`registry.orphaned_groups`); those that went."""
    gone = []
    for g in groups:
        with contextlib.suppress(OSError):
            g.rmdir()
            gone.append(g)
    return gone


def down_stale() -> list[tuple[registry.StaleTestbed, dict[str, list[int]]]]:
    """Stop every stale testbed (:func:`shrink.testbed.registry.stale`), remove its cgroups."""
    out = []
    for sb in registry.stale():
        recipe = recipe_of(sb.state)
        sig = int(sb.state.server.get("stop_signal", 15))
        stopped = {r.name: stop_and_release(recipe, r, sig) for r in sb.state.replicas}
        _remove_run_dirs(sb.state)
        sb.left = [(r, why) for r, why in _roots_left(sb.state) if why is not None]
        if sb.state.stopped is None:  # (a down that could not write its state put them back)
            _restore_irq(sb.state)
        registry.remove_entry(sb.entry)
        out.append((sb, stopped))
    return out
