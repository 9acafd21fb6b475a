"""Which part of the trace a run measures, and how long the share must warm up.

    python bench/bench_trace_window.py offsets --level 0.7 --offsets 0 10 60
    python bench/bench_trace_window.py warmup --level 0.95 --warmups 2 8

The demo's workload and 25% session sample, on the 25% CPU-time share of CPU 1 and
on the whole core, in rounds that alternate the order of the variants (this VM's
speed drifts within seconds, so variants are compared round by round).

``offsets``: every run has the same warm-up and window, but starts ``offset`` trace
seconds into the trace (``shrink.measure.skip_start``). Prints each side's CPU
seconds per request by offset: a trace whose first seconds are cheaper (or dearer)
than its steady part shows here, on both sides alike.

``warmup``: the same trace content in the window (the trace is shifted so that a
window after warm-up ``w`` covers the same trace seconds for every ``w``), with
different warm-ups. A server that has not settled after the shorter warm-up shows
lower latencies there. The reference is the same side with the longest warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any


def _open(work: Path):
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.providers import TargetSettings, make_provider
    from shrink.trace import Trace

    trace_path, docroot = _synth(work, Console(stderr=True))
    trace = Trace.read_parquet(trace_path)
    sample = samplers.sample(trace, 0.25, seed=0, level="session")
    prov = make_provider(TargetSettings(docroot=docroot), run_dir=work / "runs")
    return trace, sample, prov


def _row(tag: str, st: Any, alpha: float) -> dict[str, Any]:
    cost = None
    if st.utilization is not None and st.throughput > 0:
        cost = 1e3 * st.utilization * alpha / st.throughput  # CPU ms per request
    row = {
        "tag": tag,
        "throughput": st.throughput / alpha,
        "mean_ms": 1e3 * st.overall.mean * alpha,
        "p999_ms": 1e3 * st.overall.p999 * alpha,
        "cpu_ms": cost,
    }
    print(
        f"{tag:14s} thr {row['throughput']:6.0f}  mean {row['mean_ms']:6.1f} ms  "
        f"p999 {row['p999_ms']:6.0f} ms  CPU/request {cost or float('nan'):.3f} ms",
        file=sys.stderr,
        flush=True,
    )
    return row


def run(mode: str, level: float, values: list[float], rounds: int) -> list[dict[str, Any]]:
    from shrink.measure import level_stats, skip_start
    from shrink.share import Share

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="shrink-window-") as tmp:
        trace, sample, prov = _open(Path(tmp))
        quarter, one = Share.cpu_time((1,), 0.25), Share.whole((1,))
        with prov.open(quarter, "1-replica") as share, prov.open(one, "1-replica") as whole:
            for tgt, tr in ((share, sample), (whole, trace)):
                tgt.run(tr, rate_factor=0.3, warmup=1, duration=2, seed=1)  # warm caches
            longest = max(values)
            variants = []
            for v in values:
                for side, tgt, tr, alpha in (
                    ("share", share, sample, 0.25),
                    ("whole", whole, trace, 1.0),
                ):
                    if mode == "offsets":
                        variants.append((f"{side}@{v:g}s", tgt, skip_start(tr, v), 1.5, alpha, v))
                    else:
                        # shift so that the window after warm-up v covers the same seconds
                        shifted = skip_start(tr, (longest - v) * level)
                        variants.append((f"{side} w{v:g}s", tgt, shifted, v, alpha, v))
            for r in range(rounds):
                for tag, tgt, tr, warm, alpha, v in variants if r % 2 == 0 else variants[::-1]:
                    st = level_stats(
                        tgt.run(tr, rate_factor=level, warmup=warm, duration=4.0, seed=100 + r)
                    )
                    rows.append({**_row(tag, st, alpha), "value": v, "round": r})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", choices=["offsets", "warmup"])
    ap.add_argument("--level", type=float, default=0.8, help="rate factor of every run")
    ap.add_argument("--offsets", type=float, nargs="*", default=[0.0, 10.0, 60.0])
    ap.add_argument("--warmups", type=float, nargs="*", default=[2.0, 8.0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    values = args.offsets if args.mode == "offsets" else args.warmups
    rows = run(args.mode, args.level, values, args.rounds)
    print(
        "\n| variant | CPU ms per request (median) | mean ms (median) | p99.9 ms (median) | runs |"
    )
    print("|---|---|---|---|---|")
    for tag in dict.fromkeys(r["tag"] for r in rows):
        mine = [r for r in rows if r["tag"] == tag]
        costs = [r["cpu_ms"] for r in mine if r["cpu_ms"] is not None]
        print(
            f"| {tag} | {statistics.median(costs) if costs else float('nan'):.3f} | "
            f"{statistics.median(r['mean_ms'] for r in mine):.1f} | "
            f"{statistics.median(r['p999_ms'] for r in mine):.0f} | {len(mine)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
