"""An output option is checked as an output, by shrink's own words.

Typer checks that every existing ``Path`` is readable unless told not to, so an
output that is a write-only file was refused as "path ... is not readable" (exit 2)
before shrink's own output check could say what is wrong with it (a file under
/proc is the kernel's, not storage), and a write-only regular file, which shrink
would replace, could not be named at all by a user who is not root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from shrink.cli import app

pytestmark = pytest.mark.compute

RUN = CliRunner().invoke
FIXTURE = Path(__file__).parent / "data" / "wsesslog_all_features.txt"
# Outputs whose option is not -o/--out: (command, option or argument name).
OTHER_OUTPUTS = {
    ("sweep", "--runlogs"),
    ("synth support", "--docroot"),
    ("synth tcp", "--docroot"),
    ("machine write", "out"),
    ("testbed up", "--state"),
    ("testbed down", "--state"),
}


def _path_params() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []

    def walk(cmd, path):
        for param in cmd.params:
            if getattr(param, "type_descriptor", None) is not None:
                out.append((" ".join(path), param))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def test_no_output_option_is_checked_as_a_readable_or_existing_path():
    outputs = []
    for path, param in _path_params():
        names = {*param.opts, param.name}
        if "--out" in param.opts or any((path, n) in OTHER_OUTPUTS for n in names):
            info = param.type_descriptor.parameter_info
            outputs.append((path, param.opts))
            assert not info.readable and not info.exists, (path, param.opts)
    assert len(outputs) >= len(OTHER_OUTPUTS) + 15, outputs


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/drop_caches"), reason="needs Linux /proc")
def test_a_write_only_proc_file_as_output_is_refused_by_shrinks_own_check(tmp_path):
    r = RUN(app, ["ingest", str(FIXTURE), "-o", "/proc/sys/vm/drop_caches"])
    assert r.exit_code != 0
    assert "not readable" not in r.output, r.output
    assert "is on proc (the kernel's, not storage)" in r.output, r.output


def test_a_write_only_file_as_output_is_replaced(tmp_path, monkeypatch):
    out = tmp_path / "t.parquet"
    out.write_bytes(b"old")
    out.chmod(0o200)
    real = os.access

    def access(path, mode, **kw):  # as a user who is not root sees a 0200 file
        if Path(path) == out and mode & os.R_OK:
            return False
        return real(path, mode, **kw)

    monkeypatch.setattr(os, "access", access)
    r = RUN(app, ["ingest", str(FIXTURE), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"PAR1"
