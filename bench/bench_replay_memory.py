"""Replay memory: the engine's peak RSS against run length, this checkout vs a reference.

Each configuration runs in a fresh process: a short trace (one second of an
open-loop trace at ``--rate``, or one second of sessions of three bursts sending
``--rate`` requests a second) looped over a
horizon long enough for N requests, replayed by the engine (``--engines``:
python, native) against the fake server (``shrink.replay.fakeserver``), its
RunLog to a file. It reports the process's RSS once everything is imported
(``base``), its peak RSS (``ru_maxrss``) and the growth between them: what the
schedule, the engine and the writer took for the run. The RunLog is not read
back (the summary's cost, not the replay's).

The reference, measured in the same run, is the same script against another
checkout's shrink (``--code DIR``, e.g. a checkout of the commit before the
schedule was streamed), whose engine built the whole schedule up front: the
ratio is this checkout's growth over the reference's.

    python bench/bench_replay_memory.py --code DIR [--sizes 100000,1200000]
        [--engines python,native] [--modes open,session] [--rate 10000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import resource, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[1])
from shrink.replay import EngineConfig
from shrink.replay.native import select_engine
from shrink.replay.writer import RunLogWriter
from shrink.schedule import build_schedule, open_loop_trace
from shrink.trace import Trace

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024

n, engine, mode, rate = int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
srv = subprocess.Popen([sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
                       stdout=subprocess.PIPE, text=True)
port = int(srv.stdout.readline().split()[2])
if mode == "open":
    tr, rf = open_loop_trace("/x?bytes=100", rate, 1.0), 1.0
else:  # one second of sessions, 3 bursts of 2 requests 50 ms apart each: `rate` req/s
    m = int(rate / 6)
    sess = [s for s in range(m) for _ in range(6)]
    tr = Trace.from_columns({
        "session": sess, "t": [s / m + 0.05 * (k // 2) for s in range(m) for k in range(6)],
        "path": ["/x?bytes=100"] * (6 * m), "burst": [k // 2 for _ in range(m) for k in range(6)],
        "think": [0.05 if k % 2 == 0 else 0.0 for _ in range(m) for k in range(6)],
    }, meta={"mode": "session"})
    rf = 1.0
horizon = n / rate
d = tempfile.mkdtemp()
base = rss_kib()
try:
    sched = build_schedule(tr, rf, horizon, loop=True)
    w = RunLogWriter(d + "/r.parquet", {"bench": 1})
    stats = select_engine(engine)(sched, EngineConfig(targets=[("127.0.0.1", port)]), w)
finally:
    srv.kill()
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, stats.requests)
"""


def _run(code: Path, n: int, engine: str, mode: str, rate: float) -> tuple[int, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(code), str(n), engine, mode, str(rate)],
        capture_output=True, text=True, check=True, cwd=code,
    )  # fmt: skip
    base, peak, sent = out.stdout.split()[-3:]
    return int(base), int(peak), int(sent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", required=True, help="the reference checkout (the old engine)")
    ap.add_argument("--sizes", default="100000,600000,1200000")
    ap.add_argument("--engines", default="python,native")
    ap.add_argument("--modes", default="open,session")
    ap.add_argument("--rate", type=float, default=10000.0, help="requests per second")
    a = ap.parse_args()
    ref = Path(a.code).resolve()
    for mode in a.modes.split(","):
        for engine in a.engines.split(","):
            for n in (int(x) for x in a.sizes.split(",")):
                row: dict[str, object] = {"mode": mode, "engine": engine, "requests": n}
                growth = {}
                # interleaved: this checkout, then the reference, same load on the machine
                for name, code in (("this", ROOT), ("reference", ref)):
                    base, peak, sent = _run(code, n, engine, mode, a.rate)
                    growth[name] = peak - base
                    row[f"{name}_sent"] = sent
                    row[f"{name}_peak_mb"] = round(peak / 1024, 1)
                    row[f"{name}_growth_mb"] = round((peak - base) / 1024, 1)
                row["ratio"] = round(growth["this"] / max(growth["reference"], 1), 3)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
