"""From machine x mapping x share x parameters to per-core costs and routing.

The simulated server is one processor-sharing queue per active core (its
lighttpd worker and its PHP processes share the core). This module decides,
once per run, what a request costs on each core:

* ``static_factor`` multiplies the CPU every request needs in the worker and
  network stack: intra-socket contention (shared L3 and memory bandwidth,
  ``contention_static`` per additional busy core of the socket) times
  cross-socket sharing (``cross_socket_sharing`` times the fraction of the
  worker's replica peers on the other socket);
* ``dyn_stall_us`` is the memory time a dynamic request adds to its PHP CPU:
  the replica's dynamic working set against the L3 capacity it sees, hits in
  the other socket's L3 and misses to local or remote memory priced by their
  latencies, stretched by memory-controller contention;
* a connection whose RSS queue is on another socket than its worker costs
  ``remote_nic_us`` more per request.

Routing (like the live engine): session -> replica by the session hash used by
:mod:`shrink.replay` (or round robin); the connection's RSS queue is uniform over
the queues on the replica's sockets (or the replica's NIC socket when the
mapping binds one); the accepting worker is chosen when the session's first
request arrives (:mod:`shrink.sim.engine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shrink.errors import TopologyError
from shrink.machine import Machine
from shrink.mapping import Mapping
from shrink.sim.params import SimParams

__all__ = ["CoreCost", "Layout", "build_layout", "llc_stall_ns"]


@dataclass(frozen=True)
class CoreCost:
    """What a request costs on one simulated core."""

    cpu: int
    socket: int
    replica: int
    static_factor: float
    dyn_stall_us: float


@dataclass(frozen=True)
class Layout:
    """Per-core costs and per-replica routing facts for one run."""

    cores: tuple[CoreCost, ...]
    replica_cores: tuple[tuple[int, ...], ...]  # indices into ``cores``
    replica_queue_sockets: tuple[tuple[int, ...], ...]  # sockets a connection's queue may be on
    replica_labels: tuple[str, ...]  # "address:port"
    speed: float  # CPU-speed fraction of the share times the clock ratio

    def to_dict(self) -> dict[str, Any]:
        return {
            "cores": [c.__dict__ for c in self.cores],
            "replica_cores": [list(r) for r in self.replica_cores],
            "replica_queue_sockets": [list(r) for r in self.replica_queue_sockets],
            "speed": self.speed,
        }


def llc_stall_ns(
    p: SimParams,
    ws_mib: float,
    cap_local_mib: float,
    cap_remote_mib: float,
) -> float:
    """Extra nanoseconds per L3 reference over an all-local-hit baseline.

    The working set ``ws_mib`` is spread evenly over the capacity the replica
    sees (its share of the local and of the remote L3); references hit with
    probability capacity / working set, in the local or remote part in proportion
    to their sizes; misses go to memory, local or remote in the same proportion
    (first-touch pages follow the workers).
    """
    cap = cap_local_mib + cap_remote_mib
    if ws_mib <= 0 or cap <= 0:
        return 0.0
    hit = min(1.0, cap / ws_mib)
    local = cap_local_mib / cap
    miss = 1.0 - hit
    return (
        hit * (1.0 - local) * (p.llc_remote_ns - p.llc_local_ns)
        + miss * local * (p.mem_local_ns - p.llc_local_ns)
        + miss * (1.0 - local) * (p.mem_remote_ns - p.llc_local_ns)
    )


def build_layout(
    machine: Machine,
    mapping: Mapping,
    params: SimParams,
    *,
    speed_fraction: float = 1.0,
) -> Layout:
    """Costs of every core of ``mapping`` on ``machine`` under ``params``."""
    p = params
    if not mapping.replicas:
        raise TopologyError(f"mapping {mapping.name!r} has no replica")
    cpus = mapping.cpus
    if len(set(cpus)) != len(cpus):
        raise TopologyError(f"mapping {mapping.name!r} uses a CPU twice: {cpus}")
    busy_on_socket: dict[int, int] = {}
    for c in cpus:
        s = machine.socket_of(c)
        busy_on_socket[s] = busy_on_socket.get(s, 0) + 1
    llc = machine.llc_mib
    cores: list[CoreCost] = []
    replica_cores: list[tuple[int, ...]] = []
    queue_sockets: list[tuple[int, ...]] = []
    labels: list[str] = []
    for r_i, rep in enumerate(mapping.replicas):
        socks = [machine.socket_of(c) for c in rep.cpus]
        n_r = len(rep.cpus)
        on_socket = {s: socks.count(s) for s in set(socks)}
        idx = []
        for cpu, s in zip(rep.cpus, socks, strict=True):
            k = busy_on_socket[s]
            factor = 1.0 + p.contention_static * (k - 1)
            mem_contention = 1.0 + p.contention_memory * (k - 1)
            # this replica's share of each socket's L3: in proportion to its busy cores there
            own_cap = llc * on_socket[s] / k
            if p.cross_socket and len(on_socket) > 1:
                peers_remote = n_r - on_socket[s]
                factor *= 1.0 + p.cross_socket_sharing * peers_remote / max(1, n_r - 1)
                remote_cap = sum(
                    llc * m / busy_on_socket[t] for t, m in on_socket.items() if t != s
                )
                ws = p.ws_shared_mib + p.ws_per_core_mib * n_r
            else:
                # one socket (or cross-socket effects off): each socket on its own
                remote_cap = 0.0
                ws = p.ws_shared_mib + p.ws_per_core_mib * on_socket[s]
            stall_ns = llc_stall_ns(p, ws, own_cap, remote_cap) * mem_contention
            idx.append(len(cores))
            cores.append(
                CoreCost(
                    cpu=cpu,
                    socket=s,
                    replica=r_i,
                    static_factor=factor,
                    dyn_stall_us=p.dynamic_llc_refs * stall_ns / 1000.0,
                )
            )
        replica_cores.append(tuple(idx))
        if rep.nic_socket is None:
            queue_sockets.append(tuple(socks))  # RSS: one queue per busy core, uniform
        else:
            queue_sockets.append((int(rep.nic_socket),))
        labels.append(f"{rep.address}:{rep.port}")
    ghz_ratio = (machine.ghz or p.reference_ghz) / p.reference_ghz
    return Layout(
        cores=tuple(cores),
        replica_cores=tuple(replica_cores),
        replica_queue_sockets=tuple(queue_sockets),
        replica_labels=tuple(labels),
        speed=float(speed_fraction) * ghz_ratio,
    )
