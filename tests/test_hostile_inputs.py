"""Hostile and odd inputs to the offline commands: pipes and devices, inflating captures,
impossible dates, traces past what a reader accepts, names that would drive a terminal.

Each is one line naming the file (and the line), never a hang, a traceback or exit 70.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.errors import TraceFormatError
from shrink.ingest import read_trace


@pytest.mark.parametrize("fmt", ["auto", "clf", "pcap", "parquet"])
def test_a_device_is_refused_by_name(fmt: str) -> None:
    # /dev/null read as a log was an empty trace; /dev/zero as a capture filled memory.
    with pytest.raises(TraceFormatError, match=r"^/dev/null: not a regular file"):
        read_trace("/dev/null", format=fmt)


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    # It blocked in open() until a writer came, then lost its head to the format check.
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    r = subprocess.run(
        [sys.executable, "-m", "shrink", "ingest", str(fifo), "-o", str(tmp_path / "t.parquet")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {fifo}: not a regular file (a pipe, socket or device): a trace is read "
        "more than once, so save it to a file first"
    ]
