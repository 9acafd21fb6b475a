"""Write result files atomically: a reader sees the old file or the new one, never half.

The data goes to a fresh temporary file in the target's own folder (so that the
rename stays on one file system), created with ``O_CREAT | O_EXCL | O_NOFOLLOW``:
a name someone placed beforehand, a symlink included, makes the open fail rather
than write through it. It is flushed and fsynced, then ``os.replace``-d over the
target (which replaces a symlink itself, never the file it points at). On any
error, a full disk among them, the temporary file is removed and the target is
left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from shrink.errors import WriteError

__all__ = ["atomic_path", "open_exclusive", "write_bytes", "write_text"]


def open_exclusive(path: Path, suffix: str = ".tmp") -> tuple[int, Path]:
    """A new file beside ``path`` (hidden, random name), opened for writing: (fd, its path).

    ``O_EXCL | O_NOFOLLOW``: never an existing file, never through a symlink.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(16):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(tmp, flags, 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[tuple[int, Path]]:
    """An exclusive temporary file beside ``path`` (fd, its path) that replaces it on success.

    The one place of the write-then-rename: the caller writes through the fd (and
    closes it) or through the path; any error removes the temporary file, and an
    ``OSError`` becomes a :class:`WriteError` naming ``path``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = open_exclusive(path)
    except OSError as exc:
        raise WriteError(path, exc) from exc
    try:
        yield fd, tmp
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(path, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary path to write; on success it replaces ``path``.

    For writers that want a file name (``pyarrow.parquet.write_table``). The
    temporary file already exists (empty, created exclusively); the writer
    truncates it.
    """
    with _replacing(Path(path)) as (fd, tmp):
        os.close(fd)
        yield tmp


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    path = Path(path)
    with _replacing(path) as (fd, _tmp), os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))
