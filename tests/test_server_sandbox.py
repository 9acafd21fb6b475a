"""What a server started as root's unprivileged server user gets from shrink: not
root's environment, no group of root's, no capability, and no file root opened
beyond its own output."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.testbed import as_root_with

from shrink import processes as process
from shrink.share import Share
from shrink.testbed import ServerSettings, down, up
from shrink.testbed.private import ServerUser, server_env

SECRET = "SHRINK_PROBE_ROOT_SECRET"
OUTSIDE = "keep me: not shrink's to write"
GETENV_PHP = (
    f'<?php echo getenv("{SECRET}") === false ? "none" : "leaked"; echo " ", getenv("HOME");\n'
)


def test_the_server_users_environment_is_not_roots(monkeypatch):
    monkeypatch.setenv(SECRET, "a token of root's")
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setenv("USE_ZEND_ALLOC", "0")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("PATH", f".:/usr/bin::relative/bin:{os.defpath}")
    user = ServerUser("shrink-probe-nobody", "nogroup", 2**31 - 7, 2**31 - 7)
    env = server_env(user, {"APP_MODE": "bench"})
    assert env is not None
    assert SECRET not in env
    assert env["HOME"] != "/root" and env["USER"] == env["LOGNAME"] == user.name
    assert env["USE_ZEND_ALLOC"] == "0" and env["LC_ALL"] == "C.UTF-8"  # the server's choice
    assert env["APP_MODE"] == "bench"  # a recipe's own env
    assert all(os.path.isabs(d) for d in env["PATH"].split(os.pathsep)), env["PATH"]


def test_as_this_user_the_environment_is_inherited(monkeypatch):
    monkeypatch.setattr("shrink.own_env._ADDED", {})
    monkeypatch.setenv(SECRET, "mine")
    assert server_env(None) == dict(os.environ)
    assert server_env(None, {"A": "1"}) == {**os.environ, "A": "1"}


def test_what_shrink_set_for_itself_is_not_a_servers(monkeypatch):
    # shrink sets OPENBLAS_NUM_THREADS=1 for its own numpy (and MPLCONFIGDIR for its
    # figures): a server started as this user inherited them as if the user had.
    from shrink.own_env import set_own

    monkeypatch.setattr("shrink.own_env._ADDED", {})
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MPLCONFIGDIR", "/users/own")
    set_own("OPENBLAS_NUM_THREADS", "1", keep_users=True)
    set_own("MPLCONFIGDIR", "/tmp/ours", keep_users=True)  # the user's: kept
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    env = server_env(None)
    assert "OPENBLAS_NUM_THREADS" not in env and env["MPLCONFIGDIR"] == "/users/own"
    assert server_env(None, {"OPENBLAS_NUM_THREADS": "4"})["OPENBLAS_NUM_THREADS"] == "4"


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw if e)


@contextlib.contextmanager
def _serving(
    doc: Path, machine: Any, recipe: str, state: Path
) -> Iterator[tuple[Any, Callable[[str], httpx.Response]]]:
    """A testbed of ``recipe`` on ``doc``, brought down whatever the test does: its
    replica and the page getter."""
    st = up(doc, machine, Share.all_of(machine), state_path=state, port=0,
            server=ServerSettings(recipe))  # fmt: skip
    try:
        r = st.replicas[0]

        def get(path: str) -> httpx.Response:
            with httpx.Client(trust_env=False, timeout=5) as c:
                return c.get(f"http://{r.address}:{r.port}{path}")

        yield r, get
    finally:
        down(state)


@pytest.mark.live
@pytest.mark.root
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_every_server_process_holds_nothing_of_roots(tmp_path, machine, recipe, monkeypatch):
    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    monkeypatch.setenv(SECRET, "a token of root's")
    monkeypatch.setenv("HOME", "/root")
    doc = tmp_path / "doc"
    doc.mkdir()
    (doc / "env.php").write_text(GETENV_PHP)
    state = tmp_path / "s.json"
    with _serving(doc, machine, recipe, state) as (r, get):
        page = get("/env.php")
        assert page.status_code == 200 and page.text.startswith("none"), page.text
        assert "/root" not in page.text
        pids = [p for p in r.pids if process.is_alive(p)]
        assert pids
        for p in pids:
            s, env = _status(p), _environ(p)
            assert SECRET not in env and env.get("HOME") != "/root", (p, sorted(env))
            assert s["Uid"].split()[0] != "0" and s["Gid"].split()[0] != "0", (p, s)
            assert "0" not in s["Groups"].split(), (p, s["Groups"])
            assert int(s["CapEff"], 16) == 0 and int(s["CapPrm"], 16) == 0, (p, s)
            assert s["NoNewPrivs"] == "1", (p, s)  # a setuid program gives it nothing
            # No descriptor to the state file, nor to a root-owned file other than its
            # own output log in root's run dir.
            for fd in Path(f"/proc/{p}/fd").iterdir():
                target = os.readlink(fd)
                assert target != str(state), (p, fd)
                if target.startswith("/") and os.path.isfile(target):
                    owner = os.stat(target).st_uid
                    assert owner != 0 or target.startswith(r.run_dir), (p, target)


# What a server process's environment may hold when it runs as the server user: the
# names shrink.testbed.private passes on and sets, and what the servers themselves add
# for their workers (lighttpd's bin-environment, php-fpm's pool). PHP_INI_SCAN_DIR is
# php-cgi's, set by shrink to the replica's own ini folder (the PHP limits); a value
# of the user's must not reach it (see the test).
_SERVER_ENV = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ"}
_SERVERS_OWN = {
    "PHP_FCGI_CHILDREN", "PHP_FCGI_MAX_REQUESTS", "PHP_INI_SCAN_DIR", "PWD", "SHLVL", "_"
}  # fmt: skip


@pytest.mark.live
@pytest.mark.root
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_a_server_gets_a_minimal_environment(tmp_path, machine, recipe, monkeypatch):
    """The user's shell settings (MPLCONFIGDIR, MPLBACKEND, LD_PRELOAD, PYTHONPATH), and
    what shrink sets for itself, reach no server process that runs as the server user:
    read from /proc/PID/environ of every one of them, and from a PHP page."""
    from shrink.own_env import set_own

    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    users = {
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
        "MPLBACKEND": "Agg",
        "LD_PRELOAD": "",  # present, empty: nothing is preloaded into the tests' programs
        "PYTHONPATH": str(tmp_path / "py"),
        "PHPRC": str(tmp_path / "php-ini"),
        "PHP_INI_SCAN_DIR": str(tmp_path / "php-ini"),
    }
    for k, v in users.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("shrink.own_env._ADDED", {})
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    set_own("OPENBLAS_NUM_THREADS", "1")
    doc = tmp_path / "doc"
    doc.mkdir()
    names = ",".join(sorted(users))
    (doc / "env.php").write_text(
        f'<?php foreach (explode(",", "{names},OPENBLAS_NUM_THREADS") as $k) '
        'if (getenv($k) !== false) echo $k, "=", getenv($k), "\\n";\n'
    )
    with _serving(doc, machine, recipe, tmp_path / "s.json") as (r, get):
        page = get("/env.php")
        assert page.status_code == 200, page.text
        seen = dict(line.split("=", 1) for line in page.text.splitlines())
        # only php-cgi's own ini folder, in the replica's run folder, not the user's
        assert set(seen) <= {"PHP_INI_SCAN_DIR"}, page.text
        for k, v in seen.items():
            assert users[k] not in v and r.run_dir in v, (k, v)
        pids = [p for p in r.pids if process.is_alive(p)]
        assert pids
        for p in pids:
            # (nginx writes its process title over the start of that area: not a name)
            env = {k: v for k, v in _environ(p).items() if k.isidentifier()}
            extra = {k for k in env if not k.startswith(("LC_", "USE_ZEND_ALLOC"))}
            extra -= _SERVER_ENV | _SERVERS_OWN
            assert not extra, (p, _status(p)["Name"], sorted(extra))
            assert users["PHP_INI_SCAN_DIR"] not in env.get("PHP_INI_SCAN_DIR", ""), p


@pytest.mark.live
@pytest.mark.root
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_a_user_ini_in_the_docroot_is_not_read(tmp_path, machine, recipe, monkeypatch):
    """PHP reads a ``.user.ini`` in a page's folder: one planted in a folder of the
    document root ran any file (an upload, ``upload.txt``) as PHP before every page."""
    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    doc = tmp_path / "doc"
    (doc / "up").mkdir(parents=True)
    (doc / "up" / "upload.txt").write_text('<?php echo "ran as PHP ";\n')
    (doc / "up" / ".user.ini").write_text(f"auto_prepend_file={doc / 'up' / 'upload.txt'}\n")
    (doc / "up" / "page.php").write_text('<?php echo "page";\n')
    with _serving(doc, machine, recipe, tmp_path / "s.json") as (_, get):
        page = get("/up/page.php")
        assert page.status_code == 200 and page.text == "page", page.text


@pytest.mark.live
@pytest.mark.root
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_hidden_files_in_the_docroot_are_not_served(tmp_path, machine, recipe, monkeypatch):
    """A document root copied from a site holds ``.git/``, ``.env``, ``.htpasswd``:
    both stacks served them as static files (a ``.php`` under ``.git/`` ran). They
    are refused now; ``/.well-known/`` stays a public folder, and ``a.b/`` is not
    hidden."""
    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    doc = tmp_path / "doc"
    for name in (".git/config", ".env", "up/.htpasswd", ".well-known/x.txt", "a.b/x.txt"):
        (doc / name).parent.mkdir(parents=True, exist_ok=True)
        (doc / name).write_text("secret\n" if "x.txt" not in name else "public\n")
    (doc / ".git" / "hook.php").write_text('<?php echo "PHP-RAN";\n')
    with _serving(doc, machine, recipe, tmp_path / "s.json") as (_, get):
        for path in ("/.git/config", "/.env", "/up/.htpasswd", "/.git/hook.php", "/%2egit/config"):
            page = get(path)
            assert page.status_code == 403 and "secret" not in page.text, (path, page.text)
            assert "PHP-RAN" not in page.text, path
        for path in ("/.well-known/x.txt", "/a.b/x.txt"):
            page = get(path)
            assert page.status_code == 200 and page.text == "public\n", (path, page.text)


@pytest.mark.root
def test_a_recipe_files_version_commands_do_not_run_as_root(tmp_path, monkeypatch):
    """A recipe file's commands are the user's: its ``versions`` commands run as the
    server user, as its servers do, never as root."""
    if os.geteuid() != 0:
        pytest.skip("as another user they run as that user anyway")
    from shrink.testbed.command import CommandRecipe

    monkeypatch.setenv(SECRET, "a token of root's")
    f = tmp_path / "r.toml"
    f.write_text(
        'commands = [["true"]]\n'
        'versions = { uid = ["id", "-u"], groups = ["id", "-G"], '
        f'env = ["sh", "-c", "printenv {SECRET} || echo none"] }}\n'
    )
    got = CommandRecipe.read(f).versions()
    assert got["uid"] != "0" and "0" not in got["groups"].split(), got
    assert got["env"] == "none", got


def test_a_servers_log_it_replaced_is_not_read(tmp_path):
    """Logs in the server user's folder are its to replace: a symlink or a hard link to a
    file it may not read is not printed into an error by root, and a FIFO does not hang
    ``up``; a plain log's last lines are."""
    from shrink.testbed.recipe import tail_log

    secret = tmp_path / "secret"
    secret.write_text("root:$6$hash:19000::::::\n")
    own = tmp_path / "srv"
    own.mkdir()
    (own / "sym.log").symlink_to(secret)
    os.link(secret, own / "hard.log")
    os.mkfifo(own / "fifo.log")
    assert tail_log(own / "sym.log") == ""
    assert tail_log(own / "hard.log") == ""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(tail_log(own / "fifo.log")), daemon=True)
    reader.start()
    reader.join(5)
    assert got == [""]  # at once: no writer is waited for
    (own / "error.log").write_text("a\nb\nc\nd\n")
    assert tail_log(own / "error.log") == "b | c | d"


def test_a_servers_output_log_is_not_writable_by_others_whatever_the_umask(tmp_path):
    log = tmp_path / "stdout.log"
    old = os.umask(0)
    try:
        proc = process.start_process(["sh", "-c", "echo started"], log_path=log)
    finally:
        os.umask(old)
    assert proc.wait(10) == 0
    assert log.read_text() == "started\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o644


def test_a_servers_output_log_is_never_opened_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text(OUTSIDE)
    (tmp_path / "stdout.log").symlink_to(victim)
    with pytest.raises(OSError):
        process.start_process(["true"], log_path=tmp_path / "stdout.log")
    assert victim.read_text() == OUTSIDE
