"""Whether a user exists in this process's user namespace.

Root in a user namespace (``unshare -U -r``) is UID 0 without the machine's privilege:
a UID its maps leave out cannot own a file or run a process there, so ``up`` could not
give the server user its folder ("error: .../srv: Invalid argument")."""

from __future__ import annotations

__all__ = ["in_user_namespace", "realtime_refused_here", "setgroups_denied", "unmapped"]


def _ranges(which: str) -> list[tuple[int, int]]:
    """The IDs ``/proc/self/{which}_map`` maps, as (first, count); all of them unread."""
    try:
        with open(f"/proc/self/{which}_map") as fh:
            rows = [line.split() for line in fh if line.strip()]
    except OSError:
        return [(0, 2**32)]
    return [(int(row[0]), int(row[2])) for row in rows if len(row) == 3]


def unmapped(uid: int, gid: int) -> str | None:
    """What of ``uid`` and ``gid`` this user namespace does not map ("UID 33"), or None."""
    for which, n in (("uid", uid), ("gid", gid)):
        ranges = _ranges(which)
        if not any(first <= n < first + count for first, count in ranges):
            shown = ", ".join(f"{f}-{f + c - 1}" for f, c in ranges) or "none"
            return f"{which.upper()} {n} (this user namespace maps {which.upper()}s {shown})"
    return None


def setgroups_denied() -> bool:
    """Whether this user namespace forbids setgroups (``/proc/self/setgroups`` says
    ``deny``, as ``unshare -U -r`` writes it): its root cannot drop its groups to start a
    server as another user, whose IDs may all be mapped (a map of 0-999). ``up`` said
    "cannot start lighttpd: Exception occurred in preexec_fn."."""
    try:
        with open("/proc/self/setgroups") as fh:
            return fh.read().strip() == "deny"
    except OSError:  # (the machine's own namespace, or no /proc)
        return False


def in_user_namespace() -> bool:
    """Whether this process runs in a user namespace other than the machine's (its UID
    map is not the whole identity map): its root has no privilege over the machine's
    resources, such as SCHED_FIFO, though its capabilities read as full there."""
    return _ranges("uid") not in ([(0, 2**32 - 1)], [(0, 2**32)])


def realtime_refused_here(priority: int) -> str | None:
    """Why SCHED_FIFO ``priority`` was refused to root of a user namespace, or None: its
    capabilities read as full, and the refusal was said to be "by something else than a
    capability (a seccomp filter or a security module may)"."""
    import os

    if os.geteuid() != 0 or not in_user_namespace():
        return None
    return (
        f"realtime priority {priority}: this process is root of a user namespace (unshare "
        "-U), whose CAP_SYS_NICE does not reach the machine's scheduler; run shrink as the "
        "machine's root for it, or run without --realtime"
    )
