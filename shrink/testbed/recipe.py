"""Server recipes: how to run one replica of a web server, behind one small protocol.

A recipe says how to **start** a replica on a CPU set, an address and a port
with N workers, how to check its **health**, which **PIDs** belong to it, how to
**stop** it, and how to read its **version**. The testbed's lifecycle
(:mod:`shrink.testbed.lifecycle`) does everything else the same way for every
recipe: the mapping, the port, the cgroup, the state file, clean-up on failure.

Built in: ``lighttpd-php-cgi`` (the default) and ``nginx-php-fpm``; any other
server through a TOML file (:mod:`shrink.testbed.command`); all found by name by
:func:`shrink.testbed.servers.load_recipe`. Unit tests use
:class:`shrink.testbed.fake_recipe.FakeRecipe`.

Every process a recipe starts goes through ``ReplicaContext.spawn`` (which calls
:func:`shrink.processes.start_process`): it starts the process already
pinned to the replica's CPUs and inside its cgroup, so whatever the server forks
inherits both, and the lifecycle knows every process to clean up if start-up
fails.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from shrink import processes as process
from shrink.errors import RecipeError, TestbedError, printable
from shrink.mapping import Replica
from shrink.programs import trusted_which
from shrink.share import Cgroup
from shrink.testbed import health
from shrink.testbed.config import PhpLimits
from shrink.testbed.private import ServerUser, server_env
from shrink.testbed.state import ReplicaState
from shrink.testbed.watch import freezer_mounts, frozen

__all__ = [
    "BUILTIN_RECIPES",
    "DEFAULT_RECIPE",
    "BuiltinRecipe",
    "ReplicaContext",
    "ServerRecipe",
    "Started",
    "check_config",
    "find_tool",
    "first_line",
    "kill_spawned",
    "label",
    "pin_evenly",
    "recorded_alive",
    "replica_pids",
    "signal_number",
    "stop_replica",
    "tail_log",
    "wait_until",
]

DEFAULT_RECIPE = "lighttpd-php-cgi"
BUILTIN_RECIPES = ("lighttpd-php-cgi", "nginx-php-fpm")

Spawn = Callable[..., "subprocess.Popen[bytes]"]


@dataclass(frozen=True)
class ReplicaContext:
    """What a recipe gets to start one replica.

    ``spawn(argv, log_name, env=None)`` starts a process pinned to the replica's
    CPUs, in its cgroup, as ``user`` (the unprivileged server user when shrink runs
    as root; None: as shrink's own user), with stdout and stderr appended to
    ``run_dir/log_name``; ``env`` holds extra variables, set over the environment
    every server gets (:func:`shrink.testbed.private.server_env`: as the server user,
    not root's). ``run_dir`` is root's (configs, probe pages); ``sock_dir``
    is the server user's own short folder: sockets (108-byte path limit), pid
    files, temp files and the server's own logs (:mod:`shrink.testbed.private`).
    """

    replica: Replica
    docroot: Path
    run_dir: Path
    sock_dir: Path
    children_per_core: int
    timeout_s: float
    spawn: Spawn
    php: PhpLimits = field(default_factory=PhpLimits)
    user: ServerUser | None = None

    @property
    def workers(self) -> int:
        """One worker per core of the replica, as the papers tuned the server."""
        return len(self.replica.cpus)


@dataclass
class Started:
    """The processes of a replica that came up, by role (e.g. ``nginx``, ``php-fpm``)."""

    masters: list[int]
    processes: dict[str, list[int]]
    pinned: dict[int, list[int]] = field(default_factory=dict)
    config: str = ""
    errorlog: str = ""
    # the replica's other error logs (php-fpm's own, beside nginx's): capped and quoted
    # as ``errorlog`` is
    logs: list[str] = field(default_factory=list)


@runtime_checkable
class ServerRecipe(Protocol):
    """How to run one replica of a server. ``source`` is ``built-in`` or the TOML path."""

    name: str
    source: str

    def versions(self) -> dict[str, str]:
        """Version strings of the server's programs (recorded in every result file)."""
        ...

    def start(self, ctx: ReplicaContext) -> Started:
        """Start the replica through ``ctx.spawn``; return once its processes are up.

        Raise TestbedError (one line) if it cannot; the caller stops what was spawned.
        """
        ...

    def health(self, address: str, port: int) -> str | None:
        """None if the replica serves what it should; else the problem in words."""
        ...

    def pids(self, replica: ReplicaState) -> list[int]:
        """Every live process of the replica: recorded, forked since, or in its cgroup."""
        ...

    def stop(self, replica: ReplicaState) -> list[int]:
        """Stop every process of the replica; return the PIDs that were still running."""
        ...


class BuiltinRecipe:
    """What the built-in recipes share: the probe pages for health, and PIDs and stop
    by the replica's recorded processes and cgroup. A subclass names itself and says
    how to start."""

    name: str
    source = "built-in"
    stop_signal: int = signal.SIGTERM

    def health(self, address: str, port: int) -> str | None:
        return health.check(address, port)

    def pids(self, replica: ReplicaState) -> list[int]:
        return replica_pids(replica)

    def stop(self, replica: ReplicaState) -> list[int]:
        return stop_replica(replica, self.stop_signal)


def label(recipe: ServerRecipe) -> str:
    """How errors name a recipe: its file, or a built-in's name."""
    return recipe.name if recipe.source in ("built-in", "fake") else recipe.source


def find_tool(recipe: str, *names: str, hint: str) -> str:
    """The path of the first of ``names`` installed; /usr/sbin is searched even if not on PATH.

    Root runs it (``-v``): a match another user could have put or changed (a folder
    on ``PATH`` they may write) is skipped, and named if nothing else is found."""
    extra = os.pathsep.join(["/usr/sbin", "/usr/local/sbin", "/sbin"])
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), extra])
    skipped: list[str] = []
    for name in names:
        path, passed = trusted_which(name, search)
        skipped += passed
        if path is not None:
            return path
    if skipped:
        raise RecipeError(
            f"{' or '.join(names)}: not run from {', '.join(dict.fromkeys(skipped))}, which a "
            f"user other than root may change (it or a folder above it); {hint}",
            recipe=recipe,
        )
    raise RecipeError(f"{' or '.join(names)} is not installed: {hint}", recipe=recipe)


def first_line(argv: list[str], recipe: str, user: ServerUser | None = None) -> str:
    """The first line ``argv`` prints (stdout, else stderr: nginx -v writes there); run as
    ``user`` (with its environment, :func:`~shrink.testbed.private.server_env`) if given."""
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": [],
                   "env": server_env(user)}  # fmt: skip
    try:
        out, err = _bounded_output(argv, timeout_s=10.0, **as_user)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RecipeError(f"{' '.join(argv)} failed: {exc}", recipe=recipe) from None
    # A recipe's version command is the user's: bytes that are not UTF-8 were exit 70,
    # and escapes reached the terminal and every result file.
    text = (out.strip() or err.strip()).decode(errors="replace").splitlines()
    line = printable(text[0].strip()) if text else "unknown"
    return line if len(line) <= _VERSION_CHARS else line[:_VERSION_CHARS] + "..."


# What is read of a version command's output (each stream), and kept of its first line.
_VERSION_BYTES = 64 * 1024
_VERSION_CHARS = 200


def _bounded_output(argv: list[str], *, timeout_s: float, **kw: Any) -> tuple[bytes, bytes]:
    """``argv``'s stdout and stderr, at most :data:`_VERSION_BYTES` of each: a command
    that prints without end (``yes``) is stopped once that much is read (read whole, it
    took 11 GB in 10 s). A command still running after ``timeout_s`` is killed and is
    a TimeoutExpired."""
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            for fd in bufs:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    proc.kill()
                    raise subprocess.TimeoutExpired(argv, timeout_s)
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 65536)
                    buf = bufs[key.fd]
                    buf += chunk[: _VERSION_BYTES - len(buf)]
                    if not chunk:
                        sel.unregister(key.fd)
                    elif len(buf) >= _VERSION_BYTES:
                        proc.kill()  # enough of it: the first line is in there
                        sel.unregister(key.fd)
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        out, err = bufs.values()
    return bytes(out), bytes(err)


def check_config(argv: list[str], server: str, conf: Path, user: ServerUser | None = None) -> None:
    """Run the server's own config test (``lighttpd -tt``, ``nginx -t``) as the user the
    server will run as; a refusal is a TestbedError naming the file, with the test's
    last lines of output."""
    as_user = {"user": user.uid, "group": user.gid, "extra_groups": []} if user else {}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, **as_user)
    if done.returncode != 0:
        text = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise TestbedError(f"{server} refused {conf}: {text}")


def wait_until(
    ready: Callable[[], str | None],
    masters: list[subprocess.Popen[bytes]],
    timeout_s: float,
) -> None:
    """Poll ``ready`` (None when done, else what is missing) until it passes.

    A master that exits meanwhile ends the wait at once, with its exit status.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        for m in masters:
            rc = m.poll()
            if rc is not None:
                prog = str(m.args[0] if isinstance(m.args, list) else m.args)
                if rc in process.GATE_EXEC_FAILED:  # the gate's shell could not exec the program
                    raise TestbedError(
                        f"cannot start {prog}: {process.GATE_EXEC_FAILED[rc]} (exit {rc})",
                        pid=m.pid,
                    )
                name = Path(prog).name
                raise TestbedError(f"{name} exited with status {rc} during start-up", pid=m.pid)
        missing = ready()
        if missing is None:
            return
        if time.monotonic() > deadline:
            raise TestbedError(f"{missing} within {timeout_s:g} s")
        time.sleep(0.02)


# How much of a log's end is read for its last lines.
_TAIL_BYTES = 64 * 1024


def tail_log(path: Path, n: int = 3) -> str:
    """The last ``n`` lines of a server's log, on one line (for an error); "" if unreadable.

    A log in the server user's own folder is that user's to replace: read as root, a
    symlink or a hard link there (to /etc/shadow) would print a root file into the
    error, and a FIFO would hang ``up``. Only a regular file with one link, opened
    without following a symlink and without blocking, is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return ""
        data = os.pread(fd, _TAIL_BYTES, max(st.st_size - _TAIL_BYTES, 0))
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").strip().splitlines()
    return " | ".join(line.strip() for line in lines[-n:])


def pin_evenly(pids: list[int], cpus: tuple[int, ...]) -> dict[int, list[int]]:
    """Pin pids[i] to cpus[i % n]: each worker its own core, pool children evenly."""
    out = {}
    for i, pid in enumerate(pids):
        cpu = cpus[i % len(cpus)]
        out[pid] = [cpu]
        with contextlib.suppress(OSError):
            if os.sched_getaffinity(pid) == {cpu}:
                continue  # (inherited: a replica of one CPU needs no call)
        try:
            os.sched_setaffinity(pid, {cpu})
        except PermissionError:
            raise TestbedError(_unpinnable(pid, cpu)) from None
    return out


def _unpinnable(pid: int, cpu: int) -> str:
    """Why server process ``pid`` could not be pinned: a process of another user (the
    servers drop root) is pinned only with CAP_SYS_NICE, which root may lack (a
    container, ``capsh --drop``): said "Operation not permitted", naming nothing."""
    import pwd

    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        who = pwd.getpwuid(uid).pw_name
    except (OSError, KeyError):
        who = "another user"
    return (
        f"cannot pin server process PID {pid} (running as {who}) to CPU {cpu}: setting "
        "another user's process's CPUs needs the capability CAP_SYS_NICE, which this "
        "process runs without (dropped, as in a container or under capsh --drop); run "
        "shrink with it, or give each replica one CPU (its processes then inherit it)"
    )


def recorded_alive(r: ReplicaState) -> dict[int, int]:
    """The recorded PIDs that are still the processes ``up`` started: PID -> start time.

    A state file is not trusted: a PID counts only with its recorded start time (the
    kernel's, /proc/PID/stat field 22) and, where recorded, its program, both the same
    now. A PID the file names without them is never signalled."""
    out = {}
    for p in r.pids:
        start = r.starttimes.get(p)
        if start is None or not process.is_alive(p, start):
            continue
        exe = r.exes.get(p)
        if exe is not None and process.exe_of(p) != exe:
            continue
        out[p] = start
    return out


def replica_pids(r: ReplicaState) -> list[int]:
    """Every live process of the replica: the recorded ones (:func:`recorded_alive`), what
    they forked since (a respawned pool child), and whatever is in its cgroup."""
    out: dict[int, None] = {}
    tree = process.children_map()
    for p in recorded_alive(r):
        out[p] = None
        out.update(dict.fromkeys(process.descendants(p, tree)))
    if r.cgroup:
        out.update(dict.fromkeys(Cgroup.from_dict(r.cgroup).pids()))
    return [p for p in out if process.is_alive(p)]


def stop_replica(r: ReplicaState, stop_signal: int = signal.SIGTERM) -> list[int]:
    """Stop the replica's processes by PID: ``stop_signal`` to the masters first, then
    SIGTERM to the rest, then SIGKILL. Raise if any survives. (Its cgroup is the
    lifecycle's to remove: the share's enforcement is not the recipe's business.)"""
    targets: dict[int, int | None] = dict(recorded_alive(r))
    for p in replica_pids(r):
        targets.setdefault(p, None)
    stopped = process.stop_processes(targets, first=r.masters, first_signal=stop_signal)
    left = [p for p, t in targets.items() if process.is_alive(p, t)]
    if left:
        # A frozen process takes SIGKILL only once thawed: say where, not just that.
        mounts = freezer_mounts()
        held = sorted({w for p in left if (w := frozen(p, mounts)) is not None})
        why = f" (frozen by {', '.join(held)}: thaw it, then run down again)" if held else ""
        raise TestbedError(f"replica {r.name}: PIDs {left} survived SIGKILL{why}")
    return stopped


def kill_spawned(spawned: list[subprocess.Popen[bytes]]) -> None:
    """Stop everything a failed start-up spawned, with all it forked (masters first)."""
    tree = process.children_map()
    targets: dict[int, int | None] = {}
    for m in spawned:
        for p in (m.pid, *process.descendants(m.pid, tree)):
            info = process.proc_info(p)
            if info is not None:
                targets[p] = info.starttime
    process.stop_processes(targets, first=[m.pid for m in spawned])
    for m in spawned:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            m.wait(timeout=1)


def signal_number(name: str | int, *, recipe: str) -> int:
    """``SIGTERM``, ``TERM``, ``15`` -> 15; anything else is a RecipeError on ``stop_signal``."""
    text = str(name).strip().upper()
    try:
        if isinstance(name, int) and not isinstance(name, bool):
            # A number no signal has (0, 99999) was taken: down's kill then failed
            # (EINVAL) or sent nothing, and the server was never asked to stop.
            return int(signal.Signals(name))
        if text.isdigit():
            return int(signal.Signals(int(text)))
        return int(signal.Signals[text if text.startswith("SIG") else "SIG" + text])
    except (KeyError, ValueError):
        raise RecipeError(
            f"{name!r} is not a signal (e.g. SIGTERM, SIGINT, SIGQUIT)",
            recipe=recipe,
            field="stop_signal",
        ) from None
