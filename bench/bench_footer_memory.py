"""The memory a Parquet file's footer costs to read, per byte of the footer: the measure
behind ``shrink.defaults.FOOTER_READ_FACTOR``.

Each file is ``groups`` one-row row groups of ``columns`` columns (half int64, half
text), or a trace of the synthesized Support workload cut to one-row row groups: a few
MB of data and a footer of 1-20 MB. A fresh process reads it (``--what parse``: one
``pyarrow.parquet.ParquetFile`` and its schema and metadata; ``--what read``:
``shrink.parquet_read.read_bounded`` with no bound, all it does) and reports its peak
RSS over the one before; the factor is that over the footer's length (the file's last
8 bytes).

    python bench/bench_footer_memory.py [--what read|parse|both]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (row groups, columns); None: the Support trace, 20,000 requests
FILES = [(2000, 6), (20000, 2), (20000, 6), (5000, 20), (20000, None)]

# The peak over the resident size before, the peak reset first (clear_refs 5): the
# imports' own peak would otherwise hide a smaller one.
_CHILD = """
import sys
from pathlib import Path
import pyarrow.parquet as pq
from shrink.parquet_read import footer_length, read_bounded
def kib(key):
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith(key))
path, what = Path(sys.argv[1]), sys.argv[2]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kib("VmRSS:")
if what == "parse":
    with pq.ParquetFile(path) as pf:
        pf.schema_arrow, pf.metadata
else:
    read_bounded(path, left=1 << 62)
print(footer_length(path), (kib("VmHWM:") - before) * 1024)
"""


def _write(path: Path, groups: int, columns: int | None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if columns is None:
        from shrink.synth import synth_support

        table = synth_support(users=200, duration=120.0, seed=1).table.slice(0, groups)
        pq.write_table(table, path, row_group_size=1)
        return path
    cols = {f"c{i}": pa.array([1]) if i % 2 else pa.array(["/a"]) for i in range(columns)}
    table = pa.table(cols)
    with pq.ParquetWriter(path, table.schema) as w:
        for _ in range(groups):
            w.write_table(table)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("read", "parse", "both"), default="both")
    args = ap.parse_args()
    import pyarrow

    print(
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, pyarrow {pyarrow.__version__}"
    )
    whats = ("parse", "read") if args.what == "both" else (args.what,)
    with tempfile.TemporaryDirectory() as tmp:
        for groups, columns in FILES:
            name = f"{groups} row groups x {columns or 'trace'} columns"
            path = _write(Path(tmp) / "f.parquet", groups, columns)
            for what in whats:
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(path), what],
                    cwd=ROOT, capture_output=True, text=True, check=True,
                )  # fmt: skip
                footer, peak = (int(x) for x in out.stdout.split())
                print(
                    f"{name:32} {what:5} footer {footer / 1e6:6.1f} MB  peak +{peak / 1e6:7.1f} MB"
                    f"  {peak / footer:5.1f} bytes a footer byte"
                )


if __name__ == "__main__":
    main()
