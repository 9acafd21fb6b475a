"""Processes by PID: start pinned and in a cgroup, find a tree via /proc, stop exactly those.

A PID alone can be reused by the kernel after its process died, so every PID we
record comes with its start time (field 22 of ``/proc/PID/stat``); we only ever
signal a PID whose start time still matches.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import resource
import signal
import subprocess
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from shrink.procfs import ProcInfo, cpu_seconds, proc_info
from shrink.topology import parse_cpulist

__all__ = [
    "ProcInfo",
    "allowed_cpus",
    "check_gate_env",
    "check_program",
    "children_map",
    "cpu_seconds",
    "descendants",
    "die_with_parent",
    "exe_of",
    "has_capability",
    "is_alive",
    "pid_namespace",
    "pid_namespace_gone",
    "proc_info",
    "realtime_refused",
    "start_process",
    "stop_processes",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


@functools.cache
def _libc() -> Any:
    """The C library, loaded once in the parent: finding it runs a program, which a
    child between fork and exec (perhaps no longer root) must not have to do."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc if hasattr(libc, "prctl") else None
    except OSError:
        return None


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """In a child: have the kernel send ``sig`` when the parent dies (even by kill -9).

    ``prctl(PR_SET_PDEATHSIG)``; it survives exec. ``parent`` is the PID the child
    expects as its parent: if that one already died (before the call), exit at once.
    Linux only; elsewhere nothing happens.
    """
    libc = _libc()
    if libc is None:
        return
    libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


_TOP_PID_NS = 0xEFFFFFFC  # the kernel's first PID namespace's inode (PROC_PID_INIT_INO)


def pid_namespace() -> int | None:
    """This process's PID namespace (the inode of /proc/self/ns/pid), or None if unknown.

    A PID names a process only in the namespace it was read in: a testbed brought up
    in another one (``unshare --pid``, a container sharing this file system) records
    PIDs that here name other processes, or none."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def pid_namespace_gone(ns: int, began_by: float | None = None) -> bool:
    """Whether PID namespace ``ns`` certainly no longer exists: this process runs in the
    top one (it sees every process) and none of them is in ``ns``. From inside a
    namespace of its own, one not seen may be a sibling's or the parent's: not gone; nor
    for a user who is not root, who may not look at other users' namespaces.

    ``began_by``: a wall-clock time ``ns`` was there by (a testbed's ``started``). The
    kernel gives an ended namespace's inode to the next one made: one whose processes
    all began later took it, and ``ns`` is gone.

    The top namespace is told by its inode, fixed by the kernel (PROC_PID_INIT_INO). Told
    by kthreadd (PID 2 with no parent), a namespace joined by ``nsenter --pid`` or
    ``docker exec`` (whose PID 2 may show parent 0) was taken for the top one."""
    if os.geteuid() != 0 or pid_namespace() != _TOP_PID_NS:
        return False
    boot = _boot_time() if began_by is not None else None
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                try:
                    if os.stat(f"/proc/{entry}/ns/pid").st_ino != ns:
                        continue
                except PermissionError:
                    # (root without CAP_SYS_PTRACE may not look at another user's
                    # process's namespaces: a living one of theirs was taken for gone;
                    # its status still says whether it is in one below this one)
                    if _below_top(entry):
                        return False
                    continue
                info = proc_info(int(entry))
                if began_by is None or boot is None or info is None:
                    return False
                if boot + info.starttime / os.sysconf("SC_CLK_TCK") <= began_by:
                    return False
    return True


def _below_top(pid: str) -> bool:
    """Whether process ``pid`` is in a PID namespace below the top one (its ``NSpid``
    names more than one PID), or it cannot be told."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return len(line.split()) > 2
    return True


def _boot_time() -> float | None:
    """When the machine booted (``btime`` of /proc/stat), or None if unread."""
    with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/stat", "rb") as f:
        return float(next(line.split()[1] for line in f if line.startswith(b"btime ")))
    return None


def is_alive(pid: int, starttime: int | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, if given, started at ``starttime``."""
    info = proc_info(pid)
    if info is None or info.state in ("Z", "X"):
        return False
    return starttime is None or info.starttime == starttime


def children_map() -> dict[int, list[int]]:
    """Parent PID -> child PIDs, for every live process."""
    out: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = proc_info(int(entry))
            if info is not None and info.state not in ("Z", "X"):
                out[info.ppid].append(info.pid)
    return out


def descendants(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of ``pid`` (not ``pid`` itself), parents before children."""
    tree = children_map() if tree is None else tree
    out: list[int] = []
    todo = sorted(tree.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(sorted(tree.get(p, [])))
    return out


def exe_of(pid: int) -> str | None:
    """The program ``pid`` runs (``/proc/PID/exe``); None if gone or not readable."""
    try:
        return os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return None


def allowed_cpus(pid: int) -> tuple[int, ...]:
    """The CPUs ``pid`` may run on, read from ``Cpus_allowed_list`` in /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpulist(line.split(":", 1)[1])
    return ()


# The limits a shell's ``ulimit`` puts on shrink's own files and CPU time are no
# server's: lighttpd started under ``ulimit -f 4`` inherited it, and its error log
# reaching 4 KiB killed it (SIGXFSZ) mid-sweep; under ``ulimit -t`` each server would
# be killed after as many CPU seconds. A server starts without them, as a service
# manager starts one: unlimited with CAP_SYS_RESOURCE, else up to the hard limit, which
# ``testbed up`` then names (:func:`limits_kept`).
# ``ulimit -u`` too (per user: the server user's processes count, not root's): under
# ``ulimit -u 2`` php-cgi could not fork ("Resource temporarily unavailable") and up
# failed after 15 s naming no limit. A hard limit below FEW_PROCESSES is named.
LIFTED_LIMITS = (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU, resource.RLIMIT_NPROC)
FEW_PROCESSES = 1024
_CAP_SYS_RESOURCE = 24


def lift_limits() -> None:
    """Lift :data:`LIFTED_LIMITS` for this process (a server's, before its exec)."""
    for which in LIFTED_LIMITS:
        hard = resource.getrlimit(which)[1]
        for want in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), (hard, hard)):
            try:
                resource.setrlimit(which, want)
            except (OSError, ValueError):
                continue
            break


def has_capability(bit: int) -> bool:
    """Whether this process has capability ``bit`` in effect (root in a container, or
    under ``capsh --drop``, may not)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    return False


_CAP_SYS_NICE = 23


def realtime_refused(priority: int, rt_runtime_us: int | None = None) -> str:
    """Why SCHED_FIFO was refused: not root; root without CAP_SYS_NICE (a container,
    ``capsh --drop``), once told it "needs root"; or, with it, a cpu cgroup that gives
    realtime tasks no time (``rt_runtime_us``: cgroup v1's cpu.rt_runtime_us of this
    process's group, 0 below the root group by default; None if unread). Otherwise
    something else refused it (a seccomp filter, a security module), once said to be
    that cgroup whatever it held."""
    if os.geteuid() != 0:
        return f"realtime priority {priority} needs root (CAP_SYS_NICE); run without --realtime"
    if not has_capability(_CAP_SYS_NICE):
        why = (
            "this process is root, but runs without the capability CAP_SYS_NICE (dropped, "
            "as in a container or under capsh --drop)"
        )
    elif rt_runtime_us == 0:
        why = (
            "refused to root with CAP_SYS_NICE: the cpu cgroup it runs in gives realtime "
            "tasks no time (cpu.rt_runtime_us 0)"
        )
    else:
        why = (
            "refused to root with CAP_SYS_NICE, by something else than a capability (a "
            "seccomp filter or a security module may)"
        )
    return f"realtime priority {priority}: {why}; run without --realtime"


def _can_raise_hard_limits() -> bool:
    """Whether this process has CAP_SYS_RESOURCE (root in a container may not)."""
    return has_capability(_CAP_SYS_RESOURCE)


def limits_kept() -> list[str]:
    """A warning for each of :data:`LIFTED_LIMITS` a server would still start with: a
    finite hard limit that this process cannot raise."""
    if _can_raise_hard_limits():
        return []
    out = []
    for which, what, flag, then in (
        (resource.RLIMIT_FSIZE, "a file-size limit of {} bytes", "-f",
         "a server is killed when its log reaches it (SIGXFSZ)"),
        (resource.RLIMIT_CPU, "a CPU-time limit of {} s", "-t",
         "a server is killed when it has used that much CPU time"),
        (resource.RLIMIT_NPROC, "a limit of {} processes for their user", "-u",
         "a server that cannot fork fails to start or to serve"),
    ):  # fmt: skip
        hard = resource.getrlimit(which)[1]
        few = which != resource.RLIMIT_NPROC or hard < FEW_PROCESSES
        if hard != resource.RLIM_INFINITY and few:
            out.append(
                f"warning: the servers start with {what.format(hard)} (ulimit {flag}) that "
                f"shrink cannot lift: {then}; start shrink without it"
            )
    return out


_ULIMIT_FLAGS = {
    resource.RLIMIT_FSIZE: "-f",
    resource.RLIMIT_CPU: "-t",
    resource.RLIMIT_NPROC: "-u",
}


def limits_lifted() -> list[str]:
    """A note naming the limits of :data:`LIFTED_LIMITS` set here (``ulimit -f 100``) that
    the servers start without, up to the hard limit or past it as root: a ``ulimit -u``
    put on a page that forks is gone for the servers, and nothing said so."""
    can_raise = _can_raise_hard_limits()
    lifted = []
    for which in LIFTED_LIMITS:
        soft, hard = resource.getrlimit(which)
        if soft == resource.RLIM_INFINITY or (soft == hard and not can_raise):
            continue
        to = "unlimited" if can_raise or hard == resource.RLIM_INFINITY else str(hard)
        lifted.append(f"ulimit {_ULIMIT_FLAGS[which]} {soft} (to {to})")
    if not lifted:
        return []
    return [f"the servers start without this shell's {', '.join(lifted)}, as a "
            "service manager starts them"]  # fmt: skip


def start_process(
    argv: list[str],
    *,
    cpus: tuple[int, ...] | None = None,
    join_cgroup: Callable[[int], None] | None = None,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    owned: bool = False,
    user: tuple[int, int] | None = None,
    recorded: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, already pinned to ``cpus`` and in the cgroup.

    Both are set in the child between fork and exec, so every process it forks
    afterwards (lighttpd workers, php-cgi) inherits them from the first instruction.
    ``owned``: the process gets SIGTERM when this one dies, even by kill -9
    (:func:`die_with_parent`; lighttpd then stops its workers and php-cgi).
    ``user``: (uid, gid) it runs as, set after it joined the cgroup (which needs root).
    ``recorded(proc)`` runs after the fork and before ``argv`` does (:func:`_gated`):
    a kill of this process between the two, which no handler sees, left a server
    running that nothing had recorded; now it never starts.
    """
    me = os.getpid()
    if owned or user is not None:
        _libc()  # loaded here, before the fork

    def _prepare() -> None:
        lift_limits()  # before setuid: raising a hard limit needs root
        if join_cgroup is not None:
            join_cgroup(os.getpid())
        if cpus:
            os.sched_setaffinity(0, cpus)
        if user is not None:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
            # Nor can it gain privileges again: a PHP page that runs a setuid program
            # (su, passwd, a misconfigured one) gets no more than the server user has.
            libc = _libc()
            if libc is not None:
                libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if owned:  # after setuid, which clears a parent-death signal
            die_with_parent(signal.SIGTERM, me)

    # The one descriptor a server keeps (close_fds) is its output and error, open to write
    # to root's log: where lighttpd, nginx and php say what stops them before their own
    # error log is open. Root only reads its last lines, escaped, into an error (tail_log).
    log = _open_log(log_path) if log_path is not None else subprocess.DEVNULL
    gate = os.pipe() if recorded is not None else None
    try:
        args, env = _gated(argv, env, user) if gate is not None else (argv, env)
        proc = subprocess.Popen(
            args,
            stdin=gate[0] if gate is not None else subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_prepare,
            env=env,
            close_fds=True,
        )
    except BaseException:
        if gate is not None:
            os.close(gate[1])
        raise
    finally:
        if log is not subprocess.DEVNULL:
            os.close(log)
        if gate is not None:
            os.close(gate[0])
    if gate is not None and recorded is not None:
        proc.args = argv  # what it becomes, as messages name it, not the shell before it
        _open_gate(proc, gate[1], recorded)
    if not owned:
        # It outlives this process (``testbed up``), its Popen dropped while it runs:
        # Python's ResourceWarning, under PYTHONWARNINGS=error (or -X dev) a traceback
        # ("Exception ignored in: Popen.__del__") after up had said it was done.
        warnings.filterwarnings(
            "ignore", message=r"subprocess \d+ is still running", category=ResourceWarning
        )
    return proc


# The shell waits for a line on its standard input before it becomes the server: the line
# comes once the server's PID is recorded; an end of file (the starter died) ends it. The
# variables a shell sets of its own (PWD, OLDPWD, SHLVL, ``_``, which the read fills, IFS,
# PPID and OPTIND, which dash resets, and dies on when not a number) are kept from the
# shell and put back as the server's environment had them, or removed: the server gets
# exactly the environment it was given (dash exported PWD to every server). OPTIND is
# never unset (dash dies on that too); kept from the shell, it is not exported.
_OWN_VARS = ("PWD", "OLDPWD", "SHLVL", "_", "IFS", "PPID", "OPTIND")
_GATE = (
    "read -r _ || exit 111; exec </dev/null; "
    + "".join(
        f'if [ "${{{2 * i + 1}}}" = 1 ]; then export {k}="${{{2 * i + 2}}}"; '
        + ("fi; " if k == "OPTIND" else f"else unset {k}; fi; ")
        for i, k in enumerate(_OWN_VARS)
    )
    + f'shift {2 * len(_OWN_VARS)}; exec "$@"'
)
# The shell's own exit when ``exec`` could not run the program (POSIX): what it means.
GATE_EXEC_FAILED = {126: "not executable", 127: "not found (it or its #! interpreter)"}


def _gated(
    argv: list[str], env: dict[str, str] | None, user: tuple[int, int] | None
) -> tuple[list[str], dict[str, str]]:
    """``argv`` behind :data:`_GATE`, and the gate's environment. A program that is not
    there, or that the user the server runs as may not execute, is said here, as Popen
    said it (the shell would say it only in the server's log, exiting 127 or 126); so is
    an OPTIND that is not a number, which no POSIX shell would pass on."""
    given = env if env is not None else dict(os.environ)
    check_program(argv[0], given.get("PATH", os.defpath), user)
    check_gate_env(given)
    own = [x for k in _OWN_VARS for x in (("1", given[k]) if k in given else ("0", ""))]
    rest = {k: v for k, v in given.items() if k not in _OWN_VARS}
    return ["/bin/sh", "-c", _GATE, "shrink-gate", *own, *argv], rest


def check_gate_env(env: dict[str, str]) -> None:
    """OSError (EINVAL) for what in ``env`` the gate's shell would die on before the
    server starts: an OPTIND that is not a number ("Illegal number")."""
    optind = env.get("OPTIND")
    if optind is not None and not (optind.isascii() and optind.isdigit()):
        raise OSError(errno.EINVAL, f"OPTIND={optind!r} in its environment is not a number")


def check_program(name: str, path: str, user: tuple[int, int] | None = None) -> str:
    """The file ``exec`` would run for ``name`` (searched on ``path`` as execvp does when it
    has no slash), or FileNotFoundError / PermissionError naming it: not there, or not
    executable by ``user`` (uid, gid; None: this process), on a noexec mount included."""
    places = [name] if "/" in name else [os.path.join(d or ".", name) for d in path.split(":")]
    denied = None
    for place in places:
        if os.path.isfile(place):
            if _may_execute(place, user):
                return place
            denied = denied or place
    if denied is None:
        where = "" if "/" in name else f" on PATH {path}"
        raise FileNotFoundError(errno.ENOENT, f"not found{where}", name)
    who = "this user" if user is None else f"uid {user[0]}"
    raise PermissionError(errno.EACCES, f"{denied} is not executable by {who}", name)


def _may_execute(place: str, user: tuple[int, int] | None) -> bool:
    """Whether ``user`` (uid, gid, no other groups, as start_process sets them) may
    execute ``place``: x on the file for its class, x on every folder above it; root needs
    one x bit on the file. Never on a mount without exec."""
    with contextlib.suppress(OSError):
        if os.statvfs(place).f_flag & os.ST_NOEXEC:
            return False
    if user is None:
        return os.access(place, os.X_OK)
    uid, gid = user
    real = os.path.realpath(place)
    try:
        st = os.stat(real)
        if uid == 0:
            return bool(st.st_mode & 0o111)
        # The folders on the way as named (a symlink in a folder the user cannot search
        # is not reached) and as resolved (where the file is).
        given = [str(p) for p in Path(os.path.abspath(place)).parents]
        chain = [real, *given, *(str(p) for p in Path(real).parents)]
        return all(_has_x(os.stat(p), uid, gid) for p in chain)
    except OSError:
        return False


def _has_x(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def _open_gate(
    proc: subprocess.Popen[bytes], gate: int, recorded: Callable[[subprocess.Popen[bytes]], None]
) -> None:
    """``recorded(proc)``, then the line that lets ``proc`` become the server; if
    recording fails, the gate closes unopened and ``proc`` exits without starting it."""
    try:
        recorded(proc)
        os.write(gate, b"go\n")
    except BaseException:
        os.close(gate)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
        raise
    os.close(gate)


def _open_log(path: Path) -> int:
    """``path`` opened to append a process's output: never through a symlink, and 0644
    whatever the umask (under umask 000 a root-owned log was writable by every user)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
    except OSError:
        os.close(fd)
        raise
    return fd


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our own child, so no zombie of ours is left behind."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def own_children() -> set[int]:
    """The live children of this process."""
    return set(children_map().get(os.getpid(), ()))


def stop_new_children(before: set[int]) -> list[int]:
    """Stop this process's children not in ``before`` (:func:`own_children`), with all
    they forked; return the PIDs stopped.

    A stop signal can land inside ``subprocess.Popen`` after the fork, while it waits
    for the exec: the child runs on, and its Popen never reaches the caller, which then
    cannot stop it."""
    tree = children_map()
    new = sorted(set(tree.get(os.getpid(), ())) - before)
    targets: dict[int, int | None] = {}
    for child in new:
        for p in (child, *descendants(child, tree)):
            info = proc_info(p)
            if info is not None:
                targets[p] = info.starttime
    return stop_processes(targets, first=new) if targets else []


def stop_processes(
    pids: dict[int, int | None],
    *,
    first: Iterable[int] = (),
    first_signal: int = signal.SIGTERM,
    grace_s: float = 3.0,
) -> list[int]:
    """Stop exactly ``pids`` (PID -> start time): ``first_signal`` to ``first`` (the
    masters, so they stop their own workers), then SIGTERM the rest, then SIGKILL
    whatever outlives the grace period. A process stopped (SIGSTOP) is continued once
    signalled: stopped, it acts on no signal but SIGKILL, and a testbed whose pool was
    stopped took both grace periods to go down.

    Returns the PIDs that were still running when called (the ones stopped).
    """
    running = {p: t for p, t in pids.items() if is_alive(p, t)}

    def signal_all(which: Iterable[int], sig: int) -> None:
        for p in which:
            if p in running and is_alive(p, running[p]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)

    def wait(which: Iterable[int], until: float) -> None:
        which = list(which)
        while time.monotonic() < until:
            for p in which:
                _reap(p)
            if not any(is_alive(p, running[p]) for p in which):
                return
            time.sleep(0.02)

    def resume_stopped() -> None:
        for p, t in running.items():
            info = proc_info(p)
            if info is not None and info.state == "T" and is_alive(p, t):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGCONT)

    masters = [p for p in first if p in running]
    signal_all(masters, first_signal)
    resume_stopped()  # (a worker its master signals, too)
    wait(masters, time.monotonic() + grace_s)
    signal_all(running, signal.SIGTERM)
    resume_stopped()
    wait(running, time.monotonic() + grace_s)
    signal_all(running, signal.SIGKILL)
    wait(running, time.monotonic() + grace_s)
    return sorted(running)
