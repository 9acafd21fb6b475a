"""A large recorded body is held as few times as a replay needs: the trace's column, one
Python bytes per distinct body (not beside a dictionary's copy of it), the built request,
which the native core sends from where it is rather than copying it a byte at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shrink.trace import Trace

pytestmark = pytest.mark.compute

MB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


# Run in a child: this process's allocators keep what earlier tests freed, and a new
# allocation reuses it unseen.
CHILD = """
import json, re, sys
import pyarrow as pa
from shrink import request_keys
from shrink.trace import Trace

def rss(field):
    with open("/proc/self/status") as status:
        return int(re.search(field + r":\\s+(\\d+) kB", status.read())[1]) / 1024

trace = Trace.read_parquet(sys.argv[1])
pa.default_memory_pool().release_unused()
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the peak (VmHWM) starts again from here
before = rss("VmRSS")
keys, codes = request_keys.request_keys(trace)
lengths = sorted(len(k[2]) for k in keys)
print(json.dumps([rss("VmHWM") - before, lengths, bool(codes[0] == codes[-1])]))
"""


def test_request_keys_hold_a_large_body_about_twice_not_five_times(tmp_path: Path) -> None:
    size = 64 * MB
    big = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8).tobytes()
    n = 50
    Trace.from_columns(
        {"session": np.arange(n), "t": np.arange(n) * 0.01, "path": ["/up"] * n,
         "method": ["POST"] * n, "body": [big, *[b"small"] * (n - 2), big]},
    ).write_parquet(tmp_path / "t.parquet")  # fmt: skip
    del big
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "t.parquet")],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    grew, lengths, same = json.loads(out.stdout)
    assert lengths == [5, size] and same, out.stdout
    # The Python bytes (64 MB) and, for a moment, Arrow's dictionary of it (2.1 x); the
    # dictionary and its Python bytes together, and a copy of the column, took 5 x.
    assert grew < 3 * size / MB, f"{grew:.0f} MB for a {size // MB} MB body"
