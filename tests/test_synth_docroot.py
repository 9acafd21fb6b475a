"""``shrink synth`` end to end: trace + document root, manifest, PHP pages, determinism."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from shrink import Trace
from shrink.cli import app
from shrink.errors import WriteError
from shrink.synth import (
    MANIFEST_SCHEMA,
    PAGES,
    SupportParams,
    build_site,
    missing_paths,
    read_manifest,
    support_docroot,
    tcp_docroot,
)

pytestmark = pytest.mark.compute

runner = CliRunner()
CAP = 150_000  # keep the test's download files small


def _invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def _unique_paths(trace: Trace) -> list[str]:
    return pc.unique(trace.table.column("path")).to_pylist()


@pytest.fixture(scope="module")
def support_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("support")
    out, docroot = root / "s.parquet", root / "docroot"
    result = _invoke(
        "synth", "support", "--users", "1000", "--duration", "60", "--seed", "7",
        "-o", str(out), "--docroot", str(docroot), "--max-download-bytes", str(CAP), "--json",
    )  # fmt: skip
    return out, docroot, json.loads(result.stdout)


def test_support_cli_dynamic_fraction_via_trace_info(support_run):
    out, _, summary = support_run
    info = json.loads(_invoke("trace", "info", str(out), "--json").stdout)
    assert abs(info["dynamic_fraction"] - 0.05) < 0.005
    assert info["meta"]["users"] == 1000
    assert (info["meta"]["workload"], info["meta"]["mode"]) == ("support", "session")
    assert summary["requests"] == info["requests"] > 50_000


def test_every_trace_path_exists_in_the_docroot(support_run):
    out, docroot, _ = support_run
    trace = Trace.read_parquet(out)
    paths = _unique_paths(trace)
    assert missing_paths(docroot, paths) == []
    manifest = read_manifest(docroot)
    assert manifest.schema_id == MANIFEST_SCHEMA and manifest.workload == "support"
    listed = {e.path for e in manifest.static} | {e.path for e in manifest.dynamic}
    assert set(paths) <= listed
    for name in ("_work.php", *(f"{p}.php" for p in PAGES)):
        assert (docroot / "app" / name).is_file()
    assert missing_paths(docroot, ["/static/nope.gif", "/../etc/passwd"]) == [
        "/../etc/passwd",
        "/static/nope.gif",
    ]


def test_manifest_sizes_match_files_and_cap_is_recorded(support_run):
    _, docroot, _ = support_run
    manifest = read_manifest(docroot)
    for entry in manifest.static:
        assert (docroot / entry.path.lstrip("/")).stat().st_size == entry.bytes
    assert (docroot / "static/file1k.bin").stat().st_size == 1024
    written = json.loads((docroot / "manifest.json").read_text())["static"]
    capped = [e for e in written if "nominal_bytes" in e]
    assert capped and all(e["bytes"] == CAP < e["nominal_bytes"] for e in capped)
    assert len(capped) == sum(e.nominal_bytes not in (None, e.bytes) for e in manifest.static)
    assert manifest.params["max_download_bytes"] == CAP
    for d in manifest.dynamic:
        assert f"bytes={d.bytes}&work={d.work}&mem={d.mem_kib}&" in d.path
        assert 10 * 1024 <= d.bytes <= 100_000


def test_same_seed_same_parquet_bytes(tmp_path):
    files = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = tmp_path / f"{name}.parquet"
        _invoke("synth", "support", "--users", "50", "--duration", "30s", "--seed", str(seed),
                "-o", str(out))  # fmt: skip
        files.append(out.read_bytes())
    assert files[0] == files[1] and files[0] != files[2]
    tcp = []
    for name in ("a", "b"):
        out = tmp_path / f"t{name}.parquet"
        _invoke("synth", "tcp", "--rate", "500", "--duration", "4", "--seed", "9", "-o", str(out))
        tcp.append(out.read_bytes())
    assert tcp[0] == tcp[1]


def test_rf_cli_keeps_paths_in_the_docroot(tmp_path):
    out, docroot = tmp_path / "m.parquet", tmp_path / "dr"
    _invoke("synth", "support", "--users", "40", "--duration", "60", "--rf", "0.5",
            "--max-download-bytes", "120000", "-o", str(out),
            "--docroot", str(docroot))  # fmt: skip
    trace = Trace.read_parquet(out)
    paths = _unique_paths(trace)
    assert any(p.startswith("/static/mod/") for p in paths)
    assert missing_paths(docroot, paths) == []
    assert trace.meta["expected_dynamic_fraction"] == pytest.approx(0.025)


def test_tcp_cli_writes_the_1k_file(tmp_path):
    out, docroot = tmp_path / "t.parquet", tmp_path / "dr"
    result = _invoke("synth", "tcp", "--rate", "2000", "--duration", "3", "--arrival",
                     "constant", "-o", str(out), "--docroot", str(docroot), "--json")  # fmt: skip
    summary = json.loads(result.stdout)
    assert summary["requests"] == 6000 and summary["mode"] == "open"
    assert (docroot / "static/file1k.bin").stat().st_size == 1024
    assert read_manifest(docroot).workload == "tcp"
    assert missing_paths(docroot, _unique_paths(Trace.read_parquet(out))) == []


def test_cli_bad_parameter_exits_2_naming_the_option_and_the_rule(tmp_path):
    result = runner.invoke(
        app, ["synth", "support", "--users", "10", "--duration", "5", "--rf", "2",
              "-o", str(tmp_path / "x.parquet")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--rf: rf == 2, must be in [0, 1]." in result.output


def test_rerun_skips_identical_files_and_repairs_changed_ones(tmp_path):
    site = build_site(SupportParams(max_download_bytes=2_000_000, n_images=40), 160)
    first = support_docroot(tmp_path, site)
    assert first.written >= first.static_files and first.unchanged == 0
    victim = tmp_path / "static/img/i003.gif"
    good = victim.read_bytes()
    victim.write_bytes(b"x" * len(good))
    big = next(tmp_path.glob("static/dl/dir00000/class4_0"))
    assert big.stat().st_size == 2_000_000
    second = support_docroot(tmp_path, site)
    assert second.written == 1 and second.unchanged == second.static_files - 1
    assert victim.read_bytes() == good
    assert not list(tmp_path.rglob(".*tmp*"))


def test_a_link_at_a_docroot_file_is_neither_read_nor_written_through(tmp_path):
    # The rerun compares a file's bytes before rewriting it: a symlink planted at the
    # name must be neither read (to a FIFO no one writes, root hung on the compare)
    # nor written through (to a file of the same size, root read it and kept the link).
    root = tmp_path / "root"
    tcp_docroot(root)
    target = root / "static/file1k.bin"
    secret = tmp_path / "secret"
    secret.write_bytes(target.read_bytes())
    secret.chmod(0o600)
    target.unlink()
    target.symlink_to(secret)
    assert tcp_docroot(root).written == 1
    assert not target.is_symlink() and secret.stat().st_mode & 0o777 == 0o600
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for name in ("static/file1k.bin", "app/_work.php"):
        (root / name).unlink()
        (root / name).symlink_to(fifo)
        with pytest.raises(WriteError, match="not a file: left as it is"):
            tcp_docroot(root)  # refused at once, named: not read, not written
        (root / name).unlink()
    assert fifo.is_fifo()


def test_tcp_docroot_alone(tmp_path):
    report = tcp_docroot(tmp_path)
    assert report.static_files == 1
    written = read_manifest(tmp_path).to_dict()
    assert written["static"] == [{"path": "/static/file1k.bin", "bytes": 1024}]


def _php_cgi(script: Path, query: str) -> bytes:
    php = shutil.which("php-cgi")
    if php is None:
        pytest.skip("php-cgi is not installed (Debian package php-cgi)")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "REDIRECT_STATUS": "200",  # php-cgi's force-cgi-redirect check
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SCRIPT_FILENAME": str(script),
        "REQUEST_METHOD": "GET",
        "QUERY_STRING": query,
    }
    done = subprocess.run([php, "-q"], env=env, capture_output=True, timeout=60, check=True)
    head, sep, body = done.stdout.partition(b"\r\n\r\n")
    assert sep, done.stdout[:200]
    assert f"Content-Length: {len(body)}".encode() in head
    return body


@pytest.mark.parametrize("page", PAGES)
def test_php_page_prints_exactly_b_bytes(tmp_path, page):
    tcp_docroot(tmp_path)
    script = tmp_path / "app" / f"{page}.php"
    for nbytes in (1, 20, 54_321):
        body = _php_cgi(script, f"bytes={nbytes}&work=200&mem=128&id=5")
        assert len(body) == nbytes
    assert _php_cgi(script, "bytes=300&work=0&mem=64&id=1").startswith(
        b"<!-- shrink " + page.encode()
    )


def test_php_page_survives_bad_parameters(tmp_path):
    tcp_docroot(tmp_path)
    body = _php_cgi(tmp_path / "app" / "index.php", "bytes=abc&work=-5&mem=x")
    assert len(body) == 10_240  # the default size


def test_an_escaped_path_is_the_file_the_server_serves(tmp_path):
    """A request for "/a%20b.gif" is served from the file "a b.gif": the docroot writes
    that file, and the missing-paths check looks for it; an escaped ".." stays refused."""
    from shrink.synth.docroot import StaticFile, write_docroot

    root = tmp_path / "root"
    write_docroot(root, workload="recorded", static=[StaticFile("/s/a%20b.gif", 10)],
                  dynamic=[], params={})  # fmt: skip
    assert (root / "s" / "a b.gif").stat().st_size == 10
    assert not (root / "s" / "a%20b.gif").exists()
    assert missing_paths(root, ["/s/a%20b.gif", "/s/a b.gif?x=%20"]) == []
    # A byte that is not UTF-8 names the file by that byte, as the server reads it.
    write_docroot(root, workload="recorded", static=[StaticFile("/s/caf%E9", 3)], dynamic=[],
                  params={})  # fmt: skip
    assert b"caf\xe9" in os.listdir(os.fsencode(root / "s"))
    assert missing_paths(root, ["/s/caf%E9", "/s/caf%e9"]) == []
    assert missing_paths(root, ["/s/%2e%2e/%2e%2e/etc/passwd", "/s/a%00.gif"]) == [
        "/s/%2e%2e/%2e%2e/etc/passwd",
        "/s/a%00.gif",
    ]


def test_a_docroot_is_readable_by_the_server_user_whatever_the_umask(tmp_path):
    """Under root's umask 077 every file was 0600 and every folder 0700: the server
    (www-data) answered each request of the trace 403."""
    from shrink.synth.docroot import tcp_docroot

    old = os.umask(0o077)
    try:
        tcp_docroot(tmp_path / "d")
        (tmp_path / "mine.txt").write_text("x")  # the rest of the process: its umask back
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes.pop(Path("mine.txt")) == 0o600
    assert modes and all(m == (0o755 if (tmp_path / p).is_dir() else 0o644)
                         for p, m in modes.items()), modes  # fmt: skip
