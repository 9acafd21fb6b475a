"""RSS interrupt affinity for a real multi-queue NIC: which queue's IRQ goes to which core.

The papers bound queue i of port p to core i of socket p, so that a replica fed
"directly" has its packets processed on its own socket and one fed "indirectly"
on the other. This module reads ``/proc/interrupts`` for the interfaces' queue
IRQs and plans, for each replica of a mapping, the cores its NIC queues should
interrupt: the cores of the replica's NIC socket (``nic_socket``), or, for a
replica fed by RSS over all its sockets (``nic_socket`` None), its own cores.

``apply_plan`` writes ``/proc/irq/N/smp_affinity_list`` (root, real hardware;
stop irqbalance first or it will undo the plan). On loopback there are no queue
interrupts: a replica's "NIC" is its address, and the plan is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from shrink.errors import TopologyError
from shrink.machine import Machine
from shrink.mapping import Mapping
from shrink.topology import format_cpulist

__all__ = [
    "IrqAssignment",
    "apply_plan",
    "current_affinities",
    "format_plan",
    "interface_irq_names",
    "nic_queue_irqs",
    "plan_irq_affinity",
    "restore_affinities",
]

# Where the kernel's IRQ settings are (a test points it at a folder of its own).
PROC_ROOT = "/proc"


@dataclass(frozen=True)
class IrqAssignment:
    """One queue interrupt and the CPUs it should be delivered to."""

    irq: int
    queue: str
    replica: str
    cpus: tuple[int, ...]


def interface_irq_names(interface: str, sys_root: str | Path = "/sys") -> list[str]:
    """Names an interface's queue interrupts may carry: its own, and for virtio NICs
    the device's (``eth0`` is ``virtio2``, queues ``virtio2-input.0``)."""
    names = [interface]
    dev = Path(sys_root) / "class" / "net" / interface / "device"
    if dev.exists():
        real = dev.resolve().name
        if real.startswith("virtio"):
            names.append(real)
    return names


def nic_queue_irqs(interface: str | list[str], interrupts_text: str) -> list[tuple[int, str]]:
    """(IRQ, queue name) of an interface's receive/combined queues, in queue order.

    ``interface`` is a name or the list from :func:`interface_irq_names`. Matches
    descriptions that start with a name and end in a queue number (``eth0-TxRx-3``,
    ``eth0-rx-3``, ``ens1f0-3``, ``virtio2-input.0``); transmit-only queues
    (``eth0-tx-0``, ``virtio2-output.0``) and link/config interrupts are left out.
    """
    names = [interface] if isinstance(interface, str) else list(interface)
    found: list[tuple[int, int, str]] = []
    for line in interrupts_text.splitlines():
        head, _, rest = line.partition(":")
        if not head.strip().isdigit() or not rest.split():
            continue
        desc = rest.split()[-1]
        # The name whole: ``virtio1`` is not ``virtio12`` (a disk's ``virtio12-req.0``),
        # nor ``eth1`` ``eth10``; writing those would steer another device's interrupts.
        prefix = next((n for n in names if _names_device(desc, n)), None)
        if prefix is None or re.search(r"-(tx|output)[-.]?\d+$", desc, re.I):
            continue
        m = re.search(r"(\d+)$", desc[len(prefix) :])
        if m is None:
            continue
        found.append((int(m.group(1)), int(head), desc))
    return [(irq, name) for _, irq, name in sorted(found)]


def _names_device(desc: str, name: str) -> bool:
    """Whether an interrupt's description ``desc`` is the device ``name``'s: it starts
    with the whole name, followed by nothing or by a separator, not a letter or digit."""
    return desc.startswith(name) and not desc[len(name) : len(name) + 1].isalnum()


def plan_irq_affinity(
    mapping: Mapping, machine: Machine, interfaces: list[str], interrupts_text: str
) -> list[IrqAssignment]:
    """Spread each interface's queue IRQs over the cores of the socket feeding its replica.

    With one interface per replica, interface i feeds replica i. With a single
    interface for several replicas its queues are split into equal consecutive
    groups, one per replica (RSS indirection then decides which flows land where).
    """
    if not interfaces:
        return []
    k = len(mapping.replicas)
    if len(interfaces) not in (1, k):
        raise TopologyError(
            f"mapping {mapping.name!r} has {k} replicas; give one interface or {k}, "
            f"not {len(interfaces)}"
        )
    groups: list[list[tuple[int, str]]] = []
    if len(interfaces) == 1:
        queues = nic_queue_irqs(interface_irq_names(interfaces[0]), interrupts_text)
        if not queues:
            raise TopologyError(f"no queue interrupts for {interfaces[0]!r} in /proc/interrupts")
        size = max(1, len(queues) // k)
        groups = [queues[i * size : (i + 1) * size] for i in range(k)]
        groups[-1].extend(queues[k * size :])
    else:
        for iface in interfaces:
            queues = nic_queue_irqs(interface_irq_names(iface), interrupts_text)
            if not queues:
                raise TopologyError(f"no queue interrupts for {iface!r} in /proc/interrupts")
            groups.append(queues)
    plan = []
    for replica, queues in zip(mapping.replicas, groups, strict=True):
        cores = replica.cpus if replica.nic_socket is None else machine.cpus[replica.nic_socket]
        for j, (irq, name) in enumerate(queues):
            plan.append(IrqAssignment(irq, name, replica.name, (cores[j % len(cores)],)))
    return plan


def format_plan(plan: list[IrqAssignment]) -> str:
    """One line per IRQ, as the dry run prints it."""
    if not plan:
        return "no NIC queue interrupts to place (loopback: each replica's NIC is its address)"
    return "\n".join(
        f"IRQ {a.irq:>4} ({a.queue}) -> CPU {format_cpulist(a.cpus)}  [replica {a.replica}]"
        for a in plan
    )


def current_affinities(
    plan: list[IrqAssignment], proc_root: str | Path | None = None
) -> dict[str, str]:
    """Each planned IRQ's ``smp_affinity_list`` as it is now (IRQ as text -> CPU list),
    read without writing: what :func:`apply_plan` will replace, recorded first."""
    now: dict[str, str] = {}
    for a in plan:
        path = Path(proc_root or PROC_ROOT) / "irq" / str(a.irq) / "smp_affinity_list"
        try:
            now.setdefault(str(a.irq), path.read_text().strip())
        except OSError as exc:
            raise TopologyError(f"cannot read {path}: {exc.strerror}") from None
    return now


def apply_plan(plan: list[IrqAssignment], proc_root: str | Path | None = None) -> dict[str, str]:
    """Write each IRQ's ``smp_affinity_list``. Needs root on real hardware. Returns each
    IRQ's list before (IRQ as text -> CPU list), for :func:`restore_affinities`; a plan
    the kernel refuses part-way is undone first."""
    before: dict[str, str] = {}
    for a in plan:
        path = Path(proc_root or PROC_ROOT) / "irq" / str(a.irq) / "smp_affinity_list"
        try:
            old = path.read_text().strip()
            path.write_text(format_cpulist(a.cpus))
        except OSError as exc:
            restore_affinities(before, proc_root)
            if isinstance(exc, PermissionError):
                raise TopologyError(
                    f"no permission to write {path}: --apply-irq needs root"
                ) from None
            raise TopologyError(f"the kernel refused {path}: {exc.strerror}") from None
        before.setdefault(str(a.irq), old)
    return before


def restore_affinities(before: dict[str, str], proc_root: str | Path | None = None) -> list[str]:
    """Write back the lists :func:`apply_plan` found (a testbed's ``down``); the IRQs
    that could not be put back (gone, refused), in words. Only IRQ numbers and CPU lists
    are written: a state file is no licence to write elsewhere in /proc."""
    failed = []
    for irq, cpus in before.items():
        if not irq.isdigit() or not re.fullmatch(r"[0-9,-]+", cpus):
            failed.append(f"IRQ {irq!r}: not an IRQ and CPU list ({cpus!r})")
            continue
        path = Path(proc_root or PROC_ROOT) / "irq" / irq / "smp_affinity_list"
        try:
            path.write_text(cpus)
        except OSError as exc:
            failed.append(f"IRQ {irq} back to CPUs {cpus}: {exc.strerror}")
    return failed
