"""Topology discovery from /sys (a fake tree and this machine), TOML specs, CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import TopologyError
from shrink.machine import Machine
from shrink.topology import (
    CpuInfo,
    discover,
    format_cpulist,
    load_machine,
    machine_from_cpus,
    parse_cpulist,
    parse_lscpu,
)

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "machines").glob("*.toml"))


def fake_sysfs(
    root: Path, *, sockets: int, cores: int, threads: int, llc: str = "12288K", offline=()
) -> Path:
    """A /sys tree with Linux's numbering: thread t of core c on socket s is
    t * sockets * cores + s * cores + c (siblings far apart, as on real servers)."""
    n = sockets * cores * threads
    cpu_dir = root / "devices" / "system" / "cpu"
    online = [c for c in range(n) if c not in offline]
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text(format_cpulist(online) + "\n")
    for node in range(sockets):
        nd = root / "devices" / "system" / "node" / f"node{node}"
        nd.mkdir(parents=True)
        mine = [c for c in online if (c % (sockets * cores)) // cores == node]
        (nd / "cpulist").write_text(format_cpulist(mine) + "\n")
    for c in online:
        _thread, rest = divmod(c, sockets * cores)
        s, core = divmod(rest, cores)
        topo = cpu_dir / f"cpu{c}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{s}\n")
        (topo / "core_id").write_text(f"{core}\n")
        sib = [tt * sockets * cores + s * cores + core for tt in range(threads)]
        (topo / "thread_siblings_list").write_text(format_cpulist(sib) + "\n")
        for idx, (level, typ, size) in enumerate(
            [
                (1, "Data", "48K"),
                (1, "Instruction", "32K"),
                (2, "Unified", "1280K"),
                (3, "Unified", llc),
            ]
        ):
            d = cpu_dir / f"cpu{c}" / "cache" / f"index{idx}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "type").write_text(f"{typ}\n")
            (d / "size").write_text(f"{size}\n")
            (d / "shared_cpu_list").write_text(format_cpulist(range(n)) + "\n")
    for port in range(2):
        nic = root / "class" / "net" / f"eth{port}"
        (nic / "device").mkdir(parents=True)
        for q in range(4):
            (nic / "queues" / f"rx-{q}").mkdir(parents=True)
    (root / "class" / "net" / "lo" / "queues" / "rx-0").mkdir(parents=True)
    return root


@given(st.sets(st.integers(0, 300), min_size=1, max_size=60))
def test_cpulist_round_trip(cpus):
    text = format_cpulist(sorted(cpus))
    assert parse_cpulist(text) == tuple(sorted(cpus))
    assert "--" not in text and not text.startswith(",")


def test_parse_cpulist_forms_and_errors():
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("5") == (5,)
    with pytest.raises(TopologyError, match="must look like"):
        parse_cpulist("0-x")
    with pytest.raises(TopologyError, match="backwards"):
        parse_cpulist("3-1")


def test_discover_fake_two_socket_smt(tmp_path):
    root = fake_sysfs(tmp_path, sockets=2, cores=4, threads=2)
    m = discover(root, name="fake")
    assert (m.sockets, m.cores_per_socket, m.threads_per_core) == (2, 4, 2)
    assert m.llc_mib == 12.0
    # Socket 0 holds cores 0-3 with their siblings 8-11, sibling pairs adjacent.
    assert m.cpus[0] == (0, 8, 1, 9, 2, 10, 3, 11)
    assert m.cpus[1] == (4, 12, 5, 13, 6, 14, 7, 15)
    assert (m.nic_ports, m.nic_queues_per_port) == (2, 4)
    assert m.extra["numa_nodes"] == 2 and m.extra["source"] == "sysfs"
    # And it survives the TOML round trip unchanged.
    (tmp_path / "m.toml").write_text(m.to_toml())
    assert Machine.read_toml(tmp_path / "m.toml") == m


def test_discover_refuses_uneven_sockets(tmp_path):
    root = fake_sysfs(tmp_path, sockets=2, cores=2, threads=1, offline=(3,))
    with pytest.raises(TopologyError, match="unequal cores"):
        discover(root)


def test_discover_without_topology_files_falls_back_to_affinity(tmp_path):
    (tmp_path / "devices" / "system" / "cpu").mkdir(parents=True)
    m = discover(tmp_path)
    assert m.extra["source"] == "affinity"
    assert m.sockets == 1 and m.n_cpus == len(os.sched_getaffinity(0))


def test_parse_lscpu_and_group():
    text = "# CPU,Core,Socket,Node\n0,0,0,0\n1,1,0,0\n2,0,1,1\n3,1,1,1\n"
    cpus = parse_lscpu(text)
    assert cpus[2] == CpuInfo(cpu=2, socket=1, core=0, node=1)
    m = machine_from_cpus(cpus, name="x")
    assert m.cpus == ((0, 1), (2, 3)) and m.extra["numa_nodes"] == 2


def test_this_machine_matches_the_kernel():
    m = discover()
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    assert sorted(m.all_cpus) == list(online)
    assert m.n_cpus == len(online)
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    if nodes:
        assert m.extra["numa_nodes"] == len(nodes)
    assert m.llc_mib > 0


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_specs_load(path):
    m = load_machine(path)
    assert m.n_cpus == len(set(m.all_cpus)) == m.sockets * m.cores_per_socket * m.threads_per_core
    assert len(m.nic_port_socket) == m.nic_ports


def test_nehalem_spec_is_the_papers_machine():
    m = load_machine(ROOT / "examples" / "machines" / "nehalem-2s.toml")
    assert (m.sockets, m.cores_per_socket, m.llc_mib) == (2, 4, 12.0)


def test_cli_machine_show_json_and_text(tmp_path):
    r = CliRunner().invoke(app, ["machine", "show", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["sockets"] >= 1 and sorted(c for s in d["cpus"] for c in s) == sorted(
        discover().all_cpus
    )
    r = CliRunner().invoke(app, ["machine", "show"])
    assert r.exit_code == 0 and "cores" in r.stdout
    out = tmp_path / "this.toml"
    r = CliRunner().invoke(app, ["machine", "write", str(out)])
    assert r.exit_code == 0 and Machine.read_toml(out) == discover()
    r = CliRunner().invoke(app, ["machine", "show", "--machine", str(tmp_path / "no.toml")])
    assert r.exit_code == 1 and "no such machine spec" in r.output
