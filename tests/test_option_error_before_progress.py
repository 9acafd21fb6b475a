"""An option error is said before any progress line: nothing has run when it is found."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def test_more_engine_processes_than_generator_cpus_is_refused_before_the_first_run(tmp_path):
    # The engine refused it only as the first run started, after the sweep's first
    # progress line ("rate_factor 0.5 rep 1/2  [0/2 runs, 0 s]"), exit 1.
    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        trace
    )
    out = tmp_path / "c.json"
    args = ["sweep", str(trace), "--target", "127.0.0.1:1", "--levels", "0.5", "--duration", "1s"]
    args += ["--processes", "2", "--generator-cpus", "0", "--allow-overlap", "-o", str(out)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --processes: 2 engine processes need 2 generator CPUs"), (
        r.output
    )
    assert "rate_factor" not in r.output and not Path(out).exists()
