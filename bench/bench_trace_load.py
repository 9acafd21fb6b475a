"""How fast a Trace loads from Parquet, against pyarrow reading the same file.

Builds a 1,000,000-request trace (100,000 sessions, 10,000 distinct paths), writes
it with ``Trace.write_parquet``, then times ``Trace.read_parquet`` and
``pyarrow.parquet.read_table`` on that file (median of several runs, the two
alternating, after one warm-up read) and prints the ratio. Also times the Common Log Format
reader on the real Elastic log repeated to 100,000 lines when ../shared is there.

    python bench/bench_trace_load.py [--requests N] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from shrink.ingest import read_clf
from shrink.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
ELASTIC = ROOT.parent / "shared" / "data" / "real" / "elastic_apache_logs_combined.log"


def build(n: int, seed: int = 1) -> Trace:
    """A synthetic trace of ``n`` requests: 10 per session, bursts of 1-4."""
    rng = np.random.default_rng(seed)
    session = np.arange(n, dtype=np.int64) // 10
    within = np.arange(n) % 10
    burst = (within // 3).astype(np.int32)
    t = session * 0.05 + burst * 2.0
    pool = np.array(
        [f"/static/img/d{i % 97}/f{i}.gif" for i in range(9_000)]
        + [f"/app/product.php?id={i}" for i in range(1_000)],
        dtype=object,
    )
    pick = rng.integers(0, pool.size, n)
    path = pool[pick]
    cls = np.where(pick >= 9_000, "dynamic", "static").astype(object)
    return Trace.from_columns(
        {
            "session": session,
            "burst": burst,
            "t": t,
            "think": rng.exponential(7.0, n),
            "method": np.full(n, "GET", dtype=object),
            "path": path,
            "cls": cls,
            "bytes": rng.integers(100, 200_000, n),
            "status": np.full(n, 200, dtype=np.int32),
            "rt": rng.exponential(0.01, n),
            "client": np.array([f"10.0.{s % 256}.{s % 251}" for s in range(n // 10)], object)[
                session
            ],
        },
        meta={"reader": "bench", "source": "synthetic"},
    )


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _interleaved(a, b, repeat: int) -> tuple[float, float]:
    """Median times of ``a`` and ``b`` run alternately, so that load spikes hit both."""
    ta, tb = [], []
    for _ in range(repeat):
        for fn, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.parquet"
        t0 = time.perf_counter()
        trace = build(args.requests)
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        trace.write_parquet(path)
        t_write = time.perf_counter() - t0
        size_mib = path.stat().st_size / 2**20

        pq.read_table(path)  # warm the page cache before either is timed
        t_arrow, t_trace = _interleaved(
            lambda: pq.read_table(path), lambda: Trace.read_parquet(path), args.repeat
        )
        assert len(Trace.read_parquet(path)) == args.requests

        print(
            f"trace: {args.requests:,} requests, {trace.n_sessions:,} sessions, "
            f"{size_mib:.1f} MiB Parquet (zstd)"
        )
        print(f"build {t_build:.2f} s, write_parquet {t_write:.2f} s")
        print(f"pyarrow.parquet.read_table: {t_arrow * 1e3:8.1f} ms (median of {args.repeat})")
        print(f"Trace.read_parquet:         {t_trace * 1e3:8.1f} ms (median of {args.repeat})")
        print(f"ratio Trace.read_parquet / read_table = {t_trace / t_arrow:.2f}")

        if ELASTIC.is_file():
            log = Path(tmp) / "elastic_x10.log"
            log.write_bytes(ELASTIC.read_bytes() * 10)
            t_clf = _median_time(lambda: read_clf(log), 3)
            print(
                f"read_clf, 100,000 combined-format lines: {t_clf:.2f} s "
                f"({100_000 / t_clf:,.0f} lines/s)"
            )


if __name__ == "__main__":
    main()
