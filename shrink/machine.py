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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink import files
from shrink.atomic import write_text
from shrink.errors import TopologyError, TraceFormatError
from shrink.schemas import MachineSpec

__all__ = ["Machine"]


@dataclass(frozen=True)
class Machine:
    name: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int = 1
    llc_mib: float = 0.0
    ghz: float | None = None
    cpus: tuple[tuple[int, ...], ...] = ()
    nic_ports: int = 1
    nic_queues_per_port: int = 1
    nic_port_socket: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.sockets < 1 or self.cores_per_socket < 1 or self.threads_per_core < 1:
            raise TopologyError(
                f"machine {self.name!r}: sockets, cores and threads per core must be >= 1"
            )
        per = self.cores_per_socket * self.threads_per_core
        if not self.cpus:
            cpus = tuple(tuple(range(s * per, (s + 1) * per)) for s in range(self.sockets))
            object.__setattr__(self, "cpus", cpus)
        elif len(self.cpus) != self.sockets or any(len(c) != per for c in self.cpus):
            raise TopologyError(
                f"machine {self.name!r}: cpus must list {self.sockets} sockets of {per} CPUs each"
            )
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

    @property
    def n_cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def n_cpus(self) -> int:
        return self.n_cores * self.threads_per_core

    @property
    def all_cpus(self) -> tuple[int, ...]:
        return tuple(c for sock in self.cpus for c in sock)

    def socket_of(self, cpu: int) -> int:
        for s, cpus in enumerate(self.cpus):
            if cpu in cpus:
                return s
        raise TopologyError(f"CPU {cpu} is not on machine {self.name!r} (CPUs {self.all_cpus})")

    # TOML ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "sockets": self.sockets,
            "cores_per_socket": self.cores_per_socket,
            "threads_per_core": self.threads_per_core,
            "llc_mib": self.llc_mib,
            "cpus": [list(c) for c in self.cpus],
            "nic": {
                "ports": self.nic_ports,
                "queues_per_port": self.nic_queues_per_port,
                "port_socket": list(self.nic_port_socket),
            },
        }
        if self.ghz is not None:
            d["ghz"] = self.ghz
        if self.extra:
            d["extra"] = self.extra
        return d

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
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> Machine:
        """A machine from its spec (TOML's or ``to_dict``'s form), checked against
        :class:`shrink.schemas.MachineSpec` (which bounds sockets, cores and lists)."""
        d = files.validate(d, MachineSpec, source=source, what="machine spec")
        nic = d.get("nic", {})
        try:
            return cls(
                name=str(d.get("name", "unnamed")),
                sockets=int(d["sockets"]),
                cores_per_socket=int(d["cores_per_socket"]),
                threads_per_core=int(d.get("threads_per_core", 1)),
                llc_mib=float(d.get("llc_mib", 0.0)),
                ghz=None if d.get("ghz") is None else float(d["ghz"]),
                cpus=tuple(tuple(int(c) for c in s) for s in d.get("cpus", ())),
                nic_ports=int(nic.get("ports", 1)),
                nic_queues_per_port=int(nic.get("queues_per_port", 1)),
                nic_port_socket=tuple(int(s) for s in nic.get("port_socket", ())),
                extra=dict(d.get("extra", {})),
            )
        except TopologyError as exc:
            if source is None:
                raise
            raise TraceFormatError(str(exc), path=source) from None

    @classmethod
    def read_toml(cls, path: str | Path) -> Machine:
        d = files.read_toml(path, MachineSpec, what="machine spec")
        return cls.from_dict(d, source=str(path))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
