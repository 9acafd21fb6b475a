"""What one of the calibration's periods at the knee's load costs on the whole core after
the core sat idle, against one run right after another: the calibration's runs beside
the share's sweep each follow a share level (a minute or so) during which the full
target is idle.

    python bench/bench_idle_cost.py                 # 4 rounds, 40 s idle
    python bench/bench_idle_cost.py --rounds 6 --idle 60

The server is the demo's (lighttpd + php-cgi on CPU 1, the generator elsewhere). Each
round sleeps ``--idle`` seconds, then runs three of the calibration's runs (one whole
period of 0.25 s at 1,350 req/s, a mean of 75 req/s) back to back: the first after the
idle spell, the next two right after. CPU per request is the run's utilization times
its window over its requests (the utilization law), as the calibration reads it; the
reference measured in the same run is the runs right after another, and the ratio
printed is after-idle over right-after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ALPHA = 0.25
MEAN_RATE, KNEE_RATE = 75.0, 1350.0  # req/s: the demo's calibration here


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.providers import TestbedProvider
    from shrink.scaling.calibration import BESIDE_WARMUP_S, CALIBRATION_BUSY, _Aim
    from shrink.share import Share
    from shrink.testbed import ServerSettings
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--idle", type=float, default=40.0, help="seconds idle before a round")
    a = ap.parse_args(argv)
    aim = _Aim(MEAN_RATE, KNEE_RATE, CALIBRATION_BUSY)
    costs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="shrink-idle-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the servers run unprivileged: they pass through to the docroot
        trace_path, docroot = _synth(work, Console(stderr=True))
        sample = samplers.sample(Trace.read_parquet(trace_path), ALPHA, seed=0, level="session")
        prov = TestbedProvider(docroot, run_dir=work / "runs", server=ServerSettings())
        with prov.open(Share.whole((1,)), "1-replica") as full:
            for k in range(a.rounds):
                time.sleep(a.idle)
                for i, name in enumerate(("after idle", "right after", "right after again")):
                    planned = aim.plan(sample, BESIDE_WARMUP_S, aim.period_window(), 10 * k + i)
                    res = planned.run(full)
                    n = int(res.runlog.window(*res.window).ok_mask().sum())
                    if res.utilization and n:
                        span = res.window[1] - res.window[0]
                        costs.setdefault(name, []).append(res.utilization * span / n)
    ref = statistics.median(costs.get("right after", []) + costs.get("right after again", []))
    print("| run | CPU per request, ms (rounds) | median over right after |")
    print("|---|---|---|")
    for name, xs in costs.items():
        runs = ", ".join(f"{1e3 * x:.3f}" for x in xs)
        print(f"| {name} | {runs} | {statistics.median(xs) / ref:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
