"""PHP's limits on the testbed, an idle server before each level, and a docroot check."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import require_lighttpd

from shrink.errors import ParameterError
from shrink.mapping import Replica
from shrink.replay.live import wait_idle
from shrink.share import Share
from shrink.testbed import ServerSettings, TestbedState, down, up
from shrink.testbed.config import PhpLimits, ReplicaConfig, render_lighttpd_conf
from shrink.testbed.coverage import docroot_coverage
from shrink.topology import discover
from shrink.trace import Trace


def test_php_cgi_runs_with_time_and_memory_limits(tmp_path):
    r = Replica("r0", (0,), "127.0.0.1", 8080, (0,), 0)
    c = ReplicaConfig(r, tmp_path, tmp_path, tmp_path / "s", "/usr/bin/php-cgi", 2, 1,
                      php_max_execution_s=7, php_memory_limit="64M")  # fmt: skip
    conf = render_lighttpd_conf(c)
    assert (
        '"bin-path" => "/usr/bin/php-cgi -d user_ini.filename= -d max_execution_time=7 '
        '-d memory_limit=64M -d post_max_size=8M -d upload_max_filesize=8M"' in conf
    )


def test_php_fpm_runs_with_the_same_limits(tmp_path):
    """nginx-php-fpm said the testbed's limits (``testbed up``'s note) but ran php.ini's:
    a page took 64 MiB under ``--php-memory-limit 16M``."""
    from shrink.testbed.nginx import render_fpm_conf
    from shrink.testbed.recipe import ReplicaContext

    r = Replica("r0", (0,), "127.0.0.1", 8080, (0,), 0)
    ctx = ReplicaContext(r, tmp_path, tmp_path, tmp_path, 1, 5.0, spawn=None,  # type: ignore[arg-type]
                         php=PhpLimits(7, "64M", 24))  # fmt: skip
    conf = render_fpm_conf(ctx, tmp_path / "php-fpm.sock", 1)
    lines = conf.splitlines()
    # (admin values: a page's ini_set cannot raise them, as it could php_value's)
    assert "php_admin_value[max_execution_time] = 7" in lines, conf
    assert "php_admin_value[memory_limit] = 64M" in lines, conf
    assert "php_admin_value[post_max_size] = 24M" in lines, conf
    assert "php_admin_value[upload_max_filesize] = 24M" in lines, conf
    assert not [line for line in lines if line.startswith("php_value")], conf


@pytest.mark.live
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_a_page_cannot_raise_the_testbeds_php_limits(tmp_path, recipe, monkeypatch):
    """The limits were php_value (php-fpm) and -d (php-cgi), which a page may change:
    ``ini_set("memory_limit", "1G")`` and ``set_time_limit(0)`` took, so a request
    given up on could run on into the next level."""
    from helpers.testbed import as_root_with

    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    page = (
        '<?php ini_set("memory_limit", "1G"); ini_set("max_execution_time", "999"); '
        "set_time_limit(0); "
        'foreach (["max_execution_time", "memory_limit"] as $k) echo ini_get($k), " ";\n'
    )
    settings = ServerSettings(recipe, php=PhpLimits(7, "64M", 24))
    with _one_page_testbed(tmp_path, "raise.php", page, settings) as st:
        r = st.replicas[0]
        with httpx.Client(trust_env=False, timeout=5) as c:
            got = c.get(f"http://{r.address}:{r.port}/raise.php")
        assert got.text.split() == ["7", "64M"], got.text


@pytest.mark.live
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_a_page_sees_the_testbeds_php_limits(tmp_path, recipe, monkeypatch):
    from helpers.testbed import as_root_with

    as_root_with(recipe, monkeypatch, tmp_path / "runs")
    ini = (
        '<?php foreach (["max_execution_time", "memory_limit", "post_max_size"] as $k) '
        'echo ini_get($k), " ";\n'
    )
    settings = ServerSettings(recipe, php=PhpLimits(7, "64M", 24))
    with _one_page_testbed(tmp_path, "ini.php", ini, settings) as st:
        assert any("memory_limit 64M" in n for n in st.notes), st.notes  # said, as it is run
        r = st.replicas[0]
        with httpx.Client(trust_env=False, timeout=5) as c:
            page = c.get(f"http://{r.address}:{r.port}/ini.php")
        assert page.text.split() == ["7", "64M", "24M"], page.text


@contextlib.contextmanager
def _one_page_testbed(
    tmp_path: Path, name: str, php: str, settings: ServerSettings
) -> Iterator[TestbedState]:
    """A testbed over the whole machine serving one PHP page, brought down after."""
    doc = tmp_path / "doc"
    doc.mkdir()
    (doc / name).write_text(php)
    machine = discover()
    state = tmp_path / "s.json"
    st = up(doc, machine, Share.all_of(machine), state_path=state, port=0, server=settings)
    try:
        yield st
    finally:
        down(state)


def test_php_limits_hold_the_traces_largest_body_and_are_said():
    tr = Trace.from_columns({"session": [0, 1, 2], "t": [0.0, 1.0, 2.0], "path": ["/a.php"] * 3,
                             "method": ["GET", "POST", "POST"],
                             "body": ["", "x" * 100, "é" * (6 * 2**20)]})  # fmt: skip
    php = PhpLimits(30, "512M").for_trace(tr)
    assert php.largest_body == 12 * 2**20  # bytes on the wire, not characters
    assert php.post_max_mib == 24 and php.max_execution_s == 30  # twice the body, in MiB
    assert PhpLimits().for_trace(tr.take([0, 1])).post_max_mib == 8  # PHP's default is enough
    text = php.describe(2)
    assert "2 children per core" in text and "max_execution_time 30 s" in text
    assert "memory_limit 512M" in text and "post_max_size 24M" in text and "12,582,912" in text
    r = Replica("r0", (0,), "127.0.0.1", 8080, (0,), 0)
    conf = render_lighttpd_conf(ReplicaConfig(r, Path("/d"), Path("/r"), Path("/s"), "php-cgi", 2,
                                              1, php_post_max_mib=php.post_max_mib))  # fmt: skip
    assert "-d post_max_size=24M -d upload_max_filesize=24M" in conf
    for bad in ({"memory_limit": "lots"}, {"max_execution_s": 0}):
        with pytest.raises(ParameterError, match="--php-"):
            PhpLimits(**bad)


def test_wait_idle_waits_for_a_busy_process_and_not_for_a_sleeping_one():
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    nap = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        waited, idle = wait_idle([spin.pid], 0.4)
        assert not idle and waited >= 0.4
        waited, idle = wait_idle([nap.pid], 5.0)
        assert idle and waited < 1.0
    finally:
        spin.kill()
        nap.kill()
        spin.wait()
        nap.wait()


def test_docroot_coverage_names_what_is_missing(tmp_path):
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.bin").write_bytes(b"x")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "index.php").write_text("<?php")
    tr = Trace.from_columns(
        {
            "session": [0, 0, 1, 1, 2],
            "t": [0.0, 0.0, 1.0, 1.0, 2.0],
            "path": [
                "/static/a.bin?x=1",
                "/app/",
                "/missing.gif",
                "/missing.gif",
                "/../etc/passwd",
            ],
        }
    )
    cov = docroot_coverage(tr, tmp_path)
    assert cov.paths == 4 and cov.missing == ["/../etc/passwd", "/missing.gif"]
    assert cov.requests_missing == 3
    assert "lacks 2 of the 4 paths" in cov.warning("t.parquet")
    full = docroot_coverage(Trace.from_columns({"session": [0], "t": [0.0], "path": ["/app"]}),
                            tmp_path)  # fmt: skip
    assert full.warning("t") is None
    # Read as the server reads a request-target: percent-decoded, and "//x" is a path.
    (tmp_path / "static" / os.fsdecode(b"caf\xe9")).write_bytes(b"x")
    paths = ["/static/a%2Ebin", "//static/a.bin", "/static/a.bin%00", "/static/caf%E9"]
    odd = docroot_coverage(Trace.from_columns({"session": [0] * 4, "t": [0.0] * 4,
                                               "path": paths}), tmp_path)  # fmt: skip
    assert odd.missing == ["/static/a.bin%00"]


def test_docroot_coverage_names_what_the_server_user_cannot_read(passable_tmp):
    """A docroot root wrote under ``umask 077`` (``synth --docroot``): after the chmod
    ``up`` named for its top folder, every page was a 403, and nothing said so."""
    from shrink.testbed.private import ServerUser

    (passable_tmp / "app").mkdir(mode=0o700)
    (passable_tmp / "app" / "index.php").write_text("<?php")
    (passable_tmp / "a.bin").write_bytes(b"x")
    (passable_tmp / "secret.bin").write_bytes(b"x")
    os.chmod(passable_tmp / "a.bin", 0o644)
    os.chmod(passable_tmp / "secret.bin", 0o600)
    os.chmod(passable_tmp, 0o755)
    user = ServerUser("shrink-probe-nobody", "nogroup", 2**31 - 7, 2**31 - 7)
    paths = ["/a.bin", "/app/", "/app/index.php?id=1", "/secret.bin", "/gone.bin"]
    tr = Trace.from_columns({"session": [0] * 5, "t": [0.0] * 5, "path": paths})
    cov = docroot_coverage(tr, passable_tmp, user)
    assert cov.missing == ["/gone.bin"]
    assert cov.unreadable == ["/app/", "/app/index.php?id=1", "/secret.bin"]
    ok = docroot_coverage(tr.take([0, 3]), passable_tmp, user)
    line = ok.warning("t.parquet")
    assert line is not None and "shrink-probe-nobody" in line and "cannot read 1 of the 2" in line
    assert f"chmod -R o+rX {passable_tmp.resolve()}" in line
    assert docroot_coverage(tr.take([0]), passable_tmp, user).warning("t") is None
    # Some paths missing and some unreadable: the unreadable ones were left out of the
    # line, which named only the 404s (a root-only file planted in the docroot: 403).
    both = cov.warning("t.parquet")
    assert both is not None and "lacks 1 of the 5 paths" in both
    assert "shrink-probe-nobody, the user the servers run as, cannot read 3 more" in both


def test_a_fifo_or_socket_at_a_trace_path_is_not_said_as_a_404(tmp_path):
    """A FIFO and a Unix socket planted at a trace's paths: "they will fail (404)", where
    nginx answers the socket 500."""
    import socket

    os.mkfifo(tmp_path / "fifo.bin")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock.bin"))
        paths = ["/fifo.bin", "/sock.bin", "/gone.bin"]
        tr = Trace.from_columns({"session": [0] * 3, "t": [0.0] * 3, "path": paths})
        cov = docroot_coverage(tr, tmp_path)
    line = cov.warning("t.parquet")
    assert cov.not_files == 2 and line is not None
    assert "fail (404; the 2 that are neither file nor folder, 404 or 500)" in line, line


def test_a_symlink_to_a_fifo_or_socket_is_counted_as_one(tmp_path):
    """A symlink in the docroot to a FIFO or socket there, one leaving the docroot, a
    loop: neither stack follows a symlink (nginx ``disable_symlinks on``, lighttpd
    ``server.follow-symlink = "disable"``), so each is a 403 reached through a symlink,
    not a FIFO's 404 or a socket's 500."""
    import socket

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo.bin").symlink_to("fifo")
    (tmp_path / "out.bin").symlink_to("/dev/null")
    (tmp_path / "loop.bin").symlink_to("loop.bin")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        (tmp_path / "to-sock.bin").symlink_to(tmp_path / "sock")
        paths = ["/to-fifo.bin", "/to-sock.bin", "/out.bin", "/loop.bin"]
        tr = Trace.from_columns({"session": [0] * 4, "t": [0.0] * 4, "path": paths})
        cov = docroot_coverage(tr, tmp_path)
    assert len(cov.missing) == 4
    assert (cov.not_files, cov.symlinked) == (0, 4)


def test_a_symlink_loop_in_the_docroot_is_a_missing_path(tmp_path):
    """``up --trace`` on a docroot holding a symlink loop was an internal error (exit 70)."""
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "ok.bin").write_bytes(b"x")
    paths = ["/loop/x", "/a", "/ok.bin"]
    tr = Trace.from_columns({"session": [0] * 3, "t": [0.0] * 3, "path": paths})
    assert docroot_coverage(tr, tmp_path).missing == ["/a", "/loop/x"]


def test_hidden_paths_are_not_served_says_the_docroot_check(tmp_path):
    """Both stacks refuse a path with a segment that starts with a dot (403): the
    check counted ``/.git/config`` as served, and said nothing of the failures."""
    for name in (".git/config", "%2Eenv", ".well-known/a.txt", "a.b/c.txt", "x.txt"):
        f = tmp_path / name.replace("%2E", ".")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")
    paths = ["/.git/config", "/%2Eenv", "/.well-known/a.txt", "/a.b/c.txt", "/x.txt", "/y.txt"]
    tr = Trace.from_columns({"session": [0] * 6, "t": [0.0] * 6, "path": paths})
    cov = docroot_coverage(tr, tmp_path)
    assert cov.missing == ["/%2Eenv", "/.git/config", "/y.txt"]
    line = cov.warning("t")
    assert line is not None and "(404, or 403 for the 2 hidden)" in line


def test_the_docroot_warning_shows_a_paths_control_characters_escaped(tmp_path):
    """A Parquet trace's path with CR/LF or an ANSI escape reached the terminal raw in
    the warning before a sweep or replay on a testbed: a path could forge a line."""
    paths = ["/static/x\r\nerror: forged", "/\x1b[31mred"]
    tr = Trace.from_columns({"session": [0, 0], "t": [0.0, 0.0], "path": paths})
    line = docroot_coverage(tr, tmp_path).warning("t\x1b[2J.parquet")
    assert line is not None
    assert not any(c in line for c in "\r\n\x1b")
    assert "/static/x\\r\\nerror: forged" in line and "\\x1b[31mred" in line
    assert "t\\x1b[2J.parquet" in line


@pytest.mark.live
def test_an_abandoned_php_request_stops_at_its_time_limit(tmp_path):
    require_lighttpd()
    spin = (
        "<?php $end = microtime(true) + 20; $x = 0; while (microtime(true) < $end) { $x++; }"
        " echo $x;\n"
    )
    os.environ["SHRINK_RUN_DIR"] = str(tmp_path / "runs")
    # a 1 s limit, to keep the test short
    limits = ServerSettings(php=PhpLimits(max_execution_s=1))
    try:
        with _one_page_testbed(tmp_path, "spin.php", spin, limits) as st:
            assert any("max_execution_time 1 s" in n for n in st.notes)  # said in the state
            r = st.replicas[0]
            start = time.monotonic()
            with httpx.Client(trust_env=False, timeout=15) as c:
                resp = c.get(f"http://{r.address}:{r.port}/spin.php")
            # 20 s of spinning stopped by PHP after 1 s of CPU (allow a busy machine)
            assert time.monotonic() - start < 8.0
            assert resp.status_code >= 500 or "Maximum execution time" in resp.text
            _, idle = wait_idle(r.pids, 5.0)
            assert idle
    finally:
        os.environ.pop("SHRINK_RUN_DIR", None)


def test_testbed_up_warns_when_the_docroot_lacks_the_traces_paths(tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    tr = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/nothere.html"]})
    tr.write_parquet(tmp_path / "t.parquet")
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(
        app,
        ["testbed", "up", "--docroot", str(tmp_path / "empty"), "--state",
         str(tmp_path / "tb.json"), "--trace", str(tmp_path / "t.parquet"), "--machine",
         str(Path(__file__).parent / "does-not-exist.toml")],
    )  # fmt: skip
    # it warns before anything else (here the machine spec is missing, so nothing starts)
    assert "lacks 1 of the 1 paths" in res.output and res.exit_code == 1


def test_php_cgi_starts_with_tmp_read_only(tmp_path):
    """OPcache makes its lock file in /tmp by default: with /tmp read-only (or full)
    every php-cgi child exited 254 ("Unable to create lock file") and `testbed up`
    waited 15 s for "0 of 1 children". The lock file goes in the server's own folder."""
    import shutil

    from shrink.testbed.config import write_probe

    php = shutil.which("php-cgi")
    if os.geteuid() != 0 or php is None or shutil.which("unshare") is None:
        pytest.skip("needs root (a mount namespace), unshare and php-cgi")
    own = tmp_path / "srv"
    own.mkdir()
    r = Replica("r0", (0,), "127.0.0.1", 8080, (0,), 0)
    c = ReplicaConfig(r, tmp_path, tmp_path, own / "s", php, 1, 1, own_dir=own)
    write_probe(c)
    script = ('mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp && '
              'mount -t tmpfs tmpfs "$1" && PHP_INI_SCAN_DIR=":$2" exec "$3" -v')  # fmt: skip
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
           str(own), str(c.php_ini_dir), php]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert "Unable to create lock file" not in done.stdout + done.stderr
    assert done.returncode == 0 and done.stdout.startswith("PHP ")


def test_a_folder_without_an_index_file_is_said_as_a_403(tmp_path):
    """A recorded trace's "/" against a docroot with no index.html (any `shrink synth`
    docroot): "they will fail (404)", where nginx and lighttpd both answer 403 (no
    directory listing)."""
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.bin").write_bytes(b"x")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "index.php").write_text("<?php")
    paths = ["/", "/static/", "/static/a.bin", "/app/", "/gone.bin", "/static?x=1"]
    tr = Trace.from_columns({"session": [0] * 6, "t": [0.0] * 6, "path": paths})
    cov = docroot_coverage(tr, tmp_path)
    line = cov.warning("t.parquet")
    assert cov.missing == ["/", "/gone.bin", "/static/"]
    assert cov.no_index == 2 and line is not None  # (/static: a redirect to /static/)
    assert "fail (404, or 403 for the 2 folders without an index file)" in line, line


def test_a_path_reached_through_a_symlink_is_not_counted_served(tmp_path):
    """Both stacks refuse a symlink in the docroot (403): a file that is one
    (``latest.html -> v2.html``), a folder on the way (``cur/ -> v2/``), a folder's
    index file. By its resolved path each was counted served: no warning, and the
    replay measured 403s."""
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "a.html").write_text("x")
    (tmp_path / "v2.html").write_text("x")
    (tmp_path / "latest.html").symlink_to("v2.html")
    (tmp_path / "cur").symlink_to("v2")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").symlink_to("../v2.html")
    paths = ["/latest.html", "/cur/a.html", "/site/", "/v2.html", "/v2/a.html"]
    tr = Trace.from_columns({"session": [0] * 5, "t": [0.0] * 5, "path": paths})
    cov = docroot_coverage(tr, tmp_path)
    assert cov.missing == ["/cur/a.html", "/latest.html", "/site/"]
    assert (cov.symlinked, cov.no_index, cov.not_files) == (3, 0, 0)
    line = cov.warning("t.parquet")
    assert line is not None and "fail (404, or 403 for the 3 reached through a symlink)" in line


def test_a_folder_path_without_its_slash_is_a_redirect_not_a_failure(tmp_path):
    """Both stacks answer a folder's path without its "/" with a 301 to it, which the
    replay (following no redirect) counts a success: "/static" was said "they will
    fail (404) and count as failures"."""
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.bin").write_bytes(b"x")
    paths = ["/static", "/static?x=1", "/static/a.bin"]
    tr = Trace.from_columns({"session": [0] * 3, "t": [0.0] * 3, "path": paths})
    cov = docroot_coverage(tr, tmp_path)
    assert cov.missing == [] and cov.warning("t.parquet") is None
