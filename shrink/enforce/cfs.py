"""The CFS quota: a CPU-time share as cgroup CPU bandwidth control (today's default).

cgroup v2 ``cpu.max`` where the v2 hierarchy has the cpu controller, else cgroup
v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (the case on hybrid hierarchies
such as this project's VM). The same groups carry a ``cpuset`` (the share's CPUs)
and ``cpuacct`` (the replica's CPU time), which the other mechanisms reuse
without a quota.

Period choice. The kernel refuses a quota under 1 ms, and a long period makes
latency bimodal (../shared/DESIGN.md: 50 ms / 100 ms gave a p99 of 47.6 ms
against 2.1 ms for 1 ms / 2 ms at the same 50 % share). But a quota shorter
than one scheduler tick (1/CONFIG_HZ: 4 ms at HZ=250) under-delivers: a group
that stays runnable overruns its quota until the next tick and then pays the
debt, so on this VM (HZ=250) a 50 % share measured, as CPU used by two PHP
requests spinning on one core for 2.2 s:

    | quota / period | CPU delivered (of a core) |
    |---|---|
    | 1 ms / 2 ms    | 0.34 |
    | 2 ms / 4 ms    | 0.38 |
    | 4 ms / 8 ms    | 0.50 |
    | 5 ms / 10 ms   | 0.50 |
    | 10 ms / 20 ms  | 0.50 |

A server at saturation (where a MAT is measured) is always runnable, so we take
the *shortest period whose quota is at least one tick* (and 1 ms):
``period = ceil(max(1 ms, tick) / (fraction * n_cpus))``, rounded up to 100 us.
The cost is latency: a request can wait up to ``period - quota`` for the next
refill (4 ms at 50 %), against 1 ms with the 2 ms period. Pass ``period_us`` to
trade the other way.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_serializer

from shrink import files
from shrink.errors import TopologyError
from shrink.schemas import Count, Fraction, Name, Text
from shrink.topology import format_cpulist

__all__ = [
    "MAX_PERIOD_US",
    "MIN_QUOTA_US",
    "CfsQuota",
    "Cgroup",
    "CgroupLayout",
    "Recorded",
    "can_write_cgroups",
    "cgroup_layout",
    "cgroup_mounts",
    "cgroups_refused",
    "choose_period_us",
    "foreign_cgroup",
    "in_root_cpu_group",
    "own_rt_runtime_us",
    "scheduler_tick_us",
]

MIN_QUOTA_US = 1000  # the kernel's floor for a CFS quota
MAX_PERIOD_US = 1_000_000  # and its ceiling for the period


def scheduler_tick_us(config_text: str | None = None) -> int:
    """One scheduler tick, 1/CONFIG_HZ, in us, from the kernel's build config.

    Read from ``/boot/config-$(uname -r)`` or ``/proc/config.gz``; 4000 (HZ=250,
    the common distribution default) when neither says.
    """
    if config_text is None:
        config_text = _kernel_config()
    m = re.search(r"^CONFIG_HZ=(\d+)\s*$", config_text, re.M)
    return 1_000_000 // int(m.group(1)) if m and int(m.group(1)) > 0 else 4000


def _kernel_config() -> str:
    import gzip

    with contextlib.suppress(OSError):
        return Path(f"/boot/config-{os.uname().release}").read_text()
    with contextlib.suppress(OSError):
        return gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    return ""


def choose_period_us(fraction: float, n_cpus: int, *, tick_us: int | None = None) -> int:
    """Shortest CFS period (us, multiple of 100) whose quota is >= 1 ms and >= one tick."""
    tick = scheduler_tick_us() if tick_us is None else tick_us
    # Past twice the longest period only "too long" matters: a share of 1e-320 needed inf,
    # which math.ceil refused (OverflowError, exit 70).
    need = min(max(MIN_QUOTA_US, tick) / (fraction * n_cpus), 2.0 * MAX_PERIOD_US)
    period = max(MIN_QUOTA_US, math.ceil(need / 100 - 1e-9) * 100)
    if period > MAX_PERIOD_US and fraction * n_cpus * MAX_PERIOD_US >= MIN_QUOTA_US:
        period = MAX_PERIOD_US  # under a tick, but the longest period the kernel allows
    if period > MAX_PERIOD_US:
        raise TopologyError(
            f"a CPU-time share of {fraction:g} on {n_cpus} CPU(s) needs a period over "
            f"{MAX_PERIOD_US} us for a quota of one tick ({tick} us), which the kernel "
            "refuses; give a longer share or pass a period."
        )
    return period


# cgroups --------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupLayout:
    """Where the controllers live: v2 (one tree) or v1 (one mount per controller)."""

    version: int
    cpu: Path | None  # v2 root or v1 cpu mount
    cpuset: Path | None
    cpuacct: Path | None


def cgroup_layout(mounts_text: str | None = None, fs_root: str | Path = "/") -> CgroupLayout:
    """Find the cpu, cpuset and cpuacct controllers from ``/proc/self/mounts``.

    v2 is used only if its tree offers the cpu controller; a hybrid machine whose
    v2 tree has none (cpu bound to v1) falls back to the v1 mounts.
    """
    root = Path(fs_root)
    if mounts_text is None:
        mounts_text = (root / "proc" / "self" / "mounts").read_text()
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mounts_text.splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        where = root / f[1].lstrip("/")
        if f[2] == "cgroup2":
            v2 = where
        elif f[2] == "cgroup":
            for opt in f[3].split(","):
                if opt in ("cpu", "cpuset", "cpuacct"):
                    v1.setdefault(opt, where)
    if v2 is not None:
        controllers = (
            (v2 / "cgroup.controllers").read_text().split()
            if (v2 / "cgroup.controllers").exists()
            else []
        )
        if "cpu" in controllers:
            return CgroupLayout(2, v2, v2 if "cpuset" in controllers else None, v2)
    return CgroupLayout(1, v1.get("cpu"), v1.get("cpuset"), v1.get("cpuacct"))


def in_root_cpu_group(
    cgroup_text: str | None = None,
    layout: CgroupLayout | None = None,
    mountinfo_text: str | None = None,
) -> bool:
    """Whether this process's cpu cgroup is the root one (where the kernel's autogroups
    apply, one a session), or no cpu controller is mounted; False where it cannot tell.

    Inside a cgroup namespace /proc/self/cgroup says '/' at the namespace's root, which
    is the host's root only if the controller's mount shows its hierarchy's root
    (:func:`_shows_hierarchy_root`): ``unshare --cgroup`` from a child group read as root.
    """
    layout = layout if layout is not None else cgroup_layout()
    if layout.cpu is None:
        return True
    try:
        text = cgroup_text if cgroup_text is not None else Path("/proc/self/cgroup").read_text()
        if not _shows_hierarchy_root(layout, mountinfo_text):
            return False
    except OSError:
        return False
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (layout.version == 2 and hid == "0" and not controllers) or (
            layout.version == 1 and "cpu" in controllers.split(",")
        ):
            return path.strip() == "/"
    return True  # (no line for the controller: not in any of its groups)


def own_rt_runtime_us(
    layout: CgroupLayout | None = None,
    cgroup_text: str | None = None,
    mountinfo_text: str | None = None,
) -> int | None:
    """cgroup v1's cpu.rt_runtime_us of this process's cpu group (0: realtime tasks get
    no time there), or None where there is none or it cannot be read. The group's path
    is taken from the hierarchy's mount root: a container's bind mount of its own group
    (Docker on cgroup v1) shows /docker/ID as its folder, whose file was not found at
    /docker/ID below it, and the refusal was said to be another's (a seccomp filter)."""
    layout = layout if layout is not None else cgroup_layout()
    if layout.version != 1 or layout.cpu is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        if cgroup_text is None:
            cgroup_text = Path("/proc/self/cgroup").read_text()
        if mountinfo_text is None:
            mountinfo_text = Path("/proc/self/mountinfo").read_text()
        where = str(layout.cpu)
        roots = [f[3] for f in map(str.split, mountinfo_text.splitlines()) if f[4:5] == [where]]
        # (mountinfo escapes blanks, tabs, newlines and backslashes; /proc/self/cgroup not)
        root = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), roots[-1]) if roots else "/"
        for line in cgroup_text.splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(","):
                return _rt_runtime_below(layout.cpu, root.rstrip("/"), path.strip())
    return None


def _rt_runtime_below(mount: Path, root: str, path: str) -> int | None:
    """cpu.rt_runtime_us of the group at ``path`` (as /proc/self/cgroup names it) in the
    hierarchy mounted at ``mount`` from its folder ``root`` ("" the whole); None for a
    group the mount does not show: outside its folder, or outside this cgroup namespace
    (``/..``), whose file was read at the mount's top or beside it, another group's."""
    if ".." in path.split("/") or ".." in root.split("/"):
        return None
    if root:
        if path != root and not path.startswith(root + "/"):
            return None
        path = path[len(root) :]
    return int((mount / path.lstrip("/") / "cpu.rt_runtime_us").read_text())


def _shows_hierarchy_root(layout: CgroupLayout, mountinfo_text: str | None = None) -> bool:
    """Whether the cpu controller's folder is its hierarchy's root: mounted whole (its
    line in /proc/self/mountinfo has root '/': from a cgroup namespace below it the
    kernel shows '/..', for a bind mount the subfolder), and holding what only the root
    holds (v1: cgroup.sane_behavior; v2: no cpu.weight), which a namespace's own mount
    of its root group, shown as '/', does not. Raises OSError when mountinfo is unread."""
    if layout.cpu is None:
        return True  # (no cpu controller: no group weighs CPU time)
    if mountinfo_text is None:
        mountinfo_text = Path("/proc/self/mountinfo").read_text()
    where = str(layout.cpu)
    roots = [
        f[3]
        for f in (ln.split() for ln in mountinfo_text.splitlines())
        if len(f) > 4 and f[4] == where
    ]
    if roots[-1:] != ["/"]:  # (the last mount on a folder is the one seen there)
        return False
    if layout.version == 1:
        return (layout.cpu / "cgroup.sane_behavior").exists()
    return not (layout.cpu / "cpu.weight").exists()


def _layout(version: Any) -> CgroupLayout:
    """The layout a recorded group names: its version only. A group read back is
    accounted, emptied and removed through its folders; it is never created again."""
    if isinstance(version, CgroupLayout):
        return version
    if version not in (1, 2) or isinstance(version, bool):
        raise ValueError("must be 1 or 2")
    return CgroupLayout(version, None, None, None)


@dataclass
class Cgroup(files.FileFormat):
    """The cgroup(s) of one replica: created, filled with PIDs, read, removed.

    Its record (a testbed state's ``cgroup``) is its name, its layout's ``version``
    and its folders by controller.
    """

    name: Name
    layout: Annotated[
        CgroupLayout,
        BeforeValidator(_layout),
        Field(validation_alias="version", exclude=True),
    ] = CgroupLayout(1, None, None, None)
    dirs: Annotated[dict[Name, Text], Field(max_length=8)] = field(default_factory=dict)

    PARENT = "shrink"
    WHAT = "cgroup"

    def create(self, cpus: tuple[int, ...], quota_us: int | None, period_us: int | None) -> None:
        """Make the groups and write the limits. Raises TopologyError without permission."""
        lay = self.layout
        try:
            if lay.version == 2:
                self._create_v2(cpus, quota_us, period_us)
            else:
                self._create_v1(cpus, quota_us, period_us)
        except PermissionError as exc:
            self.remove()
            raise TopologyError(
                f"no permission to write cgroups ({exc.filename}). CPU-time shares need "
                "root or a delegated cgroup; without root, core shares (a CPU list or "
                "alpha such as 0.5) work through CPU affinity alone."
            ) from None

    def _create_v2(
        self, cpus: tuple[int, ...], quota_us: int | None, period_us: int | None
    ) -> None:
        assert self.layout.cpu is not None
        parent = _own_group(self.layout.cpu / self.PARENT)
        wanted = ["+cpu"] + (["+cpuset"] if self.layout.cpuset else [])
        for d in (self.layout.cpu, parent):
            for c in wanted:
                _write(d / "cgroup.subtree_control", c, missing_ok=True)
        d = _own_group(parent / self.name)
        self.dirs = {"cpu": str(d), "cpuacct": str(d)}
        if quota_us is not None:
            _write(d / "cpu.max", f"{quota_us} {period_us}")
        if self.layout.cpuset:
            _write(d / "cpuset.cpus", format_cpulist(cpus))
            self.dirs["cpuset"] = str(d)

    def _create_v1(
        self, cpus: tuple[int, ...], quota_us: int | None, period_us: int | None
    ) -> None:
        lay = self.layout
        if quota_us is not None:
            if lay.cpu is None:
                raise TopologyError("no cgroup cpu controller is mounted: cannot set a CPU quota")
            d = _mkgroup(lay.cpu, self.PARENT, self.name)
            self.dirs["cpu"] = str(d)
            _write(d / "cpu.cfs_period_us", str(period_us))
            _write(d / "cpu.cfs_quota_us", str(quota_us))
        if lay.cpuacct is not None and str(lay.cpuacct) != self.dirs.get("cpu"):
            self.dirs["cpuacct"] = str(_mkgroup(lay.cpuacct, self.PARENT, self.name))
        if lay.cpuset is not None:
            # v1 cpusets start empty: parent and child need cpus and mems before tasks join.
            mems = _read(lay.cpuset / "cpuset.mems") or "0"
            parent = _own_group(lay.cpuset / self.PARENT)
            _write(parent / "cpuset.cpus", _read(lay.cpuset / "cpuset.cpus") or "0")
            _write(parent / "cpuset.mems", mems)
            d = _own_group(parent / self.name)
            _write(d / "cpuset.cpus", format_cpulist(cpus))
            _write(d / "cpuset.mems", mems)
            self.dirs["cpuset"] = str(d)

    def add(self, pid: int) -> None:
        """Move ``pid`` (its whole thread group) into every group of this replica."""
        for d in dict.fromkeys(self.dirs.values()):
            _write(Path(d) / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """Every process now in the replica's groups (catches ones we never saw fork)."""
        out: set[int] = set()
        for d in self.dirs.values():
            text = _read(Path(d) / "cgroup.procs") or ""
            out.update(int(x) for x in text.split())
        return sorted(out)

    def usage_s(self) -> float | None:
        """CPU time used by the replica so far, in seconds (None if not accounted)."""
        d = self.dirs.get("cpuacct")
        if d is None:
            return None
        usage = _read(Path(d) / "cpuacct.usage")
        if usage is not None:
            return int(usage) / 1e9
        stat = _read(Path(d) / "cpu.stat") or ""
        m = re.search(r"^usage_usec (\d+)", stat, re.M)
        return int(m.group(1)) / 1e6 if m else None

    def remove(self) -> None:
        """Remove the groups (they must be empty) and, when empty, the shared parent."""
        for d in dict.fromkeys(self.dirs.values()):
            for p in (Path(d), Path(d).parent):
                # Fails while it still has members or siblings: left for the last replica.
                with contextlib.suppress(OSError):
                    p.rmdir()
        self.dirs = {}

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        return {"name": d.pop("name"), "version": self.layout.version, **d}


def cgroup_mounts(mounts_text: str | None = None) -> set[Path]:
    """Every cgroup (v1 or v2) mount point of this machine."""
    if mounts_text is None:
        mounts_text = Path("/proc/self/mounts").read_text()
    return {
        Path(f[1]) for f in (line.split() for line in mounts_text.splitlines())
        if len(f) >= 3 and f[2] in ("cgroup", "cgroup2")
    }  # fmt: skip


def foreign_cgroup(d: dict[str, Any], mounts: set[Path] | None = None) -> str | None:
    """None if a recorded cgroup (:meth:`Cgroup.to_dict`'s form) is one shrink makes:
    each of its folders ``<a cgroup mount>/shrink/<its name>``; else what is wrong.

    A state file is not trusted: ``down`` moves, kills and removes only what this says
    is shrink's own."""
    name = d.get("name")
    if (
        not isinstance(name, str)
        or not re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", name)
        or (name in (".", ".."))
    ):
        return f"cgroup name {name!r} is not one shrink makes"
    mounts = cgroup_mounts() if mounts is None else mounts
    dirs = d.get("dirs") or {}
    if not isinstance(dirs, dict):
        return "cgroup folders are not a table"
    for v in dirs.values():
        p = Path(str(v))
        if not (
            p.is_absolute()
            and ".." not in p.parts
            and p.name == name
            and p.parent.name == Cgroup.PARENT
            and p.parent.parent in mounts
        ):
            return f"cgroup {v} is outside shrink's own hierarchy (<cgroup mount>/shrink/)"
    return None


def _mkgroup(mount: Path, parent: str, name: str) -> Path:
    return _own_group(_own_group(mount / parent) / name)


def _own_group(d: Path) -> Path:
    """``d``, a cgroup folder of this user's that no one else may write: made if missing
    (mode 0755 whatever the umask) and checked if it exists.

    A group others may write lets them make groups in it (so ``down`` cannot remove
    it) and, in a group of their own there, run their processes in the server's
    share; one another user made before ``up`` (its name is predictable) has
    control files they may write: a quota or CPU list of theirs."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o755)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise TopologyError(
            f"cgroup {d} was not made by shrink (owned by UID {st.st_uid}, or not a "
            "folder): not used; remove it"
        )
    if st.st_mode & 0o022:  # made by a run under a permissive umask
        os.chmod(d, stat.S_IMODE(st.st_mode) & ~0o022)
    return d


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, value: str, *, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise TopologyError(f"cgroup file {path} does not exist") from None
    except PermissionError:
        raise
    except OSError as exc:
        if missing_ok:
            return
        raise TopologyError(f"the kernel refused {value!r} for {path}: {exc.strerror}") from None


def can_write_cgroups(layout: CgroupLayout) -> bool:
    """Whether this process may create groups under the cpu controller."""
    return layout.cpu is not None and os.access(layout.cpu, os.W_OK)


def cgroups_refused(layout: CgroupLayout) -> str:
    """Why :func:`can_write_cgroups` is False, when a cgroup is needed. Root without
    CAP_DAC_OVERRIDE (a container, ``capsh --drop``, a unit's CapabilityBoundingSet)
    may not write the controller's folder (0555 root's on cgroup v1) either: it was
    told CPU-time shares "need root", and what to do "without root"."""
    cores = (
        "core shares work through CPU affinity: `shrink testbed up --share 0-1` (or "
        "--share 0.5), or `shrink predict --share-kind cores` with an alpha of whole cores."
    )
    if os.geteuid() != 0 or layout.cpu is None:
        return (
            "no permission for cgroups (CPU-time shares need root or a delegated cgroup). "
            f"Without root, {cores}"
        )
    from shrink.processes import has_capability

    try:
        mode = f"mode {os.stat(layout.cpu).st_mode & 0o7777:04o}"
        # (a container's cgroup file system is often read-only: no capability writes it)
        read_only = bool(os.statvfs(layout.cpu).f_flag & os.ST_RDONLY)
    except OSError as exc:
        mode, read_only = exc.strerror or "cannot be looked at", False
    said = f"no permission for cgroups: this process is root, but may not write {layout.cpu}"
    if read_only:
        why = "its file system is mounted read-only (as in a container)"
    elif not has_capability(_CAP_DAC_OVERRIDE):
        why = (
            "it runs without the capability CAP_DAC_OVERRIDE (dropped, as in a container or "
            "under capsh --drop)"
        )
    else:  # (a security module: AppArmor, SELinux)
        why = "refused to root with CAP_DAC_OVERRIDE (a security module may)"
    return (
        f"{said} ({mode}): {why}; CPU-time shares need it written, or a delegated cgroup. "
        f"Without that, {cores}"
    )


_CAP_DAC_OVERRIDE = 1


class Recorded(files.FileFormat):
    """An enforcer whose fields are its record in a testbed state (``enforce``), which
    :func:`shrink.enforce.enforcer_from_dict` reads back; written after its ``mechanism``.

    Its ``__init__`` sets it up for a replica; a record read back skips it (the fields
    are set as written), so what it derives must be a field.
    """

    mechanism = ""

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        return {"mechanism": self.mechanism, **handler(self)}


@dataclass(init=False, eq=False)
class CfsQuota(Recorded):
    """The Enforcer of a CFS quota: one cgroup per replica, the quota on its CPUs.

    With ``cpu_fraction`` 1.0 (a core share) the group only pins (cpuset) and
    accounts (cpuacct): no quota is written.
    """

    cpu_fraction: Fraction = 1.0
    quota_us: Count | None = None
    period_us: Count | None = None  # None: no quota (a core share)
    cgroup: Cgroup  # type: ignore[misc]  # init=False: may follow fields with defaults

    mechanism = "cfs"
    WHAT = "CFS quota"

    def __init__(
        self, name: str, layout: CgroupLayout, *, cpu_fraction: float, period_us: int | None
    ) -> None:
        self.cgroup = Cgroup(name, layout)
        self.cpu_fraction = cpu_fraction
        self.period_us = period_us if cpu_fraction < 1.0 else None
        self.quota_us = None

    def start(self, cpus: tuple[int, ...]) -> None:
        if self.period_us is not None:
            self.quota_us = max(MIN_QUOTA_US, round(self.cpu_fraction * len(cpus) * self.period_us))
        self.cgroup.create(cpus, self.quota_us, self.period_us)

    def join(self, pid: int) -> None:
        self.cgroup.add(pid)

    def add(self, pids: list[int]) -> None:
        # Descendants of a joined process are members already; a process a recipe
        # started apart (its own master) is not, and the quota must cover it too.
        for pid in pids:
            self.cgroup.add(pid)

    def pids(self) -> list[int]:
        return self.cgroup.pids()

    def usage_s(self) -> float | None:
        return self.cgroup.usage_s()

    def stop(self) -> None:
        self.cgroup.remove()

    def describe(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism if self.period_us is not None else "none",
            "cpu_fraction": self.cpu_fraction,
            "quota_us": self.quota_us,
            "period_us": self.period_us,
        }
