"""Replica mappings: which server instances run on which CPUs, fed by which NIC.

The papers' three layouts on a two-socket machine:

* ``1-replica``: one instance over every core of the share; RSS spreads the
  NIC queues over all of its sockets, so about half the connections have their
  network processing on the other socket than the worker that serves them.
* ``2-replica-direct``: one instance per socket, each bound to the NIC port whose
  queues run on its own socket.
* ``2-replica-indirect``: one instance per socket, each bound to the NIC port
  whose queues run on the *other* socket.

``k-replica`` (e.g. ``4-replica``) splits the share's CPUs into k equal,
socket-compact groups, each fed on its own socket. On loopback each replica's
"NIC" is its own address (127.0.0.1, 127.0.0.2, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from shrink import files
from shrink.checks import check_int
from shrink.errors import OptionError, TopologyError
from shrink.machine import Machine
from shrink.schemas import MAX_CPUS, Cpu, Name, Port, Socket

__all__ = [
    "ALL_MAPPINGS",
    "BUILTIN_MAPPINGS",
    "Mapping",
    "Replica",
    "build_mapping",
    "check_mapping_names",
    "check_mappings",
    "remote_nic_probability",
]

BUILTIN_MAPPINGS = ("1-replica", "2-replica-direct", "2-replica-indirect")


class _AllMappings(tuple):
    """``--mappings all``: the built-in mappings, told apart from the same names listed
    (a list is checked whole; 'all' takes those the server's CPUs can give)."""

    __slots__ = ()


ALL_MAPPINGS = _AllMappings(BUILTIN_MAPPINGS)


@dataclass(frozen=True)
class Replica(files.FileFormat):
    """One server instance: its CPUs, its address, and the socket of the NIC queues feeding it.

    ``nic_socket`` is None when RSS spreads the replica's connections over the
    queues of all the sockets its CPUs are on.
    """

    name: Name
    cpus: Annotated[tuple[Cpu, ...], Field(max_length=MAX_CPUS)]
    address: Name
    port: Port
    sockets: Annotated[tuple[Socket, ...], Field(max_length=MAX_CPUS)]
    nic_socket: Socket | None = None

    WHAT = "replica"


@dataclass(frozen=True)
class Mapping(files.FileFormat):
    """The replicas of a mapping (``1-replica``, ...): the ``mapping`` of a curve or state."""

    name: Name
    replicas: Annotated[tuple[Replica, ...], Field(max_length=1_024)]

    WHAT = "mapping"

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(c for r in self.replicas for c in r.cpus)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(r.address, r.port) for r in self.replicas]


def remote_nic_probability(replica: Replica) -> float:
    """Probability that a connection's network processing runs on another socket
    than the worker serving it.

    RSS spreads connections uniformly over the queues of the replica's sockets and
    the worker is uniform over its CPUs, so with the replica on S sockets the
    chance they differ is 1 - 1/S (1/2 for one replica over two sockets). A
    replica fed on a fixed socket has 0 (direct) or 1 (indirect) when all its
    CPUs are on one socket.
    """
    if replica.nic_socket is None:
        s = len(set(replica.sockets))
        return 1.0 - 1.0 / s
    remote = sum(1 for s in replica.sockets if s != replica.nic_socket)
    return remote / len(replica.sockets)


# [0-9], not \d: "١-replica" (an Arabic-Indic one) ran as 1-replica under that name.
_K_REPLICA = re.compile(r"^([0-9]+)-replica(?:-(direct|indirect))?$")


def build_mapping(
    name: str,
    machine: Machine,
    cpus: tuple[int, ...] | None = None,
    *,
    addresses: list[str] | None = None,
    base_port: int = 8080,
) -> Mapping:
    """Build a named mapping over ``cpus`` (default: all of ``machine``).

    ``replica.sockets`` lists, for each of the replica's CPUs, its socket.
    """
    cpus = tuple(cpus) if cpus is not None else machine.all_cpus
    if not cpus:
        raise TopologyError("a mapping needs at least one CPU")
    # The replicas' port, as the mapping's file format bounds it (a socket's bind()
    # raised OverflowError on 70000, after the share was set up).
    check_int(base_port, "port", low=0, high=65_535)
    m = _K_REPLICA.match(name)
    if not m:
        raise TopologyError(
            f"mapping == {name!r}, must be one of {', '.join(BUILTIN_MAPPINGS)} or K-replica, "
            "K a number of replicas (4-replica)"
        )
    k = int(m.group(1))
    feed = m.group(2) or ("spread" if k == 1 else "direct")
    if k < 1 or k > len(cpus):
        n = f"{len(cpus)} CPU{'' if len(cpus) == 1 else 's'}"  # ("1 CPUs" was said)
        raise TopologyError(f"mapping {name!r}: {k} replicas cannot share {n}")
    if len(cpus) % k:
        raise TopologyError(f"mapping {name!r}: {len(cpus)} CPUs do not split into {k} replicas")
    # Socket-compact: sort by socket so each group stays on as few sockets as possible.
    ordered = sorted(cpus, key=lambda c: (machine.socket_of(c), c))
    size = len(ordered) // k
    addrs = addresses or [f"127.0.0.{i + 1}" for i in range(k)]
    if len(addrs) < k:
        raise TopologyError(f"mapping {name!r} needs {k} addresses, got {len(addrs)}")
    replicas = []
    used_sockets = sorted({machine.socket_of(c) for c in cpus})
    for i in range(k):
        group = tuple(ordered[i * size : (i + 1) * size])
        sockets = tuple(machine.socket_of(c) for c in group)
        home = max(set(sockets), key=sockets.count)
        if feed == "spread":
            nic = None
        elif feed == "direct":
            nic = home
        else:
            others = [s for s in used_sockets if s != home] or [
                s for s in range(machine.sockets) if s != home
            ]
            if not others:
                raise TopologyError(
                    f"mapping {name!r}: an indirect feed needs a second socket; "
                    f"machine {machine.name!r} has {machine.sockets}"
                )
            nic = others[0]
        replicas.append(
            Replica(
                name=f"r{i}",
                cpus=group,
                address=addrs[i],
                port=base_port,
                sockets=sockets,
                nic_socket=nic,
            )
        )
    return Mapping(name, tuple(replicas))


_NAMES_HELP = (
    f"{', '.join(BUILTIN_MAPPINGS)} or K-replica[-direct|-indirect], K a number of replicas "
    "(4-replica)"
)


def check_mapping_names(names: tuple[str, ...] | list[str], option: str = "--mappings") -> None:
    """Refuse a name no machine can run (``1-replicaa``), before a trace is even read."""
    for name in names:
        m = _K_REPLICA.match(name)
        if not m or int(m.group(1)) < 1:
            raise OptionError(option, f"unknown mapping {name!r}; accepted: {_NAMES_HELP}")


def check_mappings(
    names: tuple[str, ...] | list[str],
    machine: Machine,
    cpus: tuple[int, ...],
    option: str = "--mappings",
) -> None:
    """Refuse, before anything is measured, a mapping ``cpus`` of ``machine`` cannot give.

    The message names the mappings this machine can run (``3-replica`` on 8 CPUs
    lists 1-, 2-, 4- and 8-replica).
    """
    check_mapping_names(names, option)
    for name in names:
        try:
            build_mapping(name, machine, cpus)
        except TopologyError as exc:
            ks = [k for k in range(3, len(cpus) + 1) if len(cpus) % k == 0]
            here = [
                n
                for n in (*BUILTIN_MAPPINGS, *(f"{k}-replica" for k in ks))
                if _runs(n, machine, cpus)
            ]
            raise OptionError(
                option,
                f"{exc}; accepted on these {len(cpus)} CPUs: {', '.join(here) or 'none'}",
            ) from None


def _runs(name: str, machine: Machine, cpus: tuple[int, ...]) -> bool:
    try:
        build_mapping(name, machine, cpus)
    except TopologyError:
        return False
    return True


def mappings_here(
    names: tuple[str, ...] | list[str], machine: Machine, cpus: tuple[int, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The mappings to predict, and those left out: ``--mappings all`` (the built-in ones)
    keeps those ``cpus`` can give (one server CPU gives only 1-replica), where it refused
    the whole run; a list named otherwise is checked whole (:func:`check_mappings`)."""
    # Not names == BUILTIN_MAPPINGS: "--mappings 1-replica,2-replica-direct,2-replica-indirect"
    # on one socket lost 2-replica-indirect under a note saying --mappings all was given.
    if isinstance(names, _AllMappings):
        kept = tuple(n for n in names if _runs(n, machine, cpus))
        if kept:
            return kept, tuple(n for n in names if n not in kept)
    check_mappings(names, machine, cpus)
    return tuple(names), ()
