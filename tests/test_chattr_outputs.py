"""An output an immutable or append-only flag (chattr +i, +a) forbids is refused before
anything runs: every output is put in place by rename from a temporary file beside it,
which those flags forbid even to root. A sweep into an append-only folder ran all its
levels, then "cannot write (Operation not permitted, EPERM)", and left its temporary
files, which no one may remove there; `testbed up --state` in one started its servers
(then stopped them) and left the state's temporary file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import ParameterError
from shrink.files import check_output

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("chattr") is None, reason="chattr +i/+a: root's"
)

LINE = 'h - - [01/Aug/1995:00:00:01 -0400] "GET /a.html HTTP/1.0" 200 1839\n'


@pytest.fixture
def chattr():
    """chattr FLAG PATH, undone after the test (else its folder cannot be removed)."""
    done: list[tuple[str, Path]] = []

    def set_flag(flag: str, path: Path) -> None:
        r = subprocess.run(["chattr", f"+{flag}", str(path)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"chattr +{flag} refused here: {r.stderr.strip()}")
        done.append((flag, path))

    yield set_flag
    for flag, path in done:
        subprocess.run(["chattr", f"-{flag}", str(path)], check=False)


@pytest.mark.parametrize(
    "flag,said", [("a", "append-only (chattr +a)"), ("i", "immutable (chattr +i)")]
)
def test_an_output_in_a_locked_folder_is_refused_first(tmp_path, chattr, flag, said):
    folder = tmp_path / "out"
    folder.mkdir()
    chattr(flag, folder)
    with pytest.raises(ParameterError) as err:
        check_output(folder / "c.json", what="--out: output")
    assert str(err.value) == (
        f"--out: output {folder}/c.json: its folder {folder} is {said}: no file can be renamed "
        f"into place or removed there; chattr -{flag} {folder}, or name another folder"
    )


def test_a_locked_output_file_is_refused_first(tmp_path, chattr):
    out = tmp_path / "c.json"
    out.write_text("{}")
    chattr("a", out)  # (os.access says it may be written: appended to)
    with pytest.raises(ParameterError, match=r"c.json is append-only \(chattr \+a\): it cannot"):
        check_output(out)


def test_ingest_into_an_append_only_folder_writes_nothing(tmp_path, chattr):
    folder = tmp_path / "out"
    folder.mkdir()
    chattr("a", folder)
    log = tmp_path / "access.log"
    log.write_text(LINE * 3)
    r = CliRunner().invoke(app, ["ingest", str(log), "-o", str(folder / "t.parquet")])
    assert r.exit_code == 2, r.output
    assert "is append-only (chattr +a)" in r.output
    assert os.listdir(folder) == []


@pytest.mark.parametrize(
    "flag,said", [("a", "append-only (chattr +a)"), ("i", "immutable (chattr +i)")]
)
def test_a_locked_run_folder_is_refused_first(tmp_path, chattr, monkeypatch, flag, said):
    """SHRINK_RUN_DIR immutable: `testbed up` said "up-X.lock: Operation not permitted";
    append-only: it made its run root and entry, then "cannot write (... EPERM)"."""
    from shrink.errors import TestbedError
    from shrink.testbed import registry

    run = tmp_path / "run"
    run.mkdir(mode=0o711 if os.geteuid() == 0 else 0o700)
    chattr(flag, run)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    with pytest.raises(TestbedError) as err:
        registry.private_dir()
    assert str(err.value) == (
        f"SHRINK_RUN_DIR {run}: cannot make shrink's private folder there (it is {said}); "
        "set SHRINK_RUN_DIR (or XDG_RUNTIME_DIR) to a writable folder of this user's"
    )
    assert os.listdir(run) == []
