"""Folder locks: one run writes a folder's files at a time, and what a killed writer left.

A run that writes several files into one folder (a sweep's ``--runlogs``, a
prediction's folder) holds the kernel's ``flock`` on the folder itself for its whole
life (:func:`claimed`); runs that may share a folder hold it shared
(:func:`claimed_shared`). A lock dies with its process, so a kill -9 frees the folder,
and the temporaries the killed writer left there are removed by the next holder
(:func:`drop_temporaries`). A single output whose folder another run holds is refused
(:func:`refuse_held_folder`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from shrink.atomic import _noted_as, make_dirs, open_dir
from shrink.errors import OutputBusyError, WriteError, printable

__all__ = [
    "claimed",
    "claimed_shared",
    "drop_temporaries",
    "hold_output",
    "lock_unheld",
    "refuse_held_folder",
    "release_outputs",
]


def _holder(fd: int) -> str | None:
    """Who holds the ``flock`` on ``fd``'s file: "PID 1234 (python3)", or None. A process
    that holds it now, where it can be seen; else the one that took it (/proc/locks: it may
    be gone, its child holding the lock on, and its PID another process's)."""
    from shrink.procfs import flock_holders, flock_holding_processes, proc_info

    st = os.fstat(fd)
    now = flock_holding_processes(st.st_dev, st.st_ino, first=True)
    pids = [p for p in now or flock_holders(st.st_dev, st.st_ino) if p != os.getpid()]
    if not pids:
        return None
    info = proc_info(pids[0])
    return f"PID {pids[0]}" + (f" ({printable(info.comm)})" if info is not None else "")


# The folders (device, inode) this process holds the :func:`claimed` lock of.
_HELD: set[tuple[int, int]] = set()


def drop_temporaries(folder: str | Path, names: str) -> list[str]:
    """Remove the temporaries a killed writer left in ``folder`` for the files whose
    names match the regular expression ``names`` (``.NAME.HEX.tmp``, as
    :func:`open_exclusive` makes them, and a RunLog writer's 8 MiB ``.NAME.HEX.reserve``,
    which a killed sweep left too, one a kill): regular files of this user's, never a symlink's
    target. Only while this process holds the folder's :func:`claimed` lock: no live
    writer of that run is there. A folder it could not lock (NFS locks no folder: flock
    there needs a file open to write) keeps them all, as may a live run's be among them.
    The names removed."""
    pattern = re.compile(rf"\.(?:{names})\.[0-9a-f]{{12}}\.(?:tmp|reserve)")
    fd = open_dir(folder)
    removed: list[str] = []
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) not in _HELD:
            return removed
        for name in os.listdir(fd):
            if not pattern.fullmatch(name):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    os.unlink(name, dir_fd=fd)
                    removed.append(name)
    finally:
        os.close(fd)
    return removed


@contextlib.contextmanager
def claimed(folder: str | Path, option: str = "-o") -> Iterator[Path]:
    """``folder`` (made if need be) held by this run alone while the block runs
    (``option``: the one that named it, said when another run holds it).

    Two runs writing one output folder would each replace the other's files, one by
    one, and each say it wrote them: the second is refused before it measures. The
    lock is the kernel's (``flock`` on the folder itself, opened as :func:`open_dir`
    opens it): it goes with the process, whatever stops it, and leaves no file behind.
    A folder made here and still empty at the end (the run refused its options) is
    removed again.
    """
    made = not os.path.lexists(folder)
    path = make_dirs(folder)
    fd = open_dir(path)
    st = os.fstat(fd)
    key, locked = (st.st_dev, st.st_ino), False
    try:
        try:
            if key not in _output_folders():  # (else held already, as its output)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                _HELD.add(key)
        except BlockingIOError:
            raise OutputBusyError(path, _holder(fd), option=option) from None
        except OSError:
            pass  # a file system that cannot lock a folder: the run goes on unguarded
        yield path
    finally:
        if locked:
            _HELD.discard(key)
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):  # not empty: the run wrote there
                os.rmdir(path)


@contextlib.contextmanager
def claimed_shared(
    folder: str | Path, names: str, when_alone: Callable[[Path], None] | None = None
) -> Iterator[Path]:
    """``folder`` (made if need be) shared by the runs that each write files of their own
    there (replays, each its RunLog), and refused while one run holds it alone
    (:func:`claimed`: a sweep's --runlogs, which writes run names a replay may too).

    The temporaries a killed writer left for ``names`` (:func:`drop_temporaries`) are
    cleared only when no other run shares the folder: one may be a live writer's. Two
    replays into one folder were refused when the folder was held alone by each.
    ``when_alone(folder)`` is called then too: what it finds there no live run wrote."""
    made = not os.path.lexists(folder)
    path = make_dirs(folder)
    fd = open_dir(path)
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    try:
        try:
            if key in _output_folders():  # held alone already, as its output: unshared
                raise OSError("held here")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone: bool | None = True
        except BlockingIOError:
            alone = False
        except OSError:
            alone = None  # a file system that cannot lock a folder: unguarded
        if alone:
            _HELD.add(key)
            try:
                drop_temporaries(path, names)
                if when_alone is not None:
                    when_alone(path)
            finally:
                _HELD.discard(key)
        if alone is not None:
            try:  # from alone to shared, or shared with the runs there
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise OutputBusyError(path, _holder(fd)) from None
        yield path
    finally:
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):  # not empty: the run wrote there
                os.rmdir(path)


def refuse_held_folder(path: str | Path) -> None:
    """Raise :class:`OutputBusyError` when the folder an output goes to is one another
    run holds (:func:`claimed`: a sweep's ``--runlogs``, a prediction's folder): a
    ``replay -o`` there replaced a RunLog the sweep had kept."""
    try:
        fd = open_dir(_noted_as(path).parent)  # (a symlinked one too)
    except OSError:
        return  # not there yet: no one holds it
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in _HELD:
            return  # this process's own
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusyError(Path(path).parent, _holder(fd)) from None
        except OSError:
            pass  # a file system that cannot lock a folder
    finally:
        os.close(fd)  # (the shared lock goes with it)


def lock_unheld(folder: Path) -> int | None:
    """``folder`` opened (never through a symlink) and locked alone by this process: the
    descriptor, or None when a live process holds its lock (its maker, perhaps in a PID
    namespace of its own) or it cannot be opened. Where folders cannot be locked, the
    descriptor unlocked: its maker could not have locked it either."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        pass
    return fd


# The outputs this process holds (:func:`hold_output`): path -> (folder, lock file name,
# the lock file's descriptor, whether the lock file is this run's to remove).
_OUTPUTS: dict[str, tuple[int, str, int, bool]] = {}


def _held_here(st: os.stat_result) -> bool:
    """Whether this process already holds the lock file ``st`` is (an output it named by
    another name: ``-o d/x --runlogs link/x``)."""
    return any(
        (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino)
        for s in (os.fstat(fd) for _, _, fd, _ in _OUTPUTS.values())
    )


def _open_lock(name: str, dir_fd: int) -> tuple[int, bool] | None:
    """The lock file ``name`` in ``dir_fd`` opened (never through a symlink): its descriptor
    and whether it is this run's own to remove when let go (made by it, or an empty file of
    this user's a killed run left). None for anything else there (a FIFO, a directory,
    another user's file): not a lock file of this user's runs, neither held nor removed.
    As root, a FIFO or a file another user planted at ``.c.json.lock`` in a shared folder
    was opened, locked and removed at the end."""
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        pass
    else:
        # Readable by whoever may write the folder (its group, everyone), so their runs
        # can open it to lock against this one: at 0600, another user's run in a shared
        # folder could not open it and went on unguarded, replacing this run's output.
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o600 | (os.fstat(dir_fd).st_mode & 0o022) << 1)
        return fd, True
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # (a FIFO: no wait)
    fd = os.open(name, flags, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    # Another user's run's lock file locks against it too; only this user's is removed.
    return fd, st.st_uid == os.geteuid() and st.st_size == 0


def _as_reached(folder: Path) -> Path:
    """``folder``'s own path, as a write reaches it (:func:`open_dir`: through symlinks of
    root's or this user's only); as named when it cannot be reached (new, or refused)."""
    try:
        fd = open_dir(folder)
    except OSError:
        return folder
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return folder
    finally:
        os.close(fd)


def hold_output(path: str | Path, kind: str = "file", option: str = "-o") -> None:
    """Hold ``path`` (an output ``kind``: file or dir, a command named) for this run, or raise
    :class:`OutputBusyError` (naming ``option``, the one that named it) when another run
    holds it. Two runs with one ``-o`` both
    passed the output's check, each measured (the same server at once) and said it
    wrote the output, and the one that ended first had its files replaced (``split``:
    every part, both exit 0). The lock is the kernel's ``flock`` on ``.NAME.lock`` in
    the output's folder (made 0600, readable too by those who may write the folder; never
    through a symlink), released and removed by
    :func:`release_outputs`; a kill leaves the empty file, unheld. A folder that cannot
    be locked (or written), or anything but a regular file at that name, leaves the run
    unguarded, as before."""
    p = _noted_as(path)
    if kind == "dir" or p.name in ("", ".."):
        # A folder is written through a symlink to it, and named by its "..": the lock of
        # the folder it is (``-o d/..`` was held as d/....lock, ``-o link`` as .link.lock,
        # and a run with the folder's own name beside it went unrefused).
        p = _as_reached(p)
        if not p.name:
            return  # (/: no folder above it to hold its lock in)
    key = str(p)
    if key in _OUTPUTS:
        return
    try:
        dir_fd = open_dir(p.parent)
    except OSError:
        return
    name = f".{p.name}.lock"
    try:
        for _ in range(10):
            try:
                opened = _open_lock(name, dir_fd)
            except FileNotFoundError:  # (removed by its last holder meanwhile)
                continue
            if opened is None:
                break
            fd, own = opened
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except BlockingIOError:
                if _held_here(os.fstat(fd)):
                    os.close(fd)
                    break  # this run's own, by another name
                holder = _holder(fd)
                os.close(fd)
                raise OutputBusyError(
                    p, holder, "folder" if kind == "dir" else "file", option
                ) from None
            except OSError:  # (removed by its last holder meanwhile: take the new one)
                os.close(fd)
                continue
            st = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                _OUTPUTS[key] = (dir_fd, name, fd, own)
                if kind == "dir":
                    _hold_folder(key, p)
                return
            os.close(fd)
    except OutputBusyError:
        os.close(dir_fd)
        raise
    except OSError:
        pass  # a folder this user cannot write, or that cannot lock: unguarded
    os.close(dir_fd)


# The output folders this process holds by the folder itself (:func:`_hold_folder`): path
# -> (the folder's descriptor, its (device, inode), whether this run made it).
_FOLDERS: dict[str, tuple[int, tuple[int, int], bool]] = {}


def _hold_folder(key: str, folder: Path) -> None:
    """Hold output folder ``folder`` by its own ``flock`` too (made if new, removed again
    at the end while empty): the folder, not a name of it, is what is held. Its lock file
    ``.NAME.lock`` names it: the same folder under a second name (a bind mount's mount
    point beside its source, or the folder renamed mid-run) had a lock file of its own,
    and a second run to it wrote the folder the first one was writing. A folder another
    run holds is refused (the lock file taken here let go again); one this process holds
    (:func:`claimed`), or one that cannot be locked, is left as it is."""
    # By its name in the folder above, held (:func:`hold_output`), as it is removed: by its
    # path from /, a folder the user had made in a working folder past PATH_MAX was "not
    # there" (ENAMETOOLONG), taken for this run's, and removed when the run was refused.
    where = _OUTPUTS[key][0]
    try:
        os.stat(folder.name, dir_fd=where, follow_symlinks=False)
        made = False
    except FileNotFoundError:
        made = True
    except OSError:
        made = False  # (unknown: never removed)
    try:
        make_dirs(folder)
        fd = open_dir(folder)
    except (OSError, WriteError):  # (refused: a symlink of another user's, say)
        return
    st = os.fstat(fd)
    ino = (st.st_dev, st.st_ino)
    try:
        if ino in _HELD:
            raise OSError("held here")  # (this process's own: nothing to take)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        made = _mark_made(fd, made)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        _let_go(*_OUTPUTS.pop(key), close_dir=False)  # (its caller closes the folder)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(folder.name, dir_fd=where)
        raise OutputBusyError(folder, holder, "folder") from None
    except OSError:
        os.close(fd)
        return
    _HELD.add(ino)
    _FOLDERS[key] = (fd, ino, made)


# A file in an output folder this run made, naming the run (PID and start time) until it
# ends: a kill -9 between the option check (which makes the folder, to hold it) and the
# first write left an empty folder, which the next run into it took as the user's own
# and left again when it too wrote nothing.
MADE_MARK = ".shrink-made"


def _mark_made(fd: int, made: bool) -> bool:
    """Whether the output folder ``fd`` (held) is this run's to remove while empty: made
    now, or the empty leftover of a run killed before its first write (its mark alone
    there, its maker gone: taken without a word). A mark of a run gone beside files is
    removed, the folder kept. This run's mark is put there when the folder is its own."""
    from shrink.processes import is_alive
    from shrink.procfs import proc_info

    with contextlib.suppress(OSError, ValueError):
        # Nothing but a regular file is opened: a FIFO by that name, opened to be read,
        # held the run for good; a device's open acts (a terminal's became the controlling
        # one of a run in a session of its own). O_NONBLOCK, O_NOCTTY: one swapped in.
        if not stat.S_ISREG(os.stat(MADE_MARK, dir_fd=fd, follow_symlinks=False).st_mode):
            raise ValueError(MADE_MARK)  # (not a mark: left as it is)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        with open(os.open(MADE_MARK, flags, dir_fd=fd), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ValueError(MADE_MARK)  # (not a mark: left as it is)
            pid, start = (int(x) for x in fh.read(64).split())
        if not is_alive(pid, start):
            os.unlink(MADE_MARK, dir_fd=fd)
            made = made or not os.listdir(fd)
    if made:
        info = proc_info(os.getpid())
        _write_mark(fd, f"{os.getpid()} {info.starttime if info else 0}\n")
    return made


def _write_mark(fd: int, text: str) -> None:
    """Write the mark in folder ``fd``: a new file of a fresh name (``O_EXCL``: never one
    that is there, so never a FIFO or a device some race put in the folder this run made
    a moment before: the open of one by the mark's name acted), renamed into place."""
    from shrink.atomic import open_exclusive

    with contextlib.suppress(OSError):
        new, tmp = open_exclusive(Path(MADE_MARK), mode=0o600, dir_fd=fd)
        try:
            with open(new, "w", closefd=False) as fh:
                fh.write(text)
            os.rename(tmp.name, MADE_MARK, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp.name, dir_fd=fd)
        finally:
            os.close(new)


def _output_folders() -> set[tuple[int, int]]:
    """The (device, inode) of each output folder this process holds (:func:`_hold_folder`)."""
    return {ino for _, ino, _ in _FOLDERS.values()}


def _let_go(dir_fd: int, name: str, fd: int, own: bool, *, close_dir: bool = True) -> None:
    """Let go of one output's lock file (removed when this run's own and still there)."""
    with contextlib.suppress(OSError):
        now, st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False), os.fstat(fd)
        if own and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            os.unlink(name, dir_fd=dir_fd)
    os.close(fd)
    if close_dir:
        os.close(dir_fd)


def release_outputs() -> None:
    """Let go of every output :func:`hold_output` holds, removing its lock file (while
    still held: a run that opened it meanwhile sees it gone and makes its own) when it is
    this run's own and still the file at that name."""
    while _FOLDERS:
        key, (fd, ino, made) = _FOLDERS.popitem()
        _HELD.discard(ino)
        # By its name in the folder above, held open (:func:`hold_output`): by its path
        # from /, an output folder made in a working folder past PATH_MAX was left.
        held = _OUTPUTS.get(key)
        name, where = (Path(key).name, held[0]) if held is not None else (key, None)
        with contextlib.suppress(OSError):
            if made:
                os.unlink(MADE_MARK, dir_fd=fd)
        with contextlib.suppress(OSError):  # (empty: the run wrote nothing there)
            st = os.stat(name, dir_fd=where, follow_symlinks=False)
            if made and (st.st_dev, st.st_ino) == ino:  # (not another folder by that name)
                os.rmdir(name, dir_fd=where)
        os.close(fd)
    while _OUTPUTS:
        _let_go(*_OUTPUTS.popitem()[1])


atexit.register(release_outputs)  # (an output held outside a command's block)
