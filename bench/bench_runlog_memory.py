"""RunLog writer memory: peak RSS against run length, file writer vs an in-memory one.

Each configuration runs in a fresh process that writes N rows the way the engine
does (one ``add`` per request, ``maybe_flush`` every 1,000 rows with 65,536-row or
1-second row groups) and reports its peak RSS (``ru_maxrss``). The reference, in
the same run, is a writer without a file, which keeps every flushed table (what
the file writer did before: memory grew with the run). Then the same through a
real run of the engine against its fake server (``--live``), whose RSS also holds
the schedule (O(run): the plan of every request).

    python bench/bench_runlog_memory.py [--sizes 100000,600000,1200000] [--live]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_WRITER = """
import resource, sys, tempfile, time
sys.path.insert(0, {root!r})
from shrink.replay.writer import RunLogWriter
n, to_file = int(sys.argv[1]), sys.argv[2] == "file"
d = tempfile.mkdtemp()
w = RunLogWriter(d + "/r.parquet" if to_file else None, {{"bench": 1}})
w.targets.code("127.0.0.1:80")
add = w.add
for i in range(n):
    t = i * 1e-4
    add(t, t, t + 1e-4, t + 2e-4, 200, 1024, i & 1, i // 3, 0, 0, t)
    if i % 1000 == 999:
        w.maybe_flush(now=t)
w.close()
kept = len(w._tables)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, kept)
"""

_LIVE = """
import resource, sys, subprocess, tempfile
sys.path.insert(0, {root!r})
from shrink.replay import EngineConfig, open_loop_trace, run_engines
from shrink.schedule import ScheduleOptions
n = int(sys.argv[1])
srv = subprocess.Popen([sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
                       stdout=subprocess.PIPE, text=True)
port = int(srv.stdout.readline().split()[2])
rate = 10000.0
tr = open_loop_trace("/x?bytes=100", rate, n / rate)
d = tempfile.mkdtemp()
try:
    log, _ = run_engines(tr, EngineConfig(targets=[("127.0.0.1", port)]), rate_factor=1.0,
                         horizon=n / rate, schedule=ScheduleOptions(loop=False),
                         out=d + "/r.parquet")  # fmt: skip
finally:
    srv.kill()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(log))
"""


def _run(script: str, *args: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", script.format(root=str(ROOT)), *args],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    kib, extra = out.stdout.split()[-2:]
    return int(kib), int(extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100000,600000,1200000")
    ap.add_argument("--live", action="store_true", help="also a real engine run per size")
    a = ap.parse_args()
    for n in (int(x) for x in a.sizes.split(",")):
        file_kib, kept = _run(_WRITER, str(n), "file")
        mem_kib, _ = _run(_WRITER, str(n), "memory")
        row = {
            "requests": n,
            "file_writer_rss_mb": round(file_kib / 1024, 1),
            "tables_kept": kept,
            "in_memory_rss_mb": round(mem_kib / 1024, 1),
            "ratio": round(file_kib / mem_kib, 3),
        }
        if a.live:
            live_kib, sent = _run(_LIVE, str(n))
            row["replay_rss_mb"] = round(live_kib / 1024, 1)
            row["replay_requests"] = sent
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
