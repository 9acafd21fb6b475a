"""Server recipes without a web server: the protocol, the TOML reader, configs, the fake.

The lifecycle tests here run the fake recipe (a few lines of Python per replica), so
they need neither lighttpd nor nginx; the built-in stacks are in test_recipes_live.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers.testbed import running_under

from shrink import processes as process
from shrink.errors import RecipeError, TestbedError
from shrink.mapping import build_mapping
from shrink.share import Share
from shrink.testbed import ServerSettings, lifecycle
from shrink.testbed.command import CommandRecipe
from shrink.testbed.fake_recipe import FakeRecipe
from shrink.testbed.lighttpd import LighttpdPhpCgi
from shrink.testbed.nginx import (
    NginxPhpFpm,
    cpu_affinity_masks,
    render_fpm_conf,
    render_nginx_conf,
)
from shrink.testbed.recipe import ReplicaContext, ServerRecipe
from shrink.testbed.servers import load_recipe
from shrink.testbed.state import TestbedState
from shrink.topology import discover


def _write(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_recipe_is_a_server_recipe(tmp_path):
    f = _write(tmp_path, 'commands = [["python3", "-m", "http.server", "{port}"]]\n')
    for r in (LighttpdPhpCgi(), NginxPhpFpm(), CommandRecipe.read(f), FakeRecipe()):
        assert isinstance(r, ServerRecipe), r
    assert isinstance(load_recipe(None), LighttpdPhpCgi)
    assert isinstance(load_recipe("nginx-php-fpm"), NginxPhpFpm)
    assert load_recipe(str(f)).name == "r" and load_recipe(str(f)).source == str(f)
    with pytest.raises(RecipeError, match="recipe apache: no such built-in server; use one of"):
        load_recipe("apache")


@pytest.mark.parametrize(
    ("text", "field", "what"),
    [
        ('commands = [["x"]]\nname = \n', None, "not TOML: .*line 2"),
        ('commands = [["x"]]\ncolour = 1\n', "colour", r"unknown key\(s\) \['colour'\]"),
        ('name = "x"\n', "commands", "missing or empty"),
        ('commands = ["python3 -m http.server"]\n', r"commands\[0\]", "list of strings"),
        ('commands = [["srv", "{prot}"]]\n', r"commands\[0\]", r"unknown placeholder \{prot\}"),
        ('commands = [["srv"]]\nhealth_url = "http://{docroot}/"\n', "health_url", "{docroot}"),
        ('commands = [["srv"]]\nhealth_url = "ftp://{address}/"\n', "health_url", "http://"),
        ('commands = [["srv"]]\nstop_signal = "SIGNOPE"\n', "stop_signal", "not a signal"),
        ('commands = [["srv"]]\nstart_timeout = -1\n', "start_timeout", "seconds > 0"),
        ('commands = [["srv"]]\nworkers_per_core = 0\n', "workers_per_core", ">= 1"),
        ('commands = [["srv"]]\nenv = { A = 1 }\n', "env", "table of strings"),
        # Each of these was read, then failed when the testbed started (exit 70), or,
        # as a stop signal no signal has, left down unable to ask the server to stop.
        ('commands = [["srv", "{port:x}"]]\n', r"commands\[0\]", "no format spec"),
        ('commands = [["srv", "{port:>99999999}"]]\n', r"commands\[0\]", "no format spec"),
        ('commands = [["srv", "{port!r}"]]\n', r"commands\[0\]", "or conversion"),
        (
            'commands = [["srv"]]\nhealth_url = "http://{address}:{port:d}/"\n',
            "health_url",
            "no format spec",
        ),
        ('commands = [["srv", "a\\u0000b"]]\n', r"commands\[0\]", "NUL character"),
        ('commands = [["srv"]]\nenv = { "A=B" = "1" }\n', "env", "without '='"),
        ('commands = [["srv"]]\nenv = { "" = "1" }\n', "env", "non-empty"),
        ('commands = [["srv"]]\nstop_signal = 99999\n', "stop_signal", "not a signal"),
        ('commands = [["srv"]]\nstop_signal = 0\n', "stop_signal", "not a signal"),
        ('commands = [["srv"]]\nstop_signal = "-1"\n', "stop_signal", "not a signal"),
        # An OSC title, CR/LF: printed raw by testbed up and status, kept in result files.
        ('commands = [["srv"]]\nname = "a\\u001b]0;t\\u0007\\r\\nb"\n', "name", "printable"),
        ('commands = [["srv"]]\nversions = { "p\\u001b[31m" = ["v"] }\n', "versions", "printable"),
    ],
)
def test_a_bad_recipe_file_names_the_file_and_the_key(tmp_path, text, field, what):
    f = _write(tmp_path, text)
    with pytest.raises(RecipeError) as err:
        CommandRecipe.read(f)
    msg = str(err.value)
    assert msg.startswith(f"recipe {f}: ") and "\n" not in msg
    if field is not None:
        assert msg.startswith(f"recipe {f}: {field.replace(chr(92), '')}: ")
    assert re.search(what, msg), msg


def test_the_documented_recipe_is_the_example_file_and_reads():
    root = Path(__file__).resolve().parent.parent
    # the recipe's example lives in docs/recipes.md (the README links there)
    block = re.search(r"```toml\n(.*?)```", (root / "docs" / "recipes.md").read_text(), flags=re.S)
    example = root / "examples" / "recipes" / "python-http.toml"
    assert block is not None and block.group(1) == example.read_text()
    r = CommandRecipe.read(example)
    assert r.name == "python-http" and r.stop_signal == 2 and r.env == {"PYTHONUNBUFFERED": "1"}
    assert r.commands[0][:3] == ["python3", "-m", "http.server"]


def test_missing_recipe_file(tmp_path):
    with pytest.raises(RecipeError, match="no such recipe file"):
        load_recipe(str(tmp_path / "nope.toml"))


def test_templates_fill_every_placeholder_and_keep_literal_braces(tmp_path):
    f = _write(
        tmp_path,
        'commands = [["./bin/srv", "--listen={address}:{port}", "--cpus={cpus}", '
        '"-w{workers}", "{docroot}", "{run_dir}/x.sock", "{{json}}"]]\n'
        "workers_per_core = 3\n"
        'stop_signal = "INT"\n',
    )
    r = CommandRecipe.read(f)
    assert r.stop_signal == 2 and r.commands[0][0] == str(tmp_path / "bin" / "srv")
    rep = build_mapping("1-replica", discover(), (0, 1), base_port=8123).replicas[0]
    srv = Path("/run/r0/srv")
    ctx = ReplicaContext(rep, Path("/d"), Path("/run/r0"), srv, 2, 5.0, spawn=None)  # type: ignore[arg-type]
    vals = r.values(ctx)
    argv = [a.format(**vals) for a in r.commands[0][1:]]
    # {run_dir}: the replica's folder the server (not root) may write
    want = ["--listen=127.0.0.1:8123", "--cpus=0-1", "-w6", "/d", f"{srv}/x.sock", "{json}"]
    assert argv == want


def test_nginx_config_pins_one_worker_per_core_and_has_its_own_pool(tmp_path):
    assert cpu_affinity_masks((0, 1)) == "01 10" and cpu_affinity_masks((1,)) == "10"
    assert cpu_affinity_masks((2, 3)) == "0100 1000"
    rep = build_mapping("2-replica-direct", discover(), (0, 1), base_port=8123).replicas[1]
    ctx = ReplicaContext(rep, tmp_path / "doc", tmp_path / "r1", tmp_path, 3, 5.0, spawn=None)  # type: ignore[arg-type]
    sock = tmp_path / "php-fpm.sock"
    conf = render_nginx_conf(ctx, sock, tmp_path / "probe")
    assert "worker_processes 1;" in conf and "worker_cpu_affinity 10;" in conf
    assert "listen 127.0.0.2:8123" in conf and f'fastcgi_pass "unix:{sock}";' in conf
    assert "daemon off;" in conf and "user " not in conf and "disable_symlinks on;" in conf
    fpm = render_fpm_conf(ctx, sock, 3)
    assert "[r1]" in fpm and f'listen = "{sock}"' in fpm
    assert "pm = static" in fpm and "pm.max_children = 3" in fpm and "pm.max_requests = 0" in fpm


def test_the_lifecycle_works_through_the_recipe(tmp_path, machine):
    (tmp_path / "doc").mkdir()
    fake = FakeRecipe()
    state = tmp_path / "s.json"
    st = lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), "2-replica-direct",
                      state_path=state, port=0, server=ServerSettings(fake))  # fmt: skip
    try:
        assert fake.calls["versions"] == 1 and fake.calls["start"] == 2
        assert fake.calls["health"] >= 2 and fake.calls["pids"] >= 2
        assert st.server == {"name": "fake", "source": "fake", "stop_signal": 15}
        assert st.versions == {"fake": "fake/1.0"}
        for r in st.replicas:
            assert r.processes["server"] == r.masters
            for p in r.pids:
                assert set(process.allowed_cpus(p)) == set(r.cpus)
        assert TestbedState.read(state).server["name"] == "fake"
    finally:
        stopped = lifecycle.down(state)
    assert sorted(stopped) == ["r0", "r1"]
    assert not any(process.is_alive(p) for r in st.replicas for p in r.pids)
    for r in st.replicas:  # with cgroups (as root), none is left behind
        assert not any(Path(d).exists() for d in (r.cgroup or {}).get("dirs", {}).values())


@pytest.mark.parametrize(
    ("fail", "what"),
    [
        ("exit", r"python3?[\d.]* exited with status 3 during start-up .*fake: cannot start"),
        ("silent", r"no healthy answer \(http://127\.0\.0\.\d:\d+/: ConnectError.*within 1 s"),
        ("start", "fake: refused to start"),
    ],
)
def test_a_failed_start_names_the_recipe_and_leaves_nothing(tmp_path, machine, fail, what):
    (tmp_path / "doc").mkdir()
    state = tmp_path / "s.json"
    recipe = FakeRecipe(fail)
    recipe.start_timeout = 1.0  # type: ignore[attr-defined]
    with pytest.raises(RecipeError) as err:
        lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), "2-replica-direct",
                     state_path=state, port=0, server=ServerSettings(recipe))  # fmt: skip
    msg = str(err.value)
    assert msg.startswith("recipe fake: replica r0 (127.0.0.1:") and "\n" not in msg, msg
    assert re.search(what, msg), msg
    assert not state.exists()
    assert running_under(tmp_path) == []


def test_a_recipe_file_that_cannot_be_read_still_stops(tmp_path, machine):
    (tmp_path / "doc").mkdir()
    f = _write(tmp_path, 'commands = [["sleep", "60"]]\nhealth_url = "http://{address}:{port}/"\n')
    recipe = CommandRecipe.read(f)
    recipe.health = lambda address, port: None  # type: ignore[method-assign]
    state = tmp_path / "s.json"
    st = lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state,
                      port=0, server=ServerSettings(recipe))  # fmt: skip
    f.unlink()  # the recipe is gone; the state file alone says what to stop
    from shrink.testbed.status import status

    (rep,) = status(state)
    assert "cannot be read" in (rep.problem or "")
    assert lifecycle.down(state)["r0"] == st.replicas[0].pids
    assert not process.is_alive(st.replicas[0].master_pid)


def test_a_program_that_is_not_installed_is_named_before_anything_starts(tmp_path, machine):
    (tmp_path / "doc").mkdir()
    f = _write(tmp_path, 'commands = [["sleep", "60"], ["no-such-server-xyz", "{port}"]]\n')
    with pytest.raises(TestbedError, match=r"r\.toml: commands\[1\]: program 'no-such-server-xyz'"):
        lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine),
                     state_path=tmp_path / "s.json", port=0,
                     server=ServerSettings(str(f)))  # fmt: skip
    assert running_under(tmp_path) == []


def test_a_stop_signal_between_fork_and_popen_returning_leaves_no_server(
    tmp_path, machine, monkeypatch
):
    # SIGHUP or SIGTERM during `testbed up` can land while subprocess.Popen waits for
    # the child's exec: the server runs, but the caller never gets its Popen. A
    # nginx master was left serving, untracked, and `down --stale` did not find it.
    (tmp_path / "doc").mkdir()
    real = process.start_process
    started: list[int] = []

    def start_then_stop(argv, **kw):
        p = real(argv, **kw)
        started.append(p.pid)
        raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle.process, "start_process", start_then_stop)
    state = tmp_path / "s.json"
    try:
        with pytest.raises(KeyboardInterrupt):
            lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state,
                         port=0, server=ServerSettings(FakeRecipe()), cgroups="no")  # fmt: skip
        assert started and not any(process.is_alive(p) for p in started)
    finally:
        process.stop_processes(dict.fromkeys(started))
    assert not state.exists()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/shrink/s-{os.getpid()}-*"))


@pytest.mark.parametrize("where", ["after a replica started", "before the state is written"])
def test_a_stop_signal_between_the_steps_of_up_leaves_no_server(
    tmp_path, machine, monkeypatch, where
):
    # Between a replica's start returning and its being listed, or between the last
    # start and the state's write, a SIGTERM left lighttpd running, untracked, with its
    # run folder.
    (tmp_path / "doc").mkdir()
    real_start = lifecycle._start_replica
    started: list[int] = []

    def start_then_stop(*a, **kw):
        rs = real_start(*a, **kw)
        started.extend(rs.pids)
        if where == "after a replica started":
            raise KeyboardInterrupt
        return rs

    def no_state(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle, "_start_replica", start_then_stop)
    if where == "before the state is written":
        monkeypatch.setattr(lifecycle.TestbedState, "write", no_state)
    state = tmp_path / "s.json"
    try:
        with pytest.raises(KeyboardInterrupt):
            lifecycle.up(tmp_path / "doc", machine, Share.all_of(machine), state_path=state,
                         port=0, server=ServerSettings(FakeRecipe()))  # fmt: skip
        assert started and not any(process.is_alive(p) for p in started)
    finally:
        process.stop_processes(dict.fromkeys(started))
    assert not state.exists()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/shrink/s-{os.getpid()}-*"))


@pytest.mark.parametrize(
    ("script", "shown"),
    [
        # not UTF-8: exit 70 (UnicodeDecodeError)
        ("import sys; sys.stdout.buffer.write(b'\\xff\\xfe v1\\n')", "\ufffd\ufffd v1"),
        # an OSC title and a colour: printed raw by testbed up, kept in every result file
        ("print('\\x1b]0;pwn\\x07v\\x1b[31m2')", "\\x1b]0;pwn\\x07v\\x1b[31m2"),
        # without end: read whole for 10 s (11 GB), then "timed out"
        ("import sys\nwhile True: sys.stdout.write('y' * 65536 + '\\n')", "y" * 200 + "..."),
    ],
)
def test_a_version_command_output_is_bounded_decoded_and_escaped(script, shown):
    import sys
    import time

    from shrink.testbed.recipe import first_line

    t0 = time.monotonic()
    assert first_line([sys.executable, "-c", script], "r.toml") == shown
    assert time.monotonic() - t0 < 5


def test_nginx_takes_a_request_body_as_large_as_php_is_given(tmp_path):
    """``up --trace`` with a body over 1 MiB: PHP's post_max_size was raised to hold it,
    but nginx's own client_max_body_size (1 MiB by default) answered 413 before PHP saw
    it; lighttpd passed it on. nginx now takes as much as PHP is given."""
    from dataclasses import replace

    from shrink.testbed.config import PhpLimits

    rep = build_mapping("1-replica", discover(), (0,), base_port=8123).replicas[0]
    ctx = ReplicaContext(rep, tmp_path / "doc", tmp_path / "r0", tmp_path, 1, 5.0, spawn=None)  # type: ignore[arg-type]
    conf = render_nginx_conf(ctx, tmp_path / "php-fpm.sock", tmp_path / "probe")
    assert f"client_max_body_size {ctx.php.post_max_mib}M;" in conf
    big = replace(ctx, php=PhpLimits().for_bodies(300_000_000))
    conf = render_nginx_conf(big, tmp_path / "php-fpm.sock", tmp_path / "probe")
    assert big.php.post_max_mib >= 573 and f"client_max_body_size {big.php.post_max_mib}M;" in conf
