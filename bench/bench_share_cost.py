"""CPU per request on the demo's 25% CPU-time share against the whole core, paired.

    python bench/bench_share_cost.py                      # default period, 2 rounds
    python bench/bench_share_cost.py --period-ms 16 32    # does a longer quota change it?
    python bench/bench_share_cost.py --spin               # also with the share's CPU kept awake

The demo's validation error follows the gap between what a request costs on the share
and on the whole core (``validation.json`` ``cost_ratio``). This measures that gap
directly, at two load levels near the knee, with the demo's workload and sample: each
repetition runs on the share and on the whole core back to back (alternating order),
and the variants (CFS period; an idle-priority spinner on the server's CPU, so the vCPU
never halts in the quota's gaps) alternate round by round so that they see the same
host. The reference is the whole core measured in the same pair: the figure printed is
full / share CPU seconds per request (above 1: the share was cheaper).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# An idle-priority busy loop on CPU 1: it runs only when nothing else wants the CPU, so
# the vCPU never halts (a halted vCPU gives its physical core to the host's other
# tenants and is charged steal when it wakes).
SPIN = (
    "import os\n"
    "os.sched_setaffinity(0, {1})\n"
    "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    "while True:\n    pass\n"
)


def measure(work: Path, trace_path: Path, docroot: Path, variant: dict[str, Any], rnd: int):
    import samplers
    import shrink.share as share_mod
    from shrink.autolevels import AutoPlan, Companion, _run_level
    from shrink.providers import TargetSettings, make_provider
    from shrink.trace import Trace
    from shrink.validate import cpu_seconds_per_request

    trace = Trace.read_parquet(trace_path)
    sample = samplers.sample(trace, 0.25, seed=0, level="session")
    chosen = share_mod.choose_period_us
    if variant["period_us"]:
        share_mod.choose_period_us = lambda f, n, tick_us=None: variant["period_us"]
    prov = make_provider(TargetSettings(docroot=docroot), run_dir=work / f"runs-{rnd}")
    share = share_mod.Share.cpu_time((1,), 0.25)
    whole = share_mod.Share.whole((1,))
    rows = []
    try:
        with (
            prov.open(share, "1-replica") as target,
            prov.open(whole, "1-replica") as full,
        ):
            spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if variant["spin"] else None
            try:
                pair = Companion(full, trace, {"mean": 0.01})
                warm = AutoPlan(warmup=1, duration=2, reps=1)
                _run_level(target, sample, 0.3, "rate_factor", warm, 5, pair)
                plan = AutoPlan(warmup=2.0, duration=5.0, reps=2)
                for level in (0.95, 1.05):
                    got = _run_level(target, sample, level, "rate_factor", plan, 7, pair)
                    assert got is not None and got[1] is not None
                    for a, b in zip(got[0].reps, got[1].reps, strict=True):
                        ca = cpu_seconds_per_request(a, share)
                        cb = cpu_seconds_per_request(b, whole)
                        rows.append(
                            {
                                **variant,
                                "round": rnd,
                                "level": level,
                                "share_ms": None if ca is None else 1e3 * ca,
                                "full_ms": None if cb is None else 1e3 * cb,
                                "ratio": cb / ca if ca and cb else None,
                                "share_steal": a.steal,
                                "full_steal": b.steal,
                            }
                        )
                        print(json.dumps(rows[-1]), flush=True)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    finally:
        share_mod.choose_period_us = chosen
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--period-ms", type=float, nargs="*", default=[], help="CFS periods to try")
    ap.add_argument("--spin", action="store_true", help="also run with the CPU kept awake")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    from rich.console import Console

    from shrink.demo import _synth

    periods = [int(p * 1000) for p in args.period_ms] or [None]
    variants = [
        {"period_us": p, "spin": s}
        for p in periods
        for s in ([False, True] if args.spin else [False])
    ]
    with tempfile.TemporaryDirectory(prefix="shrink-share-cost-") as tmp:
        os.chmod(tmp, 0o711)  # as root the servers run as www-data, who must reach the docroot
        work = Path(tmp)
        trace_path, docroot = _synth(work, Console(stderr=True))
        rows = []
        for rnd in range(args.rounds):
            for v in variants:
                rows += measure(work, trace_path, docroot, v, rnd)
    print(
        "\n| period | spinner | full / share CPU per request (median, range) | share ms "
        "| full ms | share steal (median) | pairs |"
    )
    print("|---|---|---|---|---|---|---|")
    for v in variants:
        mine = [r for r in rows if r["period_us"] == v["period_us"] and r["spin"] == v["spin"]]
        ratios = [r["ratio"] for r in mine if r["ratio"]]
        if not ratios:
            continue
        share = statistics.median(r["share_ms"] for r in mine if r["share_ms"])
        full = statistics.median(r["full_ms"] for r in mine if r["full_ms"])
        steal = statistics.median(r["share_steal"] or 0.0 for r in mine)
        period = "default" if v["period_us"] is None else f"{v['period_us'] / 1000:g} ms"
        print(
            f"| {period} | {'yes' if v['spin'] else 'no'} | {statistics.median(ratios):.3f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}) | {share:.3f} | {full:.3f} | "
            f"{100 * steal:.1f}% | {len(ratios)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
