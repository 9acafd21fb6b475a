"""The document root written from a trace's paths (the demo's recorded workload):
what a path may make root write, and where (issue 35)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from shrink import demo
from shrink.errors import ParameterError, ShrinkError
from shrink.synth.docroot import StaticFile, write_docroot
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _log(tmp_path: Path, paths: list[str]) -> Path:
    """A CLF log: each path requested by 3 clients, answered 200 with 100-102 bytes."""
    lines = [
        f'10.0.0.{c} - - [01/Aug/1995:00:00:{2 * i + c:02d} -0400] "GET {p} HTTP/1.0" 200 {100 + c}'
        for i, p in enumerate(paths)
        for c in range(3)
    ]
    log = tmp_path / "access.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def _recorded(tmp_path: Path, paths: list[str]) -> tuple[Trace, Path]:
    work = tmp_path / "work"
    work.mkdir()
    cfg = {"source": _log(tmp_path, paths), "rate": 100}
    trace_path, docroot = demo._recorded(work, Console(quiet=True), cfg)
    return Trace.read_parquet(trace_path), docroot


def test_a_php_path_of_a_trace_is_not_written_as_a_page_the_server_runs(tmp_path):
    # The servers run a .php file as PHP (as www-data): a recorded /p206.php of 64 KiB,
    # written as its pseudo-random bytes, held "<?=" and answered 500 (a parse error).
    tr, docroot = _recorded(tmp_path, ["/a.gif", "/p206.php", "/app/index.php", "/manifest.json"])
    assert sorted(set(tr.column("path").tolist())) == ["/a.gif"]
    assert not (docroot / "p206.php").exists()
    assert (docroot / "app/index.php").read_text().startswith("<?php")
    for path in ("/x.php", "/d/y.php", "//app//_work.php", "/manifest.json"):
        with pytest.raises(ParameterError, match="static file path"):
            write_docroot(tmp_path / "d2", workload="w", static=[StaticFile(path, 10)],
                          dynamic=[], params={})  # fmt: skip
    assert not (tmp_path / "d2").exists()


def test_a_path_that_is_a_folder_of_another_is_left_out_before_anything_is_written(tmp_path):
    # /a beside /a/./b (or /a/b/c): the demo wrote the trace, then the file a, then
    # failed on a/b: "cannot write (Not a directory, ENOTDIR)". //x and /x are one file.
    paths = ["/a", "/a/./b", "/c", "/c/d/e", "//x", "/x", "/y"]
    tr, docroot = _recorded(tmp_path, paths)
    assert sorted(set(tr.column("path").tolist())) == ["//x", "/a/./b", "/c/d/e", "/x", "/y"]
    assert (docroot / "a/b").is_file() and (docroot / "c/d/e").is_file()
    assert (docroot / "x").stat().st_size == 102  # the larger of the two, once
    for pair in (["/a", "/a/b/c"], ["//x", "/x"]):
        static = [StaticFile(p, 10) for p in pair]
        with pytest.raises(ParameterError, match=r"a folder of|name one file"):
            write_docroot(tmp_path / "d3", workload="w", static=static, dynamic=[], params={})
    assert not (tmp_path / "d3").exists()


def test_a_docroot_the_disk_cannot_hold_is_refused_before_a_byte_is_written(tmp_path, monkeypatch):
    # A log line may say any size: 10^12 bytes were written until the disk was full
    # (taking every user's free space, and root's reserve), then "cannot write (ENOSPC)".
    root = tmp_path / "d"
    big = [StaticFile("/big.bin", 10**15), StaticFile("/s.gif", 100)]
    with pytest.raises(ShrinkError, match=r"needs 1,000,000,000,00\d,\d{3} bytes .*/big\.bin"):
        write_docroot(root, workload="w", static=big, dynamic=[], params={})
    assert not root.exists()
    real = os.statvfs
    few = [StaticFile(f"/f{i}.gif", 10) for i in range(5)]

    def two_inodes(path):
        st = real(path)
        return os.statvfs_result((*st[:7], 2, *st[8:]))  # f_favail

    monkeypatch.setattr(os, "statvfs", two_inodes)
    with pytest.raises(ShrinkError, match=r"8 files more .* 2 files free: nothing written"):
        write_docroot(root, workload="w", static=few, dynamic=[], params={})
    monkeypatch.setattr(os, "statvfs", real)
    write_docroot(root, workload="w", static=few, dynamic=[], params={})  # room: written
    monkeypatch.setattr(os, "statvfs", two_inodes)
    assert write_docroot(root, workload="w", static=few, dynamic=[], params={}).unchanged == 6


def test_a_users_own_files_in_the_docroot_folder_are_not_replaced(tmp_path):
    # `synth tcp --docroot SITE` on a folder of the user's own replaced its
    # app/index.php, manifest.json and static/file1k.bin without a word ("8 written").
    site = tmp_path / "site"
    (site / "app").mkdir(parents=True)
    mine = site / "app/index.php"
    mine.write_text('<?php echo "my shop";\n')
    (site / "index.html").write_text("keep\n")
    with pytest.raises(ShrinkError, match=r"app/index\.php: there already, and not a file shrink"):
        write_docroot(site, workload="w", static=[StaticFile("/a.gif", 10)], dynamic=[], params={})
    assert mine.read_text() == '<?php echo "my shop";\n'
    assert sorted(p.name for p in site.rglob("*")) == ["app", "index.html", "index.php"]
    mine.unlink()  # a docroot shrink wrote: its files are its own to rewrite, others kept
    write_docroot(site, workload="w", static=[StaticFile("/a.gif", 10)], dynamic=[], params={})
    (site / "a.gif").write_bytes(b"x" * 10)
    (site / "app/index.php").write_text("changed")
    again = write_docroot(site, workload="w", static=[StaticFile("/a.gif", 10)], dynamic=[],
                          params={})  # fmt: skip
    assert again.written == 2 and (site / "index.html").read_text() == "keep\n"
    (site / "b.gif").write_text("mine")  # not in the manifest: refused
    with pytest.raises(ShrinkError, match=r"b\.gif: there already"):
        write_docroot(site, workload="w", static=[StaticFile("/b.gif", 10)], dynamic=[], params={})


def test_a_file_shrink_wrote_for_another_site_is_its_own_to_rewrite(tmp_path):
    # The manifest lists the last site's files only: one left from a site before it
    # is still shrink's (its bytes are the ones shrink writes at its path).
    site = tmp_path / "site"
    write_docroot(site, workload="w", static=[StaticFile("/a.gif", 10)], dynamic=[], params={})
    write_docroot(site, workload="w", static=[StaticFile("/b.gif", 10)], dynamic=[], params={})
    again = write_docroot(site, workload="w", static=[StaticFile("/a.gif", 20)], dynamic=[],
                          params={})  # fmt: skip
    assert again.written == 1 and (site / "a.gif").stat().st_size == 20


def test_a_manifest_swapped_for_a_fifo_or_a_link_is_not_read(tmp_path):
    # The docroot may be the server user's to write: a FIFO held open by a writer
    # hung a plain read; a link to a root file was read through.
    site = tmp_path / "site"
    write_docroot(site, workload="w", static=[StaticFile("/a.gif", 10)], dynamic=[], params={})
    (site / "manifest.json").unlink()
    os.mkfifo(site / "manifest.json")
    writer = os.open(site / "manifest.json", os.O_RDWR)  # a writer that never writes
    try:
        with pytest.raises(ShrinkError, match=r"manifest\.json: there already"):
            write_docroot(site, workload="w", static=[StaticFile("/a.gif", 10)], dynamic=[],
                          params={})  # fmt: skip
    finally:
        os.close(writer)


def test_a_path_with_a_name_too_long_for_a_file_is_left_out(tmp_path):
    # One log line with a 300-byte segment stopped the demo after the trace and part of
    # the docroot were written: "cannot write (File name too long, ENAMETOOLONG)".
    tr, _ = _recorded(tmp_path, ["/a.gif", "/" + "L" * 300, "/d/" + "é" * 128])
    assert set(tr.column("path").tolist()) == {"/a.gif"}
    with pytest.raises(ParameterError, match="over the 255 bytes"):
        write_docroot(tmp_path / "d4", workload="w", static=[StaticFile("/" + "L" * 256, 1)],
                      dynamic=[], params={})  # fmt: skip
    assert not (tmp_path / "d4").exists()


def test_a_path_the_testbed_refuses_or_serves_elsewhere_is_left_out(tmp_path):
    # Answered 200 in the log, but 403 on the testbed (hidden, lighttpd's "~" and
    # ".inc") or served from the health check's folder: each replayed as a failure.
    paths = ["/a.gif", "/.htaccess", "/d/.git/config", "/x~", "/lib.inc", "/__shrink/h.txt",
             "/.well-known/t.txt"]  # fmt: skip
    tr, _ = _recorded(tmp_path, paths)
    assert sorted(set(tr.column("path").tolist())) == ["/.well-known/t.txt", "/a.gif"]


def test_a_path_not_starting_with_a_slash_is_left_out(tmp_path):
    # A proxy-probing bot's "GET http://other.host/x" answered 200 was kept as a file
    # (written at http:/other.host/x), and the replay then refused the trace: it sends
    # only paths that start with "/".
    tr, docroot = _recorded(tmp_path, ["/a.gif", "http://other.host/x.gif", "b.gif"])
    assert set(tr.column("path").tolist()) == {"/a.gif"}
    assert not (docroot / "http:").exists() and not (docroot / "b.gif").exists()
