"""shrink.enforce: the mechanisms of a CPU-time share behind one protocol."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
from conftest import require_lighttpd, require_root
from helpers.testbed import write_docroot

from shrink import processes as process
from shrink.enforce import Enforcer, enforcer_from_dict, make_enforcer
from shrink.enforce.cfs import CfsQuota, CgroupLayout
from shrink.enforce.corunner import CoRunner, build_helper
from shrink.enforce.fake import FakeEnforcer
from shrink.errors import TopologyError


def _v1(tmp_path: Path) -> CgroupLayout:
    for c in ("cpu", "cpuacct", "cpuset"):
        (tmp_path / c).mkdir()
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    return CgroupLayout(1, tmp_path / "cpu", tmp_path / "cpuset", tmp_path / "cpuacct")


def test_every_mechanism_and_the_fake_keep_the_protocol(tmp_path):
    lay = _v1(tmp_path)
    for enf in (
        make_enforcer("cfs", name="a", cpu_fraction=0.25, period_us=16000, layout=lay),
        make_enforcer("corunner", name="b", cpu_fraction=0.25, period_us=16000, layout=None),
        FakeEnforcer(0.25),
    ):
        assert isinstance(enf, Enforcer)
        assert _round_trip(enf).describe() == enf.describe()


def _round_trip(enf: Enforcer) -> Enforcer:
    return enforcer_from_dict(enf.to_dict())


def test_cfs_writes_the_quota_for_the_replicas_cpus(tmp_path):
    lay = _v1(tmp_path)
    enf = make_enforcer("cfs", name="r0", cpu_fraction=0.25, period_us=16000, layout=lay)
    enf.start((1,))
    group = tmp_path / "cpu" / "shrink" / "r0"
    assert (group / "cpu.cfs_quota_us").read_text() == "4000"
    assert (group / "cpu.cfs_period_us").read_text() == "16000"
    assert (tmp_path / "cpuset" / "shrink" / "r0" / "cpuset.cpus").read_text() == "1"
    assert enf.describe() == {
        "mechanism": "cfs",
        "cpu_fraction": 0.25,
        "quota_us": 4000,
        "period_us": 16000,
    }
    back = enforcer_from_dict(enf.to_dict())
    assert isinstance(back, CfsQuota) and back.cgroup.dirs == enf.cgroup.dirs


def test_a_core_share_gets_a_group_without_a_quota(tmp_path):
    lay = _v1(tmp_path)
    for mech in ("cfs", "corunner"):
        enf = make_enforcer(mech, name=mech, cpu_fraction=1.0, period_us=None, layout=lay)
        enf.start((0, 1))
        assert isinstance(enf, CfsQuota) and enf.describe()["mechanism"] == "none"
        assert not (tmp_path / "cpu" / "shrink" / mech).exists()


def test_bad_choices_are_refused_with_what_works():
    with pytest.raises(TopologyError, match=r"enforce == 'deadline', must be one of cfs, corunner"):
        make_enforcer("deadline", name="x", cpu_fraction=0.25, period_us=16000, layout=None)
    with pytest.raises(TopologyError, match=r"needs cgroups .* corunner needs only root"):
        make_enforcer("cfs", name="x", cpu_fraction=0.25, period_us=16000, layout=None)
    with pytest.raises(TopologyError, match=r"cpu_fraction == 0.02: .* at most 95%"):
        CoRunner("x", None, cpu_fraction=0.02)


def test_corunner_spins_the_rest_of_each_period():
    c = CoRunner("x", None, cpu_fraction=0.25)
    assert (c.period_us, c.spin_us) == (1000, 750)
    c.cpus, c.spinners = (1,), {123: 456}
    back = CoRunner.from_dict(c.to_dict())
    assert (back.cpus, back.spinners, back.spin_us) == ((1,), {123: 456}, 750)


def test_a_state_file_from_before_the_mechanisms_reads_as_cfs():
    from shrink.testbed.state import ReplicaState
    from shrink.testbed.teardown import enforcer_of

    r = ReplicaState("r0", "127.0.0.1", 1, [1], 1, [1], [], {}, {}, "", "", "")
    assert enforcer_of(r) is None
    r.cgroup = {"name": "g", "version": 1, "dirs": {"cpu": "/nonexistent/g"}}
    assert isinstance(enforcer_of(r), CfsQuota)


def _each_spinner(test):  # type: ignore[no-untyped-def]
    """``test`` run with the C co-runner and the Python one: root, SCHED_FIFO, CPU 1."""
    for mark in (
        pytest.mark.parametrize("helper", ["c", "python"]),
        pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root"),
        pytest.mark.skipif(os.cpu_count() is None or os.cpu_count() < 2, reason="needs CPU 1"),
        pytest.mark.root,
    ):
        test = mark(test)
    return test


def _use_spinner(helper: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if helper == "c" and build_helper() is None:
        pytest.skip("no C compiler: only the Python co-runner here")
    if helper == "python":
        monkeypatch.setattr("shrink.enforce.corunner.build_helper", lambda: None)


@_each_spinner
def test_corunner_takes_its_part_of_the_cpu_and_stops(helper, monkeypatch):
    _use_spinner(helper, monkeypatch)
    c = CoRunner("x", None, cpu_fraction=0.25)
    c.start((1,))
    c.add([os.getpid()])
    try:
        assert c.helper == helper
        (pid,) = c.spinners
        time.sleep(0.3)  # the Python one starts its interpreter first
        before = process.proc_info(pid)
        time.sleep(1.0)
        after = process.proc_info(pid)
        assert before is not None and after is not None
        used = (after.utime + after.stime - before.utime - before.stime) / os.sysconf("SC_CLK_TCK")
        # 0.75 s of every second; a busy host may delay its wake-ups, never add to them
        assert 0.5 < used < 0.85, used
        assert os.sched_getscheduler(pid) == os.SCHED_FIFO
    finally:
        c.stop()
    assert not process.is_alive(pid)


@_each_spinner
def test_corunner_ends_when_the_server_is_a_zombie(helper, monkeypatch):
    """A server killed while its parent did not reap it (``up`` killed between starting
    the co-runner and recording it: init reaps the orphan 1.2-1.5 s late) passes
    ``kill(pid, 0)``: the co-runner spun on for that long after ``down``."""
    _use_spinner(helper, monkeypatch)
    server = subprocess.Popen(["sleep", "30"])
    c = CoRunner("x", None, cpu_fraction=0.5)
    c.start((1,))
    c.add([server.pid])
    try:
        (pid,) = c.spinners
        time.sleep(0.3)  # the Python one starts its interpreter first
        assert process.is_alive(pid)
        server.kill()  # a zombie until waited for, below
        deadline = time.monotonic() + 1.0
        while process.is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert Path(f"/proc/{server.pid}/stat").read_text().split(") ")[1][0] == "Z"
        assert not process.is_alive(pid)  # within a second: it looks every ~100 ms
    finally:
        c.stop()
        server.wait()


@_each_spinner
def test_corunner_ends_when_another_process_has_the_servers_number(helper, monkeypatch):
    """A server that ended and whose PID another process took passed ``kill(pid, 0)``
    and the zombie check: the co-runner spun on, at SCHED_FIFO, until ``down``. It is
    given the server's start time, and a process under that number that started at
    another time is not the server (a wrong start time stands for the reuse here)."""
    _use_spinner(helper, monkeypatch)
    server = subprocess.Popen(["sleep", "30"])
    c = CoRunner("x", None, cpu_fraction=0.9)
    c.start((1,))
    c.add([server.pid])
    try:
        (pid,) = c.spinners
        info = process.proc_info(server.pid)
        assert info is not None
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        assert argv[-2:] == [str(server.pid).encode(), str(info.starttime).encode()]
        time.sleep(0.5)
        assert process.is_alive(pid)  # the server's own start time: it watches on
        other = subprocess.Popen(
            [*(x.decode() for x in argv[:-1]), str(info.starttime + 1)], start_new_session=True
        )
        try:
            other.wait(timeout=5.0)  # it looks every ~100 ms (the Python one starts first)
        finally:
            if other.poll() is None:
                other.kill()
                other.wait()
                raise AssertionError("the co-runner spun on for another process")
        assert other.returncode == 0
    finally:
        c.stop()
        server.kill()
        server.wait()


def _live_docroot(tmp_path: Path) -> Path:
    require_lighttpd()
    return write_docroot(tmp_path, '<?php echo "page";\n')


@pytest.mark.live
@pytest.mark.root
def test_testbed_with_a_corunner_records_it_and_down_stops_it(tmp_path):
    from shrink.share import Share
    from shrink.testbed import ServerSettings, down, up
    from shrink.topology import discover

    require_root()
    m = discover()
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs CPU 1 apart from the test's own")
    state = tmp_path / "tb.json"
    st = up(
        _live_docroot(tmp_path),
        m,
        Share.parse("1@25%", m),
        state_path=state,
        port=0,
        server=ServerSettings(enforce="corunner"),
    )
    rec = st.replicas[0].enforce
    try:
        assert st.to_dict()["share"]["enforce"]["mechanism"] == "corunner"
        assert rec is not None and rec["spin_us"] == 750
        (spinner,) = (int(p) for p in rec["spinners"])
        assert os.sched_getaffinity(spinner) == {1}
    finally:
        down(state)
    assert not process.is_alive(spinner)
    assert not any(process.is_alive(p) for p in st.replicas[0].pids)


@pytest.mark.live
@pytest.mark.root
def test_a_refused_enforcer_leaves_no_server_behind(tmp_path, monkeypatch):
    from shrink import processes as proc
    from shrink.share import Share
    from shrink.testbed import ServerSettings, up
    from shrink.topology import discover

    require_root()
    m = discover()
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs CPU 1 apart from the test's own")

    def refuse(self, watch):
        raise TopologyError("the co-runner on CPU 1 exited (no SCHED_FIFO)")

    monkeypatch.setattr(CoRunner, "_spawn", refuse)
    before = {p for p in map(int, filter(str.isdigit, os.listdir("/proc")))}
    with pytest.raises(TopologyError, match="co-runner"):
        up(
            _live_docroot(tmp_path),
            m,
            Share.parse("1@25%", m),
            state_path=tmp_path / "s.json",
            port=0,
            server=ServerSettings(enforce="corunner"),
        )
    born = [p for p in proc.descendants(os.getpid()) if p not in before]
    assert not [p for p in born if proc.is_alive(p)]
    assert not (tmp_path / "s.json").exists()


def test_cli_refuses_an_unknown_mechanism_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    (tmp_path / "doc").mkdir()
    r = CliRunner().invoke(
        app,
        [
            "testbed",
            "up",
            "--docroot",
            str(tmp_path / "doc"),
            "--state",
            str(tmp_path / "s.json"),
            "--share",
            "1@25%",
            "--enforce",
            "deadline",
        ],
    )
    assert r.exit_code == 1
    assert "enforce == 'deadline', must be one of cfs, corunner" in r.output
    assert "Traceback" not in r.output


def _plant_helper(cache: Path) -> Path:
    from shrink.enforce.corunner import _helper_path

    helper = _helper_path()
    assert helper.parent == cache / "shrink"
    helper.parent.mkdir(parents=True, exist_ok=True)
    helper.write_text("#!/bin/sh\necho planted\n")
    helper.chmod(0o755)
    return helper


def test_a_co_runner_in_a_folder_others_may_write_is_not_run(tmp_path, monkeypatch):
    """The helper runs as root from a folder the environment names: one planted where
    another user may write (a shared cache, XDG_CACHE_HOME kept by su) is not used."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    helper = _plant_helper(cache)
    os.chmod(helper.parent, 0o777)  # anyone could have put it there
    assert build_helper() is None
    os.chmod(helper.parent, 0o755)
    os.chmod(helper, 0o777)  # anyone could have rewritten it
    assert build_helper() is None
    os.chmod(helper, 0o755)
    assert build_helper() == helper  # this user's own, in its own folder: run


def test_no_folder_is_made_in_a_cache_folder_another_user_owns(tmp_path, monkeypatch):
    """XDG_CACHE_HOME naming another user's world-writable folder: the helper was not
    run, but root had made its folder there first."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder another user owns")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: no folder is made anyway")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    os.chmod(theirs, 0o1777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(theirs))
    assert build_helper() is None
    assert list(theirs.iterdir()) == []


def test_the_co_runner_is_built_for_no_one_else_to_write_whatever_the_umask(tmp_path, monkeypatch):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old = os.umask(0)
    try:
        helper = build_helper()
    finally:
        os.umask(old)
    assert helper is not None
    for p in (helper, helper.parent, helper.parent.parent):
        assert stat.S_IMODE(os.stat(p).st_mode) & 0o022 == 0, p
