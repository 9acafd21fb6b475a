"""The cross-socket correction: what a share inside one socket cannot show.

A share of cores on one socket measures per-class service demands D_s (static)
and D_d (dynamic) with the network processing on the worker's socket, no data
shared across sockets, and one socket's last-level cache (LLC). The full
machine under a mapping differs in three ways, each modelled as an effect on
the per-class demand with physically named parameters (:class:`Physics`):

(a) *remote network processing*. A connection whose NIC queue interrupts land
    on another socket than its worker pays ``nic_remote_penalty`` x D_s extra
    (packet data and socket state cross the interconnect). The probability is
    :func:`shrink.mapping.remote_nic_probability`: 1/2 for one replica over two
    sockets with RSS spreading, 0 for 2-replica direct, 1 for indirect.
(b) *cross-socket data sharing* inside one replica whose workers span sockets
    (shared server state, the file cache, locks bouncing over QPI):
    ``share_penalty`` x D_s x (1 - 1/S), S the replica's sockets.
    Both (a) and (b) are added, as absolute time, to requests of *every* class:
    a dynamic request passes through the same lighttpd and network path.
(c) *LLC capacity*. A fraction ``llc_miss_fraction`` (mu) of a dynamic request's
    demand is LLC-miss memory time when its replica sees one socket's LLC
    (``llc_ref_mib``). Misses scale as capacity^(-``llc_exponent``). A replica
    over two sockets sees both LLCs; the misses the extra capacity absorbs are
    served from the *other* socket's cache at ``remote_cache_cost`` of a memory
    access (published: remote memory is 60-70 cycles, about 60 %, dearer than a
    remote cache hit, so 1/1.6). Static requests have a memory fraction
    ``mu x static_memory_ratio`` (Support: 1/3.6, from the published 3.6x
    memory traffic of dynamic over static requests; tcp: 0, its one 1 KB file
    lives in the private caches).

Within a socket, ``usl_sigma`` and ``usl_kappa`` inflate every demand by the
Universal Scalability Law's factor 1 + sigma (n-1) + kappa n (n-1), n the active
cores on that socket (contention for the socket's shared LLC, memory controller
and ring). The dynamic class may have its own pair (``usl_sigma_dynamic``,
``usl_kappa_dynamic``), which makes the USL differ by workload through the mix;
left unset it shares the static class's (the published figures hold no
within-socket core counts to tell them apart). ``fixed_latency`` is added to
every response, ``queue_tail`` to the p99.9 for every NIC queue beyond the
first that a core services.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from extrapolate.queueing import Network, Station
from shrink import files
from shrink.checks import check_fraction, check_scalar
from shrink.errors import TopologyError
from shrink.machine import MIN_LLC_MIB, Machine
from shrink.mapping import Mapping, build_mapping, remote_nic_probability
from shrink.schemas import Fraction, Name, NonNeg, Positive, Stat, Text

__all__ = [
    "SUPPORT",
    "TCP",
    "Physics",
    "Workload",
    "active_mapping",
    "build_network",
    "demand_factors",
    "usl_inflation",
]


# Parameters the model divides by: 0 in a calibration file was a ZeroDivisionError or an
# overflow deep in whatif and extrapolate (exit 70), so they must be positive, and not
# vanishingly so: a demand of 1e-320 s overflowed the interval's exp (exit 70). No
# request costs less than a nanosecond, and a cache is at least a KiB (as a machine's).
MIN_DEMAND_S = 1e-9
_DIVISORS = {"demand_static": MIN_DEMAND_S, "demand_dynamic": MIN_DEMAND_S,
             "llc_ref_mib": MIN_LLC_MIB}  # fmt: skip
Demand = Annotated[float, Field(allow_inf_nan=False, ge=MIN_DEMAND_S, le=1e15)]
CacheMiB = Annotated[float, Field(allow_inf_nan=False, ge=MIN_LLC_MIB, le=1e6)]


@dataclass(frozen=True)
class Physics(files.FileFormat):
    """The physically named parameters of the model (seconds, fractions, exponents).

    The ``physics`` of a calibration file: a key that is not a parameter is refused.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")

    demand_static: Demand = 40e-6  # one core, one socket: CPU s per static request
    demand_dynamic: Demand = 5e-3  # the same for a dynamic (PHP) request
    usl_sigma: NonNeg = 0.0  # within-socket contention
    usl_kappa: NonNeg = 0.0  # within-socket coherency
    # The dynamic class's own USL (PHP: LLC and memory-bandwidth contention); None: the same
    # as the static class's. Told apart by two workloads of different mixes at several cores.
    usl_sigma_dynamic: NonNeg | None = None
    usl_kappa_dynamic: NonNeg | None = None
    nic_remote_penalty: NonNeg = 0.0  # (a) x D_s when network processing is remote
    share_penalty: NonNeg = 0.0  # (b) x D_s for a replica spanning two sockets
    llc_miss_fraction: Fraction = 0.0  # (c) mu: memory-stall share of D_d at llc_ref_mib
    llc_exponent: NonNeg = 1.0  # miss rate ~ capacity^-beta
    remote_cache_cost: NonNeg = 1.0 / 1.6  # remote-LLC hit / memory access (published)
    llc_ref_mib: CacheMiB = 12.0  # the LLC a one-socket share's replica sees
    fixed_latency: NonNeg = 0.0  # load-independent latency added to every response
    queue_tail: NonNeg = 0.0  # p99.9 delay per extra NIC queue serviced by a core

    WHAT = "physics"

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name.endswith("_dynamic"):
                continue
            if f.name == "llc_miss_fraction":
                check_fraction(v, f.name)
            elif f.name in _DIVISORS:
                check_scalar(v, f.name, low=_DIVISORS[f.name])
            else:
                check_scalar(v, f.name, low=0.0)

    @property
    def usl_dynamic(self) -> tuple[float, float]:
        """(sigma, kappa) of the dynamic class: its own, else the static class's."""
        sigma = self.usl_sigma if self.usl_sigma_dynamic is None else self.usl_sigma_dynamic
        kappa = self.usl_kappa if self.usl_kappa_dynamic is None else self.usl_kappa_dynamic
        return sigma, kappa

    def with_(self, **kw: float) -> Physics:
        return replace(self, **kw)


@dataclass(frozen=True)
class Workload(files.FileFormat):
    """A request mix: dynamic fraction, static memory ratio and the SLA thresholds (s)."""

    name: Name
    dynamic_fraction: Fraction
    static_memory_ratio: Fraction = 0.0
    thresholds: dict[Stat, Positive] = field(default_factory=lambda: {"mean": 5e-3, "p999": 0.5})
    notes: Text = ""

    WHAT = "workload"

    def __post_init__(self) -> None:
        check_fraction(self.dynamic_fraction, "dynamic_fraction")
        check_scalar(self.static_memory_ratio, "static_memory_ratio", low=0.0, high=1.0)

    @property
    def mix(self) -> dict[str, float]:
        return {"static": 1.0 - self.dynamic_fraction, "dynamic": self.dynamic_fraction}

    def with_dynamic_fraction(self, f: float) -> Workload:
        return replace(self, dynamic_fraction=f, name=f"{self.name}@rf={f:g}")


# The papers' two workloads; thresholds as published.
TCP = Workload("tcp", 0.0, 0.0, {"mean": 0.5e-3, "p999": 4e-3}, "one static 1 KB file")
SUPPORT = Workload(
    "support",
    0.05,
    1.0 / 3.6,
    {"mean": 5e-3, "p999": 0.5},
    "SPECweb2009 Support: 5% dynamic PHP pages",
)


def usl_inflation(n: float, sigma: float, kappa: float) -> float:
    """Demand inflation 1 + sigma (n-1) + kappa n (n-1) with n active cores on a socket."""
    return 1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0)


def active_mapping(machine: Machine, n_cores: int, mapping: str) -> Mapping:
    """``mapping`` over the first ``n_cores`` CPUs in socket-major order (the papers'
    convention: 2 and 4 active cores come from one socket)."""
    if not 1 <= n_cores <= machine.n_cpus:
        raise TopologyError(
            f"n_cores == {n_cores}, must be in [1, {machine.n_cpus}] on machine {machine.name!r}."
        )
    return build_mapping(mapping, machine, machine.all_cpus[:n_cores])


def demand_factors(
    physics: Physics, workload: Workload, machine: Machine, mapping: Mapping
) -> list[dict[str, Any]]:
    """Per replica: its cores, per-class demands (s) and the parts they came from."""
    cpus = mapping.cpus
    per_socket = Counter(machine.socket_of(c) for c in cpus)
    replicas_on = Counter(s for r in mapping.replicas for s in set(r.sockets))
    llc = machine.llc_mib if machine.llc_mib > 0 else physics.llc_ref_mib
    beta = physics.llc_exponent
    out = []
    for r in mapping.replicas:
        socks = sorted(set(r.sockets))
        usl = {
            cls: sum(usl_inflation(per_socket[machine.socket_of(c)], sigma, kappa) for c in r.cpus)
            / len(r.cpus)
            for cls, sigma, kappa in (
                ("static", physics.usl_sigma, physics.usl_kappa),
                ("dynamic", *physics.usl_dynamic),
            )
        }
        p_remote = remote_nic_probability(r)
        spread = 1.0 - 1.0 / len(socks)
        # LLC a replica's working set sees: its share of each of its sockets' caches.
        seen = sum(llc / replicas_on[s] for s in socks) / physics.llc_ref_mib
        local = seen / len(socks)
        miss_all, miss_local = seen**-beta, local**-beta
        memory = miss_all + physics.remote_cache_cost * (miss_local - miss_all)
        net_extra = physics.demand_static * (
            physics.nic_remote_penalty * p_remote + physics.share_penalty * spread
        )
        mu = {
            "dynamic": physics.llc_miss_fraction,
            "static": physics.llc_miss_fraction * workload.static_memory_ratio,
        }
        base = {"static": physics.demand_static, "dynamic": physics.demand_dynamic}
        demands = {c: usl[c] * (base[c] * (1.0 - mu[c] + mu[c] * memory) + net_extra) for c in base}
        out.append(
            {
                "replica": r.name,
                "cores": len(r.cpus),
                "demands": demands,
                "usl": usl["static"],
                "usl_dynamic": usl["dynamic"],
                "p_remote_nic": p_remote,
                "spread": spread,
                "llc_seen": seen,
                "memory_factor": memory,
            }
        )
    return out


def build_network(
    physics: Physics, workload: Workload, machine: Machine, mapping: Mapping
) -> Network:
    """The per-core PS network of ``machine`` under ``mapping`` for ``workload``."""
    n_active = len(mapping.cpus)
    queues = machine.nic_ports * machine.nic_queues_per_port
    per_core = max(1.0, queues / n_active)
    shift = physics.queue_tail * (per_core - 1.0)
    stations = tuple(
        Station(cores=f["cores"], demands=f["demands"], tail_shift=shift)
        for f in demand_factors(physics, workload, machine, mapping)
    )
    return Network(stations, workload.mix, fixed_latency=physics.fixed_latency)
