"""Does the calibration predict what a request costs on the share near its knee, against a
busy whole core?

    python bench/bench_share_speed.py                         # both mechanisms, 2 pairs
    python bench/bench_share_speed.py --enforce corunner --pairs 3

On the demo's workload (its Support trace and docroot; the share gets alpha 0.25 of
the sessions on a 25% CPU-time share of CPU 1, the full target is the whole CPU 1),
per mechanism:

1. ``shrink.scaling.calibrate`` runs the sample's mix light on the full target (at
   most each load of ``--loads`` busy: 0.1 is the bound a prediction keeps) and near
   its knee on the share; it predicts the full / share CPU per request of the mix as
   ``effective / nominal``.
2. A pilot finds the rate factor that keeps the full target ~80% busy; the full
   trace runs there on the full target, and the sample on the share at that rate
   factor times ``effective / nominal`` (so the share is ~80% busy too), in pairs
   back to back, alternating which goes first.
3. The measured ratio is the full target's server CPU per request over the share's,
   per pair (the reference measured in the same run); printed next to the predicted
   one. ``others``: the part of CPU 1 other processes took in those runs (the
   median; 0% on a quiet machine). A ratio of 1 would be a share that costs what
   the whole core costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ALPHA = 0.25


def _cpu_per_request(res: Any) -> float | None:
    cpu = (res.describe or {}).get("server_cpu")
    log = res.runlog.window(*res.window)
    n = int(log.ok_mask().sum())
    span = res.window[1] - res.window[0]
    return float(cpu) * span / n if cpu is not None and n else None


def _busy_factor(target: Any, trace: Any, want: float, seed: int) -> float:
    """The rate factor at which ``target`` is ``want`` busy (two pilot steps)."""
    f = 0.5
    for _ in range(2):
        res = target.run(trace, rate_factor=f, warmup=1.0, duration=2.0, seed=seed)
        u = res.utilization or 0.0
        f = f * want / u if u > 0 else f * 4
    return f


def bench(
    mech: str, work: Path, trace: Any, sample: Any, docroot: Path, pairs: int, loads: list[float]
) -> dict:
    from shrink.providers import TestbedProvider
    from shrink.scaling import calibrate
    from shrink.share import Share
    from shrink.testbed import ServerSettings

    prov = TestbedProvider(
        docroot, run_dir=work / f"runs-{mech}", server=ServerSettings(enforce=mech)
    )
    with (
        prov.open(Share.cpu_time((1,), ALPHA), "1-replica") as share,
        prov.open(Share.whole((1,)), "1-replica") as full,
    ):
        probes = []
        for load in loads:
            t0 = time.monotonic()
            sp = calibrate(share, full, sample, nominal=ALPHA, seed=1, busy=load)
            probes.append((load, sp, time.monotonic() - t0))
        speed = probes[0][1]
        f_full = _busy_factor(full, trace, 0.8, seed=3)
        f_share = f_full * speed.effective / ALPHA
        ratios, utils, others = [], [], []
        dropped = 0
        for k in range(pairs):
            first_full = k % 2 == 0
            runs = {}
            for side in ("full", "share") if first_full else ("share", "full"):
                tgt, tr, f = (full, trace, f_full) if side == "full" else (share, sample, f_share)
                runs[side] = tgt.run(tr, rate_factor=f, warmup=2.0, duration=5.0, seed=10 + k)
            utils.append((runs["full"].utilization, runs["share"].utilization))
            others.extend(float(r.describe.get("share_other_cpu") or 0.0) for r in runs.values())
            if any(r.generator.behind for r in runs.values()):
                dropped += 1  # as for a MAT: a run whose generator fell behind is not used
                continue
            cf, cs = _cpu_per_request(runs["full"]), _cpu_per_request(runs["share"])
            if cf and cs:
                ratios.append(cf / cs)
    return {
        "mechanism": mech,
        "probes": probes,
        "measured": ratios,
        "utilization": utils,
        "others": others,
        "dropped": dropped,
    }


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    import samplers
    from shrink.demo import _synth
    from shrink.trace import Trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--enforce", nargs="+", default=["cfs"])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument(
        "--loads", type=float, nargs="+", default=[0.1], help="calibration bounds to compare"
    )
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shrink-speed-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the servers run unprivileged: they pass through to the docroot
        trace_path, docroot = _synth(work, Console(stderr=True))
        trace = Trace.read_parquet(trace_path)
        sample = samplers.sample(trace, ALPHA, seed=0, level="session")
        rows = [bench(m, work, trace, sample, docroot, a.pairs, a.loads) for m in a.enforce]
    print(
        "| mechanism | probe load | calibrated speed | probe s | predicted "
        "full/share CPU per request | measured at ~80% load (median; pairs) | "
        "utilization full/share | others |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        meas = r["measured"]
        med = (
            f"{statistics.median(meas):.3f} ({', '.join(f'{x:.3f}' for x in meas)})"
            if meas
            else "-"
        )
        if r["dropped"]:
            med += f" ({r['dropped']} pair(s) dropped: generator behind)"
        ut = "; ".join(f"{u or 0:.2f}/{v or 0:.2f}" for u, v in r["utilization"])
        for load, sp, wall in r["probes"]:
            note = f" ({'; '.join(sp.notes)})" if sp.notes else ""
            print(
                f"| {r['mechanism']} | {load:g} | effective {sp.effective:.3f}{note} "
                f"| {wall:.1f} | {sp.effective / ALPHA:.3f} | {med} | {ut} "
                f"| {statistics.median(r['others'] or [0.0]):.0%} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
