"""What a testbed's servers would serve, told from the mount table: a document root
that is or holds the whole file system or a system folder, and a file of shrink's
(the state, an output folder) that the document root reaches, by its path or through
a bind mount. Mount points come from /proc/self/mountinfo: nothing is walked."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from shrink.errors import DocrootError, ParameterError, printable

__all__ = ["Mount", "mount_table", "refuse_served", "refuse_whole_fs", "whole_fs_mount"]


class Mount(NamedTuple):
    device: str  # major:minor, as mountinfo gives it
    root: PurePosixPath  # the folder of its file system mounted here (a bind: not /)
    point: Path
    fs: str


def _unescaped(field: str) -> str:
    """A mountinfo path: blanks, newlines and backslashes are octal escapes there."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mount_table(mountinfo: str = "/proc/self/mountinfo") -> list[Mount]:
    """This mount namespace's mounts that a path can reach (not hidden: :func:`_visible`),
    in mountinfo's order; none when /proc is not there."""
    rows = []
    with (
        contextlib.suppress(OSError),
        open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh,
    ):
        for line in fh:
            f = line.split()
            fs = line.split(" - ", 1)[-1].split()[0]
            mount = Mount(f[2], PurePosixPath(_unescaped(f[3])), Path(_unescaped(f[4])), fs)
            rows.append((f[0], f[1], mount))
    return _visible(rows)


def _visible(rows: list[tuple[str, str, Mount]]) -> list[Mount]:
    """The mounts of ``rows`` (mount ID, parent's ID, mount) that a path can reach: not
    below one mounted on the same point (a child of theirs there), nor below one mounted
    beside them (the same parent) on a folder above, nor on a mount hidden. Kept, a proc
    mount at doc/p that a later mount over doc hid refused the docroot, and a path's place
    was taken from a hidden mount below it (its file system, not the one a later bind of
    the docroot over a folder above put there: the state reached through that bind was
    served). Told by the parents, not by the lines' order: a mount moved (``mount
    --move``) keeps its line, and one moved onto a later mount's point is on top of it."""
    line_of = {mid: line for line, (mid, _, _) in enumerate(rows)}
    children: dict[str, list[str]] = {}
    for mid, parent, _ in rows:
        if parent != mid:
            children.setdefault(parent, []).append(mid)

    def over(mid: str) -> bool:  # (another mounted on its point: on top of it)
        point = rows[line_of[mid]][2].point
        return any(rows[line_of[c]][2].point == point for c in children.get(mid, []))

    def beside(line: int) -> bool:  # (one mounted beside it on a folder above, or later on it)
        _, parent, mount = rows[line]
        for c in children.get(parent, []):
            point = rows[line_of[c]][2].point
            if point in mount.point.parents or (point == mount.point and line_of[c] > line):
                return True
        return False

    gone: dict[str, bool] = {}  # (neither it nor what is mounted on it can be reached)
    for mid, _, _ in rows:
        chain = []  # mid and those it is mounted on, not yet told, innermost first
        while mid in line_of and mid not in gone and mid not in chain:
            chain.append(mid)
            mid = rows[line_of[mid]][1]
        for at in reversed(chain):
            gone[at] = gone.get(rows[line_of[at]][1], False) or beside(line_of[at])
    return [mount for mid, _, mount in rows if not gone[mid] and not over(mid)]


def _place(path: Path, table: list[Mount]) -> tuple[str, PurePosixPath] | None:
    """Where ``path`` (resolved) is in its file system: (device, path from that file
    system's root), the same for every bind mount that reaches it."""
    best = None
    for mount in table:
        if (mount.point == path or mount.point in path.parents) and (
            best is None or len(mount.point.parts) >= len(best.point.parts)
        ):
            best = mount
    if best is None:
        return None
    return best.device, best.root / path.relative_to(best.point)


def refuse_served(path: str | Path, docroot: str | Path, what: str, holds: str) -> None:
    """Refuse ``path`` inside the document root: the servers serve what is written
    there to any client that asks for it (``testbed up --state doc/tb.json``: ``GET
    /tb.json`` was answered 200 with the testbed's PIDs, cgroups and run folder).
    Compared resolved, and in the file system: through a bind mount of the document
    root made elsewhere (``mount --bind doc docb``, ``--state docb/tb.json``), or of a
    folder of it, or one inside the document root, the state was served all the same."""
    path, docroot = Path(os.path.realpath(path)), Path(os.path.realpath(docroot))
    reached = path == docroot or docroot in path.parents
    table = mount_table()
    if not reached and (place := _place(path, table)) is not None:
        served = [_place(docroot, table)] + [
            (m.device, m.root) for m in table if docroot in m.point.parents
        ]
        reached = any(
            top is not None
            and top[0] == place[0]
            and (top[1] == place[1] or top[1] in place[1].parents)
            for top in served
        )
        via = " (reached there through a mount)"
    else:
        via = ""
    if reached:
        raise ParameterError(
            f"{what} {path}: inside the document root {docroot}{via}, whose files the "
            f"servers serve to any client that asks ({holds}): put it outside the document root"
        )


# Folders whose files are secrets or other users' (another testbed's state in /var/tmp),
# and kernel file systems (/proc holds every process's command line): a document root
# that is one, or holds a mount of one, is refused as it is for "/". (A bind of /etc in
# the docroot: GET /etcb/passwd was 200.) Mounts made after up are seen at the next run
# against the testbed, and by `testbed status` (:func:`whole_fs_mount`).
_SYSTEM = ("/etc", "/root", "/home", "/var", "/var/tmp", "/var/lib", "/var/log", "/tmp", "/run",
           "/boot", "/proc", "/sys", "/dev")  # fmt: skip
_KERNEL_FS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs",
              "tracefs", "securityfs", "bpf", "configfs", "efivarfs", "pstore"}  # fmt: skip


def refuse_whole_fs(docroot: Path) -> None:
    """Refuse a document root that is, or holds a mount point that is, the same folder
    as ``/`` (a bind mount of it) or as a system folder (``_SYSTEM``), or a kernel file
    system: the servers served every file their user may read, other testbeds' state
    files among them (``mount --bind / doc/all``: ``GET /all/etc/passwd`` was 200).
    Mount points come from /proc/self/mountinfo: nothing is walked."""
    if (what := whole_fs_mount(docroot)) is not None:
        raise DocrootError(f"{what}, whose files the servers would serve; name a folder without it")


def whole_fs_mount(docroot: Path, seen_by: int | None = None) -> str | None:
    """What :func:`refuse_whole_fs` refuses in ``docroot``, as "document root D: P,
    inside it, is a system folder (a mount of /etc)", or None. Cheap (one read of the
    mount table, a stat per mount point under it): a running testbed's users ask it
    again before each run, since a mount made under its document root after ``up``
    (``mount --bind /etc doc/x``) was served.

    ``seen_by``: a server's PID, whose mount namespace is looked at (its mount table,
    and paths through its /proc/PID/root): a mount made only in shrink's own (``unshare
    --mount``) was said to be served, and the servers answered it 404."""
    root, table = "", "/proc/self/mountinfo"
    if seen_by is not None and os.access(f"/proc/{seen_by}/root/", os.X_OK):
        root, table = f"/proc/{seen_by}/root", f"/proc/{seen_by}/mountinfo"
    try:
        tops = {"/": os.stat(root + "/")}
    except OSError:  # (the server ended since: a traceback; looked at from here, as before)
        root, table = "", "/proc/self/mountinfo"
        tops = {"/": os.stat("/")}
    for folder in _SYSTEM:
        with contextlib.suppress(OSError):
            tops[folder] = os.stat(root + folder)
    points = {docroot: ""}
    for mount in mount_table(table):
        if mount.point == docroot or docroot in mount.point.parents:
            points[mount.point] = mount.fs if mount.fs in _KERNEL_FS else ""  # (last: on top)
    for point, kernel_fs in points.items():
        # (escaped: `testbed status` prints it as it is, a newline in a name forged a line)
        inside = ":" if point == docroot else f": {printable(point)}, inside it, is"
        with contextlib.suppress(OSError):
            st = os.stat(root + str(point))
            what = [
                name if point == Path(name) else f"a mount of {name}"
                for name, top in tops.items()
                if os.path.samestat(st, top)
            ]
            if kernel_fs or what:
                whole = "the whole file system" if what == ["a mount of /"] else "a system folder"
                what = f"{kernel_fs}, a kernel file system" if kernel_fs else what[0]
                return f"document root {printable(docroot)}{inside} {whole} ({what})"
    return None
