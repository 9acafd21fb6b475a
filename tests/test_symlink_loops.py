"""A symlink loop named as a path (``--docroot``, ``--machine``) is one line naming it,
exit 1, as every other read of such a path is: ``Path.resolve()`` raised RuntimeError
(before Python 3.13), and the command exited 70 as an internal error; on 3.13 it
returns the loop unresolved, and the command said "not a directory", exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.trace import Trace

pytestmark = pytest.mark.compute

SPEC = Path(__file__).resolve().parent.parent / "examples" / "machines" / "nehalem-2s.toml"


@pytest.mark.parametrize("python", ["this", "3.13"])
@pytest.mark.parametrize("where", ["docroot", "machine"])
def test_a_symlink_loop_is_one_line_naming_it(tmp_path, where, python, monkeypatch):
    if python == "3.13":
        # 3.13's Path.resolve() is os.path.realpath's: a loop's path comes back unresolved
        # (Debian 13: "document root .../loop is not a directory", exit 2)
        monkeypatch.setattr(Path, "resolve", lambda p, strict=False: Path(os.path.realpath(p)))
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [0, 1], "t": [0.0, 1.0], "path": ["/a", "/b"]}).write_parquet(
        trace
    )
    args = {
        "docroot": ["testbed", "up", "--docroot", str(loop), "--state", str(tmp_path / "s.json"),
                    "--port", "0"],
        "machine": ["predict", str(trace), "--target", f"sim:{SPEC}", "--machine", str(loop),
                    "--thresholds", "mean=10ms", "-o", str(tmp_path / "out")],
    }[where]  # fmt: skip
    res = CliRunner().invoke(app, args)
    out = " ".join(res.output.split())
    assert res.exit_code == 1, out
    assert f"{loop}: Too many levels of symbolic links" in out and "internal" not in out
