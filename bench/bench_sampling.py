"""Benchmark: sampling a 1,000,000-request trace at each level (target: under 2 s).

Run: ``python bench/bench_sampling.py [--requests N] [--repeat R]``.

The reference, measured in the same run on the same trace, is the least any
sampler must do: filter the Arrow table with a precomputed Boolean mask. Each
sampler's time is printed with its ratio to that reference and to the 2 s budget.
Times are the best of R runs (the machine is shared; the best is the least noisy).
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import numpy as np

import samplers
from shrink.trace import Trace


def build_trace(n_requests: int, seed: int = 0) -> Trace:
    """A closed-loop trace of about ``n_requests`` requests (bursts of 1 + Poisson(3))."""
    rng = np.random.default_rng(seed)
    n_bursts = n_requests // 4
    size = 1 + rng.poisson(3.0, n_bursts)
    size[-1] += max(n_requests - int(size.sum()), 0)
    size = size[np.cumsum(size) <= max(n_requests, int(size[0]))]
    nb = size.size
    per_session = 1 + rng.poisson(3.0, nb)  # bursts per session, trimmed below
    session_of_burst = np.repeat(np.arange(nb), per_session)[:nb]
    burst_idx = np.arange(nb) - np.searchsorted(session_of_burst, session_of_burst)
    row_burst = np.repeat(np.arange(nb), size)
    n = row_burst.size
    think = rng.exponential(2.0, nb)
    t = rng.uniform(0, 3600, nb)
    dynamic = rng.random(n) < 0.3
    return Trace.from_columns(
        {
            "session": (session_of_burst * 7919 + 13)[row_burst],
            "burst": burst_idx[row_burst].astype(np.int32),
            "t": t[row_burst],
            "think": think[row_burst],
            "path": np.where(dynamic, "/app/index.php?id=12345", "/static/img/d3/f12.gif"),
            "cls": np.where(dynamic, "dynamic", "static"),
            "bytes": rng.lognormal(8, 1.5, n).astype(np.int64),
            "rt": np.where(rng.random(n) < 0.5, rng.exponential(0.05, n), np.nan),
        },
        meta={"mode": "session", "source": "bench"},
    )


def best_of(repeat: int, fn) -> float:
    """The shortest of ``repeat`` timed calls of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=0.25)
    args = ap.parse_args()

    trace = build_trace(args.requests)
    print(f"trace: {len(trace):,} requests, {trace.n_sessions:,} sessions; alpha {args.alpha}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    mask = np.random.default_rng(1).random(len(trace)) < args.alpha
    reference = best_of(args.repeat, lambda: trace.filter(mask))
    fingerprint = best_of(args.repeat, trace.fingerprint)
    print(f"reference (Arrow filter, precomputed mask): {reference * 1e3:8.1f} ms")
    print(f"parent fingerprint (part of every sample):  {fingerprint * 1e3:8.1f} ms")
    print(f"{'level':<12}{'time':>10}{'x reference':>14}{'/ 2 s budget':>14}")
    warnings.simplefilter("ignore", samplers.StructureWarning)
    rows = [(lv, lambda lv=lv: samplers.sample(trace, args.alpha, seed=7, level=lv))
            for lv in ("session", "object", "request", "stratified")]  # fmt: skip
    rows.append(("split k=8", lambda: samplers.split(trace, 8, seed=7)))
    for name, fn in rows:
        took = best_of(args.repeat, fn)
        print(f"{name:<12}{took * 1e3:8.1f} ms{took / reference:13.1f}x{took / 2.0:13.2f}")


if __name__ == "__main__":
    main()
