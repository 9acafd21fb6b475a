"""The temporary folder a cluster actor writes its part in, and the ones lost actors left.

An actor killed with its node (a lost host, ``ray.kill``) never leaves its
``with TemporaryDirectory`` block, so its folder, with an 8 MiB reserve in it,
stays on that node for good. The folder's name carries the actor's PID; the next
actor on that node removes the folders whose process is gone. It removes only what
an actor made: a real folder (not a symlink), owned by this user, holding nothing but
a part's own files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "make_part_dir", "remove_lost_part_dirs"]

PREFIX = "shrink-ray-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-[A-Za-z0-9_]+")
# what a RunLogWriter makes for path "part.parquet": the file, its temp and its reserve
_PART_FILE = re.compile(r"(part\.parquet|\.part\.parquet\.[0-9a-f]+\.(tmp|reserve))")


def make_part_dir(base: Path) -> Path:
    """A new private folder under ``base`` named for this process."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ours(folder: Path) -> bool:
    """A real folder of this user's holding only a part's files."""
    try:
        st = folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return False
        for entry in os.scandir(folder):
            if not entry.is_file(follow_symlinks=False) or not _PART_FILE.fullmatch(entry.name):
                return False
    except OSError:
        return False
    return True


def remove_lost_part_dirs(base: Path) -> list[Path]:
    """Remove the part folders under ``base`` whose actor process is gone; return them."""
    removed: list[Path] = []
    names: list[str] = []
    with contextlib.suppress(OSError):
        names = os.listdir(base)
    for name in names:
        m = _NAME.fullmatch(name)
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        folder = base / name
        if _ours(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
