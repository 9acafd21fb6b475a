"""A document root's fingerprint, as the server would serve it, and what differs.

The built-in servers follow no symlink in the document root (``disable_symlinks on``,
``server.follow-symlink = "disable"``), so the walk follows none either: a link is
recorded by where it points (its text), never by what is there. A link inside the
document root points at files the walk reads where they are; a link out of it (to
``/``, to ``/proc``) is not walked, so no root-only or endless file is read.

Each regular file counts by its name, its size and its first and last ``WINDOW``
bytes (the whole file when it is no larger than two windows): a change in the middle
of a larger file that keeps its size is not seen. The walk is bounded: ``MAX_ENTRIES``
entries, ``MAX_BYTES`` read (past them, files count by name and size only) and
``MAX_SECONDS``; the record says which bound ended it, and a later walk stops at the
same entry. The record keeps a Merkle digest of every folder and file, the first
``KEEP`` of them (shallowest first), so a refusal names what changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Any

WINDOW = 64 << 10
MAX_ENTRIES = 200_000
MAX_BYTES = 1 << 30
MAX_SECONDS = 60.0
KEEP = 1000  # digests kept in the record
UNREADABLE = "unreadable"


@dataclass
class _Walk:
    max_entries: int
    deadline: float
    entries: int = 0
    read: int = 0
    stopped: str | None = None  # the entries or time bound that ended the walk
    bytes_bounded: bool = False
    unreadable: list[str] = field(default_factory=list)
    digests: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (depth, digest)


def docroot_record(
    root: str, *, max_entries: int = MAX_ENTRIES, seconds: float = MAX_SECONDS
) -> dict:
    """The fingerprint of the folder ``root`` (``digest``) with what the walk saw: its
    ``entries``, the bound that ended it (``bounded``: None, or entries, bytes or time),
    the names it could not read and the first ``KEEP`` entries' digests."""
    w = _Walk(max_entries, time.monotonic() + seconds)
    digest = _folder(w, os.path.realpath(root), "", 0)
    kept = sorted(w.digests.items(), key=lambda kv: (kv[1][0], kv[0]))[:KEEP]
    return {
        "digest": digest,
        "entries": w.entries,
        "bounded": "; ".join(b for b in (w.stopped, w.bytes_bounded and _BYTES) if b) or None,
        "unreadable": w.unreadable[:20],
        "unreadable_count": len(w.unreadable),
        "digests": {name: d for name, (_, d) in sorted(kept)},
    }


_BYTES = f"bytes: past {MAX_BYTES >> 20} MiB read, files by name and size only"


def _stop(w: _Walk) -> bool:
    if w.stopped is None:
        if w.entries >= w.max_entries:
            w.stopped = f"entries: the first {w.entries:,}"
        elif time.monotonic() > w.deadline:
            w.stopped = f"time: the first {w.entries:,} entries"
    return w.stopped is not None


def _folder(w: _Walk, path: str, rel: str, depth: int) -> str:
    h = hashlib.sha256()
    try:
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        w.unreadable.append(rel or ".")
        return UNREADABLE
    for e in entries:
        if _stop(w):
            break
        w.entries += 1
        name = f"{rel}/{e.name}" if rel else e.name
        d = _entry(w, e, name, depth + 1)
        w.digests[name] = (depth + 1, d)
        h.update(f"{e.name}\0{d}\0".encode())
    return h.hexdigest()[:16]


def _entry(w: _Walk, e: os.DirEntry, name: str, depth: int) -> str:
    try:
        st = e.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):  # not followed, as the servers follow none
            return "link " + hashlib.sha256(os.readlink(e.path).encode()).hexdigest()[:16]
        if stat.S_ISDIR(st.st_mode):
            return "dir " + _folder(w, e.path, name, depth)
        if not stat.S_ISREG(st.st_mode):
            return "not a file"  # a FIFO's read waits for a writer forever
        return _file(w, e.path, st.st_size)
    except OSError:
        w.unreadable.append(name)
        return UNREADABLE


def _file(w: _Walk, path: str, size: int) -> str:
    h = hashlib.sha256(f"{size}\0".encode())
    if w.read >= MAX_BYTES:
        w.bytes_bounded = True
        return h.hexdigest()[:16]
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if size <= 2 * WINDOW:
            parts = [os.pread(fd, size, 0)]
        else:
            parts = [os.pread(fd, WINDOW, 0), os.pread(fd, WINDOW, size - WINDOW)]
    finally:
        os.close(fd)
    for p in parts:
        w.read += len(p)
        h.update(p)
    return h.hexdigest()[:16]


def differences(before: dict[str, Any], now: dict[str, Any], most: int = 5) -> list[str]:
    """The most specific names whose digests differ between two records (a file rather
    than the folders holding it), the first ``most``; a name only one has counts."""
    a, b = before.get("digests") or {}, now.get("digests") or {}
    if not isinstance(a, dict):
        return []
    changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    # a folder differs because something in it does: name the inner one where it is kept
    inner = [n for n in changed if not any(m.startswith(n + "/") for m in changed)]
    return inner[:most]
