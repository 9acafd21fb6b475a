"""Removing a run root ``up`` made under shrink's private folder: only one made there,
and never through a symlink, also as root without CAP_DAC_OVERRIDE."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

__all__ = ["remove_run_root"]


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
    for _ in range(32):  # a run root is a few levels deep
        blocked: list[str] = []

        def note(_func: object, path: str, exc: object, blocked: list[str] = blocked) -> None:
            blocked.append(path)

        shutil.rmtree(root, onerror=note)
        if not root.exists() or not blocked:
            return
        changed = False
        for path in {str(q) for b in blocked for q in (b, os.path.dirname(b))}:
            with contextlib.suppress(OSError, NotImplementedError, ValueError):
                changed = _take_folder(root, path) or changed
        if not changed:
            return


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
