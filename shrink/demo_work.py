"""Where the demo keeps its trace and document root: ``--out``'s ``work`` folder, or,
when the servers' user cannot read that (a checkout under a private home), a folder
of its own under /var/tmp, reused by a rerun to the same ``--out``.

Such a folder outlives an ``--out`` that is removed, and /var/tmp is not emptied at
boot: 75 of them had piled up on one machine. Each names its ``--out`` in
``.made-for``; a demo making a new one removes those whose ``--out`` no longer points
back at them (what they hold, a trace and pages, the demo makes again). A demo holds
a shared lock on its folder's ``.demo-lock`` while it runs, and a folder so held is
never removed: a live demo's --out may not point back (two demos to one --out, an
--out others may write, one whose name ends in a space) and its servers read the
pages there mid-run. The lock file is 0600: only the folder's owner can open it, so no
other user can hold the lock and keep the folder for good (the folder and its 0644
``.made-for`` are open to every user, for the servers' sake). A demo of an older
shrink held ``.made-for`` instead: held by a process of this user's, it keeps the
folder too."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from shrink.atomic import make_dirs, write_text
from shrink.errors import ShrinkError

__all__ = ["WORK_BASE", "remove_orphans", "work_dir"]

# Where the demo puts its trace and document root when the servers' user cannot read
# ``--out`` (a checkout under a private home): a folder every user may enter.
WORK_BASE = "/var/tmp"


def work_dir(out: Path, target: str) -> Path:
    """Where the trace and the document root go: ``out/work``, unless the servers (run
    as an unprivileged user) cannot read it there, as in a checkout under a private home;
    then a fresh folder of its own that they can (its path in ``out/work-location``)."""
    from shrink.testbed.private import check_reachable, server_user

    work = out / "work"
    make_dirs(work)
    user = server_user() if target == "testbed" else None
    try:
        check_reachable(work, user)
        return work
    except ShrinkError:
        pass
    elsewhere = _earlier_work(out)
    if elsewhere is None:  # (a rerun uses its earlier one: one folder per --out)
        remove_orphans()
        elsewhere = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=WORK_BASE))
        elsewhere.chmod(0o755)
        write_text(out / "work-location", f"{elsewhere}\n")
        # written last: a folder without it (being made) is never taken for an orphan
        write_text(elsewhere / _MADE_FOR, f"{out.resolve()}\n")
    _hold(elsewhere)
    return elsewhere


_HELD: dict[Path, int] = {}  # this process's work folders: a lock on each .demo-lock


def _hold(where: Path) -> None:
    """Hold a shared lock on ``where``'s ``.demo-lock`` (made 0600 if missing) for this
    process's life.

    Another demo's clean-up looks whether a folder is held by taking its lock alone for
    a moment: a demo that asked just then went on without its lock, its folder no
    longer held for the rest of its run. So it asks again for a while (the look lasts
    microseconds; a lock kept by someone else keeps the folder too)."""
    if where in _HELD:
        return
    with contextlib.suppress(OSError):
        fd = os.open(where / _LOCK, _LOCK_OPEN | os.O_CREAT, 0o600)
        if not _private(fd):  # (none other can write the folder: not expected)
            os.close(fd)
            return
        for _ in range(_HOLD_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            except OSError:
                break
            _HELD[where] = fd
            return
        os.close(fd)


_HOLD_TRIES = 200  # 10 ms apart
_LOCK = ".demo-lock"
_LOCK_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _private(fd: int) -> bool:
    """A plain file of this user's that no one else may open."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _in_use(where: Path) -> bool:
    """A live demo holds ``where``'s ``.demo-lock`` (this one included), or an older
    shrink's holds its ``.made-for`` (:func:`_held_by_an_older_demo`). A lock on any
    other file there keeps nothing."""
    if where in _HELD or _held_by_an_older_demo(where):
        return True
    try:
        fd = os.open(where / _LOCK, _LOCK_OPEN)
    except OSError:
        return False  # none: no demo of this version ran there
    try:
        if not _private(fd):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _held_by_an_older_demo(where: Path) -> bool:
    """A demo of an older shrink, live, held a shared lock on its folder's
    ``.made-for`` (it knew no ``.demo-lock``). Any user may open that 0644 file and
    lock it, so only a holder that is a process of this user's keeps the folder: one that
    holds it now (a child it forked, its parent gone), not the PID that took the lock."""
    from shrink.procfs import flock_holding_processes

    try:
        st = os.lstat(where / _MADE_FOR)
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    holders = flock_holding_processes(st.st_dev, st.st_ino)
    return any(_euid(p) == os.geteuid() for p in holders)


def _euid(pid: int) -> int | None:
    """The effective user of ``pid`` (None where it cannot be read)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:") and len(f := line.split()) > 2 and f[2].isdigit():
            return int(f[2])
    return None


_PREFIX = "shrink-demo-"
_MADE_FOR = ".made-for"


def _ours(where: Path) -> bool:
    """A real folder of this user's, made where the demo makes them, that no one else
    may write."""
    try:
        st = os.lstat(where)
    except (OSError, ValueError):  # ValueError: a NUL in a path read from a file
        return False
    mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    made_here = where.parent == Path(WORK_BASE) and where.name.startswith(_PREFIX)
    return mine and not st.st_mode & 0o022 and made_here


def remove_orphans() -> list[Path]:
    """Remove the demo's folders under :data:`WORK_BASE` whose ``--out`` (named in
    their ``.made-for``) is gone or no longer points back at them; return them."""
    removed: list[Path] = []
    try:
        names = [n for n in os.listdir(WORK_BASE) if n.startswith(_PREFIX)]
    except OSError:
        return removed
    for name in names:
        where = Path(WORK_BASE) / name
        if not _ours(where):
            continue
        try:
            out = Path(_location(where / _MADE_FOR))
        except (OSError, ValueError):
            continue  # none: being made, or an older demo's (left as it was)
        try:
            points_back = Path(_location(out / "work-location")) == where
        except (OSError, ValueError):
            points_back = False
        if not points_back and not _in_use(where):
            shutil.rmtree(where, ignore_errors=True)
            removed.append(where)
    return removed


def _earlier_work(out: Path) -> Path | None:
    """The folder an earlier demo to ``out`` made (``out/work-location``), if it is still
    one of this user's, made where the demo makes them, and writable by no one else."""
    try:
        where = Path(_location(out / "work-location"))
    except (OSError, ValueError):
        return None
    return where if _ours(where) else None


# A work-location the demo wrote holds one path: more is not one it wrote.
_MAX_LOCATION = 4096


def _location(path: Path) -> str:
    """The path in ``out/work-location``, read only from a plain file of this user's own
    (not through a symlink, at most :data:`_MAX_LOCATION` bytes): ``--out`` may be a
    folder others can write, and a FIFO planted there hung the demo, a symlink to
    /dev/zero read without end. OSError when it is not such a file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(f"{path}: not a plain file of this user's")
        data = f.read(_MAX_LOCATION + 1)
    if len(data) > _MAX_LOCATION:
        raise OSError(f"{path}: longer than a path")
    # the line it wrote: a path may end in a space, and stripped it named another folder
    return data.decode("utf-8", "replace").removesuffix("\n")
