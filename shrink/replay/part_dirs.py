"""The temporary folder a replay's parts are written in, and the ones killed runs left.

A cluster actor killed with its node (a lost host, ``ray.kill``), or a scaled-out
replay killed with ``kill -9``, never leaves its ``with TemporaryDirectory`` block,
so its folder (with an 8 MiB reserve in it, for an actor) stays for good: dozens had
piled up in one machine's /tmp. The folder's name carries its maker's PID; the next
run making one there removes the folders whose process is gone. It removes only what
a run made: a real folder (not a symlink), owned by this user, holding nothing but a
part's own files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["ACTOR", "SPAWNED", "make_part_dir", "remove_lost_part_dirs"]

ACTOR = "shrink-ray-"  # a cluster actor's: part.parquet
SPAWNED = "shrink-replay-"  # a scaled-out replay's without -o: run.part<i>.<run id>.parquet
# what a RunLogWriter makes for either: the file, its temp and its reserve
_PART = r"(part|run\.part\d+\.[0-9a-f]+)\.parquet"
_PART_FILE = re.compile(rf"{_PART}|\.{_PART}\.[0-9a-f]+\.(tmp|reserve)")


def make_part_dir(base: Path, prefix: str) -> Path:
    """A new private folder under ``base`` named for this process."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))


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


def remove_lost_part_dirs(base: Path, prefix: str) -> list[Path]:
    """Remove the ``prefix`` folders under ``base`` whose maker is gone; return them."""
    name_re = re.compile(re.escape(prefix) + r"(\d+)-[A-Za-z0-9_]+")
    removed: list[Path] = []
    names: list[str] = []
    with contextlib.suppress(OSError):
        names = os.listdir(base)
    for name in names:
        m = name_re.fullmatch(name)
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        folder = base / name
        if _ours(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
