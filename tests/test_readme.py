"""The README's command tour runs as written (STYLE: the README run as a test).

Each ```sh block under "A tour of the commands" is run line by line with bash in a
scratch directory that has ``examples/`` linked in and ``$SHARED`` pointing at
the real traces. The live-server block needs lighttpd and php-cgi.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REAL, ROOT, SHARED

README = ROOT / "README.md"


def _tour_blocks() -> list[str]:
    text = README.read_text()
    start = text.index("## A tour of the commands")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```sh\n(.*?)```", text[start:end], flags=re.S)


STALLED = "no usable level: the generator fell behind at every level"


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "SHARED": str(SHARED), "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


def _run_block(block: str, cwd: Path) -> None:
    lines = [ln.strip() for ln in block.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    for i, line in enumerate(lines):
        res = _run(line, cwd)
        if res.returncode != 0 and STALLED in res.stderr:
            # Every level was flagged because this VM stalled the generator (it does:
            # bench/RESULTS.md). The refusal is right; measure once more before judging.
            sweep = next(ln for ln in reversed(lines[:i]) if ln.startswith("shrink sweep"))
            assert _run(sweep, cwd).returncode == 0
            res = _run(line, cwd)
            if res.returncode != 0 and STALLED in res.stderr:
                pytest.skip("the generator fell behind at every level twice (VM stalls)")
        assert res.returncode == 0, f"README line failed: {line}\n{res.stdout}\n{res.stderr}"


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def test_the_readme_has_the_two_commands_first():
    head = README.read_text().split("## ", 1)[0]
    assert "make demo" in head and "make test" in head
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_tour_of_the_commands_runs(scratch: Path):
    if not REAL.is_dir():
        pytest.skip(f"real traces not found at {REAL}")
    blocks = _tour_blocks()
    assert len(blocks) == 2
    _run_block(blocks[0], scratch)
    assert (scratch / "support-25.parquet").exists()
    assert (scratch / "parts" / "part-001.parquet").exists()


@pytest.mark.live
def test_tour_of_the_live_server_runs(scratch: Path):
    for tool in ("lighttpd", "php-cgi"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make setup installs it as root)")
    blocks = _tour_blocks()
    _run_block(blocks[0].split("# SHRiNK sampling")[0], scratch)  # the traces and docroot
    subprocess.run(
        [
            "shrink",
            "sample",
            "support.parquet",
            "--alpha",
            "0.25",
            "--seed",
            "7",
            "-o",
            "support-25.parquet",
        ],
        cwd=scratch,
        check=True,
        capture_output=True,
    )
    try:
        _run_block(blocks[1], scratch)
    finally:
        if (scratch / "tb.json").exists():
            subprocess.run(
                ["shrink", "testbed", "down", "--state", "tb.json"],
                cwd=scratch,
                capture_output=True,
            )
    assert (scratch / "curve.json").exists()
