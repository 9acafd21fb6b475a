"""Predict the papers' two-socket machine from one socket, on the simulator, and check it.

The simulator stands in for hardware this project does not have: half of the
sessions on one socket (alpha = 0.5) predict the whole 8-core machine for each
replica mapping; then the whole machine is simulated and the prediction checked.

    python examples/predict_on_simulator.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from extrapolate.mappings import extrapolate_mappings
from shrink.autolevels import AutoPlan, auto_sweep
from shrink.machine import Machine
from shrink.predict import PredictConfig, predict
from shrink.providers import SimProvider
from shrink.report.build import write_report
from shrink.share import Share
from shrink.sim.workloads import tcp_trace
from shrink.validate import validate

HERE = Path(__file__).resolve().parent


def main(out: Path) -> dict[str, dict[str, float]]:
    machine = Machine.read_toml(HERE / "machines" / "nehalem-2s.toml")
    provider = SimProvider(machine)
    # The papers' TCP/IP workload: 1 KB static requests, open loop; thresholds as published.
    trace = tcp_trace(rate=50_000.0, duration=8.0, seed=1)
    thresholds = {"mean": 0.0005, "p999": 0.004}
    plan = AutoPlan(warmup=0.3, duration=1.0, reps=2, max_levels=6, warm_run=False)
    cfg = PredictConfig(
        alpha=0.5,
        thresholds=thresholds,
        seed=1,
        plan=plan,
        mappings=("1-replica", "2-replica-direct", "2-replica-indirect"),
    )
    res = predict(trace, provider, cfg, out, extrapolator=extrapolate_mappings)
    for name, m in res.prediction.mappings.items():
        print(f"{name:20s} predicted mean-threshold MAT {m.stats['mean'].mat:>9,.0f} req/s")
    # Ground truth: the whole simulated machine under 1-replica, the full trace.
    with provider.open(Share.whole(machine.all_cpus), "1-replica") as target:
        full = auto_sweep(target, trace, thresholds, plan=plan, seed=2, alpha=1.0)
    v = validate(res.predicted, full, thresholds)
    write_report(out, res.prediction, measured=res.measured, full_run=full, validation=v)
    errors = v.mat_error
    print(
        "SHRiNK scaling alone vs the simulated whole machine (1-replica):",
        ", ".join(f"{s} {100 * e:+.1f}%" for s, e in errors.items()),
    )
    corrected = {}
    for stat in thresholds:
        measured = v.mats[stat]["measured"]
        mat_1 = res.prediction.mappings["1-replica"].stats[stat].mat
        corrected[stat] = (mat_1 - measured) / measured
    print(
        "with the cross-socket correction (published calibration):",
        ", ".join(f"{s} {100 * e:+.1f}%" for s, e in corrected.items()),
    )
    print(f"report: {out / 'report.md'}")
    return {"shrink_only": errors, "corrected": corrected}


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("sim-out"))
