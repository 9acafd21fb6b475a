"""What a request of the demo's mix costs on the whole core, light (evenly spaced, in
bursts, or in short periods at the knee's load) and busy, and on its 25% CPU-time
share: the calibration's light pattern rests on it.

    python bench/bench_burst_cost.py                  # 3 rounds, 4 s windows
    python bench/bench_burst_cost.py --rounds 5

The server is the demo's (lighttpd + php-cgi on CPU 1, the generator elsewhere); each
round runs every pattern once, in the same order, so that the host's drift spreads
over all of them. CPU per request is the run's server utilization times its window
over its requests (the utilization law): the same reading the calibration makes. The
calibration's probe sends the sample's requests drawn by class on keep-alive
connections. The reference measured in the same run is what a validation measures:
the whole trace's own sessions, looped, with the whole core busy (``sessions busy``);
every pattern prints its ratio to it (1: the pattern read the busy core's cost).

The patterns "kept awake" run with a spinner at SCHED_IDLE on the whole core's CPU: it
runs only when nothing else wants the CPU, so the server's requests preempt it at
once, but the vCPU never halts between them (an idle vCPU halts and gives its host CPU
away; a busy core never does). If a light pattern kept awake costs what the busy core
does, the light calibration's gap is the halt's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ALPHA = 0.25
LIGHT_RATE = 80.0  # req/s: 4-6% of the whole core here
BUSY_RATE = 1500.0  # req/s: 80-95% of it here
SHARE_RATE = 300.0  # req/s: near the 25% share's knee here
SESSIONS_FACTOR = 4.0  # the whole trace's sessions at 4x their rate: about BUSY_RATE
# Knee-load periods: period_s at BUSY_RATE, one every 8 periods (light on average),
# long (0.25 s) and short (0.1 s).
PERIODS_S = (0.25, 0.1)
PERIOD_GAPS = 8
AWAKE = "kept awake: "


# The spinner: pinned by its parent, lowest policy, and gone with its parent.
_SPIN = (
    "import os, sys\n"
    "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    "parent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(100000): pass\n"
)


@contextlib.contextmanager
def _kept_awake(cpu: int) -> Iterator[None]:
    """A SCHED_IDLE spinner on ``cpu`` while the block runs (stopped by its PID)."""
    spin = subprocess.Popen(
        [sys.executable, "-c", _SPIN, str(os.getpid())],
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


def _cpu_per_request(res: Any) -> float | None:
    log = res.runlog.window(*res.window)
    n = int(log.ok_mask().sum())
    u = res.utilization
    return u * (res.window[1] - res.window[0]) / n if u and n else None


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.measure import default_loop_window, default_skip, loop_window
    from shrink.providers import TestbedProvider
    from shrink.scaling.calibration import probe_trace
    from shrink.share import Share
    from shrink.testbed import ServerSettings
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="each run's window")
    a = ap.parse_args(argv)
    warm = 0.5
    span = warm + a.seconds

    def bursty(rate: float, k: int, seed: int) -> Trace:
        gap = k / rate
        return probe_trace(sample, rate, span, seed, burst=k, offset=(warm + gap / 2) % gap)

    def periods(period: float, seed: int) -> Trace:
        """Requests at BUSY_RATE for ``period`` s, one period every PERIOD_GAPS
        periods, each whole in the window (mid-way between two gaps)."""
        n = max(1, round(a.seconds / (PERIOD_GAPS * period)))
        tr = probe_trace(sample, BUSY_RATE, n * period, seed)
        tr = tr.take(np.flatnonzero(tr.column("t") < n * period))
        t = tr.column("t")
        k = np.floor(t / period)
        start = warm + (a.seconds / n - period) / 2
        return tr.with_column("t", start + k * (a.seconds / n) + (t - k * period))

    with tempfile.TemporaryDirectory(prefix="shrink-burst-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the servers run unprivileged: they pass through to the docroot
        trace_path, docroot = _synth(work, Console(stderr=True))
        whole = Trace.read_parquet(trace_path)
        sample = samplers.sample(whole, ALPHA, seed=0, level="session")
        skip = default_skip(whole)
        looped = loop_window(whole, skip, default_loop_window(whole, skip))
        prov = TestbedProvider(docroot, run_dir=work / "runs", server=ServerSettings())
        costs: dict[str, list[float]] = {}
        with (
            prov.open(Share.whole((1,)), "1-replica") as full,
            prov.open(Share.cpu_time((1,), ALPHA), "1-replica") as share,
        ):
            patterns = {
                "evenly spaced": lambda s: (full, probe_trace(sample, LIGHT_RATE, span, s)),
                "bursts of 16": lambda s: (full, bursty(LIGHT_RATE, 16, s)),
                "bursts of 64": lambda s: (full, bursty(LIGHT_RATE, 64, s)),
                "knee-load periods of 0.25 s": lambda s: (full, periods(PERIODS_S[0], s)),
                "knee-load periods of 0.1 s": lambda s: (full, periods(PERIODS_S[1], s)),
                AWAKE + "evenly spaced": lambda s: (full, probe_trace(sample, LIGHT_RATE, span, s)),
                AWAKE + "knee-load periods of 0.25 s": lambda s: (full, periods(PERIODS_S[0], s)),
                "busy": lambda s: (full, probe_trace(sample, BUSY_RATE, span, s)),
                "sessions busy": lambda s: (full, looped),
                "share near its knee": lambda s: (share, probe_trace(sample, SHARE_RATE, span, s)),
            }
            for k in range(a.rounds):
                for i, (name, make) in enumerate(patterns.items()):
                    target, tr = make(100 * k + i)
                    factor = SESSIONS_FACTOR if tr is looped else 1.0
                    awake = _kept_awake(1) if name.startswith(AWAKE) else contextlib.nullcontext()
                    with awake:
                        res = target.run(
                            tr, rate_factor=factor, warmup=warm, duration=a.seconds, seed=k
                        )
                    c = _cpu_per_request(res)
                    if c is not None:
                        # The share's utilization is of its quota: its CPU is alpha of it.
                        costs.setdefault(name, []).append(c * (ALPHA if target is share else 1))
    busy = statistics.median(costs.get("sessions busy") or [float("nan")])
    print("| pattern | CPU per request, ms (runs) | median over sessions busy |")
    print("|---|---|---|")
    for name, xs in costs.items():
        runs = ", ".join(f"{1e3 * x:.3f}" for x in xs)
        print(f"| {name} | {runs} | {statistics.median(xs) / busy:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
