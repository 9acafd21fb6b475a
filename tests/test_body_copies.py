"""A large recorded body is held as few times as a replay needs: the trace's column, one
Python bytes per distinct body (not beside a dictionary's copy of it), the built request,
which the native core sends from where it is rather than copying it a byte at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shrink.replay import native
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


@pytest.mark.skipif(not native.available(), reason="the native core is not built")
def test_the_native_core_takes_a_large_request_without_copying_it() -> None:
    big = b"x" * (64 * MB)
    args = dict(
        open=True, targets=[("127.0.0.1", 9)], req_bytes=[[big]], key_of_row=b"",
        cls_of_row=b"", head_only_of_key=[False], times=b"", route=b"", rows=b"",
        sessions=b"", burst_off=b"", burst_first=b"", burst_end=b"", burst_think=b"",
        horizon=1.0, timeout=1.0, drain=0.0, max_pool=1, conns_per_session=1,
        conn_per_request=False, batch=1, tcodes=[], ecodes=[], t0=0.0, on_rows=None,
    )  # fmt: skip
    t = time.perf_counter()
    with pytest.raises(ValueError, match="do not match the targets"):  # after taking them
        native._core.run(**args)
    took = time.perf_counter() - t
    # Taken as a sequence of ints it was 0.8 s for these 64 MiB, after the run's clock
    # had started: the schedule's first second went out late.
    assert took < 0.1, f"{took:.2f} s"
