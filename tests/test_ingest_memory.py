"""The streamed text readers' peak memory stays within a few times the trace they build.

Each read runs in a fresh Python process that reports the growth of its peak RSS
(``ru_maxrss``) from the moment the reader was imported, and the size of the table
read. The bounds sit between what the readers take now and what they took when
every column's intermediates (batch chunks, their concatenation, the reordered
copy, a list of n Python strings for a default column) stayed resident: for these
logs about 2.3 and 0.75 times the table, against 4.0 and 1.5 before. The Common Log
Format reader is left out: its growth at this size is mostly fixed costs.
"""

from __future__ import annotations

import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_READ = """
import resource, sys
from shrink.ingest import read_specweb, read_wsesslog
read = {"specweb": read_specweb, "wsesslog": read_wsesslog}[sys.argv[1]]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
trace = read(sys.argv[2])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print({"growth": (peak - base) * 1024, "table": trace.table.nbytes, "rows": len(trace)})
"""

_MIB = 2**20


def _urls(rnd: random.Random, count: int) -> list[str]:
    return [
        f"/app/p.php?id={rnd.randrange(50_000)}" if i % 5 == 0 else f"/static/f{i}.gif"
        for i in range(count)
    ]


def _specweb_log(path: Path, size: int) -> None:
    """A recorded-session log of ``size`` bytes: sessions of 20 requests, in order."""
    rnd = random.Random(7)
    urls = _urls(rnd, 50_000)
    rows = ["#shrink-sessions v1\n# fields: time session url method status bytes rt\n"]
    written = 0
    i = 0
    while written < size:
        url, size_ = rnd.choice(urls), rnd.randrange(99, 9**6)
        row = f"{i / 1000:.3f}\tu{i // 20}\t{url}\tGET\t200\t{size_}\t0.004\n"
        rows.append(row)
        written += len(row)
        i += 1
    path.write_text("".join(rows), encoding="utf-8")


def _wsesslog(path: Path, size: int) -> None:
    """An httperf session log of ``size`` bytes: sessions of 3 bursts of 4 requests."""
    rnd = random.Random(8)
    urls = _urls(rnd, 50_000)
    parts: list[str] = []
    written = 0
    i = 0
    while written < size:
        k = i % 13
        part = (
            "\n"
            if k == 12
            else (f"{rnd.choice(urls)} think=1.5\n" if k % 4 == 0 else f"\t{rnd.choice(urls)}\n")
        )
        parts.append(part)
        written += len(part)
        i += 1
    path.write_text("".join(parts), encoding="utf-8")


def _read_in_child(fmt: str, log: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _READ, fmt, str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "write", "bound"),
    [("specweb", _specweb_log, 3.2), ("wsesslog", _wsesslog, 1.1)],
)
def test_peak_memory_of_a_large_log_stays_near_its_trace(tmp_path, fmt, write, bound):
    if not sys.platform.startswith("linux"):
        pytest.skip("ru_maxrss is in KiB on Linux only")
    log = tmp_path / f"big.{fmt}"
    write(log, 10 * _MIB)
    r = _read_in_child(fmt, log)
    assert r["rows"] > 100_000
    ratio = r["growth"] / r["table"]
    assert ratio < bound, (
        f"{fmt}: peak RSS grew {r['growth'] / _MIB:.0f} MiB for a "
        f"{r['table'] / _MIB:.0f} MiB table ({ratio:.1f}x, bound {bound}x)"
    )
