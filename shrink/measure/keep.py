"""The finished levels kept on disk as each ends, not only when the run stops.

A signal, a dead server or a full disk stops a sweep through Python, which then writes
the levels it finished. Whatever stops the process outside Python does not: kill -9,
the OOM killer, an abort in a library's native code, a power cut. So each sweep can
write its curve so far after every level (:class:`KeepLevels`), to the file a stopped
run keeps them in (``X.partial.json``); the whole curve, once written as ``X.json``,
removes it (:meth:`shrink.loadcurve.LoadCurve.write_json`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from shrink.atomic import expect_unchanged, make_dirs, recording, unchanged_since_noted
from shrink.errors import FolderChangedError, WriteError
from shrink.loadcurve import LoadCurve

__all__ = [
    "KEPT_AS_MEASURED",
    "RUN_STARTED",
    "FolderGuard",
    "KeepLevels",
    "KeptCurve",
    "partial_twin",
    "write_or_aside",
]

# In a kept curve's meta: the run was going on when it was written, so it may lack
# levels the run went on to measure; and when that run started (UTC), which tells it
# from an earlier run's file a run killed before its first level left in place.
KEPT_AS_MEASURED = "kept_as_measured"
RUN_STARTED = "run_started"


@dataclass(frozen=True)
class KeptCurve:
    """A curve a stopped run kept (``X.partial.json``) and how many finished levels it
    holds: the command names it with that count (``shrink.cli._common.kept_files``), as
    sweep names its curve.partial.json; predict and validate named only the path."""

    path: Path
    levels: int

    def __str__(self) -> str:
        return str(self.path)


def partial_twin(path: Path) -> Path:
    """Where the finished levels of a run that writes ``path`` are kept: ``X.partial.json``."""
    return path.with_name(path.name.removesuffix(".json") + ".partial.json")


def _identity(folder: Path) -> tuple[int, int] | None:
    """The folder's (st_dev, st_ino); None if it is not there, or not a folder."""
    import stat

    try:
        st = os.stat(folder)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class FolderGuard:
    """The folders a run writes to, as they were when it started: each one's device and
    inode. A folder unmounted lazily (``umount -l``) mid-run stays open to nobody, and
    writes by its path go on into the folder underneath: the files written before vanish
    with the mount, and the run used to end with exit 0, saying nothing. :meth:`check`,
    called before each file is written, stops the run instead
    (:class:`shrink.errors.FolderChangedError`), naming the folder.
    """

    def __init__(self, folders: dict[str, Path | None]) -> None:
        # What each folder is (``output folder``, ``--runlogs folder``) -> its path.
        self._seen = {
            what: (path, _identity(path)) for what, path in folders.items() if path is not None
        }

    def check(self) -> None:
        for what, (path, ident) in self._seen.items():
            if ident is not None and _identity(path) != ident:
                raise FolderChangedError(path, what)

    def changed(self, what: str) -> bool:
        """Whether the folder named ``what`` is no longer the one noted at the start."""
        path, ident = self._seen.get(what, (None, None))
        return path is not None and ident is not None and _identity(path) != ident


class KeepLevels:
    """Called with the curve so far after each finished level: writes it to ``path``.

    Each write rewrites the whole curve, so its cost grows with the levels: a sweep of
    many quick levels (the simulator's, 1,000 of them) spent nearly all its time
    rewriting this file, quadratic in the levels (100 levels 7 s, 300 levels 57 s). A
    write that took more than :attr:`CHEAP_S` is therefore followed by the next only once
    :attr:`SPACING` times its cost has passed (writing stays under about a tenth of the
    run); the levels between are on disk with that next write, and a run stopped through
    Python keeps them all as before. The wait is at most :attr:`MAX_WAIT_S`: a write of
    10 s (a loaded disk's fsync, a hung NFS server) waited 90 s, and a real sweep's
    levels ended unwritten all that time. A kill -9 loses at most the levels that ended
    since the last write, that is within the last :attr:`MAX_WAIT_S` seconds.

    A write that fails (a full disk) stops nothing: the run goes on, and its finished
    levels are kept as before when it ends or stops. ``on_fail`` is told once, with the
    error, so that the user knows the levels are not on disk as they end.

    Where another run wrote ``path`` since this one noted it (a second ``sweep -o`` of
    the same output, stopped, keeps its levels there), that file is left as it is and
    this run's levels go on beside it (``X.partial.1.json``, :attr:`path` from then on),
    ``on_aside`` told once with the new name; :meth:`drop_aside` removes that file once
    the whole curve is written. A run that went on had left ``X.partial.1.json`` with
    its first levels, and a stopped one a ``.2`` beside it, named as no one's.
    """

    CHEAP_S = 0.05  # a write this quick is made after every level
    SPACING = 9.0  # otherwise, the time after a write before the next, in its costs
    MAX_WAIT_S = 30.0  # and at most this long (what a kill -9 may lose)

    def __init__(
        self,
        path: Path,
        on_fail: Callable[[WriteError], None] | None = None,
        guard: FolderGuard | None = None,
        on_aside: Callable[[Path, Path], None] | None = None,
    ) -> None:
        self.path = path
        self.on_fail = on_fail
        self.guard = guard
        self.on_aside = on_aside
        self.aside = False  # whether ``path`` is this run's own name beside another's
        self.failed: WriteError | None = None
        self.levels_written = 0  # how many levels the file on disk holds
        self.started = datetime.now(UTC).isoformat(timespec="seconds")
        self.clock: Callable[[], float] = time.monotonic
        self._next_at = 0.0  # the clock's time before which a costly write waits

    def __call__(self, curve: LoadCurve) -> None:
        if self.guard is not None:
            self.guard.check()  # a folder unmounted under the run stops it, not only this
        if self.failed is not None or not curve.levels or self.clock() < self._next_at:
            return
        began = self.clock()
        curve.meta[KEPT_AS_MEASURED] = True
        curve.meta[RUN_STARTED] = self.started
        try:
            make_dirs(self.path.parent)
            alt = write_or_aside(curve, self.path)
            if alt is not None:
                expect_unchanged(alt)  # this run's own from now on
                first, self.path, self.aside = self.path, alt, True
                if self.on_aside is not None:
                    self.on_aside(first, alt)
            self.levels_written = len(curve.levels)
            ended = self.clock()
            if ended - began > self.CHEAP_S:
                self._next_at = ended + min(self.SPACING * (ended - began), self.MAX_WAIT_S)
        except WriteError as exc:
            self.failed = exc
            if self.on_fail is not None:
                self.on_fail(exc)

    def drop_aside(self) -> None:
        """Once the whole curve is written: remove the file this run kept its levels in
        beside another run's (a regular file of this user's, as this run last wrote it)."""
        import stat

        if not self.aside or not unchanged_since_noted(self.path):
            return
        try:
            st = os.lstat(self.path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                self.path.unlink()
        except OSError:
            pass


def write_or_aside(curve: LoadCurve, path: Path) -> Path | None:
    """Write ``curve`` to ``path``; where another run wrote ``path`` meanwhile, the name
    beside it this run's file was put under instead (None when it went to ``path``)."""
    with recording() as written:
        try:
            curve.write_json(path)
        except WriteError:
            aside = [p for p in written if p.name != path.name]
            if not aside:
                raise
            return aside[-1]
    return None
