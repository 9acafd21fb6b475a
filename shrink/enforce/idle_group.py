"""An idle cpu cgroup at the top of the hierarchy, for the spinners that keep the
generator's CPUs awake (native/src/awake.rs) when shrink runs in a cpu cgroup other
than the root.

SCHED_IDLE is idle only within its task group. In the root group each spinner's
session is an autogroup at nice 19, which yields to other sessions; inside a child
cgroup autogroups do not apply, and a spinner competes at its group's full weight with
the group's siblings. A group whose ``cpu.idle`` is 1 (cgroup v1 ``cpu`` and v2 where
the cpu controller is enabled, kernel 5.15 and later) is itself idle against every
other group at its level; made as a child of the root (``shrink-awake-PID-START``),
it is idle against every group of the machine, and a spinner moved into it takes only
time nothing else wants.

Each run that needs it makes its own (named by its process's PID and start time,
which :func:`remove_stale` checks before removing one left by a process that is
gone: kill -9 of shrink) and removes it after its spinners have been reaped. Where it
cannot be made (no cpu controller, a cgroup namespace or a container that does not
show the hierarchy's root, v2 without the cpu controller below the root, no
permission, a kernel without ``cpu.idle``), :func:`idle_group_place` says why.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from shrink.enforce.cfs import (
    CgroupLayout,
    _shows_hierarchy_root,
    cgroup_layout,
    in_root_cpu_group,
)
from shrink.folder_locks import lock_unheld

__all__ = [
    "PREFIX",
    "IdleGroup",
    "idle_group_place",
    "make_idle_group",
    "remove_groups_of",
    "remove_stale",
]

PREFIX = "shrink-awake-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)")


@dataclass
class IdleGroup:
    """A made idle group: its folder; ``procs`` is the file a spinner writes its PID to;
    ``fd``, the folder open with its lock held (-1: none, or let go)."""

    path: Path
    fd: int = -1

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def remove(self) -> bool:
        """Remove the group (its spinners reaped: empty), then let go of its lock;
        whether it is gone."""
        try:
            with contextlib.suppress(FileNotFoundError):
                try:
                    self.path.rmdir()
                except OSError:
                    return False
            return True
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


def idle_group_place(
    layout: CgroupLayout | None = None, mountinfo_text: str | None = None
) -> tuple[Path | None, str | None]:
    """The cpu hierarchy's root where an idle group can be made, else (None, why not)."""
    try:
        layout = layout if layout is not None else cgroup_layout()
    except OSError:
        return None, "the cgroup mounts could not be read"
    root = layout.cpu
    if root is None:
        return None, "no cpu cgroup controller is mounted"
    try:
        if not _shows_hierarchy_root(layout, mountinfo_text):
            return None, "the cpu cgroup hierarchy's root is not visible here (a cgroup namespace)"
    except OSError:
        return None, "/proc/self/mountinfo could not be read"
    if layout.version == 2:
        try:
            enabled = (root / "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        if "cpu" not in enabled:
            return None, "cgroup v2's cpu controller is not enabled below the root"
    if not _has_cpu_idle(root, layout.version):
        return None, "the kernel has no cpu.idle (5.15 and later)"
    if not os.access(root, os.W_OK):
        return None, f"no permission to make a cgroup in {root}"
    return root, None


def _has_cpu_idle(root: Path, version: int) -> bool:
    """Whether the kernel's cpu controller has ``cpu.idle``: v1 shows it in the root too;
    v2 only below the root (a group with cpu.weight; True where none is seen)."""
    if version == 1:
        return (root / "cpu.idle").exists()
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.is_dir(follow_symlinks=False) and os.path.exists(
                os.path.join(entry.path, "cpu.weight")
            ):
                return os.path.exists(os.path.join(entry.path, "cpu.idle"))
    return True


def make_idle_group(root: Path, pid: int | None = None) -> tuple[IdleGroup | None, str | None]:
    """Make this process's idle group under ``root`` (first removing stale ones of
    processes gone): (the group, None), else (None, why not)."""
    remove_stale(root)
    pid = os.getpid() if pid is None else pid
    start = _start_time(pid)
    if start is None:
        return None, "this process's start time could not be read"
    path = root / f"{PREFIX}{pid}-{start}"
    group, why = _made_and_held(path)
    if group is None:
        return None, why
    try:
        (path / "cpu.idle").write_text("1")
        if (path / "cpu.idle").read_text().strip() != "1":
            raise OSError(0, "it did not take")
    except OSError as e:
        group.remove()
        why = "the kernel has no cpu.idle" if isinstance(e, FileNotFoundError) else e.strerror
        return None, f"cpu.idle of the cgroup {path.name} could not be set ({why})"
    return group, None


def _made_and_held(path: Path) -> tuple[IdleGroup | None, str | None]:
    """Make the group ``path`` and hold a lock on it (flock on its folder), which tells
    another run's :func:`remove_stale` it is live: a PID names a process only in its own
    PID namespace, and a run in a container sharing the hierarchy removed another's
    group just made (its spinners then could not join it, or cpu.idle was 'missing').
    One removed before its lock was taken is made again."""
    for _ in range(3):
        try:
            path.mkdir()
        except OSError as e:
            return None, f"the cgroup {path.name} could not be made ({e.strerror})"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # (removed meanwhile: made again)
        if not _lock(fd):
            os.close(fd)
            with contextlib.suppress(OSError):
                path.rmdir()  # (empty: just made)
            return None, (
                f"another process held the lock of the cgroup {path.name} for over "
                f"{LOCK_WAIT_S:g} s (the group is not used without it)"
            )
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
                return IdleGroup(path, fd), None
        except OSError:
            pass
        os.close(fd)
    return None, f"the cgroup {path.name} was removed each time it was made"


def _lock(fd: int) -> bool:
    """Take the lock of a group just made: another run's look at it holds it a moment.
    One kept longer (another user may open the folder and hold it) is waited for at most
    :data:`LOCK_WAIT_S`; False then (the group is not to be used without it)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        except OSError:
            return True  # (a file system that cannot lock: the PID and start time alone)


# How long a group just made waits for its lock held by another (a look lasts
# microseconds): past it the group is not used, since without its lock another run in a
# PID namespace of its own could take it for stale and remove it mid-run.
LOCK_WAIT_S = 1.0


def remove_stale(root: Path) -> list[str]:
    """Remove the idle groups (``shrink-awake-PID-START``) whose process is gone (none
    with that PID, or one started at another time); one still holding a process is
    left (the kernel refuses). Returns the names removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            m = _NAME.fullmatch(entry.name)
            if not m or not entry.is_dir(follow_symlinks=False):
                continue
            if _start_time(int(m.group(1))) == int(m.group(2)):
                continue  # its process lives
            if (group := _unheld(Path(entry.path))) is not None and group.remove():
                removed.append(entry.name)
    return removed


def _unheld(path: Path) -> IdleGroup | None:
    """The group at ``path`` with its lock taken by this process, or None when another
    holds it (its maker lives, in a PID namespace of its own) or it is gone."""
    fd = lock_unheld(path)
    return None if fd is None else IdleGroup(path, fd)


def remove_groups_of(pids: list[int], root: Path | None = None) -> None:
    """Remove the idle groups the processes ``pids`` (a run's engine processes, ended)
    made and did not remove, killed (kill -9, the OOM killer): one was left after the
    run, until a later run outside the root cpu cgroup made one. Their spinners die with
    them, a moment later: asked again for up to 0.5 s."""
    if root is None:
        if in_root_cpu_group():
            return  # (none made there)
        root, _ = idle_group_place()
        if root is None:
            return
    theirs = tuple(f"{PREFIX}{pid}-" for pid in pids)
    for _ in range(25):
        remove_stale(root)
        with contextlib.suppress(OSError):
            if not any(e.name.startswith(theirs) for e in os.scandir(root)):
                return
        time.sleep(0.02)


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None
