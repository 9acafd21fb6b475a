"""The calibration's probe: the sample's requests drawn by class at a planned rate."""

from __future__ import annotations

import math

import numpy as np

from shrink.errors import MeasurementError
from shrink.trace import Trace

# The calibration runs the trace's mix (its requests drawn by frequency), not a class.
MIX = "mix"


def probe_trace(
    trace: Trace, rate: float, seconds: float, seed: int, burst: int = 1, offset: float = 0.0,
    period_rate: float | None = None,
) -> Trace:  # fmt: skip
    """Requests of ``trace`` drawn by frequency (its mix, by class), ``rate`` a second:
    an exactly planned load at any rate, evenly spaced, or in bursts of ``burst``
    requests, sent at once or ``period_rate`` a second within a burst, the first
    ``offset`` seconds in.

    The probe is replayed open-loop on keep-alive connections (a pool, reused from
    burst to burst), as the sweep replays the sample's sessions (over a hundred
    requests a connection in the Support traces) and an open-loop trace's requests. A
    connection opened for every request made the probe dear on a cheap page: on the
    1 KiB static trace the calibrated full capacity was a third of the whole core's
    busy one, on the Support mix 0.59-0.95. A target told to open a connection for
    every request (``--conn-per-request``) does so for the probe too."""
    if burst < 1:
        raise MeasurementError(f"probe_trace: a burst of {burst} requests")
    if period_rate is not None and not period_rate >= rate:
        raise MeasurementError(f"probe_trace: a period at {period_rate} req/s, under {rate}")
    n = max(2, math.ceil(rate * seconds) + 1)
    rng = np.random.default_rng(seed)
    # Stratified by class (evenly spaced draws over the requests sorted by class, in
    # random order): each class's count is its share of n to one request, so that
    # the mix's composition adds no noise to its cost on either side.
    order = np.argsort(trace.column("cls").astype(str), kind="stable")
    at = (rng.random() + np.arange(n)) * (len(trace) / n)
    pick = order[np.minimum(at.astype(np.int64), len(trace) - 1)]
    src = trace.take(rng.permutation(pick))
    columns = {
        name: src.column(name)
        for name in ("method", "path", "cls", "bytes", "status", "client")
        if name in src.columns
    }
    for name in ("body", "content_type"):  # what the requests send, as recorded
        if name in src.columns:
            columns[name] = src.column(name)
    return Trace.from_columns(
        {
            **columns,
            "session": np.arange(n, dtype=np.int64),
            "burst": np.zeros(n, dtype=np.int32),
            "t": offset + _times(n, rate, burst, period_rate),
            "think": np.zeros(n),
            "rt": np.full(n, np.nan),
        },
        # The run starts at 0 of these times, not at the first request: the periods
        # stay where they were placed in its window.
        meta={
            "probe": MIX,
            "mode": "open",
            "rate": rate,
            "seed": seed,
            "burst": burst,
            "t_start": 0.0,
        },
    )


def _times(n: int, rate: float, burst: int, period_rate: float | None) -> np.ndarray:
    """Send times of ``n`` requests: a burst every ``burst / rate`` s, its requests at
    once or ``period_rate`` a second."""
    i = np.arange(n)
    t = (i // burst * burst).astype(np.float64) / rate
    return t + (i % burst) / period_rate if period_rate else t
