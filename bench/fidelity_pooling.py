"""Does pooling (the model below) explain the core subsets' errors?

A core subset's MATs are read off the share's curve scaled by servers; the whole
machine's cores are one pool behind one accept queue, and queue less than the share's
at the same utilization. For each core-subset run folder (a prediction's output, with
the validation's ``validation.json`` beside it), this reads the predicted MATs again
from the share's measured curve, as predicted and with the share's queueing excess
scaled to the full target's cores by Erlang's C, and prints both errors against the
validation's measured MATs, then their medians. Nothing in it is fitted.

    python bench/fidelity_pooling.py RUN_DIR ...

The model tried, pooling: a core subset queues more than the whole machine it stands for.

SHRiNK's scaling by servers, R_full(X) = R_share(alpha X), holds for 1 / alpha copies
of the share, each with a queue of its own. The cores of one server are one pool
behind one accept queue: a request waits only while every core is busy. At the same
utilization rho, n pooled servers (M/M/n) wait ``C(n, n rho) / (n rho)`` times as long
as one (M/M/1), C being Erlang's C formula: 0.44 for two cores against one at rho 0.8.
So the full target's response time at the scaled throughput is the share's at its
lightest level plus the share's excess over it times that ratio:

    R_full(X / alpha) = R0 + (R_share(X) - R0) * W(n, rho) / W(k, rho),

``k`` being the share's cores, ``n = k / alpha`` the full target's, ``rho`` the share's
measured utilization at the level, and ``R0`` the statistic at the share's lightest
level (the part of a response that is no wait). The one ratio serves every statistic:
in M/M/n a wait's tail also decays n times faster, and its probability is C instead
of rho, which comes to about the same ratio at the p99.9 (0.49 against the mean's
0.44 at rho 0.8). Nothing is fitted: rho is measured, k and n are the share's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shrink.errors import ShrinkError
from shrink.loadcurve import ClassStats, LoadCurve
from shrink.mat import mat
from shrink.scaling import shrink_scaled_curve

STATS = ("mean", "p999")

_ALL = ("mean", "p50", "p90", "p99", "p999")
_MAX_RHO = 0.999  # past it the ratio's limit (both queues unbounded) is used


def erlang_c(n: int, rho: float) -> float:
    """The probability that a request waits in an M/M/n queue at utilization ``rho``
    (Erlang's C), from Erlang's B by its recursion (no factorials to overflow)."""
    a = n * rho
    b = 1.0
    for k in range(1, n + 1):
        b = a * b / (k + a * b)
    return b / (1.0 - rho * (1.0 - b))


def wait_ratio(k: int, n: int, rho: float) -> float:
    """The mean wait of ``n`` pooled servers over ``k`` pooled servers' at utilization
    ``rho``: ``(C(n, n rho) / n) / (C(k, k rho) / k)`` (the ``1 / (1 - rho)`` cancels)."""
    rho = min(max(rho, 1e-9), _MAX_RHO)
    return (erlang_c(n, rho) / n) / (erlang_c(k, rho) / k)


def _floors(curve: LoadCurve) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each statistic at the curve's lightest level (median over its kept repetitions),
    overall and per class."""
    lightest = min((lv for lv in curve.levels if lv.kept), key=lambda lv: lv.level)
    reps = lightest.kept
    overall = {s: statistics.median(getattr(r.overall, s) for r in reps) for s in _ALL}
    per_class: dict[str, dict[str, float]] = {}
    for name in {c for r in reps for c in r.per_class}:
        have = [r.per_class[name] for r in reps if name in r.per_class]
        per_class[name] = {s: statistics.median(getattr(c, s) for c in have) for s in _ALL}
    return overall, per_class


def _pool(c: ClassStats, floor: dict[str, float], ratio: float) -> None:
    for s in _ALL:
        v = getattr(c, s)
        if v > floor[s]:
            setattr(c, s, floor[s] + (v - floor[s]) * ratio)
    if c.dist:
        c.dist = [
            floor["p50"] + (v - floor["p50"]) * ratio if v > floor["p50"] else v for v in c.dist
        ]


def pooled_curve(curve: LoadCurve, k: int, n: int) -> LoadCurve:
    """``curve`` (a share of ``k`` cores, its throughputs already scaled) with each
    repetition's queueing excess scaled to ``n`` pooled cores (see the module docstring).

    A repetition without a measured utilization is left as it is."""
    out = LoadCurve.from_dict(curve.to_dict())
    if n <= k or not any(lv.kept for lv in out.levels):
        return out
    floor, class_floors = _floors(out)
    for lv in out.levels:
        for r in lv.reps:
            if r.utilization is None:
                continue
            ratio = wait_ratio(k, n, r.utilization)
            _pool(r.overall, floor, ratio)
            for name, c in r.per_class.items():
                if name in class_floors:
                    _pool(c, class_floors[name], ratio)
    return out


def errors(run: Path) -> list[tuple[str, float, float, float]]:
    """(statistic, measured MAT, log error as predicted, log error pooled) of each
    statistic whose MATs were read on both sides (no bound)."""
    measured = LoadCurve.read_json(run / "measured-curve.json")
    share = measured.share
    if share.kind != "cores":
        return []
    k = len(share.cpus)
    n = round(k / measured.alpha)
    plain = shrink_scaled_curve(measured)
    pooled = pooled_curve(plain, k, n)
    checks: dict[str, Any] = json.loads((run / "validation.json").read_text())["mats"]
    out = []
    for s in STATS:
        c = checks.get(s) or {}
        if c.get("measured_status") != "ok" or not c.get("measured"):
            continue
        try:
            a, b = mat(plain, s, c["threshold"]), mat(pooled, s, c["threshold"])
        except ShrinkError:
            continue
        if a.status != "ok" or b.status != "ok":
            continue
        truth = float(c["measured"])
        out.append((s, truth, math.log(a.mat / truth), math.log(b.mat / truth)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="core-subset run folders")
    args = ap.parse_args(argv)
    plain: list[float] = []
    pooled: list[float] = []
    for run in args.runs:
        for s, truth, a, b in errors(run):
            plain.append(a)
            pooled.append(b)
            print(
                f"{run!s:60s} {s:5s} measured {truth:8,.0f}  as predicted "
                f"{100 * math.expm1(a):+6.1f}%  pooled {100 * math.expm1(b):+6.1f}%"
            )
    if not plain:
        print("no core-subset run with MATs read on both sides")
        return 1
    for name, errs in (("as predicted", plain), ("pooled", pooled)):
        print(
            f"{name:12s}: {len(errs)} pairs, median |error| "
            f"{100 * statistics.median(abs(math.expm1(e)) for e in errs):.1f}%, median error "
            f"{100 * math.expm1(statistics.median(errs)):+.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
