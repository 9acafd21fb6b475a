"""The temporary folder a replay's parts are written in, and the ones killed runs left.

A cluster actor killed with its node (a lost host, ``ray.kill``), or a scaled-out
replay killed with ``kill -9``, never leaves its ``with TemporaryDirectory`` block,
so its folder (with an 8 MiB reserve in it, for an actor) stays for good: dozens had
piled up in one machine's /tmp. The folder's name carries its maker's PID; the next
run making one there removes the folders whose process is gone. It removes only what
a run made: a real folder (not a symlink), owned by this user, holding nothing but a
part's own files.

A PID names a process only in its own PID namespace: a replay in a container sharing
/tmp (or under ``unshare --pid``) has one this namespace does not know, and its live
folder read as lost, was removed mid-run with the rows it was writing. So the maker
also holds a lock on its folder (``flock`` on the folder itself, made under a hidden
name and renamed once locked); the kernel's lock goes with the process, in whatever
namespace it runs, and a folder whose lock another holds is never removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from shrink.folder_locks import lock_unheld

__all__ = [
    "ACTOR",
    "PART_NAMES",
    "PART_STEM_MAX",
    "SPAWNED",
    "drop_part_temporaries",
    "make_part_dir",
    "part_stem",
    "remove_lost_part_dirs",
    "remove_part_dir",
    "stale_parts",
]

ACTOR = "shrink-ray-"  # a cluster actor's: part.parquet
SPAWNED = "shrink-replay-"  # a scaled-out replay's without -o: run.part<i>.<run id>.parquet
# what a RunLogWriter makes for either: the file, its temp and its reserve
_PART = r"(part|run\.part\d+\.[0-9a-f]+)\.parquet"
_PART_FILE = re.compile(rf"{_PART}|\.{_PART}\.[0-9a-f]+\.(tmp|reserve)")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCKS: dict[Path, int] = {}  # the folders this process made: their locks, held


def make_part_dir(base: Path, prefix: str) -> Path:
    """A new private folder under ``base`` named for this process, locked by it (and by
    the children it forks) until :func:`remove_part_dir`.

    Its name is seen (hidden) before it is taken: another user of a shared /tmp may put
    a folder of their own there first. That name is left to them and another tried; a
    folder whose every name was taken so is an error naming the last."""
    for _ in range(_TRIES):
        hidden = Path(tempfile.mkdtemp(prefix=f".{prefix}{os.getpid()}-", dir=base))
        try:
            fd = os.open(hidden, _DIR)
        except FileNotFoundError:  # removed before it was locked: see below
            continue
        with contextlib.suppress(OSError):  # a file system that cannot lock: the PID alone
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        folder = hidden.with_name(hidden.name[1:])
        try:
            _rename_noreplace(hidden, folder)
        except OSError as exc:
            os.close(fd)
            shutil.rmtree(hidden, ignore_errors=True)
            # ENOENT: the empty hidden folder was removed before it was locked, by a
            # clean-up (remove_lost_part_dirs) in another PID namespace, where this
            # process's PID is no live one's: another name is tried, as for EEXIST
            if exc.errno not in (errno.EEXIST, errno.ENOENT):
                raise
            continue
        _LOCKS[folder] = fd
        return folder
    raise FileExistsError(
        errno.EEXIST,
        f"another's file held the name of this run's part folder each of {_TRIES} times "
        "(a shared temporary folder: set TMPDIR to a folder of your own)",
        str(folder),
    )


_TRIES = 5
_RENAME_NOREPLACE = 1


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, never in the place of another's: a folder renamed onto
    an empty one replaces it (root's, one of another user's in a sticky /tmp), and a
    check for the name before the rename leaves a moment to put one there."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        renameat2 = None
    if renameat2 is not None:
        at_cwd = -100
        if renameat2(at_cwd, os.fsencode(src), at_cwd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # (a kernel or file system without it)
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def remove_part_dir(folder: Path) -> None:
    """Remove a folder :func:`make_part_dir` made, then let go of its lock."""
    shutil.rmtree(folder, ignore_errors=True)
    fd = _LOCKS.pop(folder, None)
    if fd is not None:
        os.close(fd)


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
    """Remove the ``prefix`` folders under ``base`` whose maker is gone; return them.

    Also the hidden ``.prefix`` ones :func:`make_part_dir` had not yet renamed (its
    maker killed in between): those only when empty, as a maker leaves them."""
    name_re = re.compile(r"(\.?)" + re.escape(prefix) + r"(\d+)-[A-Za-z0-9_]+")
    removed: list[Path] = []
    names: list[str] = []
    with contextlib.suppress(OSError):
        names = os.listdir(base)
    for name in names:
        m = name_re.fullmatch(name)
        if m is None or int(m.group(2)) == os.getpid() or _alive(int(m.group(2))):
            continue
        folder = base / name
        fd = lock_unheld(folder)
        if fd is None:
            continue  # its maker lives, in a PID namespace of its own
        try:
            if _ours(folder) and os.path.samestat(os.fstat(fd), folder.lstat()):
                if m.group(1):
                    os.rmdir(folder)  # (refused unless empty: never one with files)
                else:
                    shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


# The name of each engine process's part beside a run's OUT.parquet, after OUT's stem:
# OUT.part0.<run id>.parquet, the run's id 12 hex digits of its own (OUT.part0.parquet
# before parts were marked). A run reads only its own parts: a kill -9 of the parent
# left OUT.part0/part1.parquet, which the next run into OUT merged as its own where one
# of its processes wrote no part.
PART_NAMES = r"\.part[0-9]+(?:\.[0-9a-f]{12})?\.parquet"
# A part's stem is OUT's cut to this many bytes, so that the longest part name (part999,
# 29 bytes after its stem) and its writer's temporaries (``.NAME.HEX.reserve``, 22 more)
# fit a file name's 255: beside a legal OUT of 227 bytes or more, every part was
# "File name too long", and its temporaries were left.
PART_STEM_MAX = 255 - len("..0123456789ab.reserve") - len(".part999.0123456789ab.parquet")


_CUT = re.compile(r"~[0-9a-f]{8}\Z")  # how a cut stem ends (:func:`part_stem`)


def part_stem(out: str | Path) -> str:
    """The stem of the parts of a run whose RunLog is ``out``: its name's stem, or where
    that passes :data:`PART_STEM_MAX` bytes, its head (never cut inside a UTF-8
    character) and ``~`` and 8 hex digits of the whole stem's hash. Cut alone, two
    RunLogs whose names share their first 204 bytes shared their parts' stem: a replay
    into one named the other's stopped run's parts as its own ("of a replay into B")."""
    import hashlib

    from shrink.atomic import cut_name

    stem = Path(out).with_suffix("").name
    size = len(os.fsencode(stem))
    # A stem already in the cut form (head, ~, 8 hex digits: 201-204 bytes) is marked
    # too: kept as it is, a user's legal name equal to another RunLog's cut stem (the
    # parts' own names, copied) took that RunLog's stopped run's parts as its own.
    if size <= PART_STEM_MAX and not (size > PART_STEM_MAX - 4 and _CUT.search(stem)):
        return stem
    mark = hashlib.sha256(os.fsencode(stem)).hexdigest()[:8]
    return f"{cut_name(stem, PART_STEM_MAX - 9)}~{mark}"


def stale_parts(folder: str | Path, stems: str) -> list[str]:
    """The parts (:data:`PART_NAMES`) of the runs whose RunLog stems match ``stems`` that
    ``folder`` holds as regular files (a symlink is no part), sorted: what a run stopped
    before its merge (kill -9) left. Named, never removed: they hold measured rows."""
    pattern = re.compile(rf"(?:{stems}){PART_NAMES}")
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if pattern.fullmatch(entry.name):
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                        found.append(entry.name)
    return sorted(found)


def drop_part_temporaries(paths: list[str]) -> list[str]:
    """Remove the temporaries the writers of this run's parts ``paths`` left beside them
    (``.NAME.HEX.tmp`` and the 8 MiB ``.NAME.HEX.reserve``): an engine process killed
    mid-run (kill -9, the OOM killer) left them after a run that ended exit 0, until a
    later replay into the same file. A part's name holds its run's id, so none is another
    run's; regular files of this user's only, never a symlink's target. The names removed."""
    removed: list[str] = []
    for path in paths:
        folder, name = os.path.split(path)
        pattern = re.compile(rf"\.{re.escape(name)}\.[0-9a-f]{{12}}\.(?:tmp|reserve)")
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder or "."):
                if not pattern.fullmatch(entry.name):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        os.unlink(entry.path)
                        removed.append(entry.name)
    return removed
