"""Load curves with a known answer: an M/M/1 queue's response times at each rate, and the
synthetic truth's share curve the extrapolation starts from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats

if TYPE_CHECKING:
    from shrink.machine import Machine


def mm1_curve(
    rates: Iterable[float],
    mu: float,
    *,
    reps: int,
    n: int,
    seed: int = 0,
    alpha: float = 1.0,
    share: Any = None,
) -> LoadCurve:
    """Exponential response times of an M/M/1 (FIFO == PS in the mean) at each rate:
    ``reps`` runs of ``n`` requests a level, all of class ``static``."""
    rng = np.random.default_rng(seed)
    levels = []
    for lam in rates:
        runs = []
        for _ in range(reps):
            lat = rng.exponential(1 / (mu - lam), n)
            s = latency_stats(lat, n / lam)
            runs.append(LevelStats(throughput=float(lam), overall=s, per_class={"static": s}))
        levels.append(Level(float(lam), runs))
    return LoadCurve(levels, knob="rate", alpha=alpha, share=share or {"kind": "all"})


def half_share_curve(
    machine: Machine, *, seed: int, workload: str = "support", **kw: Any
) -> LoadCurve:
    """The design's mixed workload (Support's dynamic fraction and memory ratio) measured
    with half the sessions on the first four cores, under ``1-replica``: the share curve
    the extrapolation tests start from. ``kw``: :func:`truth_curve`'s levels, reps, noise."""
    from extrapolate._synthetic import DESIGN_WORKLOADS, Truth, truth_curve

    dyn, smr = DESIGN_WORKLOADS["mixed"]
    return truth_curve(
        Truth(), machine, "1-replica", (0, 1, 2, 3),
        dyn=dyn, smr=smr, workload=workload, alpha=0.5, seed=seed, **kw,
    )  # fmt: skip
