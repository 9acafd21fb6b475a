"""The terminal's variables as a shell, a container or CI may set them: what shrink
says is still said."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _shrink(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shrink", *args], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120,
    )  # fmt: skip


def test_a_zero_width_does_not_silence_errors_or_tables(tmp_path):
    """``COLUMNS=0`` (as ``docker exec`` without a terminal has set it): rich took a
    width of 0 and printed nothing at all. An error exited 1 without a word, and
    ``trace info`` exited 0 with an empty stdout."""
    zero = {"COLUMNS": "0"}
    done = _shrink(zero, "sample", "missing.parquet", "--alpha", "0.5", "-o", "x.parquet",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == "error: missing.parquet: no such file", done.stderr
    (tmp_path / "a.log").write_text(
        '127.0.0.1 - - [01/Jul/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 10\n'
    )
    assert _shrink(zero, "ingest", "a.log", "-o", "t.parquet", cwd=tmp_path).returncode == 0
    info = _shrink(zero, "trace", "info", "t.parquet", cwd=tmp_path)
    assert info.returncode == 0 and "sessions" in info.stdout, (info.stdout, info.stderr)
