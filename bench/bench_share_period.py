"""What a request costs on a CPU-time share as its CFS period grows, against the busy
whole core: is the share's excess cost paid per gap of the quota?

    python bench/bench_share_period.py                # 4 rounds, 4 s windows
    python bench/bench_share_period.py --rounds 8 --alpha 0.5

A CPU-time share of fraction alpha runs its server alpha * P of every CFS period P
and halts it for the rest. If what the share loses is a fixed time t in every gap
(caches refilled, the halted vCPU woken), its effective fraction is alpha - t / P:
the excess shrinks as 1 / P and vanishes as the gaps grow rare, and two periods
measured on the share alone would give its speed, with nothing run on the whole
core. If the loss grows with the gap's length instead, the excess stays as P grows.

The server is the demo's (lighttpd + php-cgi on CPU 1, the generator elsewhere). The
share replays the sample's own sessions, looped, at the same offered rate for every
period (near the default period's knee); the reference, measured in the same run, is
what a validation measures: the whole trace's sessions, looped, with the whole core
busy. Each round runs every pattern once, so that the host's drift spreads over all.
CPU per request is the run's CPU over its requests (the utilization law, as the
calibration reads it). Printed: each period's CPU per request, and its effective
fraction alpha * cost_busy / cost_share (the speed that a prediction needs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FULL_FACTOR = 4.0  # the whole trace's sessions at 4x their rate: 80-95% of the core here
PERIODS_MS = (None, 128, 512, 1000)  # the share's CFS periods (None: its default)


def _cpu_per_request(res: Any, fraction: float) -> float | None:
    log = res.runlog.window(*res.window)
    n = int(log.ok_mask().sum())
    u = res.utilization
    # A share's utilization is of its quota: its CPU is ``fraction`` of it.
    return u * fraction * (res.window[1] - res.window[0]) / n if u and n else None


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.enforce.cfs import choose_period_us
    from shrink.measure import default_loop_window, default_skip, loop_window
    from shrink.providers import TestbedProvider
    from shrink.share import Share
    from shrink.testbed import ServerSettings
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=4.0, help="each run's window")
    ap.add_argument("--alpha", type=float, default=0.25)
    ap.add_argument(
        "--share-factors",
        default="1.2,1.8",
        help="the sample's rate factors on the share, comma-separated (the whole core's is 4)",
    )
    a = ap.parse_args(argv)
    alpha = a.alpha
    share_factors = [float(x) for x in a.share_factors.split(",")]
    base = choose_period_us(alpha, 1)
    periods = [base if p is None else 1000 * p for p in PERIODS_MS]

    with tempfile.TemporaryDirectory(prefix="shrink-period-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the servers run unprivileged: they pass through to the docroot
        trace_path, docroot = _synth(work, Console(stderr=True))
        whole = Trace.read_parquet(trace_path)
        sample = samplers.sample(whole, alpha, seed=0, level="session")
        skip = default_skip(whole)
        span = default_loop_window(whole, skip)
        looped = loop_window(whole, skip, span)
        looped_sample = loop_window(sample, skip, span)
        prov = TestbedProvider(docroot, run_dir=work / "runs", server=ServerSettings())
        costs: dict[str, list[float]] = {}
        utils: dict[str, list[float]] = {}
        full_cm = prov.open(Share.whole((1,)), "1-replica")
        shares_cm = [
            prov.open(Share.cpu_time((1,), alpha, period_us=p), "1-replica") for p in periods
        ]
        with full_cm as full:
            opened = [cm.__enter__() for cm in shares_cm]
            try:
                for k in range(a.rounds):
                    runs = [("whole core busy", full, looped, FULL_FACTOR, 1.0)] + [
                        (f"period {p / 1000:g} ms x{f:g}", t, looped_sample, f, alpha)
                        for p, t in zip(periods, opened, strict=True)
                        for f in share_factors
                    ]
                    if k % 2:  # alternate the order, so that no pattern always follows another
                        runs = runs[:1] + runs[1:][::-1]
                    for name, target, tr, factor, fraction in runs:
                        res = target.run(
                            tr, rate_factor=factor, warmup=0.5, duration=a.seconds, seed=k
                        )
                        c = _cpu_per_request(res, fraction)
                        if c is not None:
                            costs.setdefault(name, []).append(c)
                            utils.setdefault(name, []).append(res.utilization or 0.0)
            finally:
                for cm in reversed(shares_cm):
                    cm.__exit__(None, None, None)
    busy = statistics.median(costs.get("whole core busy") or [float("nan")])
    print(f"alpha {alpha:g}, share rate factors {share_factors}, whole core {FULL_FACTOR:g}")
    print("| pattern | CPU per request, ms (runs) | utilization | alpha x busy / it |")
    print("|---|---|---|---|")
    for name, xs in costs.items():
        runs_ms = ", ".join(f"{1e3 * x:.3f}" for x in xs)
        u = statistics.median(utils[name])
        eff = alpha * busy / statistics.median(xs)
        print(f"| {name} | {runs_ms} | {u:.2f} | {eff:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
