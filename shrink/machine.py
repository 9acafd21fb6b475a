"""The Machine: sockets, cores, last-level caches and NIC queues, as a TOML spec.

A spec describes this machine (discovered from /sys by :mod:`shrink.topology`) or
one the user does not have (``examples/machines/nehalem-2s.toml``), so that
predictions can target it. TOML layout::

    name = "nehalem-2s"
    sockets = 2
    cores_per_socket = 4
    threads_per_core = 1
    llc_mib = 12.0          # per socket
    ghz = 2.4
    # optional: the logical CPU ids of each socket (default: socket-major order)
    cpus = [[0, 1, 2, 3], [4, 5, 6, 7]]

    [nic]
    ports = 2
    queues_per_port = 4
    # optional: port p's queues have their interrupts on this socket (default p % sockets)
    port_socket = [0, 1]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasPath, Field, model_serializer, model_validator

from shrink import files
from shrink.atomic import write_text
from shrink.errors import TopologyError, TraceFormatError
from shrink.schemas import MAX_CPUS, Cpu, Name, Socket

__all__ = ["Machine"]

# The file's ``[nic]`` table holds these fields, without their ``nic_`` prefix.
NIC = ("nic_ports", "nic_queues_per_port", "nic_port_socket")


def _nic(key: str) -> AliasPath:
    return AliasPath("nic", key)


MIN_LLC_MIB = 1 / 1024


@dataclass(frozen=True)
class Machine(files.FileFormat):
    """A machine spec: its fields are the file's keys (see the module docstring).

    Sizes are bounded here, so a hostile spec cannot make a later stage allocate
    gigabytes; ``__post_init__`` checks what the fields say together.
    """

    name: Name
    sockets: Annotated[int, Field(ge=1, le=64)]
    cores_per_socket: Annotated[int, Field(ge=1, le=4_096)]
    threads_per_core: Annotated[int, Field(ge=1, le=16)] = 1
    llc_mib: Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1e6)] = 0.0
    ghz: Annotated[
        float | None, Field(allow_inf_nan=False, ge=0.01, le=1e3, exclude_if=files.is_none)
    ] = None
    # default: socket-major order
    cpus: Annotated[
        tuple[Annotated[tuple[Cpu, ...], Field(max_length=MAX_CPUS)], ...], Field(max_length=64)
    ] = ()
    # The file's [nic] table: ports, queues_per_port, port_socket.
    nic_ports: Annotated[int, Field(ge=1, le=64, validation_alias=_nic("ports"))] = 1
    nic_queues_per_port: Annotated[
        int, Field(ge=1, le=4_096, validation_alias=_nic("queues_per_port"))
    ] = 1
    # default: port p's queues have their interrupts on socket p % sockets
    nic_port_socket: Annotated[
        tuple[Socket, ...], Field(max_length=64, validation_alias=_nic("port_socket"))
    ] = ()
    extra: Annotated[dict[str, Any], Field(exclude_if=files.is_empty)] = field(
        default_factory=dict, compare=False
    )

    WHAT = "machine spec"

    def __post_init__(self) -> None:
        # 0 is "not known"; 1e-320 made the what-if's miss rates overflow (exit 70), as a
        # 1e-320 GHz clock made every simulated demand inf. Neither is any processor's.
        if 0.0 < self.llc_mib < MIN_LLC_MIB:
            raise TopologyError(
                f"machine {self.name!r}: llc_mib == {self.llc_mib:g}, must be 0 (not known) "
                f"or at least {MIN_LLC_MIB:g} (1 KiB)"
            )
        if self.sockets < 1 or self.cores_per_socket < 1 or self.threads_per_core < 1:
            raise TopologyError(
                f"machine {self.name!r}: sockets, cores and threads per core must be >= 1"
            )
        per = self.cores_per_socket * self.threads_per_core
        if self.sockets * per > MAX_CPUS:
            raise TopologyError(
                f"machine {self.name!r}: sockets x cores_per_socket x threads_per_core == "
                f"{self.sockets * per}, must be <= {MAX_CPUS}"
            )
        if not self.cpus:
            cpus = tuple(tuple(range(s * per, (s + 1) * per)) for s in range(self.sockets))
            object.__setattr__(self, "cpus", cpus)
        elif len(self.cpus) != self.sockets or any(len(c) != per for c in self.cpus):
            raise TopologyError(
                f"machine {self.name!r}: cpus must list {self.sockets} sockets of {per} CPUs each"
            )
        listed = [c for sock in self.cpus for c in sock]
        if len(set(listed)) != len(listed):
            # One CPU in two sockets: whatif counted it twice, and a mapping pinned two
            # replicas to it.
            seen: set[int] = set()
            twice = next(c for c in listed if c in seen or seen.add(c))
            raise TopologyError(f"machine {self.name!r}: cpus lists CPU {twice} twice")
        if not self.nic_port_socket:
            ports = tuple(p % self.sockets for p in range(self.nic_ports))
            object.__setattr__(self, "nic_port_socket", ports)
        elif len(self.nic_port_socket) != self.nic_ports or any(
            not 0 <= s < self.sockets for s in self.nic_port_socket
        ):
            raise TopologyError(
                f"machine {self.name!r}: nic port_socket must name a socket in "
                f"0..{self.sockets - 1} for each of the {self.nic_ports} ports"
            )

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        if isinstance(d, Mapping) and not isinstance(d.get("nic", {}), Mapping):
            raise ValueError("nic must be a table (ports, queues_per_port, port_socket)")
        return {"name": "unnamed", **d} if isinstance(d, Mapping) else d

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        nic = {k.removeprefix("nic_"): d.pop(k) for k in NIC}
        # The order files have always had (a state file is written unsorted).
        last = {k: d.pop(k) for k in ("ghz", "extra") if k in d}
        return {**d, "nic": nic, **last}

    @property
    def n_cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def n_cpus(self) -> int:
        return self.n_cores * self.threads_per_core

    @property
    def all_cpus(self) -> tuple[int, ...]:
        return tuple(c for sock in self.cpus for c in sock)

    @functools.cached_property
    def _sockets(self) -> dict[int, int]:
        # A lookup per CPU: a model asks for every core of every replica, and a
        # search through the lists made a 2 x 4096-core what-if take minutes.
        return {c: s for s, cpus in enumerate(self.cpus) for c in cpus}

    def socket_of(self, cpu: int) -> int:
        s = self._sockets.get(cpu)
        if s is not None:
            return s
        raise TopologyError(f"CPU {cpu} is not on machine {self.name!r} (CPUs {self.all_cpus})")

    # TOML ------------------------------------------------------------------
    def to_toml(self) -> str:
        d = self.to_dict()
        lines = [f'name = "{self.name}"']
        for k in ("sockets", "cores_per_socket", "threads_per_core", "llc_mib", "ghz"):
            if k in d:
                lines.append(f"{k} = {d[k]}")
        lines.append("cpus = [" + ", ".join(str(list(c)) for c in self.cpus) + "]")
        lines += [
            "",
            "[nic]",
            f"ports = {self.nic_ports}",
            f"queues_per_port = {self.nic_queues_per_port}",
            f"port_socket = {list(self.nic_port_socket)}",
        ]
        if self.extra:
            lines += ["", "[extra]"]
            for k, v in sorted(self.extra.items()):
                lines.append(f"{k} = {_toml_value(v)}")
        return "\n".join(lines) + "\n"

    def write_toml(self, path: str | Path) -> Path:
        path = Path(path)
        write_text(path, self.to_toml())
        return path

    @classmethod
    def from_dict(
        cls, d: Any, *, source: str | Path | None = None, at: str | None = None
    ) -> Machine:
        """A machine from its spec (TOML's or ``to_dict``'s form), checked against its type.

        ``at``: where the spec is in its file (``machine``), named in an error.
        """
        try:
            return files.adapt(cls.file_format(), d, what=cls.WHAT, at=at, source=source)
        except TopologyError as exc:
            if source is None:
                raise
            raise TraceFormatError(str(exc), path=source) from None

    @classmethod
    def read_toml(cls, path: str | Path) -> Machine:
        d = files.read_toml(path, what=cls.WHAT)
        _check_keys(d, path)
        return cls.from_dict(d, source=str(path))


# The keys a spec file may hold (the module docstring); [extra] holds anything else.
_KEYS = frozenset({f.name for f in fields(Machine)} - set(NIC) | {"nic"})
_NIC_KEYS = frozenset(k.removeprefix("nic_") for k in NIC)


def _check_keys(d: Any, path: str | Path) -> None:
    """Refuse a key the spec does not know: a misspelt one (``llc_mb``) was dropped
    silently, and its field took the default (an unknown cache, one thread per core)."""
    if not isinstance(d, Mapping):
        return
    nic = d.get("nic")
    unknown = sorted(set(d) - _KEYS)
    if isinstance(nic, Mapping):
        unknown += sorted(f"nic.{k}" for k in set(nic) - _NIC_KEYS)
    if unknown:
        raise TraceFormatError(
            f"unknown key(s) {unknown} in a machine spec; known: {sorted(_KEYS - {'nic'})} "
            f"and [nic] {sorted(_NIC_KEYS)} (put notes under [extra])",
            path=path,
        )


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
