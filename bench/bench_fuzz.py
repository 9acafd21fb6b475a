"""Benchmark: a long mutation-fuzzing campaign against every reader.

Run as ``python bench/bench_fuzz.py [--inputs N] [--readers a,b] [--seed S] [--limit S]
[--budget S] [--rerun K,K]``.

For each reader of tests/helpers/fuzzing.py (specweb, CLF, wsesslog, pcap/pcapng, Parquet
trace, machine TOML, server recipe TOML, calibration, LoadCurve, prediction, testbed state, docroot
manifest, the demo's work-location, a part's RunLog), in a process of its own so that its
peak RSS is its own: N seeded mutated inputs (default 100,000), each read and used as
the next stage would.
It prints crashes (exceptions other than shrink.errors) over inputs with their
distinct sites, hangs (inputs past ``--limit`` seconds, default 5), the slowest
input (wall time, and CPU time, which a busy machine does not inflate), peak RSS,
and, as the reference measured in the same run, the CPU time to read the reader's
unmutated seed files: the ratio slowest input / seed read (both CPU) says how far
the worst mutated input is from a normal read. The issue's bar: no crash, no
hang over 5 s, no growth past 1 GiB. A hang's input numbers are printed;
``--rerun K,K --readers R --seed S`` reads those inputs of the same sequence again,
one by one, and prints each one's wall and CPU time (a hang on a busy machine
with little CPU is the machine's, not the input's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# --code DIR fuzzes another checkout's shrink (e.g. main, for a before/after) with
# this checkout's harness; readers whose use step needs this branch's API then crash.
sys.path.insert(0, os.environ.get("SHRINK_FUZZ_CODE") or str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers import fuzz_more, fuzz_states  # noqa: E402
from helpers.fuzzing import READERS, SHARED, campaign, mutate, put  # noqa: E402

from shrink.errors import ShrinkError  # noqa: E402


def _reader(name: str, states: bool, tmp: Path) -> Any:
    """The reader, with the new seeds and mutators of helpers.fuzz_states when ``states``."""
    if not states:
        return READERS[name]
    fuzz_states.splice_pool({k: r for k, r in READERS.items() if k != name}, tmp)
    return fuzz_states.with_states(READERS[name], SHARED, mutate)


def _seed_read_s(name: str, tmp: Path, states: bool = False) -> float:
    """Median seconds to read (and use) one unmutated seed file: the reference."""
    reader = _reader(name, states, tmp)
    seeds = reader.seeds(tmp)
    path = tmp / "docroot" / "manifest.json" if name == "manifest" else tmp / f"s{reader.suffix}"
    if name == "demo":
        path = fuzz_more.demo_path(tmp)
    times = []
    for _ in range(5):
        for data in seeds:
            put(path, data)
            t0 = time.process_time()
            # a seed may be refused by its use step (2 replicas on 1 socket): still timed
            with contextlib.suppress(ShrinkError):
                reader.read(path)
            times.append(time.process_time() - t0)
    times.sort()
    return times[len(times) // 2]


def run_one(
    name: str, inputs: int, seed: int, limit: float, budget: float | None,
    only: frozenset[int] | None = None, states: bool = False,
) -> dict:  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ref = _seed_read_s(name, tmp, states)
        t0 = time.perf_counter()
        if only is not None:
            inputs = max(only) + 1
        out = campaign(
            _reader(name, states, tmp),
            inputs,
            seed=seed,
            tmp=tmp,
            limit_s=limit,
            budget_s=budget,
            only=only,
        )
        wall = time.perf_counter() - t0
    return {
        "reader": name,
        "inputs": out.inputs,
        "crashes": len(out.crashes),
        "crash_sites": sorted(out.crash_sites),
        "first_crash": out.crashes[0] if out.crashes else None,
        "hangs": len(out.hangs),
        "hang_inputs": out.hangs[:50],
        "timings": out.timings,
        "errors": out.errors,
        "slowest_s": out.slowest_s,
        "slowest_cpu_s": out.slowest_cpu_s,
        "seed_read_s": ref,
        "peak_rss_mib": out.peak_rss_mib,
        "wall_s": wall,
        "messages": sorted(out.messages.items(), key=lambda kv: -kv[1]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100_000, help="mutated inputs per reader")
    ap.add_argument("--readers", default=",".join(READERS), help="comma-separated readers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=5.0, help="seconds after which an input hangs")
    ap.add_argument(
        "--budget", type=float, help="seconds per reader; the inputs run by then are counted"
    )
    ap.add_argument("--code", help="fuzz the shrink of this checkout instead (a reference)")
    ap.add_argument("--rerun", help="read only these input numbers (comma-separated) again")
    ap.add_argument(
        "--states", action="store_true",
        help="add the real traces as seeds and helpers.fuzz_states' mutators (compressed, "
        "BOMs, CR line ends, splices, odd link and block types, mistyped columns, odd TOML)",
    )  # fmt: skip
    ap.add_argument("--messages", help="write each reader's distinct refusals (JSON) here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one reader, print JSON
    a = ap.parse_args()
    only = None if a.rerun is None else frozenset(int(k) for k in a.rerun.split(","))
    if a.one:
        print(json.dumps(run_one(a.one, a.inputs, a.seed, a.limit, a.budget, only, a.states)))
        return
    unknown = [r for r in a.readers.split(",") if r not in READERS]
    if unknown:
        sys.exit(f"--readers: no reader {', '.join(unknown)}; the readers: {', '.join(READERS)}")
    print(f"{'reader':<12} {'crashes / inputs':>18} {'hangs':>6} {'refused':>8} "
          f"{'slowest wall':>13} {'(CPU)':>7} {'seed read':>10} {'ratio':>7} {'peak RSS':>9} "
          f"{'wall':>7}")  # fmt: skip
    failed = False
    for name in a.readers.split(","):
        cmd = [sys.executable, __file__, "--one", name, "--inputs", str(a.inputs),
               "--seed", str(a.seed), "--limit", str(a.limit)]  # fmt: skip
        if a.budget is not None:
            cmd += ["--budget", str(a.budget)]
        if a.rerun is not None:
            cmd += ["--rerun", a.rerun]
        if a.states:
            cmd += ["--states"]
        env = {**os.environ, "SHRINK_FUZZ_CODE": str(Path(a.code).resolve())} if a.code else None
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            print(f"{name:<12} the campaign itself failed: {p.stderr.strip()[-300:]}")
            failed = True
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        ref = r["seed_read_s"]
        ratio = r["slowest_cpu_s"] / ref if ref > 0 else float("nan")
        print(
            f"{name:<12} {r['crashes']:>7,} / {r['inputs']:<9,} {r['hangs']:>6} "
            f"{r['errors'] / max(r['inputs'], 1):>7.0%} {r['slowest_s']:>12.2f}s "
            f"{r['slowest_cpu_s']:>6.2f}s "
            f"{1e3 * r['seed_read_s']:>8.1f}ms {ratio:>6.0f}x {r['peak_rss_mib']:>6.0f} MiB "
            f"{r['wall_s']:>6.0f}s",
            flush=True,
        )
        if a.messages:
            with open(f"{a.messages}.{name}.json", "w", encoding="utf-8") as fh:
                json.dump(r["messages"], fh, indent=0)
        if r["crashes"]:
            print(f"{'':<12} sites: {', '.join(r['crash_sites'])}; first: {r['first_crash']}")
        if r["hang_inputs"]:
            print(f"{'':<12} hangs at inputs {','.join(map(str, r['hang_inputs']))} (--rerun)")
        for k, wall, cpu in r["timings"]:
            print(f"{'':<12} input {k}: {wall:.3f} s wall, {cpu:.3f} s CPU")
        failed |= bool(r["crashes"] or r["hangs"] or r["peak_rss_mib"] > 1024)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
