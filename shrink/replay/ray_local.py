"""The private Ray cluster ``--cluster ray:local`` starts: its folder, the watch on its
head, and its end.

The head (its ``gcs_server`` and ``raylet``) is a child of this process. Stopped under
a run (``ray stop``, a kill by PID), every Ray call of the driver waited for it up to
Ray's own 60 s, then Ray's core ended the process with its own line: the finished
levels kept but unsaid, the private folder and a run's marks left. :class:`HeadWatch`
looks at the head's processes a few times a second and, once one has ended, stops the
command's main thread as a stop signal does (:func:`shrink.interrupts.stop_main`), with
its own reason; the Ray calls still to come (stopping the actors, removing the placement
group, Ray's ``shutdown``) are skipped then, as each would wait for the head.

Some of the cluster's processes (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``,
workers) outlived a stopped head, orphaned, and ignored SIGTERM. Every process of the
cluster has its log files open in the cluster's session folder, which is this run's
alone (in shrink's 0700 private folder): :func:`cluster_pids` finds them by that, this
user's only, never by a name another user's cluster shares, and :func:`end_processes`
kills what SIGTERM leaves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "HeadWatch",
    "cluster_pids",
    "end_processes",
    "head_gone",
    "private_ray_dir",
    "settle",
    "settled",
    "shutdown_and_remove",
    "start_watch",
]

LOOK_S = 0.2  # s between looks at the head's processes
TERM_WAIT = 3.0  # s for the cluster's processes to end on SIGTERM before SIGKILL

# The watch of the cluster this process started, if any (one per process: ray.init's).
_watch: list[HeadWatch] = []
# When a wait of :func:`settle` last ended with the head still running (monotonic s)
_settled = [-1e9]


def private_ray_dir() -> tuple[str, str]:
    """A fresh folder for a cluster Ray starts here, and the 0700 folder that holds it in
    shrink's private folder. Ray makes its own folder world-writable (0777), and its path
    shows in every Ray process's command line: only the folder above keeps others out."""
    from shrink.testbed.registry import private_dir

    base = tempfile.mkdtemp(prefix="ray-", dir=private_dir())
    return os.path.join(base, "r"), base


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def refused(address: tuple[str, int] | None) -> bool:
    """Whether ``address`` (the head's GCS port) refuses a connection: nothing listens
    there any more. (A GCS stopped by SIGTERM closed its port seconds before it ended.)"""
    if address is None:
        return False
    try:
        socket.create_connection(address, timeout=0.5).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # a timeout, no file descriptor left: nothing told
        return False
    return False


class HeadWatch:
    """Looks at the head's processes (``{name: pid}``) and its GCS port every ``every``
    s, on a daemon thread; when a process has ended, or the port refused two looks in a
    row, ``on_end(name, pid)`` is called once (from the thread), unless ``mine()`` says
    the cluster is no longer this process's (then the watch just ends)."""

    def __init__(
        self,
        pids: dict[str, int],
        on_end: Callable[[str, int], Any],
        every: float = LOOK_S,
        port: tuple[str, int] | None = None,
        mine: Callable[[], bool] | None = None,
    ) -> None:
        self.pids = dict(pids)
        self._mine = mine
        self.port = port
        self._on_end = on_end
        self._every = every
        self._quit = threading.Event()
        self.ended: tuple[str, int] | None = None
        self._thread = threading.Thread(target=self._look, name="ray-head-watch", daemon=True)

    def start(self) -> HeadWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop looking (the cluster is being shut down on purpose)."""
        self._quit.set()

    def _look(self) -> None:
        from shrink import interrupts

        interrupts.leave_to_loop()  # a stop signal is the main thread's
        closed = 0
        while not self._quit.wait(self._every):
            gone = next(((n, p) for n, p in self.pids.items() if not alive(p)), None)
            closed = closed + 1 if refused(self.port) else 0
            if gone is None and closed >= 2 and "gcs_server" in self.pids:
                gone = ("gcs_server", self.pids["gcs_server"])
            if gone is not None and self._mine is not None and not self._mine():
                return  # shut down here on purpose (ray.shutdown() not through shrink)
            if gone is not None and not self._quit.is_set():
                self.ended = gone
                self._on_end(*gone)
                return


def head_gone() -> bool:
    """Whether the head of the cluster this process started was seen ended: a Ray call
    that needs it would wait up to Ray's 60 s, then Ray's core would end the process."""
    return bool(_watch and _watch[0].ended is not None)


@contextlib.contextmanager
def settled() -> Iterator[None]:
    """Inside, an error is first given to :func:`settle`: the head's end, if that is what
    it came of, is raised as the head's stop in its place."""
    try:
        yield
    except Exception:
        settle()
        raise


def settle(wait: float = 1.0) -> None:
    """A Ray call failed: give the watch up to ``wait`` s to see whether the head ended
    (an actor's error, "its owner has died", came before the watch's next look). If it
    did, its stop (a KeyboardInterrupt with its reason) is raised here, in place of the
    error the caller is about to raise."""
    if not _watch or _watch[0].ended is not None:
        return
    # One error settled and raised again through an outer catch (the placement's
    # failure, then run_on_cluster's) is waited for once: it took 2 s, not 1.
    if time.monotonic() - _settled[0] < wait:
        return
    until = time.monotonic() + wait
    while _watch[0].ended is None and time.monotonic() < until:
        time.sleep(0.05)
    _settled[0] = time.monotonic()


def _gcs_port(ray: Any) -> tuple[str, int] | None:
    with contextlib.suppress(AttributeError, AssertionError, ValueError):
        host, _, port = ray._private.worker._global_node.gcs_address.rpartition(":")
        return host.strip("[]"), int(port)
    return None


def head_pids(ray: Any) -> dict[str, int]:
    """The head's processes of the cluster ``ray.init`` started here: ``{name: pid}``
    (``gcs_server``, ``raylet``); empty where Ray's node does not tell."""
    try:
        node = ray._private.worker._global_node
        procs = node.all_processes
    except AttributeError:
        return {}
    out = {}
    for name in ("gcs_server", "raylet"):
        with contextlib.suppress(AttributeError, IndexError, KeyError, TypeError):
            out[name] = int(procs[name][0].process.pid)
    return out


def _stop_for_head(name: str, pid: int) -> None:
    import atexit

    from shrink import interrupts

    # Ray's own exit hook (its shutdown) waits for the head without end: not run then.
    ray = sys.modules.get("ray")
    if ray is not None:
        atexit.unregister(ray.shutdown)
    interrupts.stop_main(
        f"the local Ray cluster's head ended (its {name}, PID {pid}, is gone: stopped or "
        "killed) mid-run"
    )


def start_watch(ray: Any) -> HeadWatch | None:
    """Watch the head of the cluster ``ray.init(address="local")`` just started."""
    pids = head_pids(ray)
    if not pids:
        return None
    # Ray's shutdown() disconnects before it ends the head: a head ended so, by a caller
    # of this process, is no head's stop (it stopped a later command, or test, of it).
    mine = getattr(ray, "is_initialized", None)
    _watch[:] = [HeadWatch(pids, _stop_for_head, port=_gcs_port(ray), mine=mine).start()]
    return _watch[0]


def cluster_pids(folder: str) -> list[int]:
    """This user's processes, other than this one, with a file open under ``folder``
    (a Ray cluster's folder: each of its processes logs into its session folder) or
    ``folder`` in their command line."""
    me, uid = os.getpid(), os.geteuid()
    inside = folder.rstrip("/") + "/"
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read()
            mine = inside.encode() in cmd + b"/"
            fds = f"/proc/{entry.name}/fd"
            for fd in [] if mine else os.listdir(fds):
                with contextlib.suppress(OSError):
                    if os.readlink(f"{fds}/{fd}").startswith(inside):
                        mine = True
                        break
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if mine and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def end_processes(pids: list[int], wait: float = TERM_WAIT) -> list[int]:
    """SIGTERM to each of ``pids``, then SIGKILL to those still running after ``wait``
    s (Ray's agents, orphaned, ignored SIGTERM). Returns the PIDs killed so."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    until = time.monotonic() + wait
    left = list(pids)
    while left and time.monotonic() < until:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def shutdown_and_remove(ray: Any, base: str) -> None:
    """At exit, before Ray's own hook (registered earlier): stop the cluster started here
    (Ray's ``shutdown``, unless its head has ended: it would wait for it), end every
    process of it still running, then remove its folder."""
    import shutil

    gone = head_gone()
    for watch in _watch:
        watch.close()
    if not gone:
        with contextlib.suppress(Exception):
            ray.shutdown()
    # Looked for again after each round: a process of the cluster started while the
    # others were ended (a worker the raylet was starting) was left, orphaned.
    for _ in range(5):
        pids = cluster_pids(base)
        if not pids:
            break
        end_processes(pids)
    shutil.rmtree(base, ignore_errors=True)
    if gone:
        _exit_past_ray()


def _exit_past_ray() -> None:
    """Exit now, with the stop's status, once the head's end stopped the command: Ray's
    core, never shut down (its shutdown waits for the head), crashed the interpreter's
    own exit (SIGSEGV, exit 139) after the line was said. Where the command's status is
    not known here (the head ended after the stop was taken otherwise), the exit is
    left to Python."""
    from shrink import interrupts

    if interrupts.stopped_by() == interrupts.stop_reason() != "":
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(interrupts.exit_status())
