"""The Share: the part of the machine a scaled-down run gets, and how it is enforced.

Three kinds (``Share.parse`` reads the CLI form):

* ``all``: every CPU of the machine.
* ``cores``: a CPU subset, given as a list (``"0-1"``, ``"0,2"``) or as a fraction
  alpha of the machine (``"0.5"``) chosen socket-compactly: sockets are filled
  one after the other, whole cores at a time, so alpha = 0.5 of two sockets is
  one whole socket and 0.25 is half of the first socket.
* ``cpu_time``: given CPUs at a fraction of their speed (SHRiNK's "servers at
  alpha of the speed"), written ``CPULIST@QUOTA`` (``"1@25%"`` or ``"1@0.25"``).
  Enforced by a mechanism of :mod:`shrink.enforce` (the CFS quota by default).

CPU affinity (``sched_setaffinity``) enforces a core share and needs no root;
a cgroup ``cpuset`` is added where we may write cgroups. A CPU-time share needs
a writable cpu controller (root, or a delegated cgroup) for the CFS quota, or
root (SCHED_FIFO) for the co-runner.

How a CPU-time share is enforced (a CFS quota, a duty-cycle co-runner) and why
the CFS period is chosen as it is: :mod:`shrink.enforce`. The cgroup names this
module used to define (``Cgroup``, ``cgroup_layout``, ``choose_period_us`` ...)
are re-exported from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from shrink.checks import check_alpha
from shrink.enforce.cfs import (
    MAX_PERIOD_US,
    MIN_QUOTA_US,
    Cgroup,
    CgroupLayout,
    can_write_cgroups,
    cgroup_layout,
    choose_period_us,
    scheduler_tick_us,
)
from shrink.errors import TopologyError
from shrink.machine import Machine
from shrink.topology import format_cpulist, parse_cpulist

__all__ = [
    "MAX_PERIOD_US",
    "MIN_QUOTA_US",
    "Cgroup",
    "CgroupLayout",
    "Share",
    "ShareSpeed",
    "can_write_cgroups",
    "cgroup_layout",
    "choose_period_us",
    "scheduler_tick_us",
    "select_compact",
]


def select_compact(machine: Machine, alpha: float) -> tuple[int, ...]:
    """The CPUs of alpha of ``machine``, whole cores, filling sockets one at a time.

    Refuses an alpha that is not a whole number of cores, and says what would work.
    """
    alpha = check_alpha(alpha)
    want = alpha * machine.n_cores
    cores = round(want)
    if cores < 1 or abs(want - cores) > 1e-9:
        whole = ", ".join(f"{k / machine.n_cores:g}" for k in range(1, machine.n_cores + 1))
        raise TopologyError(
            f"share alpha == {alpha:g} is {want:g} cores of machine {machine.name!r} "
            f"({machine.n_cores} cores); a core share must be whole cores ({whole}). "
            f"For a fraction of a core use a CPU-time share such as "
            f"'{machine.all_cpus[0]}@{alpha * machine.n_cores:.0%}'."
        )
    t = machine.threads_per_core
    out: list[int] = []
    for sock in machine.cpus:
        take = min(cores - len(out) // t, machine.cores_per_socket)
        out.extend(sock[: take * t])
        if len(out) // t >= cores:
            break
    return tuple(sorted(out))


@dataclass(frozen=True)
class ShareSpeed:
    """The speed a share really delivered, relative to the full target, per request class.

    A CPU-time share of alpha is nominally a server at alpha of the speed, but a
    time-sliced core costs more CPU per request than a whole one, and by how much
    depends on the request class (../shared/DESIGN.md: ~10% for CPU-bound pages,
    ~2.5x for memory-heavy ones). So the speed is measured, per class, and the
    scaling uses it instead of the nominal alpha.

    ``nominal``: the share's fraction of the target (alpha for a CPU-time share).
    ``per_class``: measured speed per class (``static``, ``dynamic``), on the same
    scale as ``nominal`` (0.25 means "a quarter of the full target's speed").
    ``effective``: the speed of the trace's mix, the demand-weighted harmonic mean
    of ``per_class`` (what throughput scales by). ``method``: how it was obtained
    (``probe``: a light-load probe on the share and the full target; ``nominal``:
    assumed equal to ``nominal``, no measurement). ``cost_s``: seconds the
    measurement took. ``notes``: what the report should say about it (a class
    whose probe was unusable and was assumed nominal, and why).
    """

    nominal: float
    per_class: dict[str, float] = field(default_factory=dict)
    effective: float = 0.0
    method: str = "nominal"
    cost_s: float = 0.0
    notes: tuple[str, ...] = ()

    @classmethod
    def assumed(cls, nominal: float) -> ShareSpeed:
        """No measurement: the share is taken to run at its nominal fraction."""
        return cls(nominal=nominal, per_class={}, effective=nominal, method="nominal")

    def to_dict(self) -> dict[str, Any]:
        return {
            "nominal": self.nominal,
            "per_class": dict(self.per_class),
            "effective": self.effective,
            "method": self.method,
            "cost_s": self.cost_s,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShareSpeed:
        return cls(
            nominal=float(d["nominal"]),
            per_class={str(k): float(v) for k, v in dict(d.get("per_class", {})).items()},
            effective=float(d.get("effective", d["nominal"])),
            method=str(d.get("method", "nominal")),
            cost_s=float(d.get("cost_s", 0.0)),
            notes=tuple(str(n) for n in d.get("notes", ())),
        )


@dataclass(frozen=True)
class Share:
    """What a run gets of a machine.

    ``cpus``: the CPUs the run may use. ``cpu_fraction``: the fraction of each of
    those CPUs' time (1.0 for core shares). ``fraction``: the share of the whole
    machine's capacity, alpha (``len(cpus) * cpu_fraction / n_cpus``).
    """

    kind: str
    cpus: tuple[int, ...]
    fraction: float
    cpu_fraction: float = 1.0
    period_us: int | None = None
    text: str = field(default="", compare=False)

    def quota_us(self, n_cpus: int | None = None) -> int | None:
        """The CFS quota for a group of ``n_cpus`` of this share's CPUs (default: all)."""
        if self.period_us is None:
            return None
        n = len(self.cpus) if n_cpus is None else n_cpus
        return max(MIN_QUOTA_US, round(self.cpu_fraction * n * self.period_us))

    @classmethod
    def parse(cls, text: str, machine: Machine, *, period_us: int | None = None) -> Share:
        """Read ``all``, ``0.5``, ``0-1``, ``1@25%`` or ``1@0.25`` for ``machine``.

        Refuses, with the reason, CPUs the machine lacks and fractions it cannot give.
        """
        raw = str(text).strip()
        cpu_part, _, quota_part = raw.partition("@")
        if raw == "all":
            cpus, kind = machine.all_cpus, "all"
        elif re.fullmatch(r"\d*\.\d*", cpu_part) and cpu_part != "." and not quota_part:
            # A decimal point makes it alpha ("0.5", "1.0"); a bare integer is a CPU id.
            cpus, kind = select_compact(machine, float(cpu_part)), "cores"
            if len(cpus) == machine.n_cpus:
                kind = "all"
        else:
            cpus = parse_cpulist("" if cpu_part == "all" else cpu_part) or machine.all_cpus
            missing = sorted(set(cpus) - set(machine.all_cpus))
            if missing:
                raise TopologyError(
                    f"share {raw!r} names CPUs {format_cpulist(missing)} that machine "
                    f"{machine.name!r} does not have (its CPUs: "
                    f"{format_cpulist(machine.all_cpus)})."
                )
            kind = "all" if len(cpus) == machine.n_cpus else "cores"
        cpu_fraction = 1.0
        if quota_part:
            cpu_fraction = _parse_quota(quota_part, raw)
            if cpu_fraction < 1.0:
                kind = "cpu_time"
        period = None
        if kind == "cpu_time":
            period = period_us or choose_period_us(cpu_fraction, len(cpus))
            quota = cpu_fraction * len(cpus) * period
            if quota < MIN_QUOTA_US or period > MAX_PERIOD_US or period < MIN_QUOTA_US:
                raise TopologyError(
                    f"share {raw!r}: period {period} us gives a quota of {quota:.0f} us; "
                    f"the kernel needs quota >= {MIN_QUOTA_US} us and period in "
                    f"[{MIN_QUOTA_US}, {MAX_PERIOD_US}] us."
                )
        fraction = len(cpus) * cpu_fraction / machine.n_cpus
        return cls(kind, tuple(cpus), round(fraction, 9), cpu_fraction, period, raw)

    @classmethod
    def all_of(cls, machine: Machine) -> Share:
        return cls("all", machine.all_cpus, 1.0, text="all")

    def to_dict(self) -> dict[str, Any]:
        """The state/result-file form (``shrink.testbed/1`` ``share``)."""
        return {
            "kind": self.kind,
            "cpus": list(self.cpus),
            "fraction": self.fraction,
            "cpu_fraction": self.cpu_fraction,
            "quota_us": self.quota_us(),
            "period_us": self.period_us,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Share:
        return cls(
            kind=d["kind"],
            cpus=tuple(d["cpus"]),
            fraction=float(d["fraction"]),
            cpu_fraction=float(d.get("cpu_fraction", 1.0)),
            period_us=d.get("period_us"),
            text=d.get("text", ""),
        )


def _parse_quota(text: str, whole: str) -> float:
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise TopologyError(
            f"share {whole!r}: quota {t!r} must be a percentage (25%) or a fraction (0.25)."
        ) from None
    if not 0 < value <= 1:
        raise TopologyError(
            f"share {whole!r}: quota == {value:g}, must be in (0, 1] of each CPU "
            "(a CPU cannot run faster than itself)."
        )
    return value
