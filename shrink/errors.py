"""Every error shrink raises on purpose.

Hierarchy::

    ShrinkError                      root: catch this to catch everything of ours
    ├── ParameterError (ValueError)  a bad argument: alpha, rate, percentile, duration
    │   └── OptionError              a command-line option refused before anything runs (exit 2)
    ├── TraceFormatError             bad input file: names the file and the line/packet/offset
    │   └── CaptureFormatError       a damaged pcap/pcapng: byte offset or record number
    ├── TopologyError                a machine spec, share or mapping the machine cannot give
    ├── TestbedError                 lighttpd/php-cgi missing, port in use, a replica died (PID)
    │   ├── RecipeError              a server recipe that cannot be read or run: names its file
    │   └── StateError               a state file naming what shrink did not make (a cgroup)
    ├── ReplayError                  the load generator could not run the schedule
    ├── MeasurementError             a load curve or MAT that cannot be computed
    ├── WriteError                   a result file that could not be written (disk full): names it
    ├── OutputBusyError              an output folder another shrink run is writing
    └── ExtrapolationError           a model asked to predict outside what it was fitted on
        └── NotFittedError (AttributeError)  a model used before fit (so hasattr() is False)

Errors carry what a person needs to act: the file and line, the packet number,
the PID. ``str(err)`` is the whole message; the attributes are for programs.
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path
from typing import Any

__all__ = [
    "CaptureFormatError",
    "DocrootError",
    "ExtrapolationError",
    "FolderChangedError",
    "ForeignCpusError",
    "MeasurementError",
    "NotFittedError",
    "OptionError",
    "OutputBusyError",
    "OverlapError",
    "ParameterError",
    "RecipeError",
    "ReplayError",
    "ShrinkError",
    "StateError",
    "TestbedError",
    "ThreadLimitError",
    "TopologyError",
    "TraceFormatError",
    "WriteError",
    "printable",
    "thread_refused",
]


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Unicode's default-ignorable characters that Python counts printable (combining
# joiners, Hangul fillers, variation selectors, ...): a terminal draws them as nothing or
# a blank, so "a\u3164b" read as "a b" and "x\ufe00" as "x", names no one could type
# back. (The others, zero-width spaces and bidi controls among them, are not printable.)
_IGNORABLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0000, 0xE0FFF),
)


def _ignorable(ch: str) -> bool:
    return any(lo <= ord(ch) <= hi for lo, hi in _IGNORABLE)


# The longest message an error prints (characters); a longer one loses its middle.
_MAX_MESSAGE = 2000


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: a control character (CR, LF, ESC of an ANSI
    sequence, ...) is shown escaped (``\\n``, ``\\x1b``), so that a file name cannot
    move the cursor, recolour the screen or forge a line of output. A byte of a name
    that is not UTF-8 is shown as that byte (``\\xff``), not as ``\\udcff``."""
    out = []
    for ch in str(text):
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable() and not _ignorable(ch):
            out.append(ch)
        elif ord(ch) < 0x80:  # (an ASCII control: the character is the byte)
            out.append(f"\\x{ord(ch):02x}")
        elif 0xDC80 <= ord(ch) <= 0xDCFF:
            # a name's byte that is not UTF-8 (read by Linux's file-name decoding as
            # U+DC80-U+DCFF): the byte, as `ls -b` and bash's $'...' write it
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        else:  # (a C1 control is \\u0085: \\x85 is the byte 0x85 above, another name)
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


class ShrinkError(Exception):
    """Root of every error shrink raises deliberately.

    An error that stops a sweep after some levels (a dead server, a full disk)
    carries them: ``curve`` is the LoadCurve of the finished levels (None if there
    are none), and whoever writes it appends the file to ``kept``, so that the
    message names only files that exist. ``then``: what to do with them, said after
    the kept files (how to get the result a failed write left unsaid).
    """

    curve: Any = None
    kept: tuple[str, ...] = ()
    then: str = ""

    def __str__(self) -> str:
        # Messages carry names from the field (file names, paths in a log): escaped, and
        # cut in the middle when long, as a field quoted from a 1 MiB line made the one
        # line of an error 500 KB long; the head names the place, the tail the remedy.
        text = printable(super().__str__())
        if len(text) <= _MAX_MESSAGE:
            return text
        head, tail = _MAX_MESSAGE * 3 // 4, _MAX_MESSAGE // 4
        return f"{text[:head]} ...({len(text) - head - tail:,} characters cut)... {text[-tail:]}"


class ParameterError(ShrinkError, ValueError):
    """A parameter outside its allowed range, e.g. ``alpha == 1.7, must be in (0, 1].``"""


class OptionError(ParameterError):
    """A command-line option's value refused before anything is measured: names the
    option and what it accepts. The CLI exits 2 on it, as on any usage error."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"{option}: {message}")


class TraceFormatError(ShrinkError):
    """A trace file that cannot be read as the format it claims.

    ``path`` and ``line`` (1-based) or ``record`` (packet number, 1-based) or
    ``offset`` (byte offset) locate the problem.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        record: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.record = record
        self.offset = offset
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"line {line}")
        if record is not None:
            where.append(f"record {record}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.reason = message


class CaptureFormatError(TraceFormatError):
    """A packet capture that is damaged: bad magic, truncated record, garbage."""


class TopologyError(ShrinkError):
    """A machine spec, share or mapping that this (or the described) machine cannot give."""


class TestbedError(ShrinkError):
    """The real server could not be started, checked or stopped.

    ``pid`` names the process concerned where there is one.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, message: str, *, pid: int | None = None) -> None:
        self.pid = pid
        super().__init__(f"{message} (PID {pid})" if pid is not None else message)


class DocrootError(TestbedError, ParameterError):
    """A document root no testbed may serve (not a folder, the whole file system): a
    testbed error to the library, a refused ``--docroot`` to the command line."""


class StateError(TestbedError):
    """A testbed state file names something shrink did not make (a cgroup outside
    shrink's own hierarchy): nothing it names is touched."""


class RecipeError(TestbedError):
    """A server recipe that cannot be read, or whose server did not come up.

    ``recipe`` is the recipe's file (or built-in name) and ``field`` the TOML key
    or command concerned; both lead the one-line message.
    """

    def __init__(
        self, message: str, *, recipe: str, field: str | None = None, pid: int | None = None
    ) -> None:
        self.recipe = recipe
        self.field = field
        where = f"{recipe}: {field}" if field else recipe
        super().__init__(f"recipe {where}: {message}", pid=pid)


class ReplayError(ShrinkError):
    """The load generator could not run (bad target, no addresses, refused CPUs)."""


class OverlapError(OptionError, ReplayError):
    """Generator CPUs given among the share's without ``--allow-overlap``: a refused
    ``--generator-cpus`` to the command line (exit 2), a replay error to the library."""


class ForeignCpusError(OptionError, ReplayError, TopologyError):
    """``--generator-cpus`` naming CPUs this process may not use (its affinity, taskset):
    a refused option to the command line (exit 2), a replay or topology error to the
    library."""


class MeasurementError(ShrinkError):
    """A load curve, percentile or MAT that cannot be computed from what was measured."""


class ExtrapolationError(ShrinkError):
    """A model that is not fitted, or asked to predict where it has no basis."""


class NotFittedError(ExtrapolationError, AttributeError):
    """A model used before ``fit``; an AttributeError too, as scikit-learn's, so that
    ``hasattr(model, "sigma_ci_")`` is False rather than an error."""


class OutputBusyError(ShrinkError):
    """Another shrink run holds the output folder (:func:`shrink.folder_locks.claimed`)."""

    def __init__(
        self, path: str | Path, holder: str | None = None, what: str = "folder", option: str = "-o"
    ) -> None:
        # any process that may read the folder may lock it: who holds it, where known
        by = f" ({holder} holds its lock)" if holder else ""
        super().__init__(
            f"{path}: another shrink run is writing this {what}{by}; name another output "
            f"{what} ({option}), or wait until it ends"
        )
        self.path = str(path)


class FolderChangedError(ShrinkError):
    """An output folder is no longer the one the run started writing to: unmounted
    (``umount -l``), replaced or removed while the run went on
    (:class:`shrink.measure.keep.FolderGuard`)."""

    def __init__(self, folder: str | Path, what: str) -> None:
        super().__init__(
            f"{folder}: the {what} is no longer the folder this sweep started writing to "
            "(unmounted, replaced or removed while it ran), and the files written there "
            "before are not at this path; stopped"
        )
        self.path = str(folder)


class WriteError(ShrinkError):
    """A result file could not be written (a full disk, no permission).

    ``path`` names the file; ``errno`` is the OS error number. ``cut_after``: the rows
    of a RunLog put in place all the same (those written before the error); ``whole``:
    they are every row of the run (the error was in the footer's write, then rewritten).
    """

    def __init__(
        self, path: str | Path, exc: OSError, cut_after: int | None = None, whole: bool = False
    ) -> None:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOSPC:
            reason = "no space left on the device" + _no_inode(path)
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if exc.errno == errno.EFBIG and limit != resource.RLIM_INFINITY:
            reason = f"past the file-size limit of {limit} bytes, ulimit -f"
        code = errno.errorcode.get(exc.errno or 0)
        said = f"{path}: cannot write ({reason}{f', {code}' if code else ''})"
        if cut_after is not None and whole:  # only its footer's write failed (then rewritten)
            said += f"; it holds all the run's {cut_after:,} row(s) all the same"
        elif cut_after is not None:  # a RunLog put in place with the rows written before it
            said += (
                f"; it holds only the run's first {cut_after:,} row(s), written before "
                "that: a run cut short, not the whole run"
            )
        super().__init__(said)
        self.path = str(path)
        self.errno = exc.errno


def _no_inode(path: str | Path) -> str:
    """What ENOSPC meant where no inode was left but bytes were (``mkfs.ext4 -N``, many
    small files): a file system gives the one errno for both, and "no space left" beside
    a ``df`` showing room read as untrue. Empty where bytes ran out, or nothing is known."""
    for folder in (Path(path), *Path(path).parents):
        try:
            fs = os.statvfs(folder)
        except OSError:
            continue
        if fs.f_files and not fs.f_favail and fs.f_bavail:
            free = fs.f_bavail * fs.f_frsize / 2**20
            return f": no free inode for a new file (df -i), though {free:,.1f} MiB are free"
        return ""
    return ""


def thread_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the system refusing a new thread: Python's "can't start new
    thread", or Arrow's "Failed to launch worker thread" (a cgroup's pids.max, ulimit -u)."""
    said = str(exc)
    return (isinstance(exc, RuntimeError) and said == "can't start new thread") or (
        "Failed to launch worker thread" in said
    )


_CGROUPS, _CGROUP_FS = "/proc", "/sys/fs/cgroup"  # (where the cgroups are read)


def _pids_max() -> str | None:
    """This process's cgroup pids limit, as "pids.max N of cgroup PATH", where one is set
    on its cgroup or one above it (the one with the least room left): a parent's limit
    binds its children's, and only the process's own cgroup was looked at."""
    try:
        lines = Path(_CGROUPS, "self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        _, controllers, where = [*line.split(":", 2), "", ""][:3]
        if controllers not in ("pids", ""):
            continue
        root = Path(_CGROUP_FS, "pids" if controllers == "pids" else "")
        group = Path("/") / where.lstrip("/")
        for folder in (group, *group.parents):
            try:
                limit = (root / folder.relative_to("/") / "pids.max").read_text().strip()
                now = (root / folder.relative_to("/") / "pids.current").read_text().strip()
            except OSError:
                continue
            if limit != "max" and limit.isdigit():
                room = int(limit) - int(now) if now.isdigit() else int(limit)
                found.append((room, f"pids.max {limit} of cgroup {folder}"))
    return min(found)[1] if found else None


class ThreadLimitError(ShrinkError):
    """The system refused this process a thread: a limit on processes and threads (a
    cgroup's pids.max, ``ulimit -u``) is reached. Not a bug, and not the input's fault."""

    def __init__(self) -> None:
        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        # (root is held to no ulimit -u)
        nproc = soft != resource.RLIM_INFINITY and os.geteuid() != 0
        limits = [x for x in (_pids_max(), f"ulimit -u {soft}" if nproc else None) if x]
        # A thread's stack is address space (ulimit -s a thread): under ulimit -v the
        # system refuses a thread as it does past pids.max, and Python says the same.
        space = resource.getrlimit(resource.RLIMIT_AS)[0]
        if space != resource.RLIM_INFINITY:
            limits.append(f"ulimit -v {space // 1024} KiB, each thread's stack taken from it")
        what = "processes and threads" + (
            " or on address space" if space != resource.RLIM_INFINITY else ""
        )
        where = f" ({'; '.join(limits)})" if limits else ""
        super().__init__(
            f"cannot start a thread: the limit on {what}"
            + where
            + " is reached; raise it, or stop other work of this user or cgroup"
        )
