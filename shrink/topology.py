"""Discover this machine's topology from /sys and describe it as a :class:`Machine`.

Sources, in order of preference:

1. sysfs: ``/sys/devices/system/cpu/cpu*/topology/{physical_package_id,core_id,
   thread_siblings_list}``, ``/sys/devices/system/node/node*`` (NUMA nodes) and
   the last-level cache ``cpu*/cache/index*`` with the highest ``level``.
2. ``lscpu -p=CPU,CORE,SOCKET,NODE`` where sysfs lacks the topology files
   (some containers and old kernels).
3. ``os.sched_getaffinity`` alone: one socket, one thread per core.

The result is a plain :class:`shrink.machine.Machine`, so it can be written as
a TOML spec and read back, exactly like a spec the user wrote for a machine they
do not have (``examples/machines/*.toml``).

Within a socket, CPUs are listed core by core with SMT siblings adjacent, so
taking the first ``n * threads_per_core`` CPUs of a socket takes ``n`` whole
cores (:mod:`shrink.share` relies on this).
"""

from __future__ import annotations

import os
import re
import socket as _socket
import subprocess
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from shrink.errors import TopologyError
from shrink.machine import Machine
from shrink.programs import trusted_which
from shrink.schemas import MAX_CPUS

__all__ = [
    "CpuInfo",
    "discover",
    "foreign_cpus",
    "format_cpulist",
    "load_machine",
    "parse_cpulist",
]


@dataclass(frozen=True)
class CpuInfo:
    """One logical CPU as the kernel reports it."""

    cpu: int
    socket: int
    core: int
    node: int = 0


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a kernel CPU list such as ``"0-3,8,10-11"`` into sorted CPU ids."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)  # \d also takes "١" (Arabic-Indic)
        if not m:
            raise TopologyError(f"CPU list == {text!r}, must look like 0-3,8,10-11.")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise TopologyError(f"CPU list == {text!r}: range {part} runs backwards.")
        if hi >= MAX_CPUS:
            # 0-99999999999999999999 was a set of 1e20 CPUs: MemoryError, exit 70.
            raise TopologyError(
                f"CPU list == {text!r}: CPU {hi} is past the most a machine may have "
                f"({MAX_CPUS:,}: CPUs 0-{MAX_CPUS - 1})."
            )
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def format_cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """The inverse of :func:`parse_cpulist`: ``(0, 1, 2, 5)`` -> ``"0-2,5"``."""
    s = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        parts.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(parts)


def recorded_cpus(value: object) -> tuple[int, ...]:
    """The CPU numbers a file's free-form record holds (a curve's target: ``share_cpus``,
    ``generator_cpus``): a list of them, else none (an older, edited or damaged file)."""
    from shrink.schemas import MAX_CPUS

    if not isinstance(value, (list, tuple)) or len(value) > MAX_CPUS:
        return ()
    if not all(type(c) is int and 0 <= c < MAX_CPUS for c in value):
        return ()
    return tuple(value)


def foreign_cpus(cpus: tuple[int, ...] | list[int] | None) -> str | None:
    """Why this process cannot run the load generator on ``cpus`` (some are not among
    the CPUs it may use), or None. Pinning to them would fail later, naming nothing."""
    allowed = sorted(os.sched_getaffinity(0))
    bad = sorted(set(cpus or ()) - set(allowed))
    if not bad:
        return None
    return f"CPUs {bad} are not among the CPUs this process may use ({format_cpulist(allowed)})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def smt_siblings(cpu: int, sys_root: str | Path = "/sys") -> tuple[int, ...]:
    """The other hardware threads of ``cpu``'s core (none where sysfs does not say)."""
    path = Path(sys_root) / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
    listed = _read(path / "thread_siblings_list")
    try:
        return tuple(c for c in parse_cpulist(listed or "") if c != cpu)
    except TopologyError:
        return ()


def online_cpus(sys_root: str | Path = "/sys") -> tuple[int, ...] | None:
    """This machine's online CPUs (``/sys/devices/system/cpu/online``); None if unread."""
    listed = _read(Path(sys_root) / "devices" / "system" / "cpu" / "online")
    try:
        return tuple(parse_cpulist(listed)) if listed else None
    except TopologyError:
        return None


def _cpus_from_sysfs(sys_root: Path) -> list[CpuInfo] | None:
    cpu_dir = sys_root / "devices" / "system" / "cpu"
    online = _read(cpu_dir / "online")
    if online is None:
        return None
    node_of: dict[int, int] = {}
    for node in sorted((sys_root / "devices" / "system" / "node").glob("node[0-9]*")):
        listed = _read(node / "cpulist")
        if listed:
            for c in parse_cpulist(listed):
                node_of[c] = int(node.name[4:])
    out = []
    for c in parse_cpulist(online):
        topo = cpu_dir / f"cpu{c}" / "topology"
        pkg, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        if pkg is None or core is None:
            return None
        out.append(CpuInfo(c, int(pkg), int(core), node_of.get(c, 0)))
    return out or None


def _cpus_from_lscpu() -> list[CpuInfo] | None:
    exe = trusted_which("lscpu")[0]  # run as root: never one another user could plant
    if exe is None:
        return None
    try:
        text = subprocess.run(
            [exe, "-p=CPU,CORE,SOCKET,NODE"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_lscpu(text) or None


def parse_lscpu(text: str) -> list[CpuInfo]:
    """Parse ``lscpu -p=CPU,CORE,SOCKET,NODE`` output (comment lines start with ``#``)."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split(",")
        vals = [int(x) if x.strip().isdigit() else 0 for x in f[:4]] + [0] * (4 - len(f[:4]))
        out.append(CpuInfo(cpu=vals[0], core=vals[1], socket=vals[2], node=vals[3]))
    return out


def _llc_mib(sys_root: Path, cpu: int) -> tuple[float, int]:
    """Size in MiB and sharing width (CPUs) of ``cpu``'s highest-level data/unified cache."""
    best: tuple[int, float, int] = (-1, 0.0, 1)
    for idx in (sys_root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cache").glob("index*"):
        level, size = _read(idx / "level"), _read(idx / "size")
        if level is None or size is None or _read(idx / "type") == "Instruction":
            continue
        m = re.fullmatch(r"(\d+)\s*([KMG]?)", size)
        if not m:
            continue
        kib = int(m.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024**2}[m.group(2)]
        shared = _read(idx / "shared_cpu_list")
        width = len(parse_cpulist(shared)) if shared else 1
        if int(level) > best[0]:
            best = (int(level), kib / 1024, width)
    return best[1], best[2]


def _ghz() -> float | None:
    text = _read(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    if text and text.isdigit():
        return round(int(text) / 1e6, 3)
    cpuinfo = _read(Path("/proc/cpuinfo")) or ""
    m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", cpuinfo, re.M)
    return round(float(m.group(1)) / 1000, 3) if m else None


def _nic(sys_root: Path) -> tuple[int, int]:
    """(ports, rx queues per port) of the physical network interfaces (those with a device)."""
    ports = [p for p in sorted((sys_root / "class" / "net").glob("*")) if (p / "device").exists()]
    if not ports:
        return 1, 1
    queues = [len(list((p / "queues").glob("rx-*"))) or 1 for p in ports]
    return len(ports), min(queues)


def machine_from_cpus(
    cpus: list[CpuInfo], *, name: str, llc_mib: float = 0.0, ghz: float | None = None
) -> Machine:
    """Group CPUs into sockets and cores; refuse shapes a Machine cannot hold (uneven sockets)."""
    by_socket: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for c in cpus:
        by_socket[c.socket][c.core].append(c.cpu)
    sockets = [by_socket[s] for s in sorted(by_socket)]
    cores = {len(s) for s in sockets}
    threads = {len(t) for s in sockets for t in s.values()}
    if len(cores) != 1 or len(threads) != 1:
        raise TopologyError(
            f"machine {name!r}: sockets have unequal cores or threads ({sorted(cores)} cores, "
            f"{sorted(threads)} threads per core; some CPUs offline?). Describe it in a TOML "
            "spec instead (see examples/machines/)."
        )
    ordered = tuple(tuple(c for core in sorted(s) for c in sorted(s[core])) for s in sockets)
    nodes = len({c.node for c in cpus})
    return Machine(
        name=name,
        sockets=len(sockets),
        cores_per_socket=cores.pop(),
        threads_per_core=threads.pop(),
        llc_mib=round(llc_mib, 3),
        ghz=ghz,
        cpus=ordered,
        extra={"numa_nodes": nodes},
    )


def discover(sys_root: str | Path = "/sys", *, name: str | None = None) -> Machine:
    """This machine's topology: sockets, cores per socket, SMT siblings, LLC per socket.

    ``sys_root`` points elsewhere for tests (a fake sysfs tree). CPUs outside this
    process's affinity mask are kept: the machine is the hardware, the share is
    what a run gets.
    """
    root = Path(sys_root)
    source = "sysfs"
    cpus = _cpus_from_sysfs(root)
    if cpus is None and root == Path("/sys"):
        source, cpus = "lscpu", _cpus_from_lscpu()
    if cpus is None:
        source = "affinity"
        cpus = [CpuInfo(c, 0, c) for c in sorted(os.sched_getaffinity(0))]
    llc, width = _llc_mib(root, cpus[0].cpu)
    m = machine_from_cpus(
        cpus,
        name=name or _socket.gethostname() or "this",
        llc_mib=llc,
        ghz=_ghz() if root == Path("/sys") else None,
    )
    ports, queues = _nic(root)
    extra = dict(m.extra, source=source, llc_shared_by_cpus=width)
    # nic_port_socket (): derived again for the ports found
    return replace(m, nic_ports=ports, nic_queues_per_port=queues, nic_port_socket=(), extra=extra)


def load_machine(spec: str | Path) -> Machine:
    """``"this"`` discovers the local machine; anything else is a TOML spec path."""
    if str(spec) == "this":
        return discover()
    return Machine.read_toml(spec)
