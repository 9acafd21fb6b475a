"""Benchmark the testbed: start/stop time, and what a CPU-time share does to latency.

Run: ``python bench/bench_testbed.py`` (needs lighttpd and php-cgi; root for quotas).

Prints, for a PHP page of ~0.5-1 ms of CPU, sequential-request p50/p99 latency
on one core without a quota (the reference, measured in the same run) and under
a 50 % quota with a 2 ms period (1 ms quota: the shortest the kernel allows),
the period shrink chooses (quota of one scheduler tick: 8 ms at HZ=250) and a
long one (100 ms), as ratios to the reference; and the CPU the replica got
while two PHP requests spun on its core (0.50 is right; the replica's cgroup
weight is raised so other work on a shared machine does not take its share).
DESIGN.md's table is the same latency experiment with wrk; on a shared, loaded
machine the numbers are noisy.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shrink.share import Share
from shrink.testbed import down, up
from shrink.testbed.fake import FakeServer
from shrink.testbed.state import ReplicaState
from shrink.topology import discover
from tests.helpers.testbed import SPIN_PHP, cpu_rate, favoured, spinning

PAGE = "<?php $x = 0; for ($i = 0; $i < 20000; $i++) { $x += $i % 7; } echo $x;\n"
N = 300


def latencies(url: str, n: int = N) -> np.ndarray:
    out = []
    with httpx.Client(trust_env=False, timeout=10) as c:
        for _ in range(20):
            c.get(url)
        for _ in range(n):
            t0 = time.perf_counter()
            c.get(url).raise_for_status()
            out.append(time.perf_counter() - t0)
    return np.array(out)


def cpu_delivered(r: ReplicaState, seconds: float = 2.0) -> float:
    """CPU (of a core) the replica used while two requests spun on it."""
    with favoured(r), spinning(r, seconds + 0.5):
        return cpu_rate(r.pids, seconds)


def main() -> int:
    m = discover()
    cpu = m.all_cpus[0]
    with tempfile.TemporaryDirectory(prefix="shrink-bench-") as tmp:
        os.chmod(tmp, 0o711)  # as root the servers run as www-data, who must reach doc/
        doc = Path(tmp, "doc")
        (doc / "app").mkdir(parents=True)
        (doc / "app" / "page.php").write_text(PAGE)
        (doc / "app" / "spin.php").write_text(SPIN_PHP)
        (doc / "file1k.bin").write_bytes(b"x" * 1024)
        state = Path(tmp, "state.json")

        starts, stops = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            up(doc, m, Share.all_of(m), "1-replica", state_path=state, port=0)
            t1 = time.perf_counter()
            down(state)
            starts.append(t1 - t0)
            stops.append(time.perf_counter() - t1)
        print(
            f"testbed up (1-replica, {m.n_cpus} CPUs): median {statistics.median(starts):.3f} s;"
            f" down: median {statistics.median(stops):.3f} s"
        )

        with FakeServer() as fake:
            ref_static = latencies(f"{fake.url}/file1k.bin?bytes=1024")
        rows = []
        for label, text, period in (
            ("no quota (reference)", f"{cpu}", None),
            ("50% quota, 1 ms / 2 ms", f"{cpu}@50%", 2000),
            ("50% quota, default period", f"{cpu}@50%", None),
            ("50% quota, 50 ms / 100 ms", f"{cpu}@50%", 100_000),
        ):
            st = up(doc, m, Share.parse(text, m, period_us=period), "1-replica",
                    state_path=state, port=0)  # fmt: skip
            r = st.replicas[0]
            try:
                base = f"http://{r.address}:{r.port}"
                static = latencies(f"{base}/file1k.bin")
                php = latencies(f"{base}/app/page.php")
                cpu_got = cpu_delivered(r)
            finally:
                down(state)
            rows.append((label, static, php, cpu_got, st.share.period_us))
    print(f"fake in-process target, 1 KiB: p50 {np.median(ref_static) * 1e3:.3f} ms")
    ref = rows[0]
    print(
        f"{'share':<28} {'period':>8} {'static p50':>10} {'php p50':>9} {'php p99':>9} "
        f"{'p50 / ref':>9} {'p99 / ref':>9} {'CPU got':>7}"
    )
    for label, static, php, got, period in rows:
        print(
            f"{label:<28} {period or '-':>8} {np.median(static) * 1e3:8.3f}ms "
            f"{np.median(php) * 1e3:7.3f}ms {np.percentile(php, 99) * 1e3:7.3f}ms "
            f"{np.median(php) / np.median(ref[2]):9.2f} "
            f"{np.percentile(php, 99) / np.percentile(ref[2], 99):9.2f} {got:7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
