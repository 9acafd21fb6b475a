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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from pydantic import Field, computed_field, model_validator

from shrink import files
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
from shrink.errors import ParameterError, TopologyError
from shrink.machine import Machine
from shrink.schemas import MAX_CPUS, Cpu, Fraction, Name
from shrink.topology import format_cpulist, parse_cpulist

__all__ = [
    "KINDS",
    "MAX_PERIOD_US",
    "MIN_QUOTA_US",
    "SHARE_FORMAT",
    "SPEED_FORMAT",
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
class ShareSpeed(files.FileFormat):
    """The speed a share really delivered, relative to the full target.

    A CPU-time share of alpha is nominally a server at alpha of the speed, but a
    time-sliced core costs more CPU per request than a whole one, so the speed is
    measured (shrink.scaling.calibrate) and the scaling uses it instead of the
    nominal alpha.

    ``nominal``: the share's fraction of the target (alpha for a CPU-time share).
    ``per_class``: a speed per request class where one was measured (older results;
    the calibration measures the trace's mix, and every class takes ``effective``).
    ``effective``: the speed of the trace's mix (what throughput scales by).
    ``method``: how it was obtained (``calibrated``: runs of the mix on the share and
    light runs on the full target; ``nominal``: assumed equal to ``nominal``, no
    measurement). ``cost_s``: seconds the measurement took. ``notes``: what the
    report should say about it (runs that were unusable, and why).
    """

    nominal: float
    per_class: dict[str, float] = field(default_factory=dict)
    effective: float = 0.0
    method: str = "nominal"
    cost_s: float = 0.0
    notes: tuple[str, ...] = ()
    # Log-scale sd of ``effective`` from the probe's own sampling (0: not measured);
    # the MAT interval carries it (shrink.uncertainty).
    sigma: float = 0.0
    # The full target's light-load capacity for the trace's mix (req/s at 100% busy),
    # from the calibration's runs: ``effective`` is the share's over it.
    full_capacity: float | None = None
    # What the calibration ran on the full target, run by run: what it ran ("mix"),
    # seconds, offered rate (req/s) and utilization (shrink.scaling.calibrate).
    full_target_runs: tuple[dict[str, Any], ...] = ()
    # What the calibration ran on the share, run by run: seconds, offered rate (req/s)
    # and utilization of its quota.
    share_runs: tuple[dict[str, Any], ...] = ()
    # The share's side read again on the sweep's own repetitions near its knee
    # (shrink.scaling.knee_speed): their capacity, count and utilization band, and the
    # calibration's share runs' capacity it replaced; None where it was not read.
    share_knee: dict[str, Any] | None = None
    # The speed the share's sweep was scaled by (its time scale and load), as read before
    # it, where the full side was read again beside the sweep (shrink.scaling.Beside);
    # None where the calibration ended before the sweep.
    swept_at: float | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def full_target_seconds(self) -> float:
        """Seconds of the full target's time the calibration took."""
        return round(float(sum(r.get("seconds", 0.0) for r in self.full_target_runs)), 6)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def full_target_busy(self) -> float | None:
        """The highest utilization of the full target during the calibration."""
        us = [r["utilization"] for r in self.full_target_runs if r.get("utilization") is not None]
        return max(us) if us else None

    @classmethod
    def assumed(cls, nominal: float) -> ShareSpeed:
        """No measurement: the share is taken to run at its nominal fraction."""
        return cls(nominal=nominal, per_class={}, effective=nominal, method="nominal")

    @model_validator(mode="before")
    @classmethod
    def _effective_defaults_to_nominal(cls, d: Any) -> Any:
        # Files written before the speed was measured have no "effective".
        if isinstance(d, Mapping) and "effective" not in d and "nominal" in d:
            return {**d, "effective": d["nominal"]}
        return d

    WHAT = "share speed"


SPEED_FORMAT = ShareSpeed.file_format()


KINDS = ("all", "cores", "cpu_time")
Kind = Literal["all", "cores", "cpu_time"]


def _absent(value: Any) -> bool:
    return value is None


@dataclass(frozen=True)
class Share(files.FileFormat):
    """What a scaled run gets of its full target (the server it stands for).

    ``kind``: ``all``, ``cores`` (a CPU subset at full speed) or ``cpu_time`` (CPUs
    at a fraction of their time). ``cpus``: the CPUs the run may use.
    ``cpu_fraction``: the fraction of each of those CPUs' time (1.0 for core shares).

    ``fraction`` is alpha, defined once: **the fraction of the full target's
    capacity** the share gives. The full target is the CPUs the share was cut
    from: a core share is chosen among them (``len(cpus) / len(full CPUs)``; the
    machine's for :meth:`parse`, the server's for :meth:`plan`), and a CPU-time
    share spans them, so its fraction is ``cpu_fraction``. SHRiNK needs it equal to
    the sample's alpha.

    ``speed``: the speed the share really delivered (:class:`ShareSpeed`), once
    measured; the SHRiNK transform scales a CPU-time share by it
    (:attr:`speed_factor`). ``predicted_from``: on a curve already scaled to the
    full target, the share it was measured on.
    """

    kind: Kind = "all"
    cpus: Annotated[tuple[Cpu, ...], Field(max_length=MAX_CPUS)] = ()
    fraction: Fraction = 1.0
    cpu_fraction: Fraction = 1.0
    period_us: Annotated[int, Field(ge=1, le=10**7)] | None = None
    text: Name = field(default="", compare=False)
    speed: Annotated[ShareSpeed | None, Field(exclude_if=_absent)] = field(
        default=None, compare=False
    )
    predicted_from: Annotated[Share | None, Field(exclude_if=_absent)] = field(
        default=None, compare=False
    )

    @model_validator(mode="before")
    @classmethod
    def _older_files(cls, d: Any) -> Any:
        """Older files may lack keys or hold null for them (the defaults), and gave a
        CPU-time share's ``fraction`` of the whole machine; by the definition above it
        is its ``cpu_fraction``, so that is what is read."""
        if d is None:
            return {}
        if not isinstance(d, Mapping):
            return d
        d = {k: v for k, v in d.items() if v is not None}
        if d.get("kind") == "cpu_time":
            d["cpu_fraction"] = d.get("cpu_fraction", d.get("fraction", 1.0))
            d.pop("fraction", None)  # taken from cpu_fraction, once that is checked
        return d

    @model_validator(mode="after")
    def _cpu_time_fraction(self) -> Share:
        if self.kind == "cpu_time" and self.fraction != self.cpu_fraction:
            return replace(self, fraction=self.cpu_fraction)
        return self

    @computed_field(alias="quota_us")  # type: ignore[prop-decorator]
    @property
    def group_quota_us(self) -> int | None:
        """The CFS quota of all of the share's CPUs (written as ``quota_us``)."""
        return self.quota_us()

    @property
    def speed_factor(self) -> float:
        """The speed s the full target's curve is scaled by (1.0 unless a CPU-time share).

        A CPU-time share's measured effective speed where there is one, else its
        nominal one, ``cpu_fraction``.
        """
        if self.kind != "cpu_time":
            return 1.0
        if self.speed is not None and self.speed.effective > 0:
            return float(self.speed.effective)
        return float(self.cpu_fraction)

    def class_speed(self, cls: str) -> float:
        """The speed of one request class: measured per class where known, else the mix's."""
        if self.kind == "cpu_time" and self.speed is not None:
            v = self.speed.per_class.get(cls)
            if v is not None and v > 0:
                return float(v)
        return self.speed_factor

    def with_speed(self, speed: ShareSpeed | None) -> Share:
        return replace(self, speed=speed)

    def quota_us(self, n_cpus: int | None = None) -> int | None:
        """The CFS quota for a group of ``n_cpus`` of this share's CPUs (default: all)."""
        if self.period_us is None:
            return None
        n = len(self.cpus) if n_cpus is None else n_cpus
        return max(MIN_QUOTA_US, round(self.cpu_fraction * n * self.period_us))

    @classmethod
    def parse(cls, text: str, machine: Machine, *, period_us: int | None = None) -> Share:
        """Read ``all``, ``0.5``, ``0-1``, ``1@25%``, ``1@0.25``, ``0.5@50%`` or ``@50%``.

        The one grammar of a share (testbed, simulator, CLI). A decimal point makes
        the CPU part alpha of the machine's cores (socket compact); a bare integer
        is a CPU id; ``all`` or nothing is every CPU; ``@F`` adds a CPU-time
        fraction. Refuses, with the reason, CPUs the machine lacks and fractions it
        cannot give.
        """
        raw = str(text).strip()
        cpu_part, _, quota_part = raw.partition("@")
        cpu_part = cpu_part.strip()
        if cpu_part in ("", "all"):
            cpus = machine.all_cpus
        elif re.fullmatch(r"\d*\.\d*", cpu_part) and cpu_part != ".":
            cpus = select_compact(machine, float(cpu_part))
        else:
            cpus = parse_cpulist(cpu_part)
            missing = sorted(set(cpus) - set(machine.all_cpus))
            if missing:
                raise TopologyError(
                    f"share {raw!r} names CPU{'s' if len(missing) > 1 else ''} "
                    f"{format_cpulist(missing)} that machine "
                    f"{machine.name!r} does not have (its CPUs: "
                    f"{format_cpulist(machine.all_cpus)})."
                )
        # "0-3@" with nothing after the '@' ran at full speed: a fraction left out is named.
        cpu_fraction = _parse_quota(quota_part, raw) if "@" in raw else 1.0
        if cpu_fraction < 1.0:
            return cls.cpu_time(cpus, cpu_fraction, period_us=period_us, text=raw)
        return cls.cores_of(machine, cpus, text=raw)

    @classmethod
    def cores_of(cls, machine: Machine, cpus: Sequence[int], *, text: str = "") -> Share:
        """``cpus`` of ``machine`` at full speed (``all`` when that is every CPU)."""
        kind = "all" if len(cpus) == machine.n_cpus else "cores"
        return cls(kind, tuple(cpus), round(len(cpus) / machine.n_cpus, 9), text=text)

    @classmethod
    def cpu_time(
        cls,
        cpus: Sequence[int],
        cpu_fraction: float,
        *,
        period_us: int | None = None,
        text: str = "",
    ) -> Share:
        """``cpus`` at ``cpu_fraction`` of their time, with the CFS period for it."""
        cpus = tuple(cpus)
        period = period_us or choose_period_us(cpu_fraction, len(cpus))
        quota = cpu_fraction * len(cpus) * period
        if quota < MIN_QUOTA_US or period > MAX_PERIOD_US or period < MIN_QUOTA_US:
            raise TopologyError(
                f"share {text or format_cpulist(cpus)!r}: period {period} us gives a quota of "
                f"{quota:.0f} us; the kernel needs quota >= {MIN_QUOTA_US} us and period in "
                f"[{MIN_QUOTA_US}, {MAX_PERIOD_US}] us."
            )
        return cls("cpu_time", cpus, cpu_fraction, cpu_fraction, period, text)

    @classmethod
    def plan(cls, cpus: Sequence[int], machine: Machine, alpha: float, kind: str) -> Share:
        """The share of the full target ``cpus`` for a scaled run at ``alpha``.

        ``cores`` keeps alpha of the CPUs, socket-compactly (whole sockets first);
        ``cpu_time`` keeps every CPU at alpha of its time (a slower server);
        ``auto`` takes cores when alpha x CPUs is a whole number, else CPU time.
        """
        alpha = check_alpha(alpha)
        n = alpha * len(cpus)
        whole = abs(n - round(n)) < 1e-9 and round(n) >= 1
        if kind == "auto":
            kind = "cores" if whole else "cpu_time"
        if kind == "cores":
            if not whole:
                raise TopologyError(
                    f"alpha == {alpha:g} of {len(cpus)} CPUs is {n:g} CPUs, not a whole number; "
                    "use a CPU-time share (--share-kind cpu_time) or another alpha"
                )
            ordered = sorted(cpus, key=lambda c: (machine.socket_of(c), c))
            return cls("cores", tuple(ordered[: round(n)]), alpha)
        if kind == "cpu_time":
            return cls.cpu_time(cpus, alpha)
        raise ParameterError(f"share kind == {kind!r}, must be one of auto, cores, cpu_time.")

    @classmethod
    def all_of(cls, machine: Machine) -> Share:
        return cls("all", machine.all_cpus, 1.0, text="all")

    @classmethod
    def whole(cls, cpus: Sequence[int]) -> Share:
        """The full target itself: all of ``cpus``, at full speed."""
        return cls("all", tuple(cpus), 1.0, text="all")

    # The state/result-file form (``shrink.testbed/1`` and LoadCurve ``share``); a
    # Share is read as it is.
    WHAT = "share"


SHARE_FORMAT = Share.file_format()


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
