"""The testbed, run as root, trusts nothing it did not make: a recipe's health URL
stays on loopback, state files name only shrink's own cgroups and processes,
config values cannot break out of their quotes, run dirs are private, and two
``testbed up`` runs never share one."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers.resolver import resolving_localhost_to
from helpers.testbed import as_root_with

from shrink import processes as process
from shrink.enforce.cfs import cgroup_mounts
from shrink.errors import ParameterError, RecipeError, StateError, TestbedError, WriteError
from shrink.mapping import build_mapping
from shrink.share import Share
from shrink.testbed import ServerSettings, down, up
from shrink.testbed.command import CommandRecipe
from shrink.testbed.config import ReplicaConfig, render_lighttpd_conf, render_php_limits
from shrink.testbed.fake_recipe import FakeRecipe
from shrink.testbed.nginx import render_fpm_conf, render_nginx_conf
from shrink.testbed.recipe import ReplicaContext, stop_replica
from shrink.testbed.state import ReplicaState, TestbedState
from shrink.topology import discover


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://{address}:{port}@10.0.0.1/",
        "http://{address}@10.0.0.1:{port}/",
        "http://example.com:{port}/",
        "http://[::ffff:10.0.0.1]/",
    ],
)
def test_a_health_url_off_loopback_is_refused_by_parsing_alone(tmp_path, url):
    f = tmp_path / "r.toml"
    f.write_text(f'commands = [["srv"]]\nhealth_url = "{url}"\n')
    with pytest.raises(RecipeError) as err:
        CommandRecipe.read(f)
    msg = str(err.value)
    assert msg.startswith(f"recipe {f}: health_url: ") and "\n" not in msg


def test_a_health_url_on_a_localhost_that_does_not_resolve_says_so(tmp_path, monkeypatch):
    # Where no /etc/hosts names localhost, the recipe was refused as "host 'localhost'
    # is not a loopback address", which reads as a rule against localhost.
    resolving_localhost_to(monkeypatch)
    f = tmp_path / "r.toml"
    f.write_text('commands = [["srv"]]\nhealth_url = "http://localhost:{port}/"\n')
    with pytest.raises(RecipeError) as err:
        CommandRecipe.read(f)
    assert "localhost does not resolve here" in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "url", ["http://{address}:{port}/", "http://127.0.0.1:{port}/ok", "http://localhost:{port}/"]
)
def test_a_loopback_health_url_is_accepted(tmp_path, url, monkeypatch):
    resolving_localhost_to(monkeypatch, "::1", "127.0.0.1")  # a chroot may have no /etc/hosts
    f = tmp_path / "r.toml"
    f.write_text(f'commands = [["srv"]]\nhealth_url = "{url}"\n')
    assert CommandRecipe.read(f).health_url == url


def test_a_health_url_filled_in_off_loopback_is_never_probed():
    r = CommandRecipe(name="r", source="r.toml", commands=[["srv"]])
    assert "not a loopback address, not probed" in (r.health("10.0.0.1", 80) or "")


# -- state files, run dirs and config values (item 3) ----------------------------------


def _state_with(tmp_path, **replica) -> Path:
    rs = ReplicaState(
        name="r0", address="127.0.0.1", port=80, cpus=[0], masters=[1],
        processes={"lighttpd": [1]}, starttimes={}, pinned={}, config="c", errorlog="e",
        run_dir="d",
    )  # fmt: skip
    d = TestbedState([rs], {}, {"name": "1-replica"}, {}, "doc", {}, "t").to_dict()
    d["replicas"][0].update(replica)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(d))
    return path


@pytest.mark.parametrize(
    "dirs",
    [
        {"cpu": "/etc"},
        {"cpu": "/sys/fs/cgroup/cpu/user.slice"},
        {"cpu": "/sys/fs/cgroup/cpu/shrink/../user.slice"},
        {"cpu": "/tmp/shrink/g"},
    ],
)
def test_a_state_naming_a_cgroup_outside_shrinks_hierarchy_is_refused(tmp_path, dirs):
    name = Path(dirs["cpu"]).name
    path = _state_with(tmp_path, cgroup={"name": name, "version": 1, "dirs": dirs})
    with pytest.raises(StateError) as err:
        TestbedState.read(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(StateError):
        down(path)  # not the damaged-file fallback: nothing it names is touched


@pytest.mark.root
def test_down_leaves_a_process_in_another_cgroup_alive(tmp_path):
    """A state file naming another cgroup: ``down`` refuses and kills nothing in it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a cgroup")
    mounts = sorted(m for m in cgroup_mounts() if (m / "cgroup.procs").exists())
    victim = None
    for m in mounts:
        with contextlib.suppress(OSError):
            (m / f"shrink-test-victim-{os.getpid()}").mkdir()
            victim = m / f"shrink-test-victim-{os.getpid()}"
            break
    if victim is None:
        pytest.skip("cannot make a cgroup here")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (victim / "cgroup.procs").write_text(str(sleeper.pid))
        start = process.proc_info(sleeper.pid).starttime
        path = _state_with(
            tmp_path,
            processes={"lighttpd": [sleeper.pid]},
            masters=[sleeper.pid],
            starttimes={str(sleeper.pid): start},
            cgroup={"name": victim.name, "version": 1, "dirs": {"cpu": str(victim)}},
        )
        with pytest.raises(StateError, match="outside shrink's own hierarchy"):
            down(path)
        time.sleep(0.2)
        assert process.is_alive(sleeper.pid, start) and victim.is_dir()
    finally:
        sleeper.kill()
        sleeper.wait()
        time.sleep(0.1)
        with contextlib.suppress(OSError):  # the old code removed it itself
            victim.rmdir()


def test_a_recorded_pid_is_signalled_only_if_start_time_and_program_match():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        info = process.proc_info(sleeper.pid)
        exe = process.exe_of(sleeper.pid)

        def replica(starttimes, exes):
            return ReplicaState(
                name="r0", address="127.0.0.1", port=80, cpus=[0], masters=[sleeper.pid],
                processes={"server": [sleeper.pid]}, starttimes=starttimes, pinned={},
                config="c", errorlog="e", run_dir="", exes=exes,
            )  # fmt: skip

        # No start time recorded (a hand-written state file): never signalled.
        assert stop_replica(replica({}, {})) == []
        # The same PID and start time but another program: not ours either.
        assert stop_replica(replica({sleeper.pid: info.starttime}, {sleeper.pid: "/x"})) == []
        assert process.is_alive(sleeper.pid, info.starttime)
        # What up recorded, both matching: stopped.
        got = stop_replica(replica({sleeper.pid: info.starttime}, {sleeper.pid: exe}))
        assert got == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_run_dirs_are_private_fresh_and_removed_by_down(tmp_path, monkeypatch, machine):
    """The run dir is no longer beside the state, nor at a predictable /tmp/shrink-<sha1>:
    a symlink planted there (to a folder another user owns) is never followed."""
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # long: the old code put sockets in /tmp
    deep.mkdir(parents=True)
    state = deep / "s.json"
    old_run = state.with_name("s.run")
    tag = hashlib.sha1(str(old_run).encode()).hexdigest()[:10]
    planted = Path(tempfile.gettempdir()) / f"shrink-{tag}"
    nobody = tmp_path / "nobody"
    nobody.mkdir()
    planted.symlink_to(nobody)
    try:
        st = up(tmp_path / "doc", machine, Share.all_of(machine), "2-replica-direct",
                state_path=state, port=0, server=ServerSettings(FakeRecipe()))  # fmt: skip
        try:
            assert list(nobody.iterdir()) == [] and not old_run.exists()
            roots = {Path(r.run_dir).parent for r in st.replicas}
            assert len(roots) == 1
            root = roots.pop()
            assert root.parent == (tmp_path / "runs").resolve()
            assert stat.S_IMODE(os.stat(tmp_path / "runs").st_mode) & 0o066 == 0
            assert stat.S_IMODE(os.stat(root).st_mode) & 0o066 == 0
        finally:
            down(state)
        assert not root.exists()
    finally:
        planted.unlink()


# "\udcff": a name's byte 0xff (not UTF-8) was an internal error (UnicodeEncodeError)
# where php-cgi's ini or lighttpd.conf was written, testbed up exit 70
@pytest.mark.parametrize(
    "bad", [";}location / {alias /;}", 'a"b', "a\nb", "$document_root", "\udcff"]
)
def test_a_path_that_would_break_a_server_config_is_refused(tmp_path, bad):
    rep = build_mapping("1-replica", discover(), (0,), base_port=8123).replicas[0]
    odd = tmp_path / f"x{bad}y"
    ctx = ReplicaContext(rep, tmp_path, tmp_path, odd, 1, 5.0, spawn=None)  # type: ignore[arg-type]
    for render in (
        lambda: render_nginx_conf(ctx, odd / "php-fpm.sock", tmp_path / "probe"),
        lambda: render_fpm_conf(ctx, odd / "php-fpm.sock", 1),
        lambda: render_lighttpd_conf(
            ReplicaConfig(rep, odd, tmp_path, tmp_path / "php.sock", "php-cgi", 1, 1)
        ),
        lambda: render_php_limits(
            ReplicaConfig(rep, odd, tmp_path, tmp_path / "php.sock", "php-cgi", 1, 1)
        ),
    ):
        with pytest.raises(TestbedError) as err:
            render()
        assert "cannot be written into a server config" in str(err.value)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("server", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_a_docroot_its_config_cannot_hold_is_refused_before_any_work(tmp_path, monkeypatch, server):
    """A document root named with a byte that is not UTF-8 was refused only where its
    config was written: after the servers' versions were run, the run folders and the
    share's cgroups were made. It is now a refused --docroot (exit 2) before any of it."""
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.testbed import lifecycle

    def no_work(*a, **kw):
        raise AssertionError("work done for a docroot that is refused")

    monkeypatch.setattr(lifecycle, "UpLock", no_work)  # (held before the versions are run)
    monkeypatch.setattr(lifecycle, "mapping_for", no_work)
    monkeypatch.setattr(lifecycle, "new_run_root", no_work)
    root = Path(os.fsdecode(bytes(tmp_path) + b"/d\xff"))
    root.mkdir()
    r = CliRunner().invoke(app, ["testbed", "up", "--docroot", str(root), "--server", server,
                                 "--state", str(tmp_path / "tb.json"), "--port", "0"])  # fmt: skip
    assert r.exit_code == 2, r.output
    said = " ".join(r.output.split())
    assert "--docroot" in said and "holds the byte b'\\xff' (not UTF-8)" in said, said
    with pytest.raises(TestbedError, match="not UTF-8"):  # the library, as the CLI
        up(root, discover(), Share.parse("1", discover()), state_path=tmp_path / "s.json",
           server=ServerSettings(server), port=0)  # fmt: skip


def test_a_path_with_a_space_is_quoted(tmp_path):
    rep = build_mapping("1-replica", discover(), (0,), base_port=8123).replicas[0]
    spaced = tmp_path / "a b"
    ctx = ReplicaContext(rep, spaced, tmp_path, spaced, 1, 5.0, spawn=None)  # type: ignore[arg-type]
    conf = render_nginx_conf(ctx, spaced / "php-fpm.sock", tmp_path / "probe")
    assert f'fastcgi_pass "unix:{spaced}/php-fpm.sock";' in conf
    assert f'root "{spaced}";' in conf


# -- one up per state file, a warning for another testbed on the same CPUs (item 14) ----


class _SlowFake(FakeRecipe):
    def start(self, ctx):
        time.sleep(1.5)
        return super().start(ctx)


def test_a_second_up_on_the_same_state_fails_at_once_naming_the_first(
    tmp_path, monkeypatch, machine
):
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    state = tmp_path / "s.json"
    first: dict[str, object] = {}

    def run_first():
        try:
            first["state"] = up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state,
                                port=0, server=ServerSettings(_SlowFake()))  # fmt: skip
        except BaseException as exc:  # reported by the assert below
            first["error"] = exc

    t = threading.Thread(target=run_first)
    t.start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        with pytest.raises(TestbedError) as err:
            up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
               server=ServerSettings(FakeRecipe()))  # fmt: skip
        assert time.monotonic() - t0 < 1.0  # at once, not after a start-up timeout
        msg = str(err.value)
        assert str(state) in msg and f"PID {os.getpid()}" in msg and "\n" not in msg
    finally:
        t.join()
        if state.exists():
            down(state)
    assert "error" not in first and len(first["state"].replicas) == 1  # type: ignore[union-attr]


def test_another_testbed_on_the_same_cpus_is_warned_about(tmp_path, monkeypatch, machine):
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    share = Share.all_of(machine)
    fake_a, fake_b = ServerSettings(FakeRecipe()), ServerSettings(FakeRecipe())
    st_a = up(tmp_path / "doc", machine, share, state_path=a, port=0, server=fake_a)
    try:
        assert not [n for n in st_a.notes if n.startswith("warning:")]
        st_b = up(tmp_path / "doc", machine, share, state_path=b, port=0, server=fake_b)
        try:
            warned = [n for n in st_b.notes if n.startswith("warning:")]
            assert len(warned) == 1 and str(a.resolve()) in warned[0], st_b.notes
        finally:
            down(b)
    finally:
        down(a)


# -- servers without root (item 2) -------------------------------------------------------

WHOAMI_PHP = (
    '<?php echo function_exists("posix_geteuid") ? posix_geteuid() : '
    "preg_replace('/.*\\nUid:\\s+\\d+\\s+(\\d+).*/s', '$1', "
    'file_get_contents("/proc/self/status"));\n'
)


def _euid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    raise AssertionError(f"no Uid line for PID {pid}")


@pytest.mark.live
@pytest.mark.root
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_the_servers_run_without_root_and_follow_no_symlink_out(
    tmp_path, machine, recipe, monkeypatch
):
    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    doc = tmp_path / "doc"
    doc.mkdir()
    (doc / "whoami.php").write_text(WHOAMI_PHP)
    (doc / "fs").symlink_to("/")  # a page someone planted: the whole file system
    state = tmp_path / "s.json"
    server = ServerSettings(recipe)
    st = up(doc, machine, Share.all_of(machine), state_path=state, port=0, server=server)
    try:
        r = st.replicas[0]
        pids = [p for p in r.pids if process.is_alive(p)]
        assert pids and all(_euid(p) != 0 for p in pids), {p: _euid(p) for p in pids}
        base = f"http://{r.address}:{r.port}"
        with httpx.Client(trust_env=False, timeout=5) as c:
            who = c.get(f"{base}/whoami.php")
            assert who.status_code == 200 and who.text.strip().isdigit()
            assert who.text.strip() != "0"
            for path in ("/fs/etc/shadow", "/fs/etc/passwd"):
                assert c.get(base + path).status_code != 200, path
        # The configs and the run dir are root's, not writable by the server user.
        for f in (Path(r.config), Path(r.run_dir)):
            s = os.stat(f)
            assert s.st_uid == 0 and not s.st_mode & 0o022, f
    finally:
        down(state)


def test_a_docroot_that_is_the_whole_file_system_is_refused(tmp_path, machine):
    (tmp_path / "doc").symlink_to("/")
    with pytest.raises(TestbedError, match="the whole file system"):
        up(tmp_path / "doc", machine, Share.all_of(machine), state_path=tmp_path / "s.json",
           port=0, server=ServerSettings(FakeRecipe()))  # fmt: skip


@pytest.mark.parametrize("where", ["inside", "below", "through a link", "docroot a link"])
def test_a_state_inside_the_docroot_is_refused_before_anything_starts(
    tmp_path, monkeypatch, machine, where
):
    """``testbed up --state doc/tb.json``: the servers served the state to any client
    (``GET /tb.json``: 200, with the testbed's PIDs, cgroups and run folder)."""
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    real = tmp_path / "doc"
    real.mkdir()
    docroot = real
    state = {"inside": real / "tb.json", "below": real / "new" / "tb.json"}.get(where)
    if where == "through a link":
        (tmp_path / "elsewhere").symlink_to(real)
        state = tmp_path / "elsewhere" / "tb.json"
    if where == "docroot a link":
        docroot = tmp_path / "www"
        docroot.symlink_to(real)
        state = real / "tb.json"
    try:
        with pytest.raises(ParameterError, match=r"inside the document root .*put it outside"):
            up(docroot, machine, Share.all_of(machine), state_path=state, port=0,
               server=ServerSettings(FakeRecipe()))  # fmt: skip
    finally:
        if state.exists():
            down(state)
    assert sorted(p.name for p in real.iterdir()) == []  # no state, no folder made
    assert not list((tmp_path / "runs").glob("up-*"))


def test_a_private_folder_inside_the_docroot_is_refused_before_anything_starts(
    tmp_path, monkeypatch, machine
):
    """``SHRINK_RUN_DIR=doc/run testbed up --docroot doc``: the run root was made in the
    docroot, and ``GET /run/up-tb-XXXXXXXX/r0/lighttpd.conf`` was 200 (its stdout.log
    too)."""
    real = tmp_path / "doc"
    real.mkdir()
    monkeypatch.setenv("SHRINK_RUN_DIR", str(real / "run"))
    state = tmp_path / "tb.json"
    try:
        with pytest.raises(ParameterError, match=r"private folder .*inside the document root"):
            up(real, machine, Share.all_of(machine), state_path=state, port=0,
               server=ServerSettings(FakeRecipe()))  # fmt: skip
    finally:
        if state.exists():
            down(state)
    assert sorted(p.name for p in real.iterdir()) == []  # no private folder made


@pytest.mark.root
@pytest.mark.parametrize("where", ["www", "www/all d"])
def test_a_docroot_that_is_or_holds_a_bind_mount_of_the_whole_file_system_is_refused(
    tmp_path, machine, where
):
    """``mount --bind / www`` (or ``www/all d``): up served the whole file system (``GET
    /etc/passwd``: 200), as only a docroot that resolved to ``/`` itself was refused."""
    www = tmp_path / "www"
    point = tmp_path / where
    point.mkdir(parents=True)
    if subprocess.run(["mount", "--bind", "/", str(point)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    said = "the whole file system" if point == www else "all d, inside it, is the whole file"
    try:
        with pytest.raises(TestbedError, match=said):
            up(www, machine, Share.all_of(machine), state_path=tmp_path / "s.json",
               port=0, server=ServerSettings(FakeRecipe()))  # fmt: skip
    finally:
        subprocess.run(["umount", str(point)], check=True)
        if (tmp_path / "s.json").exists():
            down(tmp_path / "s.json")


@pytest.mark.root
@pytest.mark.parametrize(
    ("mount", "said"),
    [
        (["--bind", "/etc"], "a system folder (a mount of /etc)"),
        (["--bind", "/var/tmp"], "a system folder (a mount of /var/tmp)"),
        (["-t", "proc", "proc"], "a system folder (proc, a kernel file system)"),
    ],
    ids=["etc", "var-tmp", "proc"],
)
def test_a_docroot_holding_a_mount_of_a_system_folder_is_refused(tmp_path, mount, said):
    """``mount --bind /etc www/etcb``: ``GET /etcb/passwd`` was 200 (only a mount of ``/``
    was refused); /var/tmp holds other testbeds' state, /proc every command line."""
    from shrink.testbed.lifecycle import check_docroot

    www = tmp_path / "www"
    point = www / "sys x"
    point.mkdir(parents=True)
    if subprocess.run(["mount", *mount, str(point)], capture_output=True).returncode:
        pytest.skip("cannot mount here")
    try:
        with pytest.raises(TestbedError, match=re.escape(f"sys x, inside it, is {said}")):
            check_docroot(www)
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert check_docroot(www) == www  # (a plain folder: served)


@pytest.mark.root
@pytest.mark.parametrize("bound", ["docroot", "its folder", "into it"])
def test_a_state_reached_from_the_docroot_through_a_bind_mount_is_refused(tmp_path, bound):
    """``mount --bind doc docb; testbed up --docroot doc --state docb/tb.json``: the state
    was written in doc and ``GET /tb.json`` was 200 (3,459 bytes), as the paths were
    compared resolved, and a bind mount is no symlink. The same for a bind of a folder
    of the docroot made elsewhere, and for a folder bound into the docroot."""
    from shrink.testbed.lifecycle import refuse_served

    doc, outside = tmp_path / "doc", tmp_path / "outside"
    (doc / "sub").mkdir(parents=True)
    outside.mkdir()
    source, point = {
        "docroot": (doc, outside),
        "its folder": (doc / "sub", outside),
        "into it": (outside, doc / "sub"),
    }[bound]
    if subprocess.run(["mount", "--bind", str(source), str(point)]).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        with pytest.raises(ParameterError, match=r"inside the document root .* through a mount"):
            refuse_served(outside / "tb.json", doc, "state", "its PIDs")
        refuse_served(tmp_path / "tb.json", doc, "state", "its PIDs")  # (beside it: fine)
    finally:
        subprocess.run(["umount", str(point)], check=True)
    refuse_served(outside / "tb.json", doc, "state", "its PIDs")  # (unmounted: fine)


@pytest.mark.root
def test_a_docroot_the_server_user_cannot_read_is_named(tmp_path, machine):
    if os.geteuid() != 0:
        pytest.skip("only root runs the servers as another user")
    private = tmp_path / "private"
    (private / "doc").mkdir(parents=True)
    private.chmod(0o700)
    with pytest.raises(TestbedError) as err:
        up(private / "doc", machine, Share.all_of(machine), state_path=tmp_path / "s.json",
           port=0)  # fmt: skip
    assert f"cannot enter {private} (mode 0700)" in str(err.value)


@pytest.mark.root
def test_a_private_folder_the_server_user_cannot_reach_is_named(tmp_path, machine, monkeypatch):
    """``SHRINK_RUN_DIR`` below a 0700 folder of root's: ``up`` started nginx, which
    ended "nginx refused .../nginx.conf: ... open() .../nginx.conf failed (13: Permission
    denied)", naming neither the folder in the way nor what to do."""
    if os.geteuid() != 0:
        pytest.skip("only root runs the servers as another user")
    (tmp_path / "doc").mkdir()
    private = Path(tempfile.mkdtemp(prefix="shp"))  # (short: the sockets' paths fit)
    try:
        monkeypatch.setenv("SHRINK_RUN_DIR", str(private / "run"))
        with pytest.raises(TestbedError) as err:
            up(tmp_path / "doc", machine, Share.all_of(machine), state_path=tmp_path / "s.json",
               port=0)  # fmt: skip
        assert f"cannot enter {private} (mode 0700); chmod o+x" in str(err.value)
        assert "SHRINK_RUN_DIR" in str(err.value)
        assert os.listdir(private / "run") == []  # nothing started, no run root left
    finally:
        shutil.rmtree(private)


def test_a_damaged_state_naming_a_server_without_its_start_time_stops_nothing(tmp_path):
    """A process named like a server (nginx here) is not ours for its name alone."""
    fake_nginx = tmp_path / "nginx"
    fake_nginx.write_bytes(Path("/bin/sleep").read_bytes())
    fake_nginx.chmod(0o755)
    proc = subprocess.Popen([str(fake_nginx), "60"])
    try:
        for _ in range(100):
            info = process.proc_info(proc.pid)
            if info is not None and info.comm == "nginx":
                break
            time.sleep(0.01)
        path = tmp_path / "s.json"
        path.write_text(
            json.dumps(
                {"schema": "shrink.testbed/1", "replicas": [{"port": "broken", "pids": [proc.pid]}]}
            )
        )
        assert list(down(path).values()) == [[]]
        time.sleep(0.1)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_planted_private_folder_is_refused(tmp_path, monkeypatch):
    """shrink's private folder may sit at a predictable name (/tmp/shrink-UID): one that
    someone else made, or a symlink, or one others may write, is not used."""
    from shrink.testbed import registry

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "runs").symlink_to(elsewhere)
    with pytest.raises(TestbedError, match=r"not a private folder of this user \(a symlink to"):
        registry.private_dir()
    (tmp_path / "runs").unlink()
    # a file: it was said as "(a symlink, another owner, or writable by others)"
    (tmp_path / "runs").write_text("")
    with pytest.raises(TestbedError, match=r"not a private folder of this user \(not a folder\)"):
        registry.private_dir()
    (tmp_path / "runs").unlink()
    (tmp_path / "runs").mkdir(mode=0o777)
    os.chmod(tmp_path / "runs", 0o777)
    with pytest.raises(TestbedError, match=r"\(mode 0777: writable by others\)"):
        registry.private_dir()
    os.chmod(tmp_path / "runs", 0o700)
    assert registry.private_dir() == tmp_path / "runs"


def test_a_private_folder_that_cannot_be_made_says_how_to_choose_another(tmp_path, monkeypatch):
    """A user who is not root, with XDG_RUNTIME_DIR a folder of root's (mode 0755): its
    ``up`` said only "error: .../shrink: Permission denied"."""
    import errno

    from shrink.testbed import registry

    def refused(path, mode=0o777):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(os, "mkdir", refused)
    with pytest.raises(TestbedError) as err:
        registry.private_dir()
    said = str(err.value)
    assert "runs: cannot make shrink's private folder there (Permission denied)" in said
    assert "set SHRINK_RUN_DIR (or XDG_RUNTIME_DIR)" in said


def test_a_private_folder_holding_other_files_keeps_its_mode(tmp_path, monkeypatch):
    """SHRINK_RUN_DIR naming a folder that is not shrink's own (``/``, ``/root``): its
    mode was set to shrink's (``/`` 0711 hid it from every user's listing)."""
    from shrink.testbed import registry

    folder = tmp_path / "home"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / ".bashrc").write_text("x")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(folder))
    with pytest.raises(TestbedError, match=r"not shrink's \('\.bashrc' among them\)"):
        registry.private_dir()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755
    (folder / ".bashrc").unlink()
    (folder / "up-s-1234").mkdir()  # shrink's own: its mode is set as before
    assert registry.private_dir() == folder
    assert stat.S_IMODE(os.stat(folder).st_mode) in (0o700, 0o711)


def _forged_state(path: Path, pid: int) -> Path:
    """A state naming ``pid`` with its true start time and program: all readable in /proc."""
    info = process.proc_info(pid)
    assert info is not None
    rs = ReplicaState(
        name="r0", address="127.0.0.1", port=80, cpus=[0], masters=[pid],
        processes={"lighttpd": [pid]}, starttimes={pid: info.starttime},
        exes={pid: process.exe_of(pid) or ""}, pinned={}, config="c", errorlog="e", run_dir="d",
    )  # fmt: skip
    TestbedState([rs], {}, {"name": "1-replica"}, {}, "doc", {}, "t").write(path)
    return path


@pytest.mark.root
def test_a_state_another_user_wrote_stops_nothing(tmp_path, monkeypatch):
    """``down`` on a state file another user could have written: its PIDs, start times and
    programs are public in /proc, so it could name any process (sshd): none is signalled."""
    if os.geteuid() != 0:
        pytest.skip("needs root to write a file as another user")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    victim = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)  # a folder of nobody's, where root runs down
        state = _forged_state(theirs / "s.json", victim.pid)
        os.chown(state, 65534, 65534)
        with pytest.raises(StateError, match="another user could have written"):
            down(state)
        os.chown(state, 0, 0)  # root's file, but in nobody's folder: they could swap it
        with pytest.raises(StateError, match="another user could have written"):
            down(state)
        state.write_bytes(state.read_bytes()[:-5])  # damaged: salvaged PIDs are no better
        os.chown(state, 65534, 65534)
        with pytest.raises(StateError, match="another user could have written"):
            down(state)
        assert victim.poll() is None
        mine = _forged_state(tmp_path / "mine.json", victim.pid)  # root's own: trusted
        assert list(down(mine).values()) == [[victim.pid]]
    finally:
        victim.kill()
        victim.wait()


def test_down_stops_what_up_recorded_not_what_the_file_says_now(tmp_path, monkeypatch, machine):
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    state = tmp_path / "s.json"
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        st = up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
                server=ServerSettings(FakeRecipe()))  # fmt: skip
        server = st.replicas[0].masters[0]
        _forged_state(state, bystander.pid)  # rewritten since up (by whoever could)
        forged = json.loads(state.read_text())
        forged["server"] = {"name": "x", "source": str(tmp_path / "x.toml"), "stop_signal": 9}
        state.write_text(json.dumps(forged))
        stopped = down(state)
        assert list(stopped.values()) == [[server]]
        assert bystander.poll() is None
        assert json.loads(state.read_text())["server"]["stop_signal"] == 15  # up's recipe
    finally:
        bystander.kill()
        bystander.wait()


def test_a_private_folder_inside_a_folder_others_may_write_is_refused(tmp_path, monkeypatch):
    """XDG_RUNTIME_DIR (or SHRINK_RUN_DIR) naming a folder another user may write: they
    could rename shrink's folder away and put one of theirs, configs and all, in its
    place, so it is not used."""
    from shrink.testbed import registry

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # writable by all, not sticky
    monkeypatch.setenv("SHRINK_RUN_DIR", str(shared / "shrink"))  # as XDG_RUNTIME_DIR/shrink
    with pytest.raises(TestbedError, match=f"{shared} is another user's or writable by others"):
        registry.private_dir()
    assert not (shared / "shrink").exists()
    os.chmod(shared, 0o1777)  # sticky, as /tmp: no one may rename what is not theirs
    assert registry.private_dir() == shared / "shrink"


@pytest.mark.root
def test_a_private_folder_inside_another_users_folder_is_refused(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder owned by another user")
    from shrink.testbed import registry

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(theirs / "shrink"))
    with pytest.raises(TestbedError, match="another user's or writable by others"):
        registry.private_dir()


@pytest.mark.parametrize(
    "address", ["10.0.0.1", "169.254.169.254", "example.com", "::ffff:10.0.0.1"]
)
def test_a_replica_address_off_loopback_is_never_probed(tmp_path, monkeypatch, address):
    """``testbed status`` probes each replica at the address its state file names, and
    a state file is anyone's to write: an address off loopback is not probed."""
    from shrink.testbed import health
    from shrink.testbed.status import status

    def no_client(*a, **k):
        raise AssertionError("a request was about to be sent")

    monkeypatch.setattr(health.httpx, "Client", no_client)
    assert "not a loopback address, not probed" in (health.check(address, 80) or "")
    assert "not probed" in (health.probe(f"http://{address}:80/") or "")
    state = _state_with(tmp_path, address=address)
    (got,) = status(state)  # no request sent (no_client)
    assert not got.answering


def test_stale_testbeds_are_read_only_from_a_private_folder(tmp_path, monkeypatch):
    """``down --stale`` stops the PIDs the entries in shrink's folder name: entries in a
    folder another user may write (a /tmp/shrink-UID they made first) are not read."""
    from shrink.testbed import registry

    runs = tmp_path / "runs"
    runs.mkdir()
    os.chmod(runs, 0o777)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(runs))
    (runs / "testbed-0123456789abcdef.json").write_text("{}")
    with pytest.raises(TestbedError, match="not a private folder"):
        registry.stale()
    with pytest.raises(TestbedError, match="not a private folder"):
        registry.running()


def test_a_replay_reads_its_parts_back_only_from_a_folder_no_one_else_can_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A scale-out replay writes its parts in a temporary folder and reads them back:
    # in a $TMPDIR others may write (no sticky bit), another user could rename that
    # folder away and put their own parts, their measurements, in its place.
    from shrink.testbed import registry

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    private = tmp_path / "private"
    monkeypatch.setenv("SHRINK_RUN_DIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    assert registry.scratch_base() == private
    assert stat.S_IMODE(private.stat().st_mode) & 0o077 in (0, 0o011)
    shared.chmod(0o1777)  # sticky, as /tmp: a folder in it is its maker's alone
    assert registry.scratch_base() == shared


def test_a_docroot_others_may_change_is_named_with_the_folder_and_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any local user who may write the document root, or rename it away, could plant the
    # pages the server serves and the PHP it runs as the server user.
    from shrink.testbed import private
    from shrink.testbed.private import ServerUser, docroot_writers

    # As a user, the folders pytest makes are the user's own, and the servers run as them.
    uid = 2**31 - 9 if os.geteuid() == 0 else os.geteuid()
    user = ServerUser("srv", "srv", uid, uid)
    doc = tmp_path / "site" / "doc"
    doc.mkdir(parents=True)
    doc.chmod(0o755)
    assert docroot_writers(doc, user) is None
    doc.chmod(0o777)
    assert docroot_writers(doc, user) == (doc, "writable by every user (mode 0777)")
    doc.chmod(0o1777)  # sticky: others may still add pages to the root itself
    assert docroot_writers(doc, user) == (doc, "writable by every user (mode 1777)")
    doc.chmod(0o755)
    site = doc.parent
    site.chmod(0o777)  # others may rename the root away and put theirs in its place
    assert docroot_writers(doc, user) == (site, "writable by every user (mode 0777)")
    site.chmod(0o1777)  # not when sticky, as /tmp
    assert docroot_writers(doc, user) is None
    site.chmod(0o755)
    doc.chmod(0o775)
    monkeypatch.setattr(private, "_group_members", lambda gid: {0, user.uid})
    assert docroot_writers(doc, user) is None  # a group of root's and the server user's
    monkeypatch.setattr(private, "_group_members", lambda gid: {0, 4242})
    found = docroot_writers(doc, user)
    assert found is not None and found[0] == doc and found[1].startswith("writable by group ")
    doc.chmod(0o755)
    if os.geteuid() != 0:
        return  # the owner's part needs a file of another user's
    stranger = 2**31 - 11  # a UID no account has
    os.chown(doc, stranger, -1)
    assert docroot_writers(doc, user) == (doc, f"owned by UID {stranger}")
    os.chown(doc, user.uid, -1)  # the server user's own
    assert docroot_writers(doc, user) is None


def test_a_folder_or_file_inside_the_docroot_others_may_change_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the root and the folders above it were looked at: an app/ folder open to all
    # (any user could drop x.php there, run as the server user) went without a word.
    from shrink.testbed import private
    from shrink.testbed.private import ServerUser, docroot_writers

    uid = 2**31 - 9 if os.geteuid() == 0 else os.geteuid()
    user = ServerUser("srv", "srv", uid, uid)
    doc = tmp_path / "doc"
    (doc / "app").mkdir(parents=True)
    page = doc / "app" / "p.php"
    page.write_text("<?php echo 1;")
    (doc / "app" / "link").symlink_to("/etc")  # a link's own mode (0777) says nothing
    for p, mode in ((tmp_path, 0o755), (doc, 0o755), (doc / "app", 0o755), (page, 0o644)):
        p.chmod(mode)
    assert docroot_writers(doc, user) is None
    (doc / "app").chmod(0o1777)  # sticky inside the root: others may still add pages
    assert docroot_writers(doc, user) == (doc / "app", "writable by every user (mode 1777)")
    (doc / "app").chmod(0o755)
    page.chmod(0o666)
    assert docroot_writers(doc, user) == (page, "writable by every user (mode 0666)")
    page.chmod(0o664)
    monkeypatch.setattr(private, "_group_members", lambda gid: {0, 4242})
    found = docroot_writers(doc, user)
    assert found is not None and found[0] == page and found[1].startswith("writable by group ")
    page.chmod(0o644)
    monkeypatch.setattr(private, "MAX_LOOKED_AT", 1)
    (doc / "app").chmod(0o777)
    assert docroot_writers(doc, user) == (doc / "app", "writable by every user (mode 0777)")


def test_testbed_up_warns_of_a_docroot_others_may_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.testbed import private

    monkeypatch.setattr(private, "server_user", lambda: None)  # servers run as this user
    doc = tmp_path / "doc"
    doc.mkdir()
    doc.chmod(0o777)
    # A recipe that is not there: refused before any server starts, after the warning.
    args = ["testbed", "up", "--docroot", str(doc), "--state", str(tmp_path / "s.json"),
            "--server", str(tmp_path / "missing.toml")]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    lines = [x for x in r.output.splitlines() if x.startswith("warning: document root")]
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"warning: document root {doc} is writable by every user (mode"), (
        lines
    )
    assert "or PHP it runs as" in lines[0] and "let only root and" in lines[0], lines
    doc.chmod(0o755)
    (doc / "app").mkdir(mode=0o755)
    (doc / "app").chmod(0o777)
    r = CliRunner().invoke(app, args)
    lines = [x for x in r.output.splitlines() if x.startswith("warning: document root")]
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert lines == [
        f"warning: document root {doc}: {doc / 'app'}, inside it, is writable by every user "
        f"(mode 0777): they could put pages there that the server serves, or PHP it runs as "
        f"{me}; let only root and {me} write it"
    ], r.output


def test_a_relative_run_folder_is_refused(tmp_path, monkeypatch):
    """A relative SHRINK_RUN_DIR named nothing where the servers run: up started them,
    and every page, the health check's too, was an HTTP 500."""
    from shrink.testbed import registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHRINK_RUN_DIR", "rel-run")
    with pytest.raises(TestbedError, match="SHRINK_RUN_DIR='rel-run': not an absolute path"):
        registry.private_dir()
    assert not (tmp_path / "rel-run").exists()


def test_a_stopped_command_names_only_the_files_still_there(tmp_path):
    """A failed up removes the run root it wrote its configs into: "kept" named them."""
    from shrink.cli._common import kept_files

    whole, removed = tmp_path / "curve.json", tmp_path / "run" / "lighttpd.conf"
    whole.write_text("{}")
    assert kept_files([], [whole, removed]) == [str(whole)]


def test_a_file_written_under_two_names_is_named_once(tmp_path, monkeypatch):
    """predict said "kept /abs/pt/runs/testbed-0.json, pt/runs/testbed-0.json": up wrote
    the state by its resolved path, down by the one the user gave."""
    from shrink.cli._common import kept_files

    monkeypatch.chdir(tmp_path)
    Path("s.json").write_text("{}")
    assert kept_files([], [tmp_path / "s.json", Path("s.json")]) == [str(tmp_path / "s.json")]


@pytest.mark.root
def test_a_state_name_with_a_space_can_be_brought_down(tmp_path, monkeypatch, machine):
    """``--state "my state.json"``: the cgroup was named after it, space and all, and
    ``down`` refused a cgroup name it does not make: the servers ran on."""
    if os.geteuid() != 0:
        pytest.skip("needs root for the cgroups")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    state = tmp_path / "a b\x1b.json"
    st = up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
            server=ServerSettings(FakeRecipe()), cgroups="yes")  # fmt: skip
    pids = [p for r in st.replicas for p in r.pids]
    assert st.replicas[0].cgroup, "the test needs a cgroup"
    down(state)
    assert not any(process.is_alive(p) for p in pids)


@pytest.mark.root
def test_a_state_path_through_a_planted_symlink_starts_nothing(tmp_path, monkeypatch, machine):
    """``--state LINK/s.json``, LINK another user's: up resolved the path first, so the
    check never saw the link, and the state was written where it pointed."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    os.lchown(tmp_path / "link", 65534, 65534)  # planted by nobody
    state = tmp_path / "link" / "s.json"
    with pytest.raises(WriteError, match="owned by UID 65534"):
        up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state, port=0,
           server=ServerSettings(FakeRecipe()))  # fmt: skip
    assert list(elsewhere.iterdir()) == []


def test_an_up_whose_state_cannot_be_written_stops_its_servers(tmp_path, monkeypatch, machine):
    """The state written last (a full disk, a path that takes no file): the servers
    started were left running, with no state or record to stop them by."""
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "doc").mkdir()
    started: list[TestbedState] = []

    def no_room(self: TestbedState, path: object) -> None:
        started.append(self)
        raise WriteError(str(path), OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(TestbedState, "write", no_room)
    with pytest.raises(WriteError, match="no space left"):
        up(tmp_path / "doc", machine, Share.all_of(machine), state_path=tmp_path / "s.json",
           port=0, server=ServerSettings(FakeRecipe()))  # fmt: skip
    pids = [p for r in started[0].replicas for p in r.pids]
    assert pids and not any(process.is_alive(p) for p in pids)
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_private_folder_on_a_read_only_file_system_names_the_variable(tmp_path, monkeypatch):
    """SHRINK_RUN_DIR on a file system mounted read-only: `testbed up` (and a predict on
    the simulator) said only "error: DIR: Read-only file system"."""
    import errno

    from shrink.testbed import registry

    def refused(path, mode):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    (tmp_path / "runs").mkdir(mode=0o755)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(os, "chmod", refused)
    with pytest.raises(TestbedError) as err:
        registry.private_dir()
    assert str(err.value) == (
        f"SHRINK_RUN_DIR {tmp_path}/runs: cannot make shrink's private folder there "
        "(Read-only file system); set SHRINK_RUN_DIR (or XDG_RUNTIME_DIR) to a writable "
        "folder of this user's"
    )


def test_stale_testbeds_that_cannot_be_looked_for_are_a_warning(monkeypatch, capsys):
    """A predict on the simulator needs no run folder: one it could not make private
    (read-only) stopped it before anything ran."""
    from shrink.cli import testbed_cmd
    from shrink.testbed import registry

    def refused():
        raise TestbedError("SHRINK_RUN_DIR /ro/runs: cannot make shrink's private folder there")

    monkeypatch.setattr(registry, "stale", refused)
    testbed_cmd.warn_stale()
    assert capsys.readouterr().err == (
        "warning: stale testbeds not looked for: SHRINK_RUN_DIR /ro/runs: cannot make "
        "shrink's private folder there\n"
    )
