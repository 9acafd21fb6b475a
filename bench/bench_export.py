"""What a sweep's exports cost, against the exact statistics of the same requests.

python bench/bench_export.py [--requests N] [--repeat K]

One sweep of the in-process FakeTarget (N requests over 3 levels x 2 repetitions)
is recorded once; then, alternately, K times each: the reference, the exact
statistics the LoadCurve keeps (``latency_stats`` on every repetition's array),
and ``write_sweep_exports`` (HdrHistogram logs and spectra, Locust and k6 CSVs).
Prints the median times and their ratio; the k6 file (a row per request) is most
of the cost.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from shrink.export import RecordingTarget, level_samples, write_sweep_exports
from shrink.loadcurve import latency_stats
from shrink.measure import sweep
from shrink.target import FakeTarget
from shrink.trace import Trace


def _trace(rate: float, seconds: float) -> Trace:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1 / rate, int(rate * seconds * 1.1)))
    t = t[t < seconds]
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/x"] * t.size}, meta={"mode": "open"}
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    levels, reps, window = [0.5, 1.0, 1.5], 2, 10.0
    rate = args.requests / (sum(levels) * reps * window)
    trace = _trace(rate, 40.0)
    rec = RecordingTarget(FakeTarget(servers=4, demand={"static": 0.25 / rate}))
    curve = sweep(rec, trace, levels, reps=reps, warmup=1.0, duration=window, seed=1)
    runs = level_samples(curve, trace, rec.runs)
    n = sum(int(r.ok.size) for r in runs)
    ref, exp = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "curve.json"
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for r in runs:
                latency_stats(r.latency, r.window[1] - r.window[0])
            ref.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            files = write_sweep_exports(path, runs)
            exp.append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in files)
    r_ms, e_ms = 1e3 * statistics.median(ref), 1e3 * statistics.median(exp)
    print(f"{n:,} requests in {len(runs)} repetitions; exports {len(files)} files, {size:,} bytes")
    print(f"exact statistics (reference): {r_ms:,.1f} ms   exports: {e_ms:,.1f} ms")
    per = 1e3 * e_ms / n
    print(f"ratio exports / exact statistics: {e_ms / r_ms:,.1f}  ({per:.2f} us a request)")


if __name__ == "__main__":
    main()
