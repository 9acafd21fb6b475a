"""The simulator's physical parameters, named for what they are, with their sources.

Every default is either a published figure (``shrink/data/published_calibration.json``,
Hashemian et al., ICPE 2013 / CCPE 2014, a 2 x 4-core Xeon E5620 "Nehalem" at
2.4 GHz with 12 MiB of L3 per socket), a textbook figure for that processor, or
one of the few values fitted by ``bench/calibrate_sim.py`` so that the simulated
1->8-core scaling and the replica-mapping gains land near the published ones.
Fitted values say so in their docstring, with the command that fitted them.

Units: CPU demands in microseconds of one core at ``reference_ghz`` (a machine
spec with another clock divides them by ``ghz / reference_ghz``); sizes in MiB;
latencies in nanoseconds.

Where the network part of a request runs
    The NIC queue's core runs the interrupt and TCP/IP receive path; in
    lighttpd the worker that accepted the connection runs the rest. Because RSS
    spreads connections evenly over the queues and the workers evenly over the
    cores, the *amount* of network work per core is the same whichever core
    runs it, so the simulator charges all of a request's CPU to its worker's
    core and models only what differs when the queue's core is on the other
    socket: ``remote_nic_us`` of extra CPU (cache lines of the socket buffers
    and the wake-up crossing the interconnect). This keeps every core a single
    processor-sharing server.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from shrink.errors import ParameterError

__all__ = ["ACCEPT_POLICIES", "FITTED", "SimParams"]

ACCEPT_POLICIES = ("idle-first", "random")

FITTED = {
    "command": "python bench/calibrate_sim.py --verify",
    "results": 'bench/RESULTS.md, "sim"',
    "method": "closed-form solve from mean demands, corrected by the simulated MATs, 2 iterations",
    "targets": "tcp: 1-core MAT 23,200, 8-core MAT 146,000, direct +12.3%, indirect +6.5%; "
    "support: 8-core MAT 23,000, 1->8 mean scaling 7.8",
    "fitted": [
        "static_base_us",
        "contention_static",
        "remote_nic_us",
        "cross_socket_sharing",
        "dynamic_php_us",
    ],
    "verified": "tcp 1->8 mean 6.24, p99.9 7.18, MAT8 145,539; support mean 7.81, "
    "p99.9 7.75, MAT8 22,502; tcp direct +12.6%, indirect +6.9% (60,000 requests/level)",
}
"""How the fitted defaults were obtained (bench/calibrate_sim.py), and what they gave."""


# The largest value of each kind the engine computes with in floats: far past any
# machine's (1000 s of CPU a request, a second of memory latency), short of overflow.
_HIGH = {"us": 1e9, "ns": 1e9, "mib": 1e9, "ghz": 1e3, "refs": 1e12, "fraction": 100.0}


def _unit(name: str) -> str:
    tail = name.rsplit("_", 1)[-1]
    return tail if tail in _HIGH else "fraction"  # cv, sharing, contention


@dataclass(frozen=True)
class SimParams:
    """Physically named parameters of the simulated server (see the module docstring)."""

    reference_ghz: float = 2.4
    """Clock the demands below are stated for (the papers' E5620, published)."""

    static_base_us: float = 39.4
    """CPU per static request on an idle socket, network stack share included:
    accept, receive and parse the request, open/sendfile a cached file, close.
    Fitted (see FITTED) to the published tcp 1-core MAT, 146,000 / 6.3 = 23,200
    requests/s under the 0.5 ms mean threshold."""

    static_per_kib_us: float = 0.25
    """Extra CPU per KiB of static reply (segmentation, copies, ACK processing).
    Assumption: about 4 GB/s of transmit work per core with TSO; only matters
    for Support's downloads (>100 KB)."""

    static_cv: float = 2.0
    """Coefficient of variation of a static request's CPU (gamma distributed).
    Set by hand so that tcp's p99.9 MAT scales 1->8 near the published 7.2: the
    work charged to one request is skewed (interrupt batches, timer and softirq
    work, connection set-up slow paths land on whichever request is current),
    and pooled workers (``accept_policy``) hide a skewed tail better on 8 cores
    than one core can."""

    dynamic_php_us: float = 3250.0
    """Mean PHP CPU of a dynamic page when its data sit in the L3 cache (lognormal).
    A trace path carrying ``work=W`` (the synthetic docroot's convention, one
    unit = 1 microsecond) overrides the draw. Fitted (see FITTED) to Support's
    published 8-core MAT of 23,000 requests/s with 5% dynamic requests (a
    secant step on the simulated MAT after the closed-form solve)."""

    dynamic_cv: float = 1.0
    """Coefficient of variation of the PHP CPU (lognormal). Assumption."""

    dynamic_llc_refs: float = 100000.0
    """Memory references per dynamic request that reach the L3 (PHP heap walks,
    BeSim replies). Assumption, with ``contention_memory``: a fully missing
    working set costs about 4.8 ms of local-memory stalls on top of the PHP CPU,
    memory-intensive as the papers found (3.6x the memory traffic of static
    requests); the value makes 2 and 4 cores of one socket cost more per request
    than 1 or 8 cores (published) and keeps 1->8 scaling near 7.8 (the scaling
    moves little with it: 7.6-7.9 over 50k-110k references, closed form)."""

    ws_shared_mib: float = 20.0
    """Dynamic working set shared by all of a replica's PHP processes (opcode
    cache, session and catalogue data). Assumption."""

    ws_per_core_mib: float = 0.5
    """Dynamic working set added by each active core's PHP processes (their
    heaps). Assumption; with ``ws_shared_mib`` it makes 2-4 cores of one socket
    overflow its 12 MiB L3 while one replica over both sockets (24 MiB) fits
    better, the papers' explanation of Support's scaling."""

    llc_local_ns: float = 17.0
    """Local L3 hit latency: about 40 cycles at 2.4 GHz (Nehalem, textbook)."""

    llc_remote_ns: float = 45.0
    """Hit in the other socket's L3 over QPI: about 108 cycles (textbook)."""

    mem_local_ns: float = 65.0
    """Local DRAM latency (Nehalem, textbook)."""

    mem_remote_ns: float = 72.0
    """Remote DRAM latency: a remote cache hit plus 60-70 cycles, about 60% dearer
    (published: "60-70 extra cycles", ~60% more than a remote cache hit)."""

    remote_nic_us: float = 2.5
    """Extra worker CPU per request when its RSS queue's interrupts run on the
    other socket (socket buffers and wake-ups cross QPI). Fitted (see FITTED):
    2-replica-indirect (all connections remote) against direct (none), from the
    published tcp gains +6.5% and +12.3% over 1-replica."""

    cross_socket_sharing: float = 0.186
    """Fractional extra CPU of every request when the workers of one replica span
    sockets, times the fraction of a worker's peers on the other socket (shared
    listen socket, accept lock, connection tables bouncing over QPI). Fitted
    (see FITTED) to the published 1-replica tcp MAT of 146,000 requests/s."""

    contention_static: float = 0.065
    """Fractional extra CPU of a static request per additional busy core on its
    socket (shared L3 and memory bandwidth for socket buffers). Fitted (see
    FITTED) to the published 2-replica-direct tcp MAT (+12.3% over 1-replica),
    where each replica has one socket's four cores and no cross-socket cost."""

    contention_memory: float = 0.12
    """Fractional extra memory-stall time of a dynamic request per additional busy
    core on its socket (memory-controller queueing on the socket's 3 channels).
    Assumption, see ``dynamic_llc_refs``."""

    accept_policy: str = "idle-first"
    """Which worker accepts a new connection: ``idle-first`` (the workers share one
    listen socket and one waiting in epoll - an idle one - gets it; else any) or
    ``random`` (independent, like SO_REUSEPORT hashing)."""

    cross_socket: bool = True
    """Switch for every cross-socket effect (remote NIC, cross-socket sharing,
    remote cache and memory, the pooled L3 of a replica on two sockets). Off, a
    socket behaves like a machine of its own: the SHRiNK self-check's setting."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not (0.0 <= v <= _HIGH[_unit(f.name)]):
                # inf passed a bare v >= 0: the engine divided by it (exit 70) or wrote NaN.
                raise ParameterError(
                    f"{f.name} == {v!r}, must be in [0, {_HIGH[_unit(f.name)]:g}]."
                )
        dearer = min(self.llc_remote_ns, self.mem_local_ns, self.mem_remote_ns)
        if self.llc_local_ns > dearer:
            # The model charges each slower level's difference from it: negative latencies.
            raise ParameterError(
                f"llc_local_ns == {self.llc_local_ns:g}, must be at most llc_remote_ns, "
                f"mem_local_ns and mem_remote_ns (the least is {dearer:g})."
            )
        if self.reference_ghz <= 0:
            raise ParameterError(f"reference_ghz == {self.reference_ghz:g}, must be in (0, 1000].")
        if self.accept_policy not in ACCEPT_POLICIES:
            raise ParameterError(
                f"accept_policy == {self.accept_policy!r}, must be one of "
                f"{', '.join(ACCEPT_POLICIES)}."
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_(self, **changes: Any) -> SimParams:
        """A copy with some parameters changed (unknown names are an error)."""
        known = {f.name for f in fields(self)}
        bad = sorted(set(changes) - known)
        if bad:
            raise ParameterError(f"unknown simulator parameter(s) {bad}; known: {sorted(known)}")
        return replace(self, **changes)

    def without_cross_socket(self) -> SimParams:
        return replace(self, cross_socket=False)
