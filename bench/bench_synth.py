"""Benchmark the synthetic workloads and calibrate the PHP work unit.

Run: ``python bench/bench_synth.py``. Each line prints a ratio against a
reference measured in the same run:

* ``synth support`` (1000 users, 60 s) and ``synth tcp`` (1,000,000 requests)
  against a plain per-request Python loop that makes the same number of rows;
* the PHP work unit (``app/_work.php``, via ``php-cgi``): microseconds a unit
  takes at working sets of 64 KiB .. 32 MiB, each against the 64 KiB figure
  (the calibration target is 1.0 us a unit at 64 KiB).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sampling import best_of  # this script's folder is on sys.path

from shrink.synth import SupportParams, build_site, support_docroot, synth_support, synth_tcp


def _python_rows(n: int) -> list[tuple]:
    rng = random.Random(0)
    rows = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(1.0)
        rows.append((i, 0, t, 0.0, "GET", "/static/img/i001.gif", "static", 1000, 200))
    return rows


def bench_generators() -> None:
    n_support = len(synth_support(1000, 60, seed=1))
    ours = best_of(3, lambda: synth_support(1000, 60, seed=1))
    ref = best_of(3, lambda: _python_rows(n_support))
    print(f"synth support 1000 users 60 s: {n_support:,} rows in {ours * 1e3:.0f} ms; "
          f"python loop {ref * 1e3:.0f} ms; ratio {ref / ours:.1f}x")  # fmt: skip
    ours = best_of(3, lambda: synth_tcp(100_000, 10, seed=1))
    ref = best_of(1, lambda: _python_rows(1_000_000))
    print(f"synth tcp 1,000,000 requests: {ours * 1e3:.0f} ms; python loop {ref * 1e3:.0f} ms; "
          f"ratio {ref / ours:.1f}x")  # fmt: skip


def bench_docroot() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = build_site(SupportParams(max_download_bytes=1 << 20), 1000)
        t0 = time.perf_counter()
        first = support_docroot(tmp, site)
        write = time.perf_counter() - t0
        t0 = time.perf_counter()
        support_docroot(tmp, site)
        again = time.perf_counter() - t0
        print(f"docroot (1000 users, downloads capped at 1 MiB): {first.static_files} files, "
              f"{first.bytes_on_disk / 2**20:.0f} MiB written in {write * 1e3:.0f} ms; "
              f"re-run {again * 1e3:.0f} ms; ratio {write / again:.1f}x")  # fmt: skip


_CAL = """<?php
require getenv('SHRINK_WORK_PHP');
$units = (int) $_GET['units'];
$out = [];
foreach ([64, 1024, 4096, 32768] as $mem) {
    $best = INF;
    for ($r = 0; $r < 5; $r++) {
        $t0 = hrtime(true);
        shrink_walk($units, $mem);
        $best = min($best, (hrtime(true) - $t0) / 1000.0);
    }
    $t0 = hrtime(true);
    shrink_walk(0, $mem);
    $out[$mem] = ['us_per_unit' => $best / $units, 'build_us' => (hrtime(true) - $t0) / 1000.0];
}
echo json_encode($out);
"""


def bench_php_unit() -> None:
    php = shutil.which("php-cgi")
    if php is None:
        print("php work unit: skipped (php-cgi not installed)")
        return
    work = Path(__file__).resolve().parent.parent / "shrink" / "synth" / "php" / "_work.php"
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "cal.php"
        script.write_text(_CAL)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "REDIRECT_STATUS": "200",
            "SCRIPT_FILENAME": str(script),
            "REQUEST_METHOD": "GET",
            "QUERY_STRING": "units=100000",
            "SHRINK_WORK_PHP": str(work),
        }
        done = subprocess.run([php, "-q"], env=env, capture_output=True, check=True, timeout=300)
    body = done.stdout.partition(b"\r\n\r\n")[2]
    figures = json.loads(body)
    ref = figures["64"]["us_per_unit"]
    for mem, f in figures.items():
        print(f"php work unit at {int(mem):>6} KiB: {f['us_per_unit']:.3f} us/unit "
              f"(target 1.0 at 64 KiB), building the set {f['build_us']:.0f} us; "
              f"ratio to 64 KiB {f['us_per_unit'] / ref:.2f}x")  # fmt: skip


def main() -> int:
    bench_generators()
    bench_docroot()
    bench_php_unit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
