"""``testbed up`` leaves its servers running and exits: Python calls the dropped Popen of
a running process a ResourceWarning, and under ``PYTHONWARNINGS=error`` (or ``-X dev``)
``up`` printed "Exception ignored in: <function Popen.__del__ ...> Traceback ..."
after it had said it was done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flags", [["-W", "error"], ["-X", "dev"]], ids=["W-error", "X-dev"])
def test_a_server_left_running_is_no_traceback(flags):
    code = (
        "from shrink.processes import start_process\n"
        "p = start_process(['sleep', '30'])\n"
        "print(p.pid)\n"
        "del p\n"
    )
    done = subprocess.run(
        [sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    pid = int(done.stdout.split()[0])
    os.kill(pid, signal.SIGKILL)  # (its own session: a child of init now)
    assert done.returncode == 0
    assert "Traceback" not in done.stderr and "ResourceWarning" not in done.stderr, done.stderr
