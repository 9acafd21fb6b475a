"""Where a CPU-time share's prediction error comes from: the share's speed, or the rest.

A CPU-time share predicts the full target's MAT as ``MAT_share(T / s) / s``
(:mod:`shrink.scaling`). For each validated run this reads three speeds s from the
run's own files:

* **calibrated**: the one the prediction used (the light calibration on the full
  target, against the share near its knee);
* **hit**: the one at which the transform of the share's measured curve gives the
  measured MAT exactly (found by bisection; the share's curve is left as measured);
* **busy**: alpha times the full target's CPU per request on the validation's
  repetitions near the measured MAT, over the share's on its repetitions near the
  same load (its throughput there is about ``hit`` times the MAT). It is what the
  calibration would read if it could see the busy whole core, which a prediction
  may not load.

``log(calibrated / hit)`` is the part of the run's error its speed made;
``log(busy / hit)`` what a speed read from busy costs would have left: the error of
the transform itself. CPU per request is a repetition's utilization times its
CPU share over its throughput (the utilization law), as the calibration reads it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Repetitions within this relative distance of the load the MAT was found at.
NEAR = 0.25
# The speeds searched for the one that hits (a share of 2% to 100% of the target).
S_RANGE = (0.02, 1.0)


def _with_speed(curve: Any, s: float) -> Any:
    from shrink.share import ShareSpeed

    speed = curve.share.speed or ShareSpeed(nominal=curve.share.cpu_fraction)
    share = dataclasses.replace(curve.share, speed=dataclasses.replace(speed, effective=s))
    return dataclasses.replace(curve, share=share)


def predicted_mat(curve: Any, s: float, stat: str, threshold: float) -> float:
    """The full target's MAT the share's ``curve`` predicts at speed ``s``: inf where the
    share's curve stays under the threshold scaled by 1/s (the MAT lies above its
    levels), 0 where it is over it from its first level."""
    from shrink.mat import mat
    from shrink.scaling import shrink_scaled_curve

    got = mat(shrink_scaled_curve(_with_speed(curve, s)), stat, threshold)
    if got.status == "ok":
        return got.mat
    return math.inf if got.status == "not_reached" else 0.0


def speed_to_hit(curve: Any, stat: str, threshold: float, measured: float) -> float | None:
    """The speed at which ``curve`` predicts ``measured`` (None where no speed in
    :data:`S_RANGE` brackets it, or where the crossing is not inside the share's
    levels). The predicted MAT falls as s grows."""
    lo, hi = S_RANGE
    at_lo, at_hi = (
        predicted_mat(curve, lo, stat, threshold),
        predicted_mat(curve, hi, stat, threshold),
    )
    if not at_hi <= measured <= at_lo:
        return None
    for _ in range(50):
        mid = math.sqrt(lo * hi)
        if predicted_mat(curve, mid, stat, threshold) > measured:
            lo = mid
        else:
            hi = mid
    s = math.sqrt(lo * hi)
    return s if 0 < predicted_mat(curve, s, stat, threshold) < math.inf else None


def cpu_per_request(levels: Iterable[Any], near: float, cpu_share: float) -> float | None:
    """The median CPU seconds a request took over the repetitions whose throughput is
    within :data:`NEAR` of ``near`` and whose generator kept up."""
    costs = [
        rep.utilization * cpu_share / rep.throughput
        for lv in levels
        for rep in lv.reps
        if abs(rep.throughput / near - 1) <= NEAR
        and rep.utilization
        and rep.throughput > 0
        and not rep.generator_behind
    ]
    return statistics.median(costs) if costs else None


def busy_speed(share: Any, full: Any, measured: float, s_hit: float) -> float | None:
    """alpha x the full target's CPU per request near ``measured`` over the share's near
    ``s_hit * measured`` (see the module docstring)."""
    q = share.share.cpu_fraction
    c_full = cpu_per_request(full.usable(), measured, 1.0)
    c_share = cpu_per_request(share.usable(), s_hit * measured, q)
    return q * c_full / c_share if c_full and c_share else None


def decompose(run: Path, stat: str = "mean") -> dict[str, Any] | None:
    """The three speeds of one validated run of a CPU-time share (None otherwise; ``hit``
    and ``busy`` None where no speed hits), and the MAT its share's curve predicts at
    the nominal speed alpha (``nominal``, uncorrected; None with ``nominal_status``
    ``not_reached`` or ``exceeded`` where the threshold is not crossed there)."""
    from shrink.loadcurve import LoadCurve

    share_path, full_path = run / "measured-curve.json", run / "full-curve.json"
    if not (run / "validation.json").exists() or not share_path.exists() or not full_path.exists():
        return None
    share = LoadCurve.read_json(share_path)
    if share.share.kind != "cpu_time" or share.share.speed is None:
        return None
    m = json.loads((run / "validation.json").read_text())["mats"].get(stat) or {}
    if m.get("measured_status") != "ok" or not m.get("measured"):
        return None
    nominal = predicted_mat(share, share.share.cpu_fraction, stat, m["threshold"])
    status = "ok" if 0 < nominal < math.inf else "not_reached" if nominal else "exceeded"
    hit = speed_to_hit(share, stat, m["threshold"], m["measured"])
    busy = None if hit is None else busy_speed(share, LoadCurve.read_json(full_path),
                                               m["measured"], hit)  # fmt: skip
    return {
        "calibrated": share.share.speed.effective, "hit": hit, "busy": busy,
        "nominal": nominal if status == "ok" else None, "nominal_status": status,
    }  # fmt: skip


def speed_report(
    rows: list[dict[str, Any]], stat: str = "mean", alphas: dict[str, float] | None = None
) -> str:
    """A table of the three speeds per CPU-time run (a corpus row's ``speeds``, as
    :func:`decompose` read them), and the spread of each ratio.

    With ``alphas`` (each configuration's alpha) it also compares the calibration with
    no calibration at all: the nominal speed alpha over the speed that hits, whose
    spread is what a constant correction of alpha would leave, and how closely the
    calibrated and nominal errors move together (a correlation near 1: the
    calibration adds little to a constant)."""
    lines = [
        f"Where the CPU-time shares' errors come from ({stat} threshold; bench/fidelity_speed.py):",
        "| config | run | speed calibrated / busy-cost / that hits | calibrated over hit "
        "| busy over hit |",
        "|---|---|---|---|---|",
    ]
    cal, busy, nominal, paired = [], [], [], []
    for r in rows:
        d = (r.get("speeds") or {}).get(stat)
        if d is None or d.get("hit") is None:
            continue
        b = d["busy"]
        cal.append(math.log(d["calibrated"] / d["hit"]))
        alpha = (alphas or {}).get(r["config"])
        if alpha:
            nominal.append(math.log(alpha / d["hit"]))
            paired.append(cal[-1])
        busy += [math.log(b / d["hit"])] if b else []
        b_speed, b_ratio = ("-", "-") if b is None else (f"{b:.3f}", f"{b / d['hit']:.2f}")
        lines.append(
            f"| {r['config']} | {r.get('label') or Path(r['dir']).name} | "
            f"{d['calibrated']:.3f} / {b_speed} / "
            f"{d['hit']:.3f} | {d['calibrated'] / d['hit']:.2f} | {b_ratio} |"
        )
    for label, xs in (("calibrated", cal), ("busy-cost", busy), ("nominal (alpha)", nominal)):
        if len(xs) > 1:
            lines.append(
                f"{label} speed over the speed that hits, in log: mean "
                f"{statistics.fmean(xs):+.3f}, sd {statistics.stdev(xs):.3f} over {len(xs)} runs"
            )
    if len(nominal) > 2 and statistics.stdev(nominal) > 0 and statistics.stdev(paired) > 0:
        lines.append(
            "correlation of the calibrated and nominal errors: "
            f"{statistics.correlation(paired, nominal):.2f} over {len(nominal)} runs"
        )
    return "\n".join(lines) if cal else ""
