"""Shares: parsing, socket-compact selection, refusals, CFS period choice, cgroups."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import require_root
from helpers.machines import NEHALEM
from hypothesis import given
from hypothesis import strategies as st

from shrink.errors import ParameterError, TopologyError
from shrink.machine import Machine
from shrink.share import (
    MIN_QUOTA_US,
    Cgroup,
    Share,
    cgroup_layout,
    choose_period_us,
    scheduler_tick_us,
    select_compact,
)
from shrink.topology import discover

ROOT = Path(__file__).resolve().parent.parent
XEON = Machine.read_toml(ROOT / "examples" / "machines" / "xeon-2s-8c.toml")
TWO_CORE = Machine("two-core", sockets=1, cores_per_socket=2)


@pytest.mark.parametrize(
    ("alpha", "cpus"),
    [
        (0.5, (0, 1, 2, 3)),
        (0.25, (0, 1)),
        (0.75, (0, 1, 2, 3, 4, 5)),
        (0.125, (0,)),
        (1.0, tuple(range(8))),
    ],
)
def test_alpha_is_socket_compact(alpha, cpus):
    assert select_compact(NEHALEM, alpha) == cpus


def test_alpha_takes_whole_smt_cores():
    # 0.25 of 2 x 8 cores = 4 whole cores of socket 0, both threads of each.
    assert select_compact(XEON, 0.25) == (0, 1, 2, 3, 16, 17, 18, 19)
    assert {XEON.socket_of(c) for c in select_compact(XEON, 0.5)} == {0}


@given(st.integers(1, 8))
def test_alpha_whole_cores_property(k):
    cpus = select_compact(NEHALEM, k / 8)
    assert len(cpus) == k
    # Socket-compact: no socket is used before the one before it is full.
    per_socket = [sum(1 for c in cpus if NEHALEM.socket_of(c) == s) for s in range(2)]
    assert per_socket[1] == 0 or per_socket[0] == 4


def test_parse_forms_on_two_cores(monkeypatch):
    monkeypatch.setattr("shrink.enforce.cfs.scheduler_tick_us", lambda: 4000)  # HZ=250
    assert Share.parse("all", TWO_CORE) == Share("all", (0, 1), 1.0)
    assert Share.parse("0.5", TWO_CORE).cpus == (0,)
    assert Share.parse("1", TWO_CORE) == Share("cores", (1,), 0.5)  # a bare integer is a CPU
    assert Share.parse("0-1", TWO_CORE).kind == "all"
    q = Share.parse("1@25%", TWO_CORE)
    assert q == Share.parse("1@0.25", TWO_CORE)
    # A CPU-time share's fraction is of its full target (its CPUs at full speed).
    assert (q.kind, q.cpus, q.cpu_fraction, q.fraction) == ("cpu_time", (1,), 0.25, 0.25)
    # The quota is one tick, the period as short as that allows.
    assert (q.quota_us(), q.period_us) == (4000, 16000)
    half = Share.parse("0@50%", TWO_CORE)
    assert (half.quota_us(), half.period_us, half.fraction) == (4000, 8000, 0.5)
    assert Share.parse("0@100%", TWO_CORE).kind == "cores"


def test_scheduler_tick_from_kernel_config():
    assert scheduler_tick_us("# x\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n") == 4000
    assert scheduler_tick_us("CONFIG_HZ=1000\n") == 1000
    assert scheduler_tick_us("") == 4000
    assert scheduler_tick_us() in (1000, 3333, 4000, 10000)


def test_parse_period_override_and_dict_round_trip():
    s = Share.parse("0-1@50%", TWO_CORE, period_us=100_000)
    assert (s.quota_us(), s.quota_us(1), s.period_us) == (100_000, 50_000, 100_000)
    assert Share.from_dict(s.to_dict()) == s
    assert s.to_dict()["quota_us"] == 100_000


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("0.25", r"0.5 cores .* whole cores .*'0@50%'"),
        ("0.3", "whole cores"),
        ("2", "does not have"),
        ("0-3", "does not have"),
        ("1@150%", "cannot run faster"),
        ("1@x", "percentage"),
        ("0@10%/", "percentage"),
    ],
)
def test_refusals_say_why(text, match):
    with pytest.raises(TopologyError, match=match):
        Share.parse(text, TWO_CORE)


def test_bad_alpha_is_a_parameter_error():
    with pytest.raises(ParameterError, match=r"alpha == 1.5, must be in \(0, 1\]"):
        Share.parse("1.5", TWO_CORE)


def test_period_too_short_for_a_quota_is_refused():
    with pytest.raises(TopologyError, match="quota >= 1000"):
        Share.parse("0@10%", TWO_CORE, period_us=2000)


@given(st.floats(0.005, 1.0), st.integers(1, 64), st.sampled_from([1000, 3333, 4000, 10000]))
def test_period_is_shortest_with_a_tick_long_quota(fraction, n, tick):
    p = choose_period_us(fraction, n, tick_us=tick)
    floor = max(MIN_QUOTA_US, tick)
    assert p % 100 == 0 and MIN_QUOTA_US <= p <= 1_000_000
    assert fraction * n * p >= MIN_QUOTA_US - 1e-6
    if p < 1_000_000:
        assert fraction * n * p >= floor - 1e-6
    if MIN_QUOTA_US < p < 1_000_000:  # 100 us shorter would drop the quota under a tick
        assert fraction * n * (p - 100) < floor


def test_period_refused_when_even_a_second_is_too_short():
    with pytest.raises(TopologyError, match="needs a period over"):
        choose_period_us(0.0005, 1, tick_us=4000)


HYBRID = """\
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def test_layout_hybrid_without_v2_cpu_falls_back_to_v1(tmp_path):
    (tmp_path / "sys/fs/cgroup/unified").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/unified/cgroup.controllers").write_text("\n")
    lay = cgroup_layout(HYBRID, fs_root=tmp_path)
    assert lay.version == 1
    assert lay.cpu == tmp_path / "sys/fs/cgroup/cpu"
    assert lay.cpuset == tmp_path / "sys/fs/cgroup/cpuset"


def test_layout_v2_with_cpu_controller(tmp_path):
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    lay = cgroup_layout("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", fs_root=tmp_path)
    base = tmp_path / "sys/fs/cgroup"
    assert (lay.version, lay.cpu, lay.cpuset, lay.cpuacct) == (2, base, base, base)


def test_v1_cgroup_files_on_a_fake_tree(tmp_path):
    for c in ("cpu", "cpuacct", "cpuset"):
        (tmp_path / "sys/fs/cgroup" / c).mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cpuset/cpuset.cpus").write_text("0-7\n")
    (tmp_path / "sys/fs/cgroup/cpuset/cpuset.mems").write_text("0-1\n")
    lay = cgroup_layout(HYBRID, fs_root=tmp_path)
    share = Share.parse("4-5@25%", NEHALEM, period_us=2000)
    cg = Cgroup("t-r0", lay)
    cg.create((4, 5), share.quota_us(2), share.period_us)
    cpu = Path(cg.dirs["cpu"])
    assert cpu == tmp_path / "sys/fs/cgroup/cpu/shrink/t-r0"
    assert (cpu / "cpu.cfs_period_us").read_text() == "2000"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "1000"
    cs = Path(cg.dirs["cpuset"])
    assert (cs / "cpuset.cpus").read_text() == "4-5"
    assert (cs / "cpuset.mems").read_text() == "0-1"
    assert (cs.parent / "cpuset.cpus").read_text() == "0-7"  # v1 parents start empty
    cg.add(1234)
    assert (cpu / "cgroup.procs").read_text() == "1234"
    assert cg.pids() == [1234]
    assert Cgroup.from_dict(cg.to_dict()).dirs == cg.dirs


def test_v2_cgroup_files_on_a_fake_tree(tmp_path):
    base = tmp_path / "sys/fs/cgroup"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpuset cpu\n")
    lay = cgroup_layout("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", fs_root=tmp_path)
    assert lay.version == 2
    cg = Cgroup("t-r1", lay)
    cg.create((1,), 1000, 2000)
    d = base / "shrink" / "t-r1"
    assert (d / "cpu.max").read_text() == "1000 2000"
    assert (d / "cpuset.cpus").read_text() == "1"
    (d / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 1\n")
    assert cg.usage_s() == 2.5


@pytest.mark.root
def test_real_cgroup_quota_on_this_machine():
    require_root()
    lay = cgroup_layout()
    if lay.cpu is None:
        pytest.skip("no cgroup cpu controller mounted")
    m = discover()
    share = Share.parse(f"{m.all_cpus[0]}@50%", m)
    cg = Cgroup(f"test-{os.getpid()}", lay)
    cg.create(share.cpus, share.quota_us(), share.period_us)
    cpu = Path(cg.dirs["cpu"])
    proc = subprocess.Popen(["sleep", "30"])
    try:
        cg.add(proc.pid)
        assert proc.pid in cg.pids()
        if lay.version == 1:
            assert (cpu / "cpu.cfs_quota_us").read_text().strip() == str(share.quota_us())
            assert (cpu / "cpu.cfs_period_us").read_text().strip() == str(share.period_us)
        else:
            assert (cpu / "cpu.max").read_text().split() == [
                str(share.quota_us()),
                str(share.period_us),
            ]
        if "cpuset" in cg.dirs:
            assert os.sched_getaffinity(proc.pid) == set(share.cpus)
    finally:
        proc.kill()
        proc.wait()
        cg.remove()
    assert not Path(cpu).exists()


def test_the_share_format_is_the_share_type(tmp_path):
    """One definition: the Share and ShareSpeed types are the schema, reader and writer."""
    from shrink.errors import TraceFormatError
    from shrink.loadcurve import LoadCurve
    from shrink.share import SHARE_FORMAT, ShareSpeed

    schema = SHARE_FORMAT.json_schema()["$defs"]
    assert schema["Share"]["properties"]["kind"]["enum"] == ["all", "cores", "cpu_time"]
    assert schema["Share"]["properties"]["cpus"]["items"]["minimum"] == 0
    assert schema["ShareSpeed"]["required"] == ["nominal"]
    speed = ShareSpeed(0.25, effective=0.2, method="calibrated", share_runs=({"seconds": 2.5},))
    s = Share.cpu_time((0, 1), 0.25, period_us=8000).with_speed(speed)
    back = Share.from_dict(s.to_dict())
    assert (back, back.speed) == (s, speed)
    assert s.to_dict()["speed"]["full_target_seconds"] == 0.0  # derived, written for readers
    # A speed written before "share_runs" and "effective" existed still reads.
    old = ShareSpeed.from_dict({"nominal": 0.5, "per_class": {"php": 0.4}})
    assert (old.effective, old.share_runs, old.per_class) == (0.5, (), {"php": 0.4})
    # A curve whose share's speed is not a number is refused in one line naming the field.
    path = LoadCurve(levels=[], share=s).write_json(tmp_path / "curve.json")
    path.write_text(path.read_text().replace('"effective": 0.2', '"effective": "fast"'))
    with pytest.raises(TraceFormatError, match=r"curve\.json: share\.speed\.effective: "):
        LoadCurve.read_json(path)


def test_cgroup_folders_are_not_writable_by_others_whatever_the_umask(tmp_path):
    """Run with umask 000, shrink made its cgroups 0777: any user could make a group in
    one (so ``down`` could not remove it) and run processes of theirs in the share."""
    for c in ("cpu", "cpuacct", "cpuset"):
        (tmp_path / "sys/fs/cgroup" / c).mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cpuset/cpuset.cpus").write_text("0-7\n")
    (tmp_path / "sys/fs/cgroup/cpuset/cpuset.mems").write_text("0\n")
    lay = cgroup_layout(HYBRID, fs_root=tmp_path)
    # A run under umask 000 before this one left the shared parent writable by all.
    (tmp_path / "sys/fs/cgroup/cpu/shrink").mkdir(mode=0o777)
    os.chmod(tmp_path / "sys/fs/cgroup/cpu/shrink", 0o777)
    old = os.umask(0)
    try:
        cg = Cgroup("t-r0", lay)
        cg.create((4, 5), 1000, 2000)
    finally:
        os.umask(old)
    for d in cg.dirs.values():
        for p in (Path(d), Path(d).parent):
            assert stat.S_IMODE(os.stat(p).st_mode) & 0o022 == 0, p


@pytest.mark.root
def test_a_cgroup_another_user_made_at_a_replicas_name_is_not_used(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder owned by another user")
    for c in ("cpu", "cpuacct", "cpuset"):
        (tmp_path / "sys/fs/cgroup" / c).mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cpuset/cpuset.cpus").write_text("0-7\n")
    (tmp_path / "sys/fs/cgroup/cpuset/cpuset.mems").write_text("0\n")
    lay = cgroup_layout(HYBRID, fs_root=tmp_path)
    planted = tmp_path / "sys/fs/cgroup/cpu/shrink/t-r0"
    planted.mkdir(parents=True)
    os.chown(planted, 65534, 65534)  # made by nobody before up
    with pytest.raises(TopologyError, match="not made by shrink"):
        Cgroup("t-r0", lay).create((4, 5), 1000, 2000)
    assert not (planted / "cpu.cfs_quota_us").exists()
