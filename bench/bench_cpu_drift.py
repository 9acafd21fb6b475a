"""How steady is this machine's CPU speed? (It bounds every live MAT measured here.)

Times a fixed kernel (200,000 chained SHA-256 hashes) on one CPU every 2 s and
prints each time and the ratio of the slowest to the fastest run of the same
work, measured in the same run: 1.0 would be a steady machine.

    python bench/bench_cpu_drift.py [--cpu 1] [--samples 15]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time


def kernel() -> float:
    t = time.perf_counter()
    h = b"x" * 64
    for _ in range(200_000):
        h = hashlib.sha256(h).digest()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--gap", type=float, default=2.0)
    args = ap.parse_args()
    if args.cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {args.cpu})
    times = []
    for _ in range(args.samples):
        times.append(kernel())
        print(f"{times[-1] * 1e3:7.1f} ms", flush=True)
        time.sleep(args.gap)
    print(
        f"fastest {min(times) * 1e3:.1f} ms, slowest {max(times) * 1e3:.1f} ms, "
        f"slowest/fastest {max(times) / min(times):.2f}"
    )


if __name__ == "__main__":
    main()
