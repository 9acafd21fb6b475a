"""Can a tiny probe on the server's CPU tell how fast the host is running right now?

    python bench/bench_host_probe.py                        # all three kernels
    python bench/bench_host_probe.py --kernel fault --reps 12 --levels 3 5.5

This VM's speed moves under the demo (bench_cpu_drift.py: the same hashes took 1.7x as
long from one second to the next, with no steal). If a probe could follow that speed
during every repetition, a prediction could be corrected for it. The probe
(``bench/host_probe.c``, built here with the C compiler) runs one fixed kernel of about
0.3 ms every 50 ms, pinned to the server's CPU (CPU 1) at SCHED_FIFO: under 1% of it.
Three kernels: ``cpu`` (cycles), ``fault`` (page faults and zeroing: 1 MiB mapped and
touched, as a PHP request's memory is) and ``chase`` (a pointer chase over 8 MiB).

Meanwhile the whole core (lighttpd + PHP, the demo's workload and loop window) runs the
same fixed levels again and again, 1 s + 3 s each. At a fixed level the server's CPU per
request (utilization / throughput) moves only with the host. The reference is that
cost, measured in the same run: per level the benchmark prints the correlation of the
probe's mean kernel time with it (log scale, over the repetitions) and the ratio of
their spreads. A probe that tracks the host has a correlation near 1 and a slope (sd
ratio) that is the same from run to run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SOURCE = Path(__file__).with_name("host_probe.c")
WARMUP_S, DURATION_S = 1.0, 3.0  # the demo's whole-core windows
PERIOD_S = 0.05


def _build(work: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench_host_probe: no C compiler (cc or gcc) to build host_probe.c")
    exe = work / "host_probe"
    subprocess.run([cc, "-O2", "-o", str(exe), str(SOURCE)], check=True)
    return exe


def _runs(target, looped, levels: list[float], reps: int):
    """(level, window start, window end, CPU ms per request) for every repetition."""
    from shrink.measure import level_stats, looped_run

    rows = []
    seed = 0
    for _ in range(reps):
        for level in levels:
            run = looped_run(looped, level, WARMUP_S, DURATION_S)
            t0 = time.monotonic()
            res = target.run(
                run.trace, rate_factor=level, warmup=run.warmup, duration=run.duration, seed=seed
            )
            t1 = time.monotonic()
            seed += 1
            st = level_stats(res)
            if st.utilization and st.throughput:
                rows.append((level, t0 + run.warmup, t1, 1e3 * st.utilization / st.throughput))
    return rows


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from shrink.demo import _synth
    from shrink.measure import default_loop_window, default_skip, loop_window
    from shrink.providers import TargetSettings, make_provider
    from shrink.share import Share
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=["cpu", "fault", "chase"], action="append")
    ap.add_argument("--levels", type=float, nargs="+", default=[3.0, 5.5])
    ap.add_argument("--reps", type=int, default=12)
    a = ap.parse_args(argv)
    kernels = a.kernel or ["cpu", "fault", "chase"]
    print(
        "| kernel | level | repetitions | CPU ms/request (range) | probe kernel us (range) "
        "| correlation (log) | sd ratio probe / cost |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="shrink-host-probe-") as tmp:
        work = Path(tmp)
        exe = _build(work)
        trace_path, docroot = _synth(work, Console(stderr=True))
        trace = Trace.read_parquet(trace_path)
        skip = default_skip(trace)
        looped = loop_window(trace, skip, default_loop_window(trace, skip))
        prov = make_provider(TargetSettings(docroot=docroot), run_dir=work / "runs")
        cpus = prov.server_cpus()
        with prov.open(Share.whole(cpus), "1-replica") as target:
            for kernel in kernels:
                log = work / f"probe-{kernel}.txt"
                total = a.reps * len(a.levels) * 10 + 60  # bounded: it stops by itself
                with log.open("w") as out:
                    probe = subprocess.Popen(
                        [str(exe), str(cpus[-1]), kernel, str(PERIOD_S), str(total)], stdout=out
                    )
                    try:
                        rows = _runs(target, looped, a.levels, a.reps)
                    finally:
                        probe.terminate()
                        probe.wait()
                _report(kernel, rows, np.loadtxt(log, ndmin=2), a.levels)
    return 0


def _report(kernel: str, rows, samples: np.ndarray, levels: list[float]) -> None:
    t, us = samples[:, 0], samples[:, 1]
    for level in levels:
        pairs = []
        for lv, start, end, cost in rows:
            inside = (t >= start) & (t <= end)
            if lv == level and inside.any():
                pairs.append((float(np.mean(us[inside])), cost))
        if len(pairs) < 3:
            print(f"| {kernel} | {level:g} | {len(pairs)} | - | - | - | - |")
            continue
        p = np.log([x for x, _ in pairs])
        c = np.log([y for _, y in pairs])
        corr = float(np.corrcoef(p, c)[0, 1])
        costs = [y for _, y in pairs]
        probes = [x for x, _ in pairs]
        print(
            f"| {kernel} | {level:g} | {len(pairs)} | {min(costs):.3f}-{max(costs):.3f} "
            f"| {min(probes):.0f}-{max(probes):.0f} | {corr:+.2f} | {p.std() / c.std():.2f} |"
        )


if __name__ == "__main__":
    from shrink.errors import ShrinkError

    try:
        raise SystemExit(main())
    except (ShrinkError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"bench_host_probe: {exc}") from None
    except KeyboardInterrupt:
        raise SystemExit("bench_host_probe: interrupted; nothing is kept") from None
