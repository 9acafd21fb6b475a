"""What a request costs the whole core when it is light, against when it is busy, read
three ways: the calibration's light runs are what a CPU-time share's speed rests on.

    python bench/bench_light_cost.py                # 4 rounds
    python bench/bench_light_cost.py --rounds 6 --spin

The server is the demo's (lighttpd + php-cgi on CPU 1, the generator elsewhere), the
requests the demo's sample at alpha 0.25. Each round runs three of the calibration's
light runs (``shrink.scaling.calibration``: periods at the knee's load, at most 10%
busy) and two busy runs of the whole trace (a pilot sets them about 60% and 85% busy),
back to back. CPU per request is the CPU over the requests the run answered, the
CPU read three ways over the same run:

* ``tick``: CPU 1's busy time in /proc/stat, what the testbed's utilization reads (on
  a tick-accounting kernel it is sampled at the timer tick);
* ``idle``: the run's wall time less CPU 1's idle time (which a tickless kernel
  counts exactly);
* ``sched``: the server's processes' own run time (``shrink.procfs.cpu_seconds``: the
  threads' schedstat, in nanoseconds), as the testbed's ``server_cpu`` reads it.

The reference measured in the same run is the busy runs of the same round: the ratio
printed is light over busy (1 would be a calibration that reads the busy core). With
``--spin`` every round is run again with an idle-priority busy loop on CPU 1, so that
the virtual CPU never halts between requests (``tick`` and ``idle`` then read the loop
too: only ``sched`` counts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shrink.procfs import cpu_seconds

ALPHA = 0.25
CPU = 1
MEAN_RATE, KNEE_RATE = 75.0, 1350.0  # req/s: the demo's calibration here
BUSY = (0.6, 0.85)  # the busy runs' utilization, aimed at
SPIN = (
    "import os\n"
    f"os.sched_setaffinity(0, {{{CPU}}})\n"
    "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    "while True:\n    pass\n"
)
WAYS = ("tick", "idle", "sched")


def _proc_stat() -> tuple[int, int]:
    """CPU's (busy, idle) in USER_HZ ticks."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{CPU} "):
                v = [int(x) for x in line.split()[1:]]
                return sum(v) - v[3] - v[4], v[3] + v[4]
    raise SystemExit(f"no cpu{CPU} in /proc/stat")


def _costs(
    run: Callable[..., Any], pids: list[int], *args: Any, **kw: Any
) -> dict[str, float] | None:
    hz = os.sysconf("SC_CLK_TCK")
    (b0, i0), s0, w0 = _proc_stat(), cpu_seconds(pids), time.monotonic()
    res = run(*args, **kw)
    (b1, i1), s1, w1 = _proc_stat(), cpu_seconds(pids), time.monotonic()
    n = int(res.runlog.ok_mask().sum())
    if n == 0:
        return None
    return {
        "tick": (b1 - b0) / hz / n,
        "idle": ((w1 - w0) - (i1 - i0) / hz) / n,
        "sched": (s1 - s0) / n,
    }


def _server_pids(target: Any) -> list[int]:
    """The testbed's server processes and their children (php-cgi under lighttpd)."""
    from shrink.processes import children_map

    inner = target
    while not hasattr(inner, "state") and hasattr(inner, "inner"):
        inner = inner.inner
    pids = {int(p) for r in inner.state.get("replicas", []) for p in r.get("pids", [])}
    kids = children_map()
    todo = list(pids)
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in pids:
                pids.add(c)
                todo.append(c)
    return sorted(pids)


def _round(full: Any, trace: Any, sample: Any, k: int, unit: float) -> list[tuple[str, dict]]:
    from shrink.scaling.calibration import BESIDE_WARMUP_S, CALIBRATION_BUSY, _Aim

    aim = _Aim(MEAN_RATE, KNEE_RATE, CALIBRATION_BUSY)
    pids = _server_pids(full)
    rows = []
    for i in range(3):
        planned = aim.plan(sample, BESIDE_WARMUP_S, aim.period_window(), 10 * k + i)
        got = _costs(planned.run, pids, full)
        if got:
            rows.append(("light", got))
    for j, u in enumerate(BUSY):
        f = u / unit
        got = _costs(full.run, pids, trace, rate_factor=f, warmup=1.0, duration=4.0,
                     seed=100 + 10 * k + j)  # fmt: skip
        if got:
            rows.append(("busy", got))
    return rows


def _table(rows: list[tuple[str, str, int, dict]]) -> None:
    print("| vCPU | way | light ms per request (runs) | busy ms | light / busy (median) "
          "| light cv | busy cv |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for variant in dict.fromkeys(v for v, _, _, _ in rows):
        for way in WAYS if variant == "halts" else ("sched",):
            light = [c[way] for v, kind, _, c in rows if v == variant and kind == "light"]
            busy = [c[way] for v, kind, _, c in rows if v == variant and kind == "busy"]
            if len(light) < 2 or len(busy) < 2:
                continue
            # each round's light runs over that round's busy ones
            ratios = []
            for k in sorted({r for v, _, r, _ in rows if v == variant}):
                lk = [c[way] for v, kind, r, c in rows if (v, kind, r) == (variant, "light", k)]
                bk = [c[way] for v, kind, r, c in rows if (v, kind, r) == (variant, "busy", k)]
                if lk and bk:
                    ratios.append(statistics.median(lk) / statistics.median(bk))
            print(
                f"| {variant} | {way} | {', '.join(f'{1e3 * x:.3f}' for x in light)} | "
                f"{', '.join(f'{1e3 * x:.3f}' for x in busy)} | "
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                f"{statistics.stdev(light) / statistics.mean(light):.2f} | "
                f"{statistics.stdev(busy) / statistics.mean(busy):.2f} |"
            )


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.providers import TestbedProvider
    from shrink.share import Share
    from shrink.testbed import ServerSettings
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--spin", action="store_true", help="each round again, CPU kept awake")
    a = ap.parse_args(argv)
    rows: list[tuple[str, str, int, dict]] = []
    with tempfile.TemporaryDirectory(prefix="shrink-light-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the servers run unprivileged: they pass through to the docroot
        trace_path, docroot = _synth(work, Console(stderr=True))
        trace = Trace.read_parquet(trace_path)
        sample = samplers.sample(trace, ALPHA, seed=0, level="session")
        prov = TestbedProvider(docroot, run_dir=work / "runs", server=ServerSettings())
        with prov.open(Share.whole((CPU,)), "1-replica") as full:
            pilot = full.run(trace, rate_factor=1.0, warmup=1.0, duration=3.0, seed=1)
            unit = pilot.utilization or 0.0
            if unit <= 0:
                print("the pilot read no utilization", file=sys.stderr)
                return 1
            for k in range(a.rounds):
                for spin in (False, True) if a.spin else (False,):
                    loop = subprocess.Popen([sys.executable, "-c", SPIN]) if spin else None
                    try:
                        for kind, c in _round(full, trace, sample, k, unit):
                            rows.append(("awake" if spin else "halts", kind, k, c))
                            ms = {w: round(1e3 * x, 4) for w, x in c.items()}
                            print(kind, "awake" if spin else "halts", k, ms, flush=True)
                    finally:
                        if loop is not None:
                            loop.kill()
                            loop.wait()
    _table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
