"""What a sweep's checks during a level cost the generator's schedule: send-lag p99 of a
level run as ``shrink sweep`` runs it, against the same run as ``shrink replay --target
URL`` runs it, interleaved in the same sitting.

A sweep's level, beside the native engine's send thread, runs Python threads on the
generator's CPU: the testbed watch (a look at the testbed every 0.25 s: its processes'
states, CPUs and share), the stop-watch (every 50 ms), and a window sampler that reads
/proc/stat at the window's edges and looks for other clients in /proc/net/tcp three
times. A replay against a URL runs only the stop-watch. Both run here against the same
testbed (``shrink testbed up``: lighttpd, one 1 KiB static file, CPU 1, the whole core),
the generator on CPU 0 at shrink's default scheduling, open loop at each ``--rates``
(requests/s), ``--runs`` pairs each, the order alternating. The ratio is the median
send-lag p99 with the checks over the median without.

    python bench/bench_watch_cost.py [--rates 5000,20000] [--runs 5] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shrink import testbed  # noqa: E402
from shrink.replay import open_loop_trace  # noqa: E402
from shrink.replay.live import LiveTarget  # noqa: E402
from shrink.share import Share  # noqa: E402
from shrink.target import GeneratorPlacement  # noqa: E402
from shrink.topology import discover  # noqa: E402

SERVER_CPU, GEN_CPU = 1, 0
WARMUP = 0.5


def _lag_ms(target: LiveTarget, rate: float, seconds: float, out: Path) -> float:
    trace = open_loop_trace("/file1k.bin", rate, WARMUP + seconds)
    res = target.run(trace, rate_factor=1.0, warmup=WARMUP, duration=seconds, out=out)
    out.unlink(missing_ok=True)
    return res.generator.send_lag_p99 * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="5000,20000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    if not {SERVER_CPU, GEN_CPU} <= os.sched_getaffinity(0):
        sys.exit("needs CPUs 0 and 1")
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    machine = discover()
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the server's user passes through to the docroot, no more
        docroot = work / "docroot"
        docroot.mkdir()
        (docroot / "file1k.bin").write_bytes(b"x" * 1024)
        state = work / "tb.json"
        testbed.up(docroot, machine, Share.parse(str(SERVER_CPU), machine),
                   state_path=state, port=0)  # fmt: skip
        try:
            gen = GeneratorPlacement(cpus=(GEN_CPU,))
            swept = LiveTarget.from_state(state, generator=gen)
            plain = LiveTarget(list(swept.addresses), generator=gen)
            _lag_ms(plain, 1000.0, 1.0, work / "warm.parquet")  # connections, page cache
            for rate in (float(x) for x in a.rates.split(",")):
                lags: dict[str, list[float]] = {"sweep": [], "replay": []}
                for i in range(a.runs):
                    order = (("sweep", swept), ("replay", plain))
                    for name, target in order if i % 2 == 0 else order[::-1]:
                        lags[name].append(_lag_ms(target, rate, a.seconds, work / "r.parquet"))
                med = {k: float(np.median(v)) for k, v in lags.items()}
                print(json.dumps({
                    "rate": rate,
                    "sweep_lag_p99_ms": [round(x, 3) for x in lags["sweep"]],
                    "replay_lag_p99_ms": [round(x, 3) for x in lags["replay"]],
                    "median_sweep_ms": round(med["sweep"], 3),
                    "median_replay_ms": round(med["replay"], 3),
                    "ratio": round(med["sweep"] / max(med["replay"], 1e-6), 2),
                }), flush=True)  # fmt: skip
        finally:
            testbed.down(state)


if __name__ == "__main__":
    main()
