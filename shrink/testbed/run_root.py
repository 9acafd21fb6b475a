"""Removing a run root ``up`` made under shrink's private folder: only one made there,
never through a symlink nor into a file system mounted inside it, also as root without
CAP_DAC_OVERRIDE; and what was left, and why."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = ["remove_run_root", "why_left"]


def remove_run_root(run_dir: str | Path, base: Path) -> bool:
    """Remove the run root of a replica's ``run_dir`` if it is one ``up`` made under ``base``.

    A state file is not trusted: a run dir anywhere else is left alone. True if removed.
    """
    if not run_dir:
        return False
    root = Path(run_dir).parent
    try:
        ours = (
            root.parent.resolve() == base.resolve()
            and root.name.startswith("up-")
            and not root.is_symlink()
            and os.lstat(root).st_uid == os.geteuid()
        )
    except OSError:
        return False
    if ours:
        _remove_tree(root)
    return ours and not root.exists()


def _remove_tree(root: Path) -> None:
    """Remove ``root``, a run root ``up`` made. Its ``srv/`` is the server user's (0700):
    root without CAP_DAC_OVERRIDE (a container, ``capsh --drop``) may not enter it, and
    ``rmtree`` left the whole run root, the servers' configs and logs, without a word.
    Each folder it could not enter or empty is made root's (``lchown``: never through a
    symlink; CAP_CHOWN) and the removal tried again, a pass a level deeper."""
    root = Path(os.path.realpath(root))  # (not a symlink: a folder above may be one)
    for _ in range(32):  # a run root is a few levels deep
        blocked: list[str] = []

        def note(_func: object, path: str, exc: object, blocked: list[str] = blocked) -> None:
            if getattr(exc, "errno", None) != errno.EXDEV:  # (a mount point: never taken)
                blocked.append(path)

        _remove_below(root, note)
        if not root.exists() or not blocked:
            return
        changed = False
        for path in {str(q) for b in blocked for q in (b, os.path.dirname(b))}:
            with contextlib.suppress(OSError, NotImplementedError, ValueError):
                changed = _take_folder(root, path) or changed
        if not changed:
            return


def _mounts_below(root: Path) -> dict[str, str]:
    """The mount points below ``root`` (path: file system type), from the mount table."""
    from shrink.testbed.mounts import mount_table

    top = os.path.realpath(root)
    return {
        str(m.point): m.fs
        for m in mount_table()
        if str(m.point) != top and str(m.point).startswith(top.rstrip(os.sep) + os.sep)
    }


def _remove_below(root: Path, note: Callable[[object, str, object], None]) -> None:
    """``shutil.rmtree(root, onerror=note)`` that never enters a file system mounted
    below ``root`` (a bind mount, a tmpfs): ``rmtree`` checks symlinks, not mounts, and
    emptied a file system mounted in the run root before it failed on its mount point.
    A folder on another device, or a mount point of the mount table (a bind mount of
    the same file system), is left and noted; the rest is removed."""
    mounts = set(_mounts_below(root))
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        note(os.open, str(root), exc)
        return
    try:
        # Walked by its real path, as the mount table names mount points: by the path
        # given (through a symlink above, /var/run for /run) a bind mount of the same
        # file system was not told, entered and emptied.
        _empty(fd, os.path.realpath(root), (os.fstat(fd).st_dev, mounts), note)
    finally:
        os.close(fd)
    try:
        os.rmdir(root)
    except OSError as exc:
        note(os.rmdir, str(root), exc)


def _empty(fd: int, path: str, where: tuple[int, set[str]], note: Callable) -> None:
    """Remove what the folder open as ``fd`` (at ``path``) holds, not crossing a mount."""
    dev, mounts = where
    try:
        entries = list(os.scandir(fd))
    except OSError as exc:
        note(os.scandir, path, exc)
        return
    for entry in entries:
        sub = os.path.join(path, entry.name)
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir and (entry.stat(follow_symlinks=False).st_dev != dev or sub in mounts):
                note(_empty, sub, OSError(errno.EXDEV, "a mount point", sub))
                continue
            if not is_dir:
                os.unlink(entry.name, dir_fd=fd)
                continue
            child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            note(os.unlink, sub, exc)
            continue
        try:
            _empty(child, sub, where, note)
        finally:
            os.close(child)
        try:
            os.rmdir(entry.name, dir_fd=fd)
        except OSError as exc:
            note(os.rmdir, sub, exc)


def why_left(root: Path) -> str:
    """Why the run root ``root`` is still there after :func:`remove_run_root`: a file
    system mounted inside it (never entered), a file or folder chattr locks, or the
    first entry that could not be removed and its error."""
    from shrink.errors import printable
    from shrink.files import lock_of

    if mounts := _mounts_below(root):
        at, fs = sorted(mounts.items())[0]
        more = f" (and {len(mounts) - 1} more)" if len(mounts) > 1 else ""
        return (
            f"{printable(at)} is a mount point ({fs}){more}: down neither enters nor "
            "unmounts a file system mounted in it; unmount it, then remove the folder"
        )
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            if lock := lock_of(Path(folder, name)):
                return f"{printable(os.path.join(folder, name))} is {lock}"
    if lock := lock_of(root):
        return f"it is {lock}"
    failed: list[tuple[str, object]] = []
    _remove_below(root, lambda _f, path, exc: failed.append((path, exc)))
    if failed:
        path, exc = failed[0]
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{printable(path)}: {why}"
    return "it could not be removed"


def _take_folder(root: Path, path: str) -> bool:
    """Make the folder ``path`` below ``root`` root's and 0700; True if it was another's.

    Reached from ``root`` one name at a time (``O_PATH | O_NOFOLLOW``): never through a
    symlink, the last name's or a folder's on the way. By the path's string, a folder
    on the way the server user swapped for a symlink after ``rmtree`` named the path
    (``srv/a/b`` -> ``/var/lib``) made root chown and chmod the folder it led to."""
    rel = os.path.relpath(path, root)
    parts = [] if rel == os.curdir else rel.split(os.sep)
    if not parts or os.pardir in parts:
        return False  # the root is ours already; nothing outside it is touched
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for name in parts[:-1]:
            fd, prev = os.open(name, flags, dir_fd=fd), fd
            os.close(prev)
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid == os.geteuid():
            return False
        os.chown(parts[-1], os.geteuid(), -1, dir_fd=fd, follow_symlinks=False)
        with contextlib.suppress(OSError, NotImplementedError):  # its owner may enter, empty it
            os.chmod(parts[-1], 0o700, dir_fd=fd, follow_symlinks=False)
        return True
    finally:
        os.close(fd)
