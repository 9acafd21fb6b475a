"""The duty-cycle co-runner: a CPU-time share as a SCHED_FIFO spinner on each share CPU.

Each of the share's CPUs gets a co-runner at real-time priority 1 that spins
``(1 - f)`` of every ``period_us`` (1 ms) and sleeps the rest; the server's normal
tasks run in the gaps. Every task on the CPU (the server, its softirqs, kernel
threads) is slowed alike at a 1 ms grain, which a quota on the server's cgroup
does not do. The spinner is ``corunner.c`` (built by ``scripts/setup.sh``, or
here on first use when a C compiler exists); Python's sleep overshoots by tens of
microseconds, so ``python -m shrink.enforce._spin`` is only the fallback.

A co-runner watches the server's first PID and exits when it is gone, so a
server that dies never leaves a spinner; ``stop`` ends it by PID and start time.
The kernel lets real-time tasks use at most ``sched_rt_runtime_us`` of each
``sched_rt_period_us`` (95%): a share under 5% cannot be given this way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from shrink import processes as process
from shrink.atomic import make_dirs
from shrink.enforce.cfs import Cgroup, CgroupLayout, Recorded
from shrink.errors import TopologyError, WriteError
from shrink.programs import safe_to_run, trusted_path, trusted_which
from shrink.schemas import MAX_CPUS, Count, Cpu, Fraction, Name, Pid

__all__ = ["PERIOD_US", "CoRunner", "build_helper"]

PERIOD_US = 1000  # the measurements: 1 ms is near ideal; finer loses to switching
SOURCE = Path(__file__).with_name("corunner.c")
RT_LIMIT = 0.95  # sched_rt_runtime_us / sched_rt_period_us, the kernel default


def _helper_path() -> Path:
    tag = hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:10]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shrink" / f"corunner-{tag}"


def build_helper() -> Path | None:
    """The compiled co-runner (built now if missing and a compiler exists), else None.

    It runs as root, from a folder the environment names (``XDG_CACHE_HOME``,
    ``HOME``): one that another user may write, or a program they put there, is not
    run (None: the Python spinner is used instead)."""
    path = _helper_path()
    if path.exists():
        return path if safe_to_run(path) else None
    search = trusted_path()  # cc runs as and ld by PATH: only its trusted folders
    cc = trusted_which("cc", search)[0] or trusted_which("gcc", search)[0]
    if cc is None:
        return None
    # Checked before a folder is made: in a cache folder another user owns (a hostile
    # XDG_CACHE_HOME) root left a folder of its own, though it ran nothing from it.
    above = path.parent
    while not os.path.lexists(above) and above != above.parent:
        above = above.parent
    if not safe_to_run(above):
        return None
    try:
        make_dirs(path.parent, 0o755)
    except WriteError:
        return None
    if not safe_to_run(path.parent):
        return None
    tmp = Path(tempfile.mkdtemp(dir=path.parent)) / "corunner"
    try:
        done = subprocess.run(
            [cc, "-O2", "-o", str(tmp), str(SOURCE)], capture_output=True, text=True,
            timeout=60, env={**os.environ, "PATH": search},
        )  # fmt: skip
        if done.returncode != 0:
            return None
        os.chmod(tmp, 0o755)  # whatever the umask: a program root runs is no one else's to write
        os.replace(tmp, path)  # atomic: two builders at once both end with a whole file
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)
    return path if safe_to_run(path) else None


@dataclass(init=False, eq=False)
class CoRunner(Recorded):
    """The Enforcer of a duty-cycle co-runner (one spinner per CPU of the replica)."""

    cpu_fraction: Fraction
    period_us: Annotated[int, Field(ge=1, le=10**7)]
    spin_us: Count = 0  # derived from the two above
    helper: Name = ""  # "c" or "python": which spinner ran
    cpus: Annotated[tuple[Cpu, ...], Field(max_length=MAX_CPUS)] = ()
    spinners: Annotated[dict[Pid, Count], Field(max_length=MAX_CPUS)] = field(
        default_factory=dict
    )  # PID -> start time
    # The group (no quota) pins and accounts the server, as for a core share.
    cgroup: Cgroup | None = None

    mechanism = "corunner"
    WHAT = "co-runner"

    def __init__(
        self,
        name: str,
        layout: CgroupLayout | None,
        *,
        cpu_fraction: float,
        period_us: int = PERIOD_US,
    ) -> None:
        self.cgroup = Cgroup(name, layout) if layout is not None else None
        self.cpu_fraction = cpu_fraction
        self.period_us = period_us
        self.cpus = ()
        self.spinners = {}
        self.helper = ""
        self.__post_init__()

    def __post_init__(self) -> None:
        if not 1 - RT_LIMIT <= self.cpu_fraction < 1.0:
            raise TopologyError(
                f"cpu_fraction == {self.cpu_fraction:g}: a co-runner gives a share in "
                f"[{1 - RT_LIMIT:g}, 1) (real-time tasks may use at most {RT_LIMIT:.0%} of a CPU)."
            )
        self.spin_us = round((1 - self.cpu_fraction) * self.period_us)

    def start(self, cpus: tuple[int, ...]) -> None:
        self.cpus = tuple(cpus)
        if self.cgroup is not None:
            self.cgroup.create(self.cpus, None, None)

    def join(self, pid: int) -> None:
        if self.cgroup is not None:
            self.cgroup.add(pid)

    def add(self, pids: list[int]) -> None:
        if self.cgroup is not None:
            for pid in pids:
                self.cgroup.add(pid)
        if not self.spinners and pids:
            self._spawn(watch=pids[0])

    def _spawn(self, watch: int) -> None:
        exe = build_helper()
        self.helper = "c" if exe is not None else "python"
        base = [str(exe)] if exe else [sys.executable, "-m", "shrink.enforce._spin"]
        # Its start time: a process that gets the server's number once it has ended is
        # not the server (kill(pid, 0) passed it, and the spinner spun on till down).
        info = process.proc_info(watch)
        watched = [str(watch), str(info.starttime if info is not None else -1)]
        procs = []
        for cpu in self.cpus:
            argv = [*base, str(cpu), str(self.period_us), str(self.spin_us), *watched]
            procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            )
        time.sleep(0.1)  # long enough to have failed on a missing permission
        for p in procs:
            info = process.proc_info(p.pid)
            if p.poll() is not None or info is None:
                err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
                self.stop()
                raise TopologyError(
                    f"the co-runner on CPU {p.args[-5]} exited ({err or p.returncode}); "
                    "it needs root (SCHED_FIFO): run as root or use --enforce cfs"
                )
            self.spinners[p.pid] = info.starttime
            if p.stderr is not None:
                p.stderr.close()

    def pids(self) -> list[int]:
        return self.cgroup.pids() if self.cgroup is not None else []

    def usage_s(self) -> float | None:
        return self.cgroup.usage_s() if self.cgroup is not None else None

    def stop(self) -> None:
        process.stop_processes(dict(self.spinners), grace_s=1.0)
        for pid in self.spinners:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        left = [p for p, t in self.spinners.items() if process.is_alive(p, t)]
        if left:
            raise TopologyError(f"co-runner PIDs {left} survived SIGKILL")
        self.spinners = {}
        if self.cgroup is not None:
            self.cgroup.remove()

    def describe(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "cpu_fraction": self.cpu_fraction,
            "period_us": self.period_us,
            "spin_us": self.spin_us,
            "helper": self.helper,
        }
