"""``replay -o X`` and ``sweep -o C`` print their summary after the files are written,
outside the commands' error reporter: a stdout whose reader had gone (``| true``)
ended them with click's own EPIPE exit (141 from shrink's main), nothing said of the
RunLog or curve written, where ``sample`` and ``split`` name theirs; a full stdout
said "No space left on device" and nothing of them either."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _replay(out: Path, stdout: int) -> subprocess.CompletedProcess[str]:
    # Port 9 (discard): nothing listens on loopback, every request is refused at once;
    # the RunLog is written all the same, then the summary printed.
    return subprocess.run(
        [sys.executable, "-m", "shrink", "replay", "--rate", "20", "--target",
         "http://127.0.0.1:9/", "--duration", "1s", "--realtime", "0", "-o", str(out)],
        stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_a_replay_whose_reader_has_gone_names_its_runlog(tmp_path):
    r, w = os.pipe()
    os.close(r)
    try:
        done = _replay(tmp_path / "r.parquet", w)
    finally:
        os.close(w)
    assert done.returncode == 141, done.stderr
    assert done.stderr.splitlines()[-1] == f"stdout closed: kept {tmp_path / 'r.parquet'}"
    assert (tmp_path / "r.parquet").stat().st_size > 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_replay_on_a_full_stdout_names_its_runlog(tmp_path):
    with open("/dev/full", "w") as full:
        done = _replay(tmp_path / "r.parquet", full.fileno())
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"error: standard output: No space left on device; kept {tmp_path / 'r.parquet'}"
    )
