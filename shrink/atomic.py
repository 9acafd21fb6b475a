"""Write result files atomically: a reader sees the old file or the new one, never half.

The data goes to a fresh temporary file in the target's own folder (so that the
rename stays on one file system), created with ``O_CREAT | O_EXCL | O_NOFOLLOW``:
a name someone placed beforehand, a symlink included, makes the open fail rather
than write through it. It is flushed and fsynced, then ``os.replace``-d over the
target (which replaces a symlink itself, never the file it points at), once the
temporary name is seen to hold that same file still (in a folder another user may
write, it could have been swapped meanwhile). Writers write through the open file,
never by reopening its name. A target that
is, or links to, a device, pipe, socket or a descriptor in ``/proc`` is refused, as
the rename would put a regular file in its place (``/dev/null``). On any
error, a full disk among them, the temporary file is removed and the target is
left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from shrink.errors import WriteError

__all__ = [
    "atomic_file",
    "cut_name",
    "expect_unchanged",
    "is_plain_target",
    "make_dirs",
    "open_dir",
    "open_exclusive",
    "own_dir",
    "pass_dir",
    "recording",
    "replaced_by_another",
    "resolve_path",
    "unchanged_since_noted",
    "write_bytes",
    "write_text",
]


# The files put in place inside each open :func:`recording` block, innermost last.
_ledgers: list[list[Path]] = []


@contextlib.contextmanager
def recording() -> Iterator[list[Path]]:
    """The paths that writes inside the block put in place, in order, each once.

    A command that stops part-way (a full disk, a signal) names what it had already
    written from this list: those files are whole, and the user should know they exist.
    A write inside nested blocks is in each block's list: the outer one's names what
    an inner block wrote before it ended.
    """
    ledger: list[Path] = []
    _ledgers.append(ledger)
    try:
        yield ledger
    finally:
        # By identity: two blocks' lists can be equal.
        _ledgers[:] = [other for other in _ledgers if other is not ledger]


def make_dirs(folder: str | Path, mode: int = 0o755) -> Path:
    """Create ``folder`` and its missing parents, never through a planted symlink.

    Folders that exist are taken as they are (the user named them), but a symlink
    among them that another user owns is refused (the walk of :func:`open_dir`). Each
    one created here is made by ``mkdir`` in its parent held open, and then opened
    ``O_NOFOLLOW`` there: made by name, a parent that another user swapped for a
    symlink between the check and the ``mkdir`` (a rename in a folder they may write)
    had root make the folder where the symlink led. A :class:`WriteError` names the
    folder otherwise.
    """
    folder = Path(folder)
    missing: list[Path] = []
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        fd = _pass_to(p)
    except OSError as exc:
        raise WriteError(p, exc) from None
    try:
        for d in reversed(missing):
            try:
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(d.name, mode, dir_fd=fd)
                nxt = os.open(d.name, _PASS_FLAGS, dir_fd=fd)  # a symlink: ENOTDIR
            except OSError as exc:
                raise WriteError(d, exc) from None
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    return folder


def _from_root(folder: str | Path) -> Path:
    """``folder`` from ``/``: an absolute one as it is (the current folder may have been
    deleted, and a path that does not need it still works), a relative one below it."""
    folder = Path(folder)
    if folder.is_absolute():
        return folder
    try:
        return Path.cwd() / folder
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT, "the current folder was deleted: give an absolute path", str(folder)
        ) from None


def own_dir(folder: str | Path, mode: int = 0o755) -> Path:
    """A folder shrink names itself (an export's ``curve-hdr/``): made if missing, and
    refused if it is a symlink or not a directory, so nothing is written where it points."""
    folder = Path(folder)
    try:
        make_dirs(folder, mode)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "a symlink or not a directory", str(folder))
    except OSError as exc:
        raise WriteError(folder, exc) from None
    return folder


_NAME_MAX = 255  # bytes a file name may hold on Linux's file systems


def _cut(name: bytes, size: int) -> bytes:
    """``name``'s first ``size`` bytes, never ending inside a UTF-8 character: cut in
    two, the name was no longer UTF-8 (``ls`` shows "?", and a file system that keeps
    names UTF-8 refuses it, the run's file then lost)."""
    head = name[: max(size, 0)]
    if len(head) < len(name):
        for end in range(len(head), max(len(head) - 4, -1), -1):  # a character: <= 4 bytes
            try:
                head[:end].decode("utf-8")
            except UnicodeDecodeError:
                continue
            return head[:end]
    return head  # (a name that was not UTF-8 to begin with: cut where it falls)


def cut_name(name: str, size: int) -> str:
    """``name`` cut to its first ``size`` bytes (:func:`_cut`)."""
    return os.fsdecode(_cut(os.fsencode(name), size))


def open_exclusive(
    path: Path, suffix: str = ".tmp", mode: int = 0o644, *, dir_fd: int | None = None
) -> tuple[int, Path]:
    """A new file beside ``path`` (hidden, random name), opened for writing: (fd, its path).

    ``O_EXCL | O_NOFOLLOW``: never an existing file, never through a symlink. With
    ``dir_fd`` (``path``'s folder, held open), it is made in that folder whatever its
    name leads to meanwhile.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
    # The name as a prefix, cut to fit a file name's 255 bytes: a legal name of 238 bytes
    # or more was refused as "File name too long", its temporary twin being longer.
    room = _NAME_MAX - len(os.fsencode(f"..{secrets.token_hex(6)}{suffix}"))
    stem = os.fsdecode(_cut(os.fsencode(path.name), room))
    for _ in range(16):
        tmp = path.with_name(f".{stem}.{secrets.token_hex(6)}{suffix}")
        try:
            where = tmp.name if dir_fd is not None else tmp
            return os.open(where, flags, mode, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The folders on the way are passed through, not read: O_PATH needs only the search
# right that a path through them needs anyway. With O_RDONLY, a user who is not root
# could write nothing below a folder it may pass but not list (a home folder of mode
# 0711, say): every output was "cannot write (Permission denied)", where open() wrote.
_PASS_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(folder: str | Path) -> int:
    """A descriptor of ``folder`` (opened to be read), reached as :func:`_pass_to` reaches it."""
    fd = _pass_to(folder)
    try:
        return os.open(".", _DIR_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def pass_dir(folder: str | Path) -> int:
    """An ``O_PATH`` descriptor of ``folder`` (:func:`_pass_to`): enough to make, stat,
    rename and unlink names in it, with only the write and search rights the kernel asks
    for those. Held by :func:`open_dir` (read as well), a file could not be written in a
    folder this user may write and pass but not list (mode 0311, a drop box): the
    output check let it through and the run's file was lost after it ran ("cannot write
    (Permission denied)")."""
    return _pass_to(folder)


def _pass_to(folder: str | Path) -> int:
    """An ``O_PATH`` descriptor of ``folder``, reached one name at a time from ``/``
    without following a symlink that neither root nor this user made.

    Checking the path and then using it by name would leave a gap: in a folder another
    user may write, they can rename a checked folder away and put a symlink in its
    place before the write. Held open, the folder is the one checked, whatever its
    name leads to afterwards. A ".." goes back to the folder held before (as the
    kernel's would, but by what was walked): opened by name, it led to the parent a
    folder had by then, and another user who moved their own folder ``w`` to a folder
    they may write (``/tmp``) between two steps had ``w/../out.json`` written there.
    """
    me = os.geteuid()
    todo = list(_from_root(folder).parts[1:])
    held = [os.open("/", _PASS_FLAGS)]  # the last folders walked through, innermost last
    names: list[str] = []  # the innermost one's path from "/", one folder (never a link) a name
    ids: list[tuple[int, int]] = []  # each of those folders as walked: (device, inode)
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                if names:  # ("/.." is "/")
                    names.pop()
                    ids.pop()
                    os.close(held.pop())
                    if not held:  # (beyond the folders held: walked again from "/")
                        held.append(_plain_walk(names, ids))
                continue
            try:
                held.append(os.open(name, _PASS_FLAGS, dir_fd=held[-1]))
                names.append(name)
                st = os.fstat(held[-1])
                ids.append((st.st_dev, st.st_ino))
                if len(held) > _HELD_MAX:  # (one descriptor a folder: a deep path ran out)
                    os.close(held.pop(0))
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
            st = os.stat(name, dir_fd=held[-1], follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name)
            links += 1
            if st.st_uid not in (0, me):
                why = f"a symlink owned by UID {st.st_uid}, not followed"
                raise OSError(errno.ELOOP, why, name)
            if links > 40:
                raise OSError(errno.ELOOP, "too many symlinks", str(folder))
            target = Path(os.readlink(name, dir_fd=held[-1]))
            todo[:0] = target.parts[1:] if target.is_absolute() else target.parts
            if target.is_absolute():  # the walk starts again from "/"
                names.clear()
                ids.clear()
                old, held[:] = held[:], [os.open("/", _PASS_FLAGS)]
                for fd in old:
                    os.close(fd)
        return held.pop()
    finally:
        for fd in held:
            os.close(fd)


# The folders :func:`_pass_to` keeps open at most: held all, a path more than ~1,000
# folders deep (as the kernel walks it: within PATH_MAX) ran out of descriptors at the
# usual limit of 1,024 ("Too many open files"), and no output could be written there.
_HELD_MAX = 64


def _plain_walk(names: list[str], ids: list[tuple[int, int]]) -> int:
    """The folder ``names`` leads to from ``/`` (folders only, no symlink followed): a
    ``..`` back past the folders :func:`_pass_to` keeps open, walked again by the names
    that walk went through, each the folder walked then (``ids``) or refused: by name
    alone, a folder on the way moved meanwhile and another put in its place (by whoever
    may write its parent) led the '..' into that other folder, not back where it came."""
    fd = os.open("/", _PASS_FLAGS)
    try:
        for name, was in zip(names, ids, strict=True):
            nxt = os.open(name, _PASS_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != was:
                raise OSError(errno.ESTALE, "a folder on the way was moved meanwhile", name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _replaceable(path: Path) -> None:
    """Refuse a target that is, or links to, a device, pipe or socket: the rename would
    put a regular file in its place, and as root ``-o /dev/null`` (or ``/dev/stdout``,
    a symlink to a descriptor) replaced the system's own node."""
    if not is_plain_target(path):
        raise OSError(
            errno.EINVAL, "a device, pipe, socket or descriptor, not a file: left as it is"
        )


def is_plain_target(path: str | Path) -> bool:
    """Whether ``path`` is new, a regular file or directory, or a symlink that a rename may
    replace: not one to a device, pipe or socket, nor to a descriptor in ``/proc``
    (``/dev/stdout`` is one even when the shell redirected it to a file)."""
    try:
        if os.path.islink(path) and os.readlink(path).startswith("/proc/"):
            return False
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return True  # new, or a dangling symlink (the rename replaces the link itself)
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _still_ours(tmp: Path, made: os.stat_result, dir_fd: int) -> None:
    """Refuse to rename ``tmp`` into place if its name no longer holds the file made for
    it: in a folder another user may write, the temporary name can be unlinked and
    replaced (by a symlink, say) while the data is written."""
    now = os.stat(tmp.name, dir_fd=dir_fd, follow_symlinks=False)
    if (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino):
        raise OSError(errno.EEXIST, "its temporary file was replaced by someone else", str(tmp))


# An output's state when its command checked it (absolute path: (device, inode,
# mtime) or None when absent), and after each replace of this process's own.
_EXPECTED: dict[str, tuple[int, int, int] | None] = {}


def _noted_as(path: str | Path) -> Path:
    """``path`` from ``/`` with its ".." kept, as the write reaches it: by abspath's
    "x/.." dropped by name, ``-o link/../t.parquet`` (``link`` the user's own symlink)
    was noted in one folder and written in another, and its rewrite kept as
    t.1.parquet saying another run wrote it (exit 1)."""
    return _from_root(path)


def _fingerprint(name: str, dir_fd: int) -> tuple[int, int, int] | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def expect_unchanged(path: str | Path) -> None:
    """Note ``path`` (an output a command named) as it is now: a write of it that finds
    it replaced meanwhile by someone else (a second ``sweep -o`` of the same file, a
    ``replay -o`` into a sweep's RunLogs) keeps this run's file beside it instead of
    replacing theirs, and says so. Two such runs each said they wrote the file, and the
    one that ended first had lost what it measured."""
    p = _noted_as(path)
    try:
        # As the write reaches it (:func:`open_dir`): through the user's own symlinked
        # folder too. Opened with O_NOFOLLOW, such a folder read as empty, and rewriting
        # a file there was taken for another run's write (kept as c.1.json, exit 1).
        fd = pass_dir(p.parent)
    except OSError:
        _EXPECTED[str(p)] = None  # (its folder is made later: nothing there yet)
        return
    try:
        _EXPECTED[str(p)] = _fingerprint(p.name, fd)
    finally:
        os.close(fd)


def note_written(path: Path, dir_fd: int) -> None:
    """Note ``path`` (in the folder open at ``dir_fd``) as this process has just written
    it, where :func:`expect_unchanged` noted it: a file written by another writer than
    :func:`_replacing` (a RunLog's) was otherwise taken for another run's, and a
    stopped replay's closing line did not name its own RunLog."""
    if (key := str(_noted_as(path))) in _EXPECTED:
        _EXPECTED[key] = _fingerprint(path.name, dir_fd)


def unchanged_since_noted(path: str | Path) -> bool:
    """Whether ``path`` is as :func:`expect_unchanged` noted it, or as this process last
    wrote it (True when it was never noted): a file found otherwise is another run's."""
    p = _noted_as(path)
    if str(p) not in _EXPECTED:
        return True
    try:
        fd = pass_dir(p.parent)
    except OSError:
        return _EXPECTED[str(p)] is None
    try:
        return _fingerprint(p.name, fd) == _EXPECTED[str(p)]
    finally:
        os.close(fd)


def _aside_name(path: Path, n: int) -> str:
    """``STEM.N.SUFFIX``, its stem cut to fit a file name's 255 bytes: beside a legal name
    of 250 bytes, the longer one failed (ENAMETOOLONG) and this run's file was removed."""
    stem, tail = os.fsencode(path.stem), os.fsencode(f".{n}{path.suffix}")
    if len(tail) >= _NAME_MAX:  # (a suffix of its own near 255 bytes: the number last)
        stem, tail = os.fsencode(path.name), os.fsencode(f".{n}")
    return os.fsdecode(_cut(stem, _NAME_MAX - len(tail)) + tail)


# What link(2) says where a file system makes no hard links (FAT, some FUSE and network
# ones): the file is then renamed onto an empty name of its own made just before.
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}


def _put_aside(tmp: Path, path: Path, dir_fd: int) -> Path:
    """``tmp`` linked under the first free name ``STEM.N.SUFFIX`` beside ``path`` (never
    over a file), and unlinked: the name it now has."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for n in range(1, 10000):
        alt = path.with_name(_aside_name(path, n))
        try:
            os.link(tmp.name, alt.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            try:  # a name of this run's own first, then the file onto it
                os.close(os.open(alt.name, flags, 0o600, dir_fd=dir_fd))
            except FileExistsError:
                continue
            os.replace(tmp.name, alt.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return alt
        os.unlink(tmp.name, dir_fd=dir_fd)
        return alt
    raise OSError(errno.EEXIST, "no free name beside it", str(path))


def _replaced_by_another(tmp: Path, path: Path, dir_fd: int) -> None:
    """Raise (this run's file put aside and recorded) when ``path`` is no longer what
    its command saw of it, nor what this process last wrote there."""
    key = str(_noted_as(path))
    now = _fingerprint(path.name, dir_fd)
    if key not in _EXPECTED or now is None or now == _EXPECTED[key]:
        return  # (gone meanwhile, the user's rm: no one's file is replaced)
    alt = _put_aside(tmp, path, dir_fd)
    for ledger in _ledgers:
        ledger.append(alt)
    exc = OSError(
        errno.EEXIST,
        f"another run wrote it while this one ran; left as it is, this run's is {alt}",
    )
    exc.aside = alt  # type: ignore[attr-defined]  # (where this run's file now is)
    raise exc


def replaced_by_another(tmp: Path, path: Path, dir_fd: int) -> Path | None:
    """Before ``tmp`` (in the folder open at ``dir_fd``) is renamed onto ``path`` by a
    writer of its own (a RunLog's): where another run wrote ``path`` since its command
    noted it, ``tmp`` is put aside beside it (never over it), and that name returned;
    else None. Two ``replay -o`` of one file each said they wrote it, exit 0, and the
    one that ended first had lost what it measured."""
    try:
        _replaced_by_another(tmp, path, dir_fd)
    except OSError as exc:
        if (alt := getattr(exc, "aside", None)) is None:
            raise
        return alt
    return None


@contextlib.contextmanager
def _replacing(path: Path, mode: int = 0o644) -> Iterator[tuple[int, Path]]:
    """An exclusive temporary file beside ``path`` (fd, its path) that replaces it on success.

    The one place of the write-then-rename: the caller writes through the fd (and
    closes it) or through the path; any error removes the temporary file, and an
    ``OSError`` becomes a :class:`WriteError` naming ``path``.
    """
    dir_fd = -1
    try:
        make_dirs(path.parent)
        dir_fd = pass_dir(path.parent)
        _replaceable(path)
        fd, tmp = open_exclusive(path, mode=mode, dir_fd=dir_fd)
        made = os.fstat(fd)
    except OSError as exc:
        if dir_fd >= 0:
            os.close(dir_fd)
        raise WriteError(path, exc) from exc
    try:
        yield fd, tmp
        _still_ours(tmp, made, dir_fd)
        _replaced_by_another(tmp, path, dir_fd)
        os.replace(tmp.name, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        note_written(path, dir_fd)
        for ledger in _ledgers:
            if path not in ledger:
                ledger.append(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp.name, dir_fd=dir_fd)
        raise WriteError(path, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp.name, dir_fd=dir_fd)
        raise
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def atomic_file(
    path: str | Path, mode: str = "w", *, perm: int = 0o644, sync: bool = True, **open_kw: Any
) -> Iterator[IO[Any]]:
    """An open file (``mode`` "w" or "wb", ``open_kw`` as for :func:`open`) that
    replaces ``path`` when the block ends without error; for writers that stream.
    ``sync=False`` skips the fsync (a synthetic docroot of thousands of files, which
    is rebuilt from its manifest if a crash loses it)."""
    with _replacing(Path(path), perm) as (fd, _tmp), os.fdopen(fd, mode, **open_kw) as fh:
        yield fh
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


def write_bytes(path: str | Path, data: bytes, *, perm: int = 0o644, sync: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    path = Path(path)
    with atomic_file(path, "wb", perm=perm, sync=sync) as fh:
        fh.write(data)
    return path


def write_text(path: str | Path, text: str, *, perm: int = 0o644) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"), perm=perm)


def resolve_path(path: str | Path) -> Path:
    """``Path(path).resolve()``, a symlink loop raising on every Python the RuntimeError
    ("Symlink loop from '...'") of 3.11 and 3.12, which the CLI says as the path and
    ELOOP's words. Python 3.13 (Debian 13's) returns the loop's path unresolved: a loop
    given as ``--docroot`` was "not a directory (make one with shrink synth)"."""
    resolved = Path(path).resolve()
    try:
        os.stat(resolved)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RuntimeError(f"Symlink loop from '{resolved}'") from None
    return resolved
