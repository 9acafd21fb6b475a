"""Simulator speed: a sweep of 10 load levels x 100,000 requests on 8 simulated cores.

    python bench/bench_sim.py [--cpu N] [--requests 100000] [--workload tcp|support]

Runs pinned to one CPU. Prints the sweep's wall time, simulated requests per
second, and the ratio against a reference measured in the same run: a minimal
pure-Python heapq event loop (one FIFO queue, arrivals and departures) over the
same number of requests, the cheapest event loop Python can run.
"""

from __future__ import annotations

import argparse
import heapq
import os
import time
from pathlib import Path

import numpy as np

from shrink.machine import Machine
from shrink.measure import level_stats
from shrink.sim import SimTarget, support_trace, tcp_trace

ROOT = Path(__file__).resolve().parent.parent


def reference_loop(n: int, seed: int = 0) -> float:
    """Seconds for a bare heapq event loop of n arrivals and n departures."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0, n)).tolist()
    service = rng.exponential(0.8, n).tolist()
    t0 = time.perf_counter()
    heap: list[tuple[float, int]] = []
    free = 0.0
    for i, a in enumerate(arrivals):
        while heap and heap[0][0] <= a:
            heapq.heappop(heap)
        free = max(free, a) + service[i]
        heapq.heappush(heap, (free, i))
    while heap:
        heapq.heappop(heap)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the last)")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--workload", choices=("tcp", "support"), default="tcp")
    args = ap.parse_args()
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    machine = Machine.read_toml(ROOT / "examples/machines/nehalem-2s.toml")
    target = SimTarget(machine, "1-replica")
    if args.workload == "tcp":
        trace = tcp_trace(10_000, 20.0)
        warm = 0.0
    else:
        trace = support_trace(300, 60.0, think_s=0.3)
        warm = 3.0  # sessions need a few seconds to fill the system
    # pilot (not timed): utilization and throughput per unit of rate factor
    pilot = target.run(trace, rate_factor=0.5, warmup=max(warm, 0.1), duration=2.0, seed=99)
    cap = 0.5 / pilot.utilization
    per_factor = level_stats(pilot).throughput / 0.5
    factors = cap * np.linspace(0.1, 0.95, 10)
    total = 0
    t0 = time.perf_counter()
    for i, f in enumerate(factors):
        duration = args.requests / (f * per_factor)
        warmup = max(warm, 0.05 * duration)
        res = target.run(trace, rate_factor=float(f), warmup=warmup, duration=duration, seed=i)
        st = level_stats(res)
        total += len(res.runlog)
        print(
            f"  level {i}: rate factor {f:5.2f}  {st.overall.n:>7} measured  "
            f"{st.throughput:>9,.0f} req/s  util {res.utilization:.2f}  "
            f"mean {st.overall.mean * 1e3:.3f} ms"
        )
    wall = time.perf_counter() - t0
    ref = reference_loop(total)
    print(f"workload {args.workload}, 8 simulated cores, CPU {cpu}")
    print(
        f"sweep of 10 levels x {args.requests:,} measured requests: {wall:.1f} s "
        f"({total:,} requests simulated incl. warm-up, {total / wall:,.0f} req/s)"
    )
    print(
        f"reference heapq loop over {total:,} requests: {ref:.2f} s; "
        f"ratio sim/reference {wall / ref:.1f}"
    )


if __name__ == "__main__":
    main()
