"""The "tcp" workload: every request is for one static 1 KB file, sent open-loop.

Hashemian et al. (ICPE 2013) used a workload of one 1 KB static file to expose
the network-processing cost of a request; it scaled only 6.3x from 1 to 8
cores. Here each request is its own one-request session (``mode="open"``): its
``t`` is its intended send time, so a replayer sends on schedule whatever the
server's response times are.

Arrivals are evenly spaced (``constant``) or a Poisson process (``poisson``) at
``rate`` requests/s over ``[0, duration)``. Generation is vectorised, so
millions of requests take well under a second.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from shrink.checks import check_rate
from shrink.errors import ParameterError
from shrink.synth._table import VocabColumn, check_size, trace_from_vocab
from shrink.trace import Trace

__all__ = ["ARRIVALS", "TCP_BYTES", "TCP_PATH", "synth_tcp"]

TCP_PATH = "/static/file1k.bin"
TCP_BYTES = 1024
ARRIVALS: tuple[str, ...] = ("constant", "poisson")


def _poisson_times(rate: float, duration: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process on [0, duration), drawn in chunks of gaps."""
    expected = rate * duration
    chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
    parts: list[np.ndarray] = []
    last = 0.0
    while True:
        times = last + np.cumsum(rng.exponential(1.0 / rate, chunk))
        if times[-1] >= duration:
            parts.append(times[times < duration])
            break
        parts.append(times)
        last = float(times[-1])
    # The process starts at 0, so the first arrival is one gap after it.
    return np.concatenate(parts)


def synth_tcp(
    rate: float,
    duration: float,
    *,
    seed: int = 0,
    arrival: Literal["constant", "poisson"] = "poisson",
) -> Trace:
    """An open-loop trace of ``/static/file1k.bin`` requests at ``rate`` req/s.

    ``constant`` sends at ``k / rate`` for ``k = 0, 1, ...`` while below
    ``duration``; ``poisson`` draws exponential gaps with mean ``1 / rate``
    (seeded, so the same seed gives the same trace).
    """
    rate = check_rate(rate)
    duration = check_size(duration, seed, rate * duration, f"{rate:g} req/s for {duration:g} s")
    if arrival not in ARRIVALS:
        raise ParameterError(f"arrival == {arrival!r}, must be one of {', '.join(ARRIVALS)}.")
    if arrival == "constant":
        t = np.arange(math.ceil(rate * duration), dtype=np.float64) / rate
        t = t[t < duration]
    else:
        t = _poisson_times(rate, duration, np.random.default_rng(seed))
    n = int(t.size)
    zeros = np.zeros(n, dtype=np.int32)
    meta = {
        "reader": "synth",
        "source": "shrink synth tcp",
        "workload": "tcp",
        "mode": "open",
        "rate": rate,
        "arrival": arrival,
        "duration": duration,
        "seed": int(seed),
    }
    return trace_from_vocab(
        session=np.arange(n, dtype=np.int64),
        burst=zeros,
        t=t,
        think=np.zeros(n),
        path=VocabColumn([TCP_PATH], zeros),
        cls=VocabColumn(["static"], zeros),
        nbytes=np.full(n, TCP_BYTES, dtype=np.int64),
        status=np.full(n, 200, dtype=np.int32),
        client=VocabColumn([""], zeros),
        meta=meta,
    )
