"""The README and the tour run as written (STYLE: the README run as a test).

The README's ```sh block under "Try it without a server" and every ```sh block of
docs/tour.md are run line by line with bash in a scratch directory that has
``examples/`` linked in (the tour's first two blocks in one, in order, as a reader
runs them). The README's block and the tour's first read only what the
project ships (``examples/traces``, made by ``examples/traces/make_traces.py``) or
make, so they run on a fresh clone; the tour's live-server block needs lighttpd and
php-cgi; its last block reads the real traces through ``$SHARED`` and runs only
where they are. Commands that need a server of yours ("Predict your own server")
are checked against the CLI by tests/test_docs.py instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REAL, ROOT, SHARED, server_user_may_enter

README = ROOT / "README.md"
TOUR = ROOT / "docs" / "tour.md"
# A reader gets from the top of the README to predicting their own server in this
# many lines, and reads all of it in five minutes.
OWN_SERVER_BY_LINE = 60
README_LINES = 200


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _tour_blocks() -> list[str]:
    return _sh_blocks(TOUR.read_text())


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


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tour's scratch directory after its first block, run once: the commands test
    checks what it made, and the live-server block goes on from it, as a reader does
    (its testbed serves the document root the first block synthesized)."""
    d = tmp_path_factory.mktemp("tour")
    server_user_may_enter(d, tmp_path_factory.getbasetemp())
    (d / "examples").symlink_to(ROOT / "examples")
    _run_block(_tour_blocks()[0], d)
    return d


@pytest.mark.compute
def test_the_readme_has_the_two_commands_first():
    head = README.read_text().split("## ", 1)[0]
    assert "make demo" in head and "make test" in head
    first = _sh_blocks(head)[0].splitlines()
    assert first[0].startswith("make demo") and first[1].startswith("make test")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


@pytest.mark.compute
def test_the_readme_is_short_and_shows_your_own_server_early():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_LINES, len(lines)
    at = lines.index("## Predict your own server")
    own = _sh_blocks(_section(README.read_text(), "Predict your own server"))[0]
    commands = [ln for ln in own.splitlines() if ln.startswith("shrink ")]
    assert [c.split()[1] for c in commands] == ["ingest", "predict", "validate"]
    block_end = at + lines[at:].index("```", lines[at:].index("```sh") + 1)
    assert block_end < OWN_SERVER_BY_LINE, block_end
    # Dated results live in bench/RESULTS.md only.
    dated = re.compile(r"[Ss]ession [0-9]+|20[0-9]{2}-[01][0-9]-[0-3][0-9]")
    assert not [ln for ln in lines if dated.search(ln)]


@pytest.mark.compute
def test_the_readme_try_it_block_runs(scratch: Path):
    blocks = _sh_blocks(_section(README.read_text(), "Try it without a server"))
    assert len(blocks) == 1
    _run_block(blocks[0], scratch)
    assert (scratch / "support-25.parquet").exists() and (scratch / "access.parquet").exists()


def test_tour_of_the_commands_runs(tour: Path):
    blocks = _tour_blocks()
    assert len(blocks) == 3
    assert "$SHARED" not in blocks[0] + blocks[1], "the tour must run on a fresh clone"
    assert (tour / "access.parquet").exists() and (tour / "capture.parquet").exists()
    assert (tour / "support-25.parquet").exists()
    assert (tour / "parts" / "part-001.parquet").exists()
    assert (tour / "calibration.json").exists()


@pytest.mark.compute
def test_tour_with_the_real_traces_runs(scratch: Path):
    if not REAL.is_dir():
        pytest.skip(f"real traces not found at {REAL} (a fresh clone has none)")
    block = _tour_blocks()[2]
    assert "$SHARED" in block
    _run_block(block, scratch)
    assert (scratch / "nasa.wsesslog").exists()


@pytest.mark.compute
def test_the_shipped_traces_are_the_projects_own(tmp_path: Path):
    """examples/traces holds exactly what make_traces.py writes (nothing fetched)."""
    import runpy

    shipped = ROOT / "examples" / "traces"
    mod = runpy.run_path(str(shipped / "make_traces.py"))
    for made in mod["main"](tmp_path):
        assert made.read_bytes() == (shipped / made.name).read_bytes(), made.name
        assert made.stat().st_size < 32_000  # a few KB: fit for a repository


@pytest.mark.live
def test_tour_of_the_live_server_runs(tour: Path):
    for tool in ("lighttpd", "php-cgi"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make setup installs it as root)")
    try:
        _run_block(_tour_blocks()[1], tour)
    finally:
        if (tour / "tb.json").exists():
            subprocess.run(
                ["shrink", "testbed", "down", "--state", "tb.json"],
                cwd=tour,
                capture_output=True,
            )
    # The tour had no replay and no extrapolate, and swept a 25% sample on a 50% share.
    assert (tour / "curve.json").exists() and (tour / "run.parquet").exists()
