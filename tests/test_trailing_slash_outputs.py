"""A file output named with a trailing ``/`` (or ``/.``) names a folder: refused, not
written as a file of that name (typer's Path conversion dropped the ``/`` and the ``.``
before shrink saw them, and ``-o out.json/`` wrote out.json). A folder output may end in
``/``: it names the folder it is."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from shrink.cli import app

# Every option (or argument) that names a file to write, with the command it belongs to.
FILE_OUTPUTS = [
    (["sweep"], "-o"),
    (["replay"], "-o"),
    (["mat"], "-o"),
    (["ingest"], "-o"),
    (["export"], "-o"),
    (["sample"], "-o"),
    (["sim", "run"], "-o"),
    (["sim", "sweep"], "-o"),
    (["synth", "support"], "-o"),
    (["synth", "tcp"], "-o"),
    (["calibrate"], "-o"),
    (["whatif"], "-o"),
    (["extrapolate"], "-o"),
    (["testbed", "up"], "--state"),
    (["testbed", "status"], "--state"),
    (["testbed", "down"], "--state"),
    (["machine", "write"], None),  # (its OUT argument)
]


@pytest.mark.compute
@pytest.mark.parametrize("typed", ["out.json/", "out.json/.", "out.json//", "sub/out.json/./"])
@pytest.mark.parametrize(("command", "option"), FILE_OUTPUTS)
def test_a_file_output_typed_as_a_folder_is_refused(tmp_path, monkeypatch, command, option, typed):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    given = [option, typed] if option else [typed]
    r = CliRunner().invoke(app, [*command, *given])
    assert r.exit_code == 2, r.output
    assert f"{typed} names a folder; name a file" in r.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]


@pytest.mark.compute
@pytest.mark.parametrize(("command", "option"), FILE_OUTPUTS)
def test_an_empty_file_output_is_refused_as_empty(tmp_path, monkeypatch, command, option):
    """``-o ''`` was typer's Path("."): said as "output . is a directory", a name the user
    never typed (and ``testbed status --state ''``: ".: is a directory")."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, [*command, *([option, ""] if option else [""])])
    assert r.exit_code == 2, r.output
    assert "an empty name names no file" in r.output
    assert " . " not in r.output and ".:" not in r.output
    assert list(tmp_path.iterdir()) == []


def test_a_file_output_written_and_a_folder_output_typed_with_a_slash(tmp_path, monkeypatch):
    """Without the slash the file is written; a folder output's slash is the folder."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        app, ["synth", "tcp", "--rate", "10", "--duration", "1", "-o", "t.parquet",
              "--docroot", "doc/"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.parquet").is_file() and (tmp_path / "doc").is_dir()
    r = CliRunner().invoke(app, ["split", "t.parquet", "--parts", "2", "-o", "parts/"])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "parts").glob("*.parquet"))) == 2
