"""shrink's replay latency against wrk2's at the same constant rate, same server, same run.

wrk2 (Gil Tene's constant-throughput wrk, https://github.com/giltene/wrk2) is the
independent check: it also counts latency from each request's intended start.
Both drive one lighttpd serving a 1 KiB file (CPU 1) from CPU 0, one after the
other, at ``--rate`` requests/s; the script prints p50 and p99 of each and their
ratios:

* **corrected** (from the intended start): wrk2's ``Recorded Latency`` against
  shrink's ``done - intended``;
* **uncorrected** (from the actual send): wrk2's ``-U`` figures against shrink's
  ``done - sent``.

wrk2 waits on its event loop's millisecond timers, so each of its requests goes
out up to ~1 ms after its intended time, and at a light load its corrected
latency is mostly that wait; shrink wakes within tens of microseconds (a
timerfd). The uncorrected pair compares the two clients' measurement of the
same server; the corrected pair differs by the generators' own send lag, which
the script prints for both (wrk2's: corrected minus uncorrected). The native
core times a response by the kernel's receive stamp (SO_TIMESTAMPNS), wrk2 and
the Python engine when their event loop has woken up for it, so the native
core's uncorrected figures are lower by that wake-up latency.

wrk2 is not part of shrink: build it from its source outside this repository
and pass its binary with ``--wrk2 PATH`` or the ``WRK2`` environment variable
(default: ``wrk2`` on PATH). Without it the script says so and exits 0.

    python bench/bench_wrk2.py [--rate 2000] [--seconds 5] [--engine auto] [--wrk2 PATH]

wrk2 spends its first 10 s calibrating and reports only what follows, so its
run lasts ``10 + --seconds``; shrink's runs ``--seconds`` after a 1 s warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay import GEN_CPU, start_lighttpd  # noqa: E402

from shrink.replay import EngineConfig, open_loop_trace, run_engines  # noqa: E402
from shrink.replay.native import engine_name, select_engine  # noqa: E402
from shrink.schedule import ScheduleOptions  # noqa: E402
from shrink.target import GeneratorPlacement  # noqa: E402

WRK2_CALIBRATION = 10.0  # seconds wrk2 measures before it starts recording
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def find_wrk2(path: str | None = None) -> str | None:
    """The wrk2 binary: ``path``, else $WRK2, else ``wrk2`` on PATH; None when absent."""
    cand = path or os.environ.get("WRK2") or shutil.which("wrk2")
    if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
        return str(cand)
    return None


def parse_wrk2(text: str) -> dict[str, dict[float, float]]:
    """wrk2 --latency [-U] output: {'corrected'|'uncorrected': {percentile: seconds}}."""
    out: dict[str, dict[float, float]] = {}
    block = None
    for line in text.splitlines():
        if "Latency Distribution (HdrHistogram - Recorded Latency)" in line:
            block = "corrected"
        elif "Latency Distribution (HdrHistogram - Uncorrected Latency" in line:
            block = "uncorrected"
        elif block is not None:
            m = re.match(r"\s*([0-9.]+)%\s+([0-9.]+)(us|ms|s|m)\b", line)
            if m:
                out.setdefault(block, {})[float(m.group(1))] = (
                    float(m.group(2)) * _UNITS[m.group(3)]
                )
            elif out.get(block):
                block = None
    if "corrected" not in out:
        raise ValueError("no 'Recorded Latency' distribution in wrk2's output")
    return out


def run_wrk2(wrk2: str, port: int, rate: float, seconds: float, conns: int, prio: list[str]):
    url = f"http://127.0.0.1:{port}/static/file1k.bin"
    cmd = [*prio, "taskset", "-c", str(GEN_CPU), wrk2, "-t1", f"-c{conns}",
           f"-d{WRK2_CALIBRATION + seconds:g}s", f"-R{rate:g}", "--latency", "-U", url]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return parse_wrk2(res.stdout)


def run_shrink(port: int, rate: float, seconds: float, engine: Any) -> dict[str, Any]:
    warm = 1.0
    tr = open_loop_trace("/static/file1k.bin", rate, warm + seconds)
    cfg = EngineConfig([("127.0.0.1", port)], drain=1.0)
    log, _ = run_engines(tr, cfg, rate_factor=1.0, horizon=warm + seconds,
                         schedule=ScheduleOptions(loop=False),
                         generator=GeneratorPlacement(cpus=(GEN_CPU,), engine=engine))  # fmt: skip
    intended, sent, done = log.column("intended"), log.column("sent"), log.column("done")
    keep = (intended >= warm) & log.ok_mask()
    lat, svc = (done - intended)[keep], (done - sent)[keep]
    pct = (50.0, 99.0)
    return {
        "n": int(keep.sum()),
        "errors": int((~log.ok_mask()).sum()),
        "corrected": dict(zip(pct, np.percentile(lat, pct).tolist(), strict=True)),
        "uncorrected": dict(zip(pct, np.percentile(svc, pct).tolist(), strict=True)),
    }


def compare(wrk2: dict[str, dict[float, float]], shrink: dict[str, Any]) -> dict[str, Any]:
    """shrink / wrk2 per kind and percentile, and each generator's own lag at p50."""
    out: dict[str, Any] = {}
    for kind in ("corrected", "uncorrected"):
        for p in (50.0, 99.0):
            if kind in wrk2 and p in wrk2[kind]:
                out[f"{kind}_p{p:g}_ratio"] = shrink[kind][p] / wrk2[kind][p]
    if "uncorrected" in wrk2:
        out["wrk2_lag_p50"] = wrk2["corrected"][50.0] - wrk2["uncorrected"][50.0]
    out["shrink_lag_p50"] = shrink["corrected"][50.0] - shrink["uncorrected"][50.0]
    return out


def _us(x: float) -> str:
    return f"{x * 1e6:8.1f} us"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=2000.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--conns", type=int, default=8, help="wrk2's connections")
    p.add_argument("--engine", default="auto", help="auto | native | python")
    p.add_argument("--wrk2", default=None, help="wrk2 binary (default: $WRK2, else wrk2 on PATH)")
    p.add_argument("--no-realtime", action="store_true")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args()
    wrk2 = find_wrk2(a.wrk2)
    if wrk2 is None:
        print("wrk2 not found (--wrk2 PATH, $WRK2 or wrk2 on PATH): skipped")
        return
    engine = select_engine(a.engine)
    realtime = not a.no_realtime and os.geteuid() == 0
    prio = ["chrt", "-f", "10"] if realtime else ["nice", "-n", "-10"]
    if realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_lighttpd(Path(tmp))
        try:
            if realtime:
                os.sched_setscheduler(proc.pid, os.SCHED_FIFO, os.sched_param(10))
            w = run_wrk2(wrk2, port, a.rate, a.seconds, a.conns, prio)
            s = run_shrink(port, a.rate, a.seconds, engine)
        finally:
            proc.terminate()
            proc.wait()
    c = compare(w, s)
    if a.json:
        print(json.dumps({"rate": a.rate, "engine": engine_name(engine), "wrk2": w,
                          "shrink": s, "compare": c}, default=str))  # fmt: skip
        return
    print(f"rate {a.rate:,.0f}/s, lighttpd 1 KiB on CPU 1, generators on CPU {GEN_CPU}, "
          f"{'SCHED_FIFO 10' if realtime else 'nice -10'}; shrink engine: {engine_name(engine)}; "
          f"shrink {s['n']:,} requests, {s['errors']} errors")  # fmt: skip
    for kind in ("corrected", "uncorrected"):
        for pc in (50.0, 99.0):
            wv = w.get(kind, {}).get(pc, float("nan"))
            sv = s[kind][pc]
            print(f"{kind:>11} p{pc:g}: wrk2 {_us(wv)}  shrink {_us(sv)}  "
                  f"shrink/wrk2 {sv / wv:6.3f}")  # fmt: skip
    if "wrk2_lag_p50" in c:
        print(f"own send lag at p50 (corrected - uncorrected): wrk2 {_us(c['wrk2_lag_p50'])}, "
              f"shrink {_us(c['shrink_lag_p50'])}")  # fmt: skip
    print(
        "corrected: wrk2's figures hold its own millisecond-timer lag (above); shrink's "
        "hold its send lag"
    )
    if engine_name(engine) == "native":
        print(
            "uncorrected: the native core takes a response's time from the kernel's receive "
            "stamp, wrk2 after its event loop wakes (the wake-up latency is the difference)"
        )


if __name__ == "__main__":
    main()
