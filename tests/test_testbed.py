"""Testbed pieces that need no live server: config, state, processes, errors, the fake target."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time

import httpx
import pytest
from helpers.testbed import lighttpd_replica, this_process_replica

from shrink import processes as process
from shrink.errors import ParameterError, RecipeError, TestbedError, TopologyError
from shrink.machine import Machine
from shrink.mapping import build_mapping
from shrink.share import Share
from shrink.testbed import ServerSettings, lifecycle
from shrink.testbed.config import ReplicaConfig, render_lighttpd_conf, write_probe
from shrink.testbed.fake import FakeServer
from shrink.testbed.fake_recipe import FakeRecipe
from shrink.testbed.lighttpd import LighttpdPhpCgi
from shrink.testbed.nginx import NginxPhpFpm
from shrink.testbed.recipe import find_tool
from shrink.testbed.state import ReplicaState, TestbedState

TWO_CORE = Machine("two-core", sockets=1, cores_per_socket=2)


def _cfg(tmp_path, mapping="1-replica"):
    r = build_mapping(mapping, TWO_CORE, base_port=8123).replicas[-1]
    return ReplicaConfig(
        replica=r,
        docroot=tmp_path / "doc",
        run_dir=tmp_path / "run",
        socket_path=tmp_path / "run" / "php.sock",
        php_cgi="/usr/bin/php-cgi",
        php_children=2 * len(r.cpus),
        workers=len(r.cpus),
    )


def test_config_has_the_papers_tuning(tmp_path):
    c = _cfg(tmp_path)
    text = render_lighttpd_conf(c)
    assert "server.max-worker = 2" in text  # one worker per core
    assert 'server.event-handler = "linux-sysepoll"' in text
    assert 'server.bind = "127.0.0.1"' in text and "server.port = 8123" in text
    assert f'server.document-root = "{tmp_path / "doc"}"' in text
    assert '"PHP_FCGI_CHILDREN" => "4"' in text and '"PHP_FCGI_MAX_REQUESTS" => "0"' in text
    assert f'"socket" => "{tmp_path / "run" / "php.sock"}"' in text
    assert "server.max-keep-alive-requests" in text and str(c.errorlog) in text


def test_second_replica_binds_its_own_address(tmp_path):
    c = _cfg(tmp_path, "2-replica-direct")
    assert c.replica.address == "127.0.0.2" and c.workers == 1
    assert 'server.bind = "127.0.0.2"' in render_lighttpd_conf(c)


@pytest.mark.live
def test_rendered_config_passes_lighttpd_check(tmp_path):
    # Without lighttpd (make setup as a user lists it as missing) this skips, naming it.
    try:
        lighttpd = find_tool("lighttpd-php-cgi", "lighttpd", hint="apt-get install lighttpd")
    except RecipeError as exc:
        pytest.skip(f"lighttpd is not installed (make setup installs it as root): {exc}")
    c = _cfg(tmp_path)
    (tmp_path / "doc").mkdir()
    write_probe(c)
    r = subprocess.run([lighttpd, "-tt", "-f", str(c.conf_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_state_round_trip(tmp_path):
    rs = lighttpd_replica()
    st = TestbedState([rs], {"kind": "all"}, {"name": "1-replica"}, {}, "doc", {"php": "8"}, "t")
    path = st.write(tmp_path / "s.json")
    d = json.loads(path.read_text())
    assert d["schema"] == "shrink.testbed/1" and d["replicas"][0]["pids"] == [10, 11, 12]
    assert TestbedState.read(path).to_dict() == d
    assert d["server"]["name"] == "lighttpd-php-cgi" and d["replicas"][0]["masters"] == [10]
    # A state written before recipes (lighttpd_pids, php_pids) still reads, and stops.
    old = dict(d["replicas"][0], lighttpd_pids=[10], php_pids=[11, 12])
    del old["processes"], old["masters"]
    back = ReplicaState.from_dict(old)
    assert back.processes == {"lighttpd": [10], "php-cgi": [11, 12]} and back.master_pid == 10
    assert back.role(11) == "php-cgi" and back.role(99) == "server"
    path.write_text("{")
    with pytest.raises(TestbedError, match="not JSON"):
        TestbedState.read(path)
    with pytest.raises(TestbedError, match="was `testbed up` run"):
        TestbedState.read(tmp_path / "none.json")


def test_state_reads_its_share_back_typed_and_writes_it_as_before(tmp_path):
    rs = ReplicaState("r0", "127.0.0.1", 80, [1], [10], {"lighttpd": [10]}, {}, {}, "c", "", "")
    share = Share.parse("1@25%", TWO_CORE)
    held = {"mechanism": "cfs", "groups": ["g"]}
    st = TestbedState([rs], share, {"name": "1-replica"}, {}, "doc", {}, "t", share_enforce=held)
    path = st.write(tmp_path / "s.json")
    # On disk: the Share's own form plus how it is held, as up always wrote it.
    assert json.loads(path.read_text())["share"] == share.to_dict() | {"enforce": held}
    back = TestbedState.read(path)
    assert back.share == share and back.share.quota_us() == share.quota_us()
    assert back.share_enforce == held
    assert back.write(tmp_path / "again.json").read_bytes() == path.read_bytes()
    # A share the Share type cannot hold is refused in one line naming the file.
    d = json.loads(path.read_text())
    d["share"]["kind"] = "half"
    path.write_text(json.dumps(d))
    with pytest.raises(TestbedError, match=r"s\.json: share\.kind: .*'half'"):
        TestbedState.read(path)


def test_process_helpers_on_a_child_we_start(tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    p = process.start_process(["sleep", "30"], cpus=(cpu,), log_path=tmp_path / "log")
    try:
        info = process.proc_info(p.pid)
        assert info is not None and info.comm == "sleep" and info.ppid == os.getpid()
        assert process.allowed_cpus(p.pid) == (cpu,)
        assert p.pid in process.descendants(os.getpid())
        assert not process.is_alive(p.pid, info.starttime + 1)  # a reused PID is not ours
        stopped = process.stop_processes({p.pid: info.starttime})
        assert stopped == [p.pid] and not process.is_alive(p.pid)
    finally:
        p.kill()
        p.wait()
    assert process.proc_info(2**22 + 7) is None


def test_a_stopped_process_is_stopped_without_waiting_out_the_grace_period():
    """A server stopped by SIGSTOP (the php-fpm pool mid-sweep): SIGTERM stayed pending,
    and its testbed took the grace periods (3 s each) to go down, until SIGKILL."""
    import signal

    p = subprocess.Popen(["sleep", "30"])
    try:
        info = process.proc_info(p.pid)
        os.kill(p.pid, signal.SIGSTOP)
        while process.proc_info(p.pid).state != "T":
            time.sleep(0.01)
        start = time.monotonic()
        assert process.stop_processes({p.pid: info.starttime}) == [p.pid]
        assert time.monotonic() - start < 1.5
        assert not process.is_alive(p.pid)
    finally:
        p.kill()
        p.wait()


def test_stop_leaves_alone_a_pid_whose_start_time_differs():
    p = subprocess.Popen(["sleep", "30"])
    try:
        info = process.proc_info(p.pid)
        assert process.stop_processes({p.pid: info.starttime + 99}) == []
        assert process.is_alive(p.pid)
    finally:
        p.kill()
        p.wait()


def test_missing_servers_say_how_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)  # nothing installed anywhere
    with pytest.raises(RecipeError, match=r"lighttpd-php-cgi: lighttpd is not .*apt-get install"):
        LighttpdPhpCgi().versions()
    with pytest.raises(RecipeError, match=r"nginx-php-fpm: nginx is not .*apt-get install nginx"):
        NginxPhpFpm().versions()


def test_one_socket_indirect_is_allowed_with_a_note():
    share = Share.all_of(TWO_CORE)
    m, notes = lifecycle.mapping_for("2-replica-indirect", TWO_CORE, share, 9000)
    assert [r.cpus for r in m.replicas] == [(0,), (1,)]
    assert [r.address for r in m.replicas] == ["127.0.0.1", "127.0.0.2"]
    assert notes and "nominal" in notes[0]
    with pytest.raises(TopologyError, match=r"2 replicas cannot share 1 CPU\b"):
        lifecycle.mapping_for("2-replica-direct", TWO_CORE, Share.parse("0.5", TWO_CORE), 9000)
    # the indirect one, tried as direct on one socket, was said as '2-replica-direct'
    with pytest.raises(TopologyError, match=r"'2-replica-indirect': 2 replicas .* \(share 0\.5"):
        lifecycle.mapping_for("2-replica-indirect", TWO_CORE, Share.parse("0.5", TWO_CORE), 9000)


def test_docroot_must_exist(tmp_path):
    with pytest.raises(TestbedError, match="not a directory"):
        lifecycle.up(tmp_path / "nope", TWO_CORE, Share.all_of(TWO_CORE),
                     state_path=tmp_path / "s.json")  # fmt: skip


def test_port_in_use_is_refused(tmp_path):
    (tmp_path / "doc").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(TestbedError, match=f"port {port} on 127.0.0.1 is in use"):
            lifecycle.up(tmp_path / "doc", TWO_CORE, Share.parse("0.5", TWO_CORE),
                         state_path=tmp_path / "s.json", port=port,
                         server=ServerSettings(FakeRecipe()))  # fmt: skip


def test_cpu_time_share_without_cgroup_permission(tmp_path, monkeypatch):
    (tmp_path / "doc").mkdir()
    monkeypatch.setattr(lifecycle, "can_write_cgroups", lambda layout: False)
    m = Machine("m", sockets=1, cores_per_socket=len(os.sched_getaffinity(0)),
                cpus=(tuple(sorted(os.sched_getaffinity(0))),))  # fmt: skip
    share = Share.parse(f"{m.all_cpus[0]}@50%", m)
    with pytest.raises(TopologyError, match=r"no permission for cgroups.*CPU affinity"):
        lifecycle.up(tmp_path / "doc", m, share, state_path=tmp_path / "s.json", port=0,
                     server=ServerSettings(FakeRecipe()))  # fmt: skip


def test_a_predict_refused_a_cpu_time_share_leaves_no_empty_run_folder(tmp_path, monkeypatch):
    """predict as a user who may make no cgroup, at an alpha of no whole core (auto: a
    CPU-time share), made its -o folder and runs/ in it, then was refused, leaving both
    empty behind."""
    from shrink.providers import TestbedProvider

    (tmp_path / "doc").mkdir()
    monkeypatch.setattr(lifecycle, "can_write_cgroups", lambda layout: False)
    m = Machine("m", sockets=1, cores_per_socket=len(os.sched_getaffinity(0)),
                cpus=(tuple(sorted(os.sched_getaffinity(0))),))  # fmt: skip
    provider = TestbedProvider(tmp_path / "doc", machine=m, run_dir=tmp_path / "out" / "runs")
    share = Share.cpu_time(m.all_cpus[:1], 0.3)
    with (
        pytest.raises(TopologyError, match=r"no permission for cgroups"),
        provider.open(share, "1-replica"),
    ):
        pass
    assert not (tmp_path / "out").exists()


def test_a_predict_writing_inside_the_docroot_is_refused_before_it_makes_a_folder(tmp_path):
    """predict -o doc/p: its testbed's state (doc/p/runs/testbed-0.json) and run logs
    were served to any client; up refused the state only once doc/p and doc/p/runs
    were made (left empty), and named a state file the user never gave."""
    from shrink.providers import TestbedProvider

    (tmp_path / "doc").mkdir()
    with pytest.raises(ParameterError, match=r"output folder .*doc/p/runs: inside the document"):
        TestbedProvider(tmp_path / "doc", run_dir=tmp_path / "doc" / "p" / "runs")
    assert list((tmp_path / "doc").iterdir()) == []
    TestbedProvider(tmp_path / "doc", run_dir=tmp_path / "p" / "runs")  # beside it: fine


def test_cpu_time_share_without_a_mounted_cpu_controller(tmp_path, monkeypatch):
    """In a chroot or container whose /sys/fs/cgroup has no controllers mounted, root
    was told it lacked permission and needed root."""
    from shrink.share import CgroupLayout

    (tmp_path / "doc").mkdir()
    monkeypatch.setattr(lifecycle, "cgroup_layout", lambda: CgroupLayout(1, None, None, None))
    m = Machine("m", sockets=1, cores_per_socket=len(os.sched_getaffinity(0)),
                cpus=(tuple(sorted(os.sched_getaffinity(0))),))  # fmt: skip
    share = Share.parse(f"{m.all_cpus[0]}@50%", m)
    with pytest.raises(TopologyError) as err:
        lifecycle.up(tmp_path / "doc", m, share, state_path=tmp_path / "s.json", port=0,
                     server=ServerSettings(FakeRecipe()))  # fmt: skip
    said = str(err.value)
    assert "no cgroup with the cpu controller is mounted" in said, said
    assert "permission" not in said and "need root" not in said, said
    assert "--share-kind cores" in said, said


def test_fake_target_serves_sizes_and_counts():
    with FakeServer(service_time_s=0.002) as fake, httpx.Client(trust_env=False) as c:
        t0 = time.monotonic()
        r = c.get(f"{fake.url}/app/index.php?bytes=777&work=5")
        assert time.monotonic() - t0 >= 0.002
        assert r.status_code == 200 and len(r.content) == 777
        assert len(c.get(f"{fake.url}/static/x.gif").content) == 100
        assert fake.requests == 2 and fake.paths[1] == "/static/x.gif"


def test_up_refuses_to_overwrite_a_running_testbed(tmp_path):
    (tmp_path / "doc").mkdir()
    rs = this_process_replica()
    state = TestbedState([rs], {}, {}, {}, "doc", {}, "t").write(tmp_path / "s.json")
    with pytest.raises(TestbedError, match=r"still runs .* testbed down --state"):
        lifecycle.up(tmp_path / "doc", TWO_CORE, Share.all_of(TWO_CORE), state_path=state)


def test_health_check_names_the_problem():
    from shrink.testbed import health

    with FakeServer() as fake:
        problem = health.check(fake.address, fake.port)
        assert problem is not None and "HTTP 200 'xxx" in problem  # not our probe's answer
        with pytest.raises(TestbedError, match=r"did not answer within 0\.2 s"):
            health.wait_healthy(fake.address, fake.port, timeout_s=0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert "ConnectError" in health.check("127.0.0.1", port)
    with pytest.raises(TestbedError, match="exited before answering"):
        health.wait_healthy("127.0.0.1", port, timeout_s=5, still_running=lambda: False)


def test_cgroup_permission_error_says_what_works_without_root(tmp_path, monkeypatch):
    from shrink.enforce import cfs as share_mod

    lay = share_mod.CgroupLayout(1, tmp_path / "cpu", None, None)
    (tmp_path / "cpu").mkdir()

    def refuse(path, value, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(share_mod, "_write", refuse)
    cg = share_mod.Cgroup("t", lay)
    with pytest.raises(TopologyError, match=r"need root .* core shares .* CPU affinity"):
        cg.create((0,), 4000, 8000)
    assert not (tmp_path / "cpu" / "shrink" / "t").exists()  # nothing half-made is left


def test_the_down_command_shown_quotes_the_state_path(tmp_path, capsys):
    # "stop with: shrink testbed down --state x.json; touch y", pasted back, ran touch.
    from shrink.cli.testbed_cmd import _print_up

    (tmp_path / "doc").mkdir()
    rs = this_process_replica()
    path = tmp_path / "a b.json; touch y"
    st = TestbedState([rs], {}, {"name": "1-replica"}, {}, "doc", {}, "t")
    state = st.write(path)
    with pytest.raises(TestbedError, match=r"--state '.*/a b\.json; touch y'"):
        lifecycle.up(tmp_path / "doc", TWO_CORE, Share.all_of(TWO_CORE), state_path=state)
    _print_up(st, TWO_CORE, Share.all_of(TWO_CORE), state)
    assert f"--state '{state}'" in capsys.readouterr().out


def test_the_chmod_shown_for_an_unreadable_docroot_quotes_its_path(passable_tmp):
    from shrink.testbed.private import ServerUser, check_reachable

    doc = passable_tmp / "my site; x"
    doc.mkdir(mode=0o700)
    nobody = ServerUser("nobody", "nogroup", 65534, 65534)
    with pytest.raises(TestbedError, match=r"chmod o\+rx '.*/my site; x'"):
        check_reachable(doc, nobody)
