"""The two built-in stacks side by side: predicted MAT of nginx + PHP-FPM over lighttpd + php-cgi.

    python bench/bench_stacks.py                        # 1 round, 150 s of runs per prediction
    python bench/bench_stacks.py --rounds 2 --budget 450

Writes the demo's Support-like trace (same seed and settings as ``make demo``), then
predicts one whole core (CPU 1) from alpha = 0.25 on a 25% CPU-time share, once per
stack, alternating the stacks round by round so that both see the same host. The
reference is lighttpd + php-cgi (the default recipe) predicted in the same round: the
figure printed is nginx-php-fpm's MAT / lighttpd-php-cgi's, per statistic, over the
rounds where both MATs are crossings (not bounds). Each row
also says whether the generator kept up (a busy host makes MATs bounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

STACKS = ("lighttpd-php-cgi", "nginx-php-fpm")


def predict_once(work: Path, trace: Path, docroot: Path, server: str, budget: float) -> dict:
    from shrink.autolevels import AutoPlan
    from shrink.demo import DEMO
    from shrink.errors import MeasurementError
    from shrink.pipeline import TargetSettings, run_predict
    from shrink.predict import PredictConfig

    # The demo's plan with a smaller budget: time-scaled pairs, the probe once, the
    # coarse pass from 80% of the estimated capacity.
    plan = AutoPlan(
        warmup=1.5,
        duration=4.0,
        reps=2,
        probe_reps=1,
        coarse=(0.8, 0.9, 1.0, 1.1, 1.25),
        max_levels=7,
        budget_s=budget,
    )
    t0 = time.monotonic()
    try:
        pred = run_predict(
            trace,
            work,
            PredictConfig(
                alpha=DEMO["alpha"],
                share_kind="cpu_time",
                mappings=("1-replica",),
                thresholds=dict(DEMO["thresholds"]),
                seed=DEMO["seed"],
                plan=plan,
            ),
            target=TargetSettings(target="testbed", docroot=docroot, server=server),
        )
    except MeasurementError as exc:  # a host so busy that the generator never kept up
        return {"server": server, "seconds": round(time.monotonic() - t0), "error": str(exc)}
    pred = pred.to_dict()  # as prediction.json holds it
    m = pred["mappings"]["1-replica"]
    return {
        "server": server,
        "seconds": round(time.monotonic() - t0),
        "versions": pred["server"]["versions"],
        **{s: {"mat": m[s]["mat"], "status": m[s].get("status")} for s in DEMO["thresholds"]},
        "kept_up": pred["self_checks"].get("generator_kept_up"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds of runs per prediction")
    ap.add_argument("--out", type=Path, default=None, help="keep the work here")
    args = ap.parse_args()
    from rich.console import Console

    from shrink.demo import DEMO, _synth

    work = args.out or Path(tempfile.mkdtemp(prefix="bench-stacks-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.out is None:
        os.chmod(work, 0o711)  # as root the servers run as www-data, who must reach the docroot
    trace, docroot = _synth(work, Console(stderr=True))
    rows: list[dict[str, Any]] = []
    ratios: dict[str, list[float]] = {s: [] for s in DEMO["thresholds"]}
    for rnd in range(args.rounds):
        order = STACKS if rnd % 2 == 0 else STACKS[::-1]
        got = {}
        for server in order:
            row = predict_once(work / f"{server}-{rnd}", trace, docroot, server, args.budget)
            got[server] = row
            rows.append({"round": rnd, **row})
            print(json.dumps(rows[-1]), flush=True)
        for s in ratios:
            # Only crossings: a MAT that is a bound ("not_reached") gives no ratio.
            ref, new = (got[k].get(s, {}) for k in STACKS)
            if ref.get("status") == new.get("status") == "ok" and ref["mat"] and new["mat"]:
                ratios[s].append(new["mat"] / ref["mat"])
    (work / "stacks.json").write_text(json.dumps(rows, indent=2) + "\n")
    for s, r in ratios.items():
        if r:
            print(
                f"{s}: nginx-php-fpm / lighttpd-php-cgi MAT = {statistics.median(r):.2f} "
                f"(rounds: {', '.join(f'{x:.2f}' for x in r)})"
            )
    print(f"rows: {work / 'stacks.json'}")


if __name__ == "__main__":
    main()
