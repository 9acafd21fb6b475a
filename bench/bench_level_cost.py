"""What one request costs at fixed load levels, repeated: the whole core, and a share.

    python bench/bench_level_cost.py                                 # whole core
    python bench/bench_level_cost.py --levels 2.4 2.7 3.0 2.4 2.7 3.0 2.4 1.5 2.4
    python bench/bench_level_cost.py --alpha 0.25 --levels 1.2 1.5 1.8 2.1 1.5 1.8
    python bench/bench_level_cost.py --php-children-per-core 4 --levels 2.4 3.0 3.6
    python bench/bench_level_cost.py --alpha 0.25 --enforce corunner --levels 1.6 2.0

On the demo's workload (its Support trace and docroot, built here), each level replays
the loop window the demo's sweep loops (its skip and window) at ``level`` times the
trace's rate, on CPU 1 with the generator on CPU 0. With ``--alpha`` below 1 the run
goes to a CPU-time share of that fraction with alpha of the sessions (seed 1), its
warm-up and window 1/alpha times longer, as the sweep time-scales it.

Per level it prints throughput, the server's utilization (of what the share may use),
its CPU per request (utilization x alpha / throughput: comparable across sides) and
the mean and p99.9 response time, and the CPU per request of the server's PHP
processes and of its web server alone (user + system, from /proc, over the whole run
and every request it completed). The reference is the same level measured again in
the same run: repeating a level shows how much the host alone moves what a request
costs, and levels past the knee show what overload costs (a server that falls behind
runs php-cgi's children together, each request dearer: with four children a core,
PHP's CPU per request doubled once the core was busy; the default is now one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WARMUP_S, DURATION_S = 1.5, 4.0  # the demo's plan, whole-core side


def _server_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's descendants (the servers it started), by
    kind: ``php`` (php-cgi, php-fpm) and ``web`` (everything else: the web server)."""
    from shrink.processes import descendants
    from shrink.procfs import proc_info, process_cpu_seconds

    out = {"php": 0.0, "web": 0.0}
    for pid in descendants(os.getpid()):
        info = proc_info(pid)
        if info is None or info.comm.startswith("python"):
            continue  # exited since the listing, or the load generator's workers
        try:
            seconds = process_cpu_seconds(pid)
        except (OSError, ValueError):
            continue
        out["php" if info.comm.startswith("php") else "web"] += seconds
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.measure import (
        default_loop_window,
        default_skip,
        level_stats,
        loop_window,
        looped_run,
    )
    from shrink.providers import TargetSettings, make_provider
    from shrink.share import Share
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=float, nargs="+", default=[2.4, 2.7, 3.0, 2.4, 2.7, 3.0])
    ap.add_argument("--alpha", type=float, default=1.0, help="share fraction (1: whole core)")
    ap.add_argument(
        "--php-children-per-core", type=int, default=None, help="PHP pool size (default: 1)"
    )
    ap.add_argument("--enforce", choices=["cfs", "corunner"], default=None, help="share mechanism")
    a = ap.parse_args(argv)
    if not 0 < a.alpha <= 1:
        ap.error(f"--alpha must be in (0, 1], not {a.alpha:g}")
    if a.php_children_per_core is not None and a.php_children_per_core < 1:
        ap.error(f"--php-children-per-core must be at least 1, not {a.php_children_per_core}")
    with tempfile.TemporaryDirectory(prefix="shrink-level-cost-") as tmp:
        os.chmod(tmp, 0o711)  # as root the servers run as www-data, who must reach the docroot
        work = Path(tmp)
        trace_path, docroot = _synth(work, Console(stderr=True))
        whole = Trace.read_parquet(trace_path)
        skip = default_skip(whole)
        span = default_loop_window(whole, skip)  # chosen on the whole trace, as predict does
        trace = whole
        if a.alpha < 1:
            trace = samplers.sample(whole, a.alpha, seed=1, level="session")
        looped = loop_window(trace, skip, span)
        k = 1.0 / a.alpha
        prov = make_provider(TargetSettings(docroot=docroot), run_dir=work / "runs")
        children = a.php_children_per_core
        if children is None:
            children = prov.server.php_children_per_core
        # enforce None: shrink.enforce's default
        prov.server = replace(prov.server, php_children_per_core=children, enforce=a.enforce)
        cpus = prov.server_cpus()
        share = Share.whole(cpus) if a.alpha == 1 else Share.cpu_time(cpus, a.alpha)
        print(
            "| time | level | throughput (req/s) | utilization | CPU ms/request | mean | p99.9 "
            "| PHP us/request | web server us/request |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        with prov.open(share, "1-replica") as target:
            for i, level in enumerate(a.levels):
                run = looped_run(looped, level, k * WARMUP_S, k * DURATION_S)
                before = _server_cpu()
                res = target.run(
                    run.trace, rate_factor=level, warmup=run.warmup, duration=run.duration, seed=i
                )
                after = _server_cpu()
                done = max(1, int(res.runlog.ok_mask().sum()))
                split = {key: 1e6 * (after[key] - before[key]) / done for key in after}
                st = level_stats(res)
                u = st.utilization
                cost = "-" if u is None or not st.throughput else (
                    f"{1000 * u * a.alpha / st.throughput:.3f}"
                )  # fmt: skip
                print(
                    f"| {time.strftime('%H:%M:%S')} | {level:g} | {st.throughput:,.0f} | "
                    f"{'-' if u is None else f'{u:.0%}'} | {cost} | "
                    f"{1000 * st.overall.get('mean'):.2f} ms | "
                    f"{1000 * st.overall.get('p999'):.0f} ms | {split['php']:.0f} | "
                    f"{split['web']:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
