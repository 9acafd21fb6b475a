"""Readers bound a line or record: a gzip that inflates to a long line with no line
break, or a large sparse file of zeros, fails fast in one line naming the file (and the
line), in bounded memory, with auto-detection and with each --format."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from shrink.errors import TraceFormatError
from shrink.ingest import read_trace

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]
# The child's own peak RSS is /proc's VmHWM: ru_maxrss starts at the parent's peak
# (Linux carries it across exec), so a large test process read as a large child.
CHILD = """
import re, sys
sys.argv = ["shrink", *sys.argv[1:]]
from shrink.cli import main
try:
    main()
finally:
    with open("/proc/self/status") as status:
        rss = int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read())[1])
    print(f"maxrss_kb {rss}", file=sys.stderr)
"""


def _ingest(*args: str) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in MB) of ``shrink ingest ARGS`` in a subprocess."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, "ingest", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    rss = int(out.stderr.rsplit("maxrss_kb ", 1)[1].split()[0]) // 1024
    return out.returncode, out.stderr.rsplit("maxrss_kb ", 1)[0], rss


@pytest.fixture(scope="module")
def sparse(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("big") / "zeros.log"
    with p.open("wb") as f:
        f.truncate(2 << 30)  # 2 GiB of zeros, no block written
    return p


@pytest.mark.parametrize("fmt", ["auto", "clf", "specweb", "wsesslog", "pcap"])
def test_a_sparse_file_of_zeros_fails_fast_in_bounded_memory(tmp_path, sparse, fmt):
    status, err, rss = _ingest(str(sparse), "-o", str(tmp_path / "t.parquet"), "--format", fmt)
    assert status == 1, err
    assert str(sparse) in err and "empty" not in err and len(err.strip().splitlines()) == 1
    # About 150 MB of interpreter and libraries, loaded or not: well under the file.
    assert rss < 400, f"{rss} MB"


def test_a_gzip_inflating_to_one_long_line_fails_at_the_bound(tmp_path):
    bomb = tmp_path / "bomb.log.gz"
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = b"a" * (1 << 20)
    with bomb.open("wb") as f:
        for _ in range(512):  # 512 MiB inflated, a few hundred KiB on disk
            f.write(c.compress(block))
        f.write(c.flush())
    status, err, rss = _ingest(str(bomb), "-o", str(tmp_path / "t.parquet"), "--format", "clf")
    assert status == 1 and f"{bomb}, line 1: a line longer than 1,048,576 bytes" in err, err
    assert rss < 400, f"{rss} MB"  # reading the line whole would take over 660 MB


def test_the_bound_is_configurable_and_names_the_line(tmp_path):
    log = tmp_path / "a.log"
    good = '1.2.3.4 - - [01/Aug/1995:00:00:01 -0400] "GET /x HTTP/1.0" 200 10\n'
    log.write_text(good * 3 + good.replace("/x", "/" + "y" * 5000) + good)
    assert len(read_trace(log, format="clf")) == 5
    with pytest.raises(TraceFormatError, match=r"a\.log, line 4: a line longer than 4,096"):
        read_trace(log, format="clf", max_line=4096)
    status, err, _ = _ingest(str(log), "-o", str(tmp_path / "t.parquet"), "--max-line", "4096")
    assert status == 1 and "line 4" in err
