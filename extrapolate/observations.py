"""Observations: the figures a calibration is fitted to, and the model's value for each.

An observation is one number measured on a configuration (machine, active
cores, mapping) for a workload: a MAT, a ratio of two MATs (core scaling), a
relative MAT change between mappings, or a utilization at a throughput. The
published figures and a user's own measured LoadCurves both become lists of
observations, so one fitter serves both (:mod:`extrapolate.calibration`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any

from pydantic import Field, PlainSerializer, ValidatorFunctionWrapHandler, WrapValidator

from extrapolate.crosssocket import SUPPORT, TCP, Physics, Workload, active_mapping, build_network
from shrink import files
from shrink.errors import ExtrapolationError
from shrink.machine import Machine
from shrink.mapping import Mapping, build_mapping
from shrink.schemas import MAX_CPUS, Cpu, Finite, Name, Text

__all__ = [
    "Config",
    "Observation",
    "load_published",
    "model_value",
    "paper_machine",
    "published_observations",
]

KINDS = ("mat", "ratio", "change", "utilization")


def _as_printed(v: Any, handler: ValidatorFunctionWrapHandler) -> float:
    checked = handler(v)
    return v if type(v) is int else checked


# A figure as printed: an int stays an int (the papers' MATs), so it is written as read.
Figure = Annotated[Finite, WrapValidator(_as_printed), PlainSerializer(lambda v: v)]


@dataclass(frozen=True)
class Config(files.FileFormat):
    """Active cores (the first ``n_cores`` in socket-major order, or exactly ``cpus``)
    and the mapping over them."""

    n_cores: Annotated[int, Field(ge=1, le=MAX_CPUS)]
    mapping: Name = "1-replica"
    cpus: Annotated[tuple[Cpu, ...], Field(max_length=MAX_CPUS)] | None = None

    def build(self, machine: Machine) -> Mapping:
        if self.cpus:
            return build_mapping(self.mapping, machine, tuple(self.cpus))
        return active_mapping(machine, self.n_cores, self.mapping)


@dataclass(frozen=True)
class Observation(files.FileFormat):
    """One figure. ``precision`` is the half-width its printing allows (or a 1-sigma error).

    kinds: ``mat`` (req/s at ``config``), ``ratio`` (MAT(config) / MAT(ref)),
    ``change`` (MAT(config) / MAT(ref) - 1), ``utilization`` (busiest core's
    utilization at throughput ``at`` on ``config``).
    """

    name: Name
    kind: Name
    workload: Name
    stat: Name
    config: Config
    value: Figure
    precision: Finite
    ref: Config | None = None
    at: Finite | None = None
    source: Text = ""

    WHAT = "observation"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ExtrapolationError(f"observation kind == {self.kind!r}, must be one of {KINDS}")
        if self.kind in ("ratio", "change") and self.ref is None:
            raise ExtrapolationError(f"observation {self.name!r}: a {self.kind} needs ref")
        if self.kind == "utilization" and self.at is None:
            raise ExtrapolationError(f"observation {self.name!r}: a utilization needs at")
        if not self.precision > 0:
            raise ExtrapolationError(f"observation {self.name!r}: precision must be > 0")


def model_value(
    physics: Physics,
    obs: Observation,
    machine: Machine,
    workloads: dict[str, Workload],
) -> float:
    """The model's value for ``obs`` under ``physics``."""
    wl = workloads[obs.workload]

    def network(cfg: Config):
        return build_network(physics, wl, machine, cfg.build(machine))

    if obs.kind == "utilization":
        assert obs.at is not None
        return float(network(obs.config).utilization(obs.at).max())
    threshold = wl.thresholds[obs.stat]
    m = network(obs.config).mat(obs.stat, threshold)
    if obs.kind == "mat":
        return m
    assert obs.ref is not None
    r = network(obs.ref).mat(obs.stat, threshold)
    if r <= 0:
        return float("inf")
    return m / r if obs.kind == "ratio" else m / r - 1.0


# ---------------------------------------------------------------- published figures


@cache
def _published_text() -> str:
    return resources.files("shrink").joinpath("data/published_calibration.json").read_text()


def load_published() -> dict[str, Any]:
    """The papers' figures (shrink/data/published_calibration.json)."""
    return json.loads(_published_text())


def paper_machine(data: dict[str, Any] | None = None) -> Machine:
    """The papers' 2 x 4-core Nehalem, 12 MiB LLC per socket, 2 NIC ports x 4 queues."""
    d = (data or load_published())["machine"]
    return Machine(
        name="nehalem-2s",
        sockets=int(d["sockets"]),
        cores_per_socket=int(d["cores_per_socket"]),
        llc_mib=float(d["llc_mib_per_socket"]),
        ghz=float(d["ghz"]),
        nic_ports=2,
        nic_queues_per_port=4,
    )


def _half_unit(printed: float, decimals: int) -> float:
    return 0.5 * 10.0**-decimals


def published_observations(data: dict[str, Any] | None = None) -> list[Observation]:
    """The published figures as observations, each with the precision its printing gives."""
    d = data or load_published()
    src = d.get("source", "published")
    full = Config(8, "1-replica")
    one = Config(1, "1-replica")
    wl = d["workloads"]
    sc = d["core_scaling_1_to_8"]
    rm = d["replica_mappings"]["tcp_mean_mat_change"]
    obs = [
        Observation(
            "tcp_mat8_mean",
            "mat",
            "tcp",
            "mean",
            full,
            wl["tcp"]["mat_8_cores_rps"],
            500.0,
            source=src,
        ),
        Observation(
            "support_mat8_mean",
            "mat",
            "support",
            "mean",
            full,
            wl["support"]["mat_8_cores_rps"],
            500.0,
            source=src,
        ),
    ]
    for w in ("tcp", "support"):
        for stat in ("mean", "p999"):
            obs.append(
                Observation(
                    f"{w}_scaling_{stat}",
                    "ratio",
                    w,
                    stat,
                    full,
                    sc[w][stat],
                    _half_unit(sc[w][stat], 1),
                    ref=one,
                    source=src,
                )
            )
    for feed in ("direct", "indirect"):
        obs.append(
            Observation(
                f"tcp_{feed}_change",
                "change",
                "tcp",
                "mean",
                Config(8, f"2-replica-{feed}"),
                rm[feed],
                _half_unit(rm[feed], 3),
                ref=full,
                source=src,
            )
        )
    obs.append(
        Observation(
            "tcp_utilization_at_max_rate",
            "utilization",
            "tcp",
            "mean",
            full,
            wl["tcp"]["utilization_at_max_rate"],
            0.05,
            at=float(wl["tcp"]["max_rate_tested_rps"]),
            source=src,
        )
    )
    obs.append(
        Observation(
            "support_utilization_at_80pct",
            "utilization",
            "support",
            "mean",
            full,
            0.8,
            0.05,
            at=float(wl["support"]["rps_at_80pct_utilization"]),
            source=src,
        )
    )
    return obs


def published_workloads(data: dict[str, Any] | None = None) -> dict[str, Workload]:
    """tcp and support with the thresholds printed in the papers."""
    d = data or load_published()
    out = {}
    for base in (TCP, SUPPORT):
        t = d["workloads"][base.name]["thresholds_ms"]
        out[base.name] = Workload(
            base.name,
            base.dynamic_fraction,
            base.static_memory_ratio,
            {k: float(v) / 1000.0 for k, v in t.items()},
            base.notes,
        )
    return out
