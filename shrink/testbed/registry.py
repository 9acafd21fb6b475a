"""Testbeds that outlived their owner: recorded at ``up``, found and stopped later.

``up`` writes a copy of the state into a run directory (:func:`run_dir`), with the
state file's path and, for a testbed started inside a longer command (``predict``,
the main job), that command's PID and start time: its **owner**. ``down`` removes
the entry. A testbed is **stale** when

* its owner is gone (PID and start time no longer match: a ``kill -9`` of
  ``predict``), or
* its state file is gone or says it was stopped, while processes or cgroups it
  recorded remain.

A testbed whose owner died also gets a parent-death signal (its lighttpd master
gets SIGTERM and stops its php-cgi), so usually only its cgroups are left; ``shrink
testbed down --stale`` stops whatever remains, by PID and start time, and removes
the cgroups.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink import files
from shrink import processes as process
from shrink.atomic import make_dirs, write_text
from shrink.errors import TestbedError, TraceFormatError
from shrink.jsonout import dumps
from shrink.schemas import RegistryEntryFile
from shrink.testbed.private import secure_dir, swappable_above
from shrink.testbed.state import TestbedState, elsewhere

__all__ = [
    "StaleTestbed",
    "clear_killed_ups",
    "forget",
    "orphaned_groups",
    "private_dir",
    "record",
    "recorded",
    "remove_entry",
    "run_dir",
    "running",
    "scratch_base",
    "stale",
    "unrecorded_groups",
]


def run_dir() -> Path:
    """shrink's private folder (entries, locks, run roots): ``$SHRINK_RUN_DIR``, else
    /run/shrink (root), ``$XDG_RUNTIME_DIR/shrink``, or /tmp/shrink-UID. It is used
    only once :func:`private_dir` has checked it is this user's and no one else's."""
    env = os.environ.get("SHRINK_RUN_DIR")
    if env:
        if not os.path.isabs(env):
            # The servers run in another folder, where a relative name finds none of
            # their configs and sockets (every page was an HTTP 500).
            raise TestbedError(f"SHRINK_RUN_DIR={env!r}: not an absolute path")
        return Path(env)
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return Path("/run/shrink")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "shrink"
    return Path(tempfile.gettempdir()) / f"shrink-{os.geteuid()}"


def private_dir() -> Path:
    """:func:`run_dir`, made if missing (its parents too) and checked: a real folder of
    this user's, writable by no one else. Mode 0711 as root (the server user passes
    through it to its sockets), else 0700."""
    d = run_dir()
    # (in a folder of root's: a bare "Permission denied"; on a read-only file system, or
    # one full or immutable: "error: DIR: Read-only file system", for a predict on the
    # simulator too, the variable never named)
    why = None
    try:
        make_dirs(d.parent)
        secure_dir(d, 0o711 if os.geteuid() == 0 else 0o700)
        if os.statvfs(d).f_flag & os.ST_RDONLY:  # (made before it was mounted read-only)
            why = os.strerror(errno.EROFS)
        elif lock := files.lock_of(d):  # (+i: "up-X.lock: Operation not permitted"; +a:
            why = f"it is {lock}"  # up started, then left files no one may remove there)
    except OSError as exc:
        why = exc.strerror or str(exc)
    if why is not None:
        said = "SHRINK_RUN_DIR " if os.environ.get("SHRINK_RUN_DIR") else ""
        raise TestbedError(
            f"{said}{d}: cannot make shrink's private folder there ({why}); set "
            "SHRINK_RUN_DIR (or XDG_RUNTIME_DIR) to a writable folder of this user's"
        )
    return d


def scratch_base() -> Path:
    """Where shrink makes a temporary folder whose files it reads back (a replay's
    parts): the system's temporary folder, unless another user could swap a folder in
    it ($TMPDIR theirs, or writable by others without the sticky bit; they could put
    their own files in the place of the ones shrink wrote); then :func:`private_dir`."""
    base = Path(tempfile.gettempdir())
    if swappable_above(base / "scratch") is None:
        return base
    return private_dir()


def _entry(state_path: Path) -> Path:
    key = hashlib.sha1(str(state_path.resolve()).encode()).hexdigest()[:16]
    return run_dir() / f"testbed-{key}.json"


def record(
    state_path: str | Path, state: TestbedState, *, owned: bool, starting: bool = False
) -> Path:
    """Note a testbed that ``up`` started (``owned``: it dies with this process), or, with
    ``starting``, what it has started so far: this process is then its owner until
    ``up`` records it whole, so a kill -9 of ``up`` leaves a stale entry, not servers
    that nothing names."""
    state_path = Path(state_path).resolve()
    owner = None
    if owned or starting:
        info = process.proc_info(os.getpid())
        owner = {"pid": os.getpid(), "starttime": info.starttime if info else None}
    private_dir()
    entry = _entry(state_path)
    doc: dict[str, Any] = {"state_path": str(state_path), "owner": owner, "state": state.to_dict()}
    if starting:
        doc["starting"] = True
    written = write_text(entry, dumps(doc, indent=1) + "\n", perm=0o600)
    _drop_temporaries(entry)
    _publish()
    return written


def _publish() -> None:
    from shrink.testbed.cpus_in_use import publish

    # (root's: which CPUs its testbeds run on, for other users' up)
    publish(run_dir(), lambda: [st for _, st in running()])


def _drop_temporaries(entry: Path) -> None:
    """Remove what a killed writer of ``entry`` left: its temporary files (written, then
    renamed over it; ``up`` is killed between the two as likely as anywhere). Only
    ``up`` writes an entry, under the lock of its state file, so none is being written."""
    for tmp in entry.parent.glob(f".{entry.name}.*.tmp"):
        if re.fullmatch(rf"\.{re.escape(entry.name)}\.[0-9a-f]{{12}}\.tmp", tmp.name):
            with contextlib.suppress(OSError):
                tmp.unlink()


def recorded(state_path: str | Path) -> TestbedState | None:
    """The state ``up`` recorded for ``state_path`` in shrink's private folder (a copy no
    other user could have written); None if there is none (or it is damaged)."""
    entry = _entry(Path(state_path))
    if not run_dir().is_dir() or not entry.is_file():
        return None
    private_dir()  # still this user's and no one else's
    doc = _load(entry)
    if doc is None:
        return None
    return TestbedState.from_dict(doc["state"], source=str(entry))


def forget(state_path: str | Path) -> None:
    """Remove the entry of a testbed that was stopped."""
    remove_entry(_entry(Path(state_path)))


def remove_entry(entry: Path) -> None:
    """Remove an entry, and any temporary file a killed ``up`` left while writing it."""
    with contextlib.suppress(OSError):
        entry.unlink()
    _drop_temporaries(entry)
    _publish()


@dataclass
class StaleTestbed:
    """A recorded testbed whose owner or state file is gone."""

    entry: Path
    state_path: Path
    state: TestbedState
    reason: str
    # the run roots ``down --stale`` could not remove, each with why (a mount in it, a
    # chattr-locked file): it said nothing of them, as ``down --state`` does
    left: list[tuple[Path, str]] = field(default_factory=list)

    def running(self) -> list[int]:
        return [
            p
            for r in self.state.replicas
            for p in r.pids
            if process.is_alive(p, r.starttimes.get(p))
        ]


def _load(entry: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = files.read_json(entry, RegistryEntryFile, what="registry entry")
        TestbedState.from_dict(doc["state"], source=str(entry))
    except (TraceFormatError, KeyError, TypeError, TestbedError):
        return None  # a damaged entry is skipped
    return doc


def _why_stale(doc: dict[str, Any]) -> str | None:
    if (
        elsewhere(
            doc["state"].get("pid_ns"), doc["state"].get("started"), doc["state"].get("replicas")
        )
        is not None
    ):
        return None  # its PIDs name other processes here: not judged (nor stopped) from here
    if doc["state"].get("stopped"):
        # a down that could not write the state file (chattr +i) noted its stop here:
        # kept while the file still says the testbed runs, so a second down knows
        return _stopped_state_gone(Path(doc["state_path"]))
    owner = doc.get("owner")
    if owner and not process.is_alive(int(owner["pid"]), owner.get("starttime")):
        return f"its owner (PID {owner['pid']}) is gone"
    if owner and doc.get("starting"):
        return None  # up runs still: its state file is not written yet
    path = Path(doc["state_path"])
    if not path.exists():
        return f"its state file {path} is gone"
    try:
        on_disk = files.read_json(path, what="testbed state")
    except TraceFormatError:
        return f"its state file {path} is unreadable"
    if isinstance(on_disk, dict) and on_disk.get("stopped"):
        return f"{path} says it was stopped"
    return None


def _stopped_state_gone(path: Path) -> str | None:
    """Why a stopped testbed's entry can go: its state file is gone or says stopped."""
    try:
        on_disk = files.read_json(path, what="testbed state")
    except TraceFormatError:
        return None if path.exists() else f"it was stopped and its state file {path} is gone"
    if isinstance(on_disk, dict) and on_disk.get("stopped"):
        return f"{path} says it was stopped"
    return None


def _entries() -> list[Path]:
    """The recorded testbeds, read only from a folder that is still private: an entry
    names PIDs (with start times and programs anyone can read in /proc) that
    ``down --stale`` stops, so one another user could have put there is not read."""
    root = run_dir()
    if not root.is_dir():
        return []
    private_dir()
    return sorted(root.glob("testbed-*.json"))


def running() -> list[tuple[Path, TestbedState]]:
    """Every recorded testbed that is not stale: (its state file, its state)."""
    out = []
    for entry in _entries():
        doc = _load(entry)
        if doc is not None and not doc["state"].get("stopped") and _why_stale(doc) is None:
            state = TestbedState.from_dict(doc["state"], source=str(entry))
            out.append((Path(doc["state_path"]), state))
    return out


def serving(state: TestbedState) -> bool:
    """Whether any process ``state`` records runs still (as recorded: PID and start time;
    where an older state records no start time, a process begun after the state was
    written is not its), or it records none. A testbed whose servers were all killed (the
    OOM killer, a kill) is recorded running until it is brought down: it was said to run
    on its CPUs, and a predict there was refused ("wait for the other to end") for good."""
    if state.elsewhere() is not None:
        return True  # up ran in another PID namespace: its PIDs cannot be looked at here
    recorded = [(p, r.starttimes.get(p)) for r in state.replicas for p in r.pids]
    return not recorded or any(
        process.is_alive(p, t) and (t is not None or not _began_after(p, state.started))
        for p, t in recorded
    )


# How much later than its state's "started" a process recorded without a start time (an
# older ``up``'s state) may have begun and still be the one recorded: the time is written
# to the second and the boot time (``btime``) is one too, and the wall clock may have
# been stepped since (NTP). A PID reused after a reboot, or days later, is well past it.
_REUSED_AFTER_S = 60.0


def _began_after(pid: int, started: str) -> bool:
    """Whether ``pid`` began well after ``started`` (a state's ISO time, written once its
    servers ran): it is not the process the state records, but another that took its PID
    (a state of an older ``up``, with no start times, counted any process that had
    taken a recorded PID as its server running). False where either time is unknown."""
    from datetime import datetime

    info = process.proc_info(pid)
    try:
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        written = datetime.fromisoformat(started).timestamp()
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    if info is None:
        return False
    began = btime + info.starttime / os.sysconf("SC_CLK_TCK")
    return began > written + _REUSED_AFTER_S


def others_running() -> list[tuple[int, Path, TestbedState]]:
    """As root, the running testbeds of other users: (their UID, state file, state).

    Each user records its testbeds in a private folder of its own (:func:`run_dir`:
    ``/tmp/shrink-UID`` or ``$XDG_RUNTIME_DIR/shrink``), which root's ``up`` never read:
    a user's testbed on the CPUs root's took went without a word. Only a folder and
    entries owned by the UID the folder's place names are read, and only processes
    still running as recorded (PID and start time) count; nothing they name is touched."""
    if os.geteuid() != 0:
        return []  # another user's folder is not ours to read (root's is 0711)
    places = [(d, d.name.removeprefix("shrink-")) for d in _glob(tempfile.gettempdir(), "shrink-*")]
    places += [(d / "shrink", d.name) for d in _glob("/run/user", "*")]
    out = []
    for folder, uid_text in places:
        if not uid_text.isdigit() or int(uid_text) == 0 or folder == run_dir():
            continue
        uid = int(uid_text)
        for entry, doc in _owned(folder, uid):
            st = TestbedState.from_dict(doc["state"], source=str(entry))
            # (its own processes: an entry naming root's, start times and all, warned as theirs)
            if any(_alive_as(p, r.starttimes.get(p), uid) for r in st.replicas for p in r.pids):
                out.append((uid, Path(str(doc["state_path"])), st))
    return out


def _alive_as(pid: int, starttime: int | None, uid: int) -> bool:
    """Whether ``pid`` runs as recorded (its start time) and as ``uid``."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
    except (OSError, ValueError):
        return False
    return process.is_alive(pid, starttime)


def _glob(base: str, pattern: str) -> list[Path]:
    try:
        return sorted(Path(base).glob(pattern))
    except OSError:
        return []


def _owned(folder: Path, uid: int) -> list[tuple[Path, dict[str, Any]]]:
    """The entries in ``folder`` (each path and document) if it is a real folder of
    ``uid``'s that no one else may write, each a regular file of ``uid``'s; else none.
    Read through descriptors, never through a symlink: checked by name and then opened
    by name, an entry its user swapped for a symlink meanwhile had root read the file it
    names (root's own), and one swapped for a FIFO with a writer held root's up for ever."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    out = []
    try:
        st = os.fstat(dir_fd)
        if st.st_uid != uid or st.st_mode & 0o022:
            return []
        for name in sorted(os.listdir(dir_fd)):
            if name.startswith("testbed-") and name.endswith(".json"):
                doc = _read_owned(name, dir_fd, uid, folder / name)
                if doc is not None:
                    out.append((folder / name, doc))
    except OSError:
        return []
    finally:
        os.close(dir_fd)
    return out


def _read_owned(name: str, dir_fd: int, uid: int, entry: Path) -> dict[str, Any] | None:
    """The registry entry ``name`` in ``dir_fd`` when it is a regular file of ``uid``'s (as
    opened, not as named), else None; a damaged one is skipped."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(name, flags, dir_fd=dir_fd), "rb") as f:
            es = os.fstat(f.fileno())
            if not stat.S_ISREG(es.st_mode) or es.st_uid != uid:
                return None
            data = files.read_at_most(f, files.MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > files.MAX_BYTES:
        return None
    try:
        doc: dict[str, Any] = files.parse_json(
            data, RegistryEntryFile, source=entry, what="registry entry"
        )
        TestbedState.from_dict(doc["state"], source=str(entry))
    except (TraceFormatError, KeyError, TypeError, TestbedError):
        return None
    return doc


def stale() -> list[StaleTestbed]:
    """Every recorded testbed that is stale (see the module docstring)."""
    out = []
    for entry in _entries():
        doc = _load(entry)
        if doc is None:
            continue
        why = _why_stale(doc)
        if why is not None:
            state = TestbedState.from_dict(doc["state"], source=str(entry))
            out.append(StaleTestbed(entry, Path(doc["state_path"]), state, why))
    return out


def _named_dirs(doc: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for r in doc.get("state", {}).get("replicas", []):
        for cg in (r.get("cgroup"), (r.get("enforce") or {}).get("cgroup")):
            if isinstance(cg, dict):
                out.update(str(v) for v in (cg.get("dirs") or {}).values())
    return out


def unrecorded_groups(mounts: set[Path] | None = None) -> list[tuple[Path, list[int]]]:
    """shrink's cgroups (``<cgroup mount>/shrink/<name>``) that hold processes while no
    testbed recorded in :func:`run_dir` names them: (the group, its PIDs).

    A testbed started under another ``SHRINK_RUN_DIR`` (one since deleted, say) is
    recorded there, so ``down --stale`` cannot tell whose they are. They are named to
    the user, never stopped on that guess: they may be a live testbed of another run."""
    from shrink.enforce.cfs import Cgroup, cgroup_mounts

    named: set[str] = set()
    for entry in _entries():
        doc = _load(entry)
        if doc is not None:
            named |= _named_dirs(doc)
    out: dict[Path, list[int]] = {}
    for mount in sorted(cgroup_mounts() if mounts is None else mounts):
        parent = mount / Cgroup.PARENT
        try:
            groups = sorted(g for g in parent.iterdir() if g.is_dir() and not g.is_symlink())
        except OSError:
            continue
        for g in groups:
            if str(g) in named:
                continue
            try:
                pids = [int(x) for x in (g / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
            if pids:
                out[g] = sorted(pids)
    return sorted(out.items())


# A replica's group: ``<state stem>-<PID of the process that made it>-<time>-r<index>``.
_GROUP_NAME = re.compile(r".+-(\d+)-\d+-r\d+")


def orphaned_groups(mounts: set[Path] | None = None) -> list[Path]:
    """Empty groups of shrink's whose maker is gone and which no record here names: an
    ``up`` (or ``predict``) killed after it made a replica's group and before it
    recorded the first server in it, which nothing else removes. A group whose maker
    still runs (or whose name says no maker) is never one: it may be filling."""
    from shrink.enforce.cfs import Cgroup, cgroup_mounts

    named: set[str] = set()
    for entry in _entries():
        doc = _load(entry)
        if doc is not None:
            named |= _named_dirs(doc)
    out: list[Path] = []
    for mount in sorted(cgroup_mounts() if mounts is None else mounts):
        try:
            groups = sorted((mount / Cgroup.PARENT).iterdir())
        except OSError:
            continue
        for g in groups:
            m = _GROUP_NAME.fullmatch(g.name)
            if not m or str(g) in named or g.is_symlink() or not g.is_dir():
                continue
            if Path(f"/proc/{m.group(1)}").exists():
                continue
            try:
                empty = not (g / "cgroup.procs").read_text().split()
            except OSError:
                continue
            if empty and not any(c.is_dir() for c in g.iterdir()):
                out.append(g)
    return out


def clear_killed_ups() -> list[Path]:
    """Remove what an ``up`` killed before it recorded anything left in :func:`run_dir`,
    and return it: a run root whose maker (its PID and start time, in
    :data:`shrink.testbed.private.RUN_ROOT_MAKER`) is gone and that no entry names, and
    a lock file no ``up`` holds (removed while held here, as ``UpLock`` removes its own).
    Nothing goes while an entry cannot be read (the run root it names would look like a
    killed one's)."""

    root = run_dir()
    if not root.is_dir():
        return []
    named: set[Path] = set()
    for entry in _entries():
        doc = _load(entry)
        if doc is None:
            return []
        for r in doc["state"].get("replicas", []):
            if r.get("run_dir"):
                named.add(Path(r["run_dir"]).parent)
    out = []
    for p in sorted(root.glob("up-*")):
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if st.st_uid != os.geteuid():
            continue
        if stat.S_ISDIR(st.st_mode) and p not in named:
            maker = _maker(p)
            if maker is not None and not process.is_alive(*maker):
                shutil.rmtree(p, ignore_errors=True)
                out += [p] if not p.exists() else []
        elif p.name.endswith(".lock") and stat.S_ISREG(st.st_mode) and _remove_unheld(p):
            out.append(p)
    return out


def _maker(root: Path) -> tuple[int, int] | None:
    """The PID and start time a run root names as its maker; None if it names none (one
    made before run roots did, or not shrink's)."""
    from shrink.testbed.private import RUN_ROOT_MAKER

    try:
        fd = os.open(root / RUN_ROOT_MAKER, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            pid, started = fh.read(64).split()
        return int(pid), int(started)
    except (OSError, ValueError):
        return None


def _remove_unheld(lock: Path) -> bool:
    """Remove ``lock`` (a file ``UpLock`` made) if no ``up`` holds it: taken, then
    removed while held. True if removed."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(lock, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
            return False  # replaced meanwhile: another up's
        os.unlink(lock)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
