"""Load curves with a known answer: an M/M/1 queue's response times at each rate."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats


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
