"""Programs root runs, found only where no other user could have put them.

``shutil.which`` takes the first match on ``PATH``: with a folder another user may
write early on root's ``PATH``, a ``lighttpd`` they put there ran as root (``lighttpd
-v`` for the versions) and then as the server. :func:`trusted_which` skips such a
match, and :func:`safe_to_run` is the rule it applies (the co-runner's helper, which
root also runs, is held to the same).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

__all__ = ["safe_to_run", "trusted_path", "trusted_which"]


def safe_to_run(path: str | Path) -> bool:
    """Whether root may run ``path``: it and every folder above it, as named and as
    resolved, are this user's or root's and writable by no one else (a sticky folder's
    entries excepted), so no other user could have put or swapped a program there."""
    me = os.geteuid()
    named = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    try:
        for p in dict.fromkeys([named, *named.parents, real, *real.parents]):
            st = os.lstat(p)
            if st.st_uid not in (0, me):
                return False
            if stat.S_ISLNK(st.st_mode):
                continue
            sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
            if st.st_mode & 0o022 and not sticky:
                return False
    except OSError:
        return False
    return True


def trusted_which(name: str, path: str | None = None) -> tuple[str | None, list[str]]:
    """The first ``name`` on ``path`` (default ``PATH``) that :func:`safe_to_run` allows,
    and the matches skipped before it (or all of them, with None), for the error. An
    empty entry (the working folder, for a shell) is not searched."""
    folders = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    skipped: list[str] = []
    for folder in dict.fromkeys(f for f in folders if f):
        found = shutil.which(name, path=folder)
        if found is None:
            continue
        if safe_to_run(found):
            return found, skipped
        skipped.append(found)
    return None, skipped


def trusted_path() -> str:
    """``PATH`` less its folders :func:`safe_to_run` refuses: for a program root runs that
    runs others by ``PATH`` (``cc`` runs ``as`` and ``ld`` so)."""
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(f for f in dict.fromkeys(folders) if f and safe_to_run(f))
