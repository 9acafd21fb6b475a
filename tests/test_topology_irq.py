"""The RSS IRQ affinity plan for a real multi-queue NIC (from a /proc/interrupts text)."""

from __future__ import annotations

import pytest
from helpers.machines import NEHALEM

from shrink.errors import TopologyError
from shrink.irq import (
    apply_plan,
    format_plan,
    interface_irq_names,
    nic_queue_irqs,
    plan_irq_affinity,
)
from shrink.mapping import build_mapping

pytestmark = pytest.mark.compute


def interrupts(ifaces=("eth0", "eth1"), queues=4, first=40) -> str:
    lines = ["           CPU0       CPU1       CPU2"]
    irq = first
    for iface in ifaces:
        lines.append(f" {irq}:  1  0  0  PCI-MSI-edge  {iface}")  # link interrupt
        irq += 1
        for q in range(queues):
            lines.append(f" {irq}:  9  0  0  PCI-MSI-edge  {iface}-TxRx-{q}")
            irq += 1
        lines.append(f" {irq}:  9  0  0  PCI-MSI-edge  {iface}-tx-0")
        irq += 1
    lines.append("NMI:  0  0  0  Non-maskable interrupts")
    return "\n".join(lines) + "\n"


def test_queue_irqs_in_queue_order_without_link_or_tx():
    q = nic_queue_irqs("eth0", interrupts())
    assert q == [(41, "eth0-TxRx-0"), (42, "eth0-TxRx-1"), (43, "eth0-TxRx-2"), (44, "eth0-TxRx-3")]
    assert nic_queue_irqs("eth1", interrupts())[0] == (47, "eth1-TxRx-0")


@pytest.mark.parametrize(
    ("mapping", "want"),
    [("2-replica-direct", [0, 1]), ("2-replica-indirect", [1, 0])],
)
def test_two_ports_feed_their_replicas_socket(mapping, want):
    m = build_mapping(mapping, NEHALEM)
    plan = plan_irq_affinity(m, NEHALEM, ["eth0", "eth1"], interrupts())
    assert len(plan) == 8
    for replica, sock in zip(m.replicas, want, strict=True):
        mine = [a for a in plan if a.replica == replica.name]
        # Queue i of the port goes to core i of the feeding socket, as in the papers.
        assert [a.cpus[0] for a in mine] == list(NEHALEM.cpus[sock])


def test_one_replica_spreads_queues_over_its_cores():
    m = build_mapping("1-replica", NEHALEM)
    plan = plan_irq_affinity(m, NEHALEM, ["eth0"], interrupts(queues=8))
    assert [a.cpus[0] for a in plan] == list(range(8))
    assert "IRQ" in format_plan(plan) and "loopback" in format_plan([])


def test_plan_errors():
    m = build_mapping("2-replica-direct", NEHALEM)
    with pytest.raises(TopologyError, match="no queue interrupts"):
        plan_irq_affinity(m, NEHALEM, ["ens9"], interrupts())
    with pytest.raises(TopologyError, match="give one interface or 2"):
        plan_irq_affinity(m, NEHALEM, ["eth0", "eth1", "eth2"], interrupts())


def test_apply_writes_smp_affinity_list(tmp_path):
    m = build_mapping("2-replica-direct", NEHALEM)
    plan = plan_irq_affinity(m, NEHALEM, ["eth0", "eth1"], interrupts())
    for a in plan:
        (tmp_path / "irq" / str(a.irq)).mkdir(parents=True)
        (tmp_path / "irq" / str(a.irq) / "smp_affinity_list").write_text("0-7\n")
    apply_plan(plan, proc_root=tmp_path)
    assert (tmp_path / "irq" / "41" / "smp_affinity_list").read_text() == "0"
    assert (tmp_path / "irq" / "50" / "smp_affinity_list").read_text() == "7"


def test_virtio_nic_queues_are_found_through_the_device(tmp_path):
    dev = tmp_path / "devices" / "pci0000:00" / "0000:00:03.0" / "virtio2"
    dev.mkdir(parents=True)
    (tmp_path / "class" / "net" / "eth0").mkdir(parents=True)
    (tmp_path / "class" / "net" / "eth0" / "device").symlink_to(dev)
    names = interface_irq_names("eth0", sys_root=tmp_path)
    assert names == ["eth0", "virtio2"]
    text = (
        " 37:  0  0  PCI-MSIX  0-edge  virtio2-config\n"
        " 38:  0  9  PCI-MSIX  1-edge  virtio2-input.0\n"
        " 39:  9  0  PCI-MSIX  2-edge  virtio2-output.0\n"
        " 40:  0  9  PCI-MSIX  3-edge  virtio2-input.1\n"
    )
    assert nic_queue_irqs(names, text) == [(38, "virtio2-input.0"), (40, "virtio2-input.1")]


def test_cli_nic_without_queues_fails_before_starting(tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    (tmp_path / "doc").mkdir()
    r = CliRunner().invoke(
        app,
        ["testbed", "up", "--docroot", str(tmp_path / "doc"), "--state", str(tmp_path / "s.json"),
         "--nic", "nosuchnic0"],
    )  # fmt: skip
    assert r.exit_code == 1 and "no queue interrupts for 'nosuchnic0'" in r.output
    assert not (tmp_path / "s.json").exists()


def test_a_device_name_is_not_the_start_of_another():
    # On a VM with ten or more virtio devices, eth0's virtio1 must not take virtio12's
    # disk queue, nor eth1 the queues of eth10: their affinities are not the NIC's.
    text = (
        " 38:  0  9  PCI-MSIX  1-edge  virtio1-input.0\n"
        " 50:  0  9  PCI-MSIX  1-edge  virtio12-req.0\n"
        " 51:  0  9  PCI-MSIX  1-edge  virtio10-input.0\n"
    )
    assert nic_queue_irqs(["eth0", "virtio1"], text) == [(38, "virtio1-input.0")]
    q = nic_queue_irqs("eth1", interrupts(("eth1", "eth10"), queues=2))
    assert [name for _, name in q] == ["eth1-TxRx-0", "eth1-TxRx-1"]


def test_down_puts_back_the_irq_affinities_up_changed(tmp_path, monkeypatch, machine):
    """`testbed up --nic eth0 --apply-irq` moved IRQ 38 (virtio2-input.0) to CPU 1; after
    `down` (and after an `up` that failed) it stayed there: the old lists were kept
    nowhere."""
    from shrink import irq
    from shrink.share import Share
    from shrink.testbed import lifecycle
    from shrink.testbed.config import ServerSettings
    from shrink.testbed.fake_recipe import FakeRecipe

    proc = tmp_path / "proc"
    for n in (41, 42):
        (proc / "irq" / str(n)).mkdir(parents=True)
        (proc / "irq" / str(n) / "smp_affinity_list").write_text("0-7\n")
    monkeypatch.setattr(irq, "PROC_ROOT", str(proc))
    plan = [irq.IrqAssignment(41, "eth0-TxRx-0", "r0", (0,)),
            irq.IrqAssignment(42, "eth0-TxRx-1", "r0", (1,))]  # fmt: skip
    (tmp_path / "doc").mkdir()
    state = tmp_path / "s.json"
    lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
                 server=ServerSettings(FakeRecipe()), irq_plan=plan)  # fmt: skip
    assert (proc / "irq" / "42" / "smp_affinity_list").read_text() == "1"
    lifecycle.down(state)
    for n in (41, 42):
        assert (proc / "irq" / str(n) / "smp_affinity_list").read_text() == "0-7"
    # a state's list is only ever an IRQ number and a CPU list
    assert irq.restore_affinities({"../../x": "0"}) and not (proc / "x").exists()
