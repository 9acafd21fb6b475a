"""A stdout whose encoding lacks a character shrink prints (a path's "ü" under
``PYTHONIOENCODING=ascii``) shows it escaped: the command's own status, never the
internal error (exit 70) that ``trace info`` gave after reading the trace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.trace import Trace

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def test_a_path_stdouts_encoding_lacks_is_shown_escaped(tmp_path):
    path = tmp_path / "tü.parquet"
    Trace.from_columns({"session": [0, 1], "t": [0.0, 1.0], "path": ["/a", "/b"]}).write_parquet(
        path
    )
    out = subprocess.run(
        [sys.executable, "-m", "shrink", "trace", "info", str(path)], capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "ascii"}, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    assert b"t\\xfc.parquet" in out.stdout and b"internal error" not in out.stderr
