"""Programs shrink runs as root (a server's ``-v``, ``lscpu``, the C compiler) are never
taken from a folder on ``PATH`` that another user may write: a ``lighttpd`` planted
there ran as root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shrink import topology
from shrink.errors import RecipeError
from shrink.programs import trusted_which
from shrink.testbed.recipe import find_tool

pytestmark = pytest.mark.compute


def _planted(folder: Path, name: str, mode: int) -> Path:
    folder.mkdir(exist_ok=True)
    marker = folder / f"{name}.ran"
    prog = folder / name
    prog.write_text(f"#!/bin/sh\necho ran > {marker}\necho '0,0,0,0'\n")
    prog.chmod(0o755)
    folder.chmod(mode)  # exactly, whatever the umask
    return prog


def test_a_program_in_a_folder_others_may_write_is_not_taken(tmp_path, monkeypatch):
    evil = _planted(tmp_path / "evil", "lighttpd", 0o777)
    ok = _planted(tmp_path / "ok", "lighttpd", 0o755)
    monkeypatch.setenv("PATH", f"{evil.parent}{os.pathsep}{ok.parent}")
    assert find_tool("lighttpd-php-cgi", "lighttpd", hint="install it") == str(ok)
    assert trusted_which("lighttpd") == (str(ok), [str(evil)])


def test_only_a_planted_program_is_refused_naming_it(tmp_path, monkeypatch):
    evil = _planted(tmp_path / "evil", "shrink-no-such-server", 0o777)
    monkeypatch.setenv("PATH", str(evil.parent))
    with pytest.raises(RecipeError, match=r"not run from .*evil/shrink-no-such-server"):
        find_tool("r", "shrink-no-such-server", hint="install it")


def test_lscpu_planted_on_path_is_not_run(tmp_path, monkeypatch):
    evil = _planted(tmp_path / "evil", "lscpu", 0o777)
    monkeypatch.setenv("PATH", str(evil.parent))
    topology._cpus_from_lscpu()
    assert not (evil.parent / "lscpu.ran").exists()


def test_the_compiler_root_runs_does_not_run_an_assembler_planted_on_path(tmp_path, monkeypatch):
    """``cc`` runs ``as`` and ``ld`` by ``PATH``: a planted ``as`` ran as root when the
    co-runner's helper was built."""
    from shrink.enforce import corunner

    if trusted_which("cc")[0] is None and trusted_which("gcc")[0] is None:
        pytest.skip("no C compiler")
    evil = _planted(tmp_path / "evil", "as", 0o777)
    monkeypatch.setenv("PATH", f"{evil.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert corunner.build_helper() is not None
    assert not (evil.parent / "as.ran").exists()
