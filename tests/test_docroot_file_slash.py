"""A file's path with a "/" after it ("/v2.html/"): nginx answers 404 (its static module
declines a URI ending in "/", the index module meets ENOTDIR), lighttpd 200 (the "/" its
path info). The docroot check counted it served whatever the testbed ran."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shrink.testbed.coverage import docroot_coverage
from shrink.trace import Trace

pytestmark = pytest.mark.compute

_PATHS = ["/v2.html/", "/v2.html", "/d/", "/d"]


def _coverage(root, server):
    (root / "v2.html").write_text("2")
    (root / "d").mkdir()
    (root / "d" / "index.html").write_text("i")
    tr = Trace.from_columns({"session": [0] * 4, "t": [0.0] * 4, "path": _PATHS})
    return docroot_coverage(tr, root, None, server)


def test_a_files_path_with_a_slash_is_a_404_under_nginx(tmp_path):
    cov = _coverage(tmp_path, "nginx-php-fpm")
    assert cov.missing == ["/v2.html/"], cov
    said = cov.warning("t")
    assert said is not None and "lacks 1 of the 4 paths" in said and "fail (404)" in said


@pytest.mark.parametrize("server", ["lighttpd-php-cgi", ""])
def test_a_files_path_with_a_slash_is_served_by_lighttpd(tmp_path, server):
    assert _coverage(tmp_path, server).missing == []


def test_a_run_on_a_testbed_judges_by_the_server_it_runs(tmp_path, monkeypatch, capsys):
    from shrink.cli import _replay_opts, testbed_cmd

    (tmp_path / "v2.html").write_text("2")
    monkeypatch.setattr(testbed_cmd, "coverage_user", lambda: None)
    monkeypatch.setattr(_replay_opts, "_check_bodies", lambda *a: None)
    tr = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/v2.html/"]})
    for name, warned in (("nginx-php-fpm", True), ("lighttpd-php-cgi", False)):
        state = {"docroot": str(tmp_path), "server": {"name": name}}
        _replay_opts._warn_docroot(SimpleNamespace(state=state), tr, "t.parquet")
        assert ("lacks 1 of the 1 paths" in capsys.readouterr().err) is warned, name
    # testbed up --server X --trace: as that server
    testbed_cmd.warn_docroot(tmp_path / "t.parquet", tmp_path, tr, "nginx-php-fpm")
    assert "lacks 1 of the 1 paths" in capsys.readouterr().err
    testbed_cmd.warn_docroot(tmp_path / "t.parquet", tmp_path, tr, "lighttpd-php-cgi")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("server", "missing"),
    [
        ("lighttpd-php-cgi", ["/link/x", "/nope/x"]),
        (
            "nginx-php-fpm",
            ["/v2.html/extra", "/d/v2.html/a/b", "/v2.html/nope/", "/link/x", "/nope/x"],
        ),
    ],
)
def test_a_files_path_with_more_names_after_it_is_served_by_lighttpd(tmp_path, server, missing):
    """lighttpd 1.4 answers /v2.html/extra 200 (the rest its path info; tried against
    one on loopback with the testbed's modules), nginx 404: the check said 404 for both."""
    (tmp_path / "v2.html").write_text("2")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "v2.html").write_text("2")
    (tmp_path / "link").symlink_to(tmp_path / "v2.html")
    paths = ["/v2.html/extra", "/d/v2.html/a/b", "/v2.html/nope/", "/link/x", "/nope/x"]
    tr = Trace.from_columns({"session": [0] * 5, "t": [0.0] * 5, "path": paths})
    assert sorted(docroot_coverage(tr, tmp_path, None, server).missing) == sorted(missing)


@pytest.mark.parametrize(
    "server,missing",
    [("lighttpd-php-cgi", ["/nosuch/x"]), ("", ["/nosuch/x"]),
     ("nginx-php-fpm", ["/a/b.html/x", "/nosuch/x", "/p.php/extra", "/v2.html/extra"])],
)  # fmt: skip
def test_a_files_path_with_more_after_it_is_its_path_info_under_lighttpd(tmp_path, server, missing):
    """lighttpd serves ``/v2.html/extra`` (the file, "/extra" its path info; PHP's
    PATH_INFO for ``/p.php/extra``), nginx answers 404: both seen with curl on live
    testbeds. The check called it a 404 under either server."""
    (tmp_path / "v2.html").write_text("2")
    (tmp_path / "p.php").write_text("<?php")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.html").write_text("b")
    paths = ["/v2.html/extra", "/p.php/extra", "/a/b.html/x", "/nosuch/x"]
    tr = Trace.from_columns({"session": [0] * 4, "t": [0.0] * 4, "path": paths})
    assert docroot_coverage(tr, tmp_path, None, server).missing == missing
