"""Names reach the terminal escaped: CR, LF and ANSI escapes in a file name are shown,
not obeyed, in errors' str() and in the CLI's error line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.errors import TraceFormatError, WriteError, printable

ROOT = Path(__file__).resolve().parents[1]
NASTY = "x\x1b[2J\x1b[31mred\rfake line\nerror: forged\x07.parquet"


def test_printable_escapes_control_characters_only():
    assert printable("a\x1b[31mb\r\nc\td\x7f\x9b") == "a\\x1b[31mb\\r\\nc\\td\\x7f\\x9b"
    assert printable("café / naïve ünïcode ok") == "café / naïve ünïcode ok"
    assert printable("zero\u200bwidth\u2028line") == "zero\\u200bwidth\\u2028line"


@pytest.mark.parametrize(
    "err",
    [TraceFormatError("bad", path=NASTY, line=3), WriteError(NASTY, OSError(28, "full"))],
)
def test_errors_str_is_escaped(err):
    text = str(err)
    assert "\x1b" not in text and "\r" not in text and "\n" not in text and "\x07" not in text
    assert "\\x1b[31mred\\rfake line\\nerror: forged\\x07" in text


def test_the_cli_error_line_is_escaped(tmp_path):
    bad = tmp_path / NASTY
    bad.write_bytes(b"not parquet")
    out = subprocess.run(
        [sys.executable, "-m", "shrink", "trace", "info", str(bad)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    err = out.stderr.decode()
    assert "\x1b[2J" not in err and "\r" not in err and "\x07" not in err
    assert len(err.strip().splitlines()) == 1 and "\\x1b[31mred\\rfake line\\n" in err
