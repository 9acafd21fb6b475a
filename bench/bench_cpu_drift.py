"""How steady is this machine's CPU speed? (It bounds every live MAT measured here.)

Times a fixed kernel (200,000 chained SHA-256 hashes) on one CPU every 2 s and
prints each time and the ratio of the slowest to the fastest run of the same
work, measured in the same run: 1.0 would be a steady machine.

    python bench/bench_cpu_drift.py [--cpu 1] [--samples 15]
    python bench/bench_cpu_drift.py --pair --seconds 90   # do CPU 0 and CPU 1 drift together?

``--pair`` runs the hashes on CPU 0 (a 5% duty cycle, like a probe beside the load
generator) and on CPU 1 (flat out) at once, and prints the correlation of their
per-second speeds: near 1, a probe on the generator's CPU could track the server's
CPU speed; near 0, it cannot.
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


def _speeds(cpu: int, seconds: float, duty: float, out: str) -> None:
    """Per-second hash rates on ``cpu`` for ``seconds`` (child process), to ``out``."""
    import json

    os.sched_setaffinity(0, {cpu})
    t0, rates, h = time.monotonic(), {}, b"x" * 32
    while (now := time.monotonic() - t0) < seconds:
        a = time.perf_counter()
        for _ in range(500):
            h = hashlib.sha256(h).digest()
        took = time.perf_counter() - a
        rates.setdefault(int(now), []).append(500 / took)
        if duty < 1:
            time.sleep(took * (1 / duty - 1))
    with open(out, "w") as f:
        json.dump({k: sorted(v)[len(v) // 2] for k, v in rates.items()}, f)


def pair(seconds: float) -> None:
    import json
    import multiprocessing as mp
    import statistics
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        outs = [f"{tmp}/cpu0.json", f"{tmp}/cpu1.json"]
        procs = [
            mp.Process(target=_speeds, args=(0, seconds, 0.05, outs[0])),
            mp.Process(target=_speeds, args=(1, seconds, 1.0, outs[1])),
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        from pathlib import Path

        a, b = (json.loads(Path(o).read_text()) for o in outs)
    keys = sorted(set(a) & set(b), key=int)[:-1]
    x, y = [a[k] for k in keys], [b[k] for k in keys]
    print(
        f"{len(keys)} s; CPU 0 slowest/fastest {max(x) / min(x):.2f}, CPU 1 {max(y) / min(y):.2f}"
    )
    for w in (1, 5, 10):
        xb = [statistics.mean(x[i : i + w]) for i in range(0, len(x) - w + 1, w)]
        yb = [statistics.mean(y[i : i + w]) for i in range(0, len(y) - w + 1, w)]
        print(f"correlation of {w:2d} s speeds: {statistics.correlation(xb, yb):+.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--gap", type=float, default=2.0)
    ap.add_argument("--pair", action="store_true", help="CPU 0 against CPU 1, at once")
    ap.add_argument("--seconds", type=float, default=90.0, help="length of --pair")
    args = ap.parse_args()
    if args.pair:
        pair(args.seconds)
        return
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
