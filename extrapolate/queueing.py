"""The queueing relation: per-core processor sharing with several request classes.

Why processor sharing. Lighttpd runs one event-driven worker per core, pinned,
and PHP-FastCGI processes are pinned evenly; connections are spread over the
cores by RSS and the listening socket. Each core therefore time-slices among
the requests it holds: an M/G/1 processor-sharing (PS) station per core, fed
1/n of the load. For M/G/1-PS the mean response time is *insensitive* to the
shape of the service-demand distribution, and per class it is

    R_c = D_c / (1 - rho),       rho = lambda_core * sum_c f_c D_c

(Kleinrock 1967; Harchol-Balter, *Performance Modeling and Design of Computer
Systems*, ch. 22). So corrected per-class demands D_c turn directly into the
mean-latency curve, with no assumption on their variability. That is what makes
a per-class correction of the *demands* enough for the mean.

The p99.9 has no such insensitivity. We use the response time of M/M/1-PS for
each class (exponential demands inside a class): its mean is D_c/(1-rho) and its
squared coefficient of variation is exactly (2+rho)/(2-rho) (Coffman, Muntz and
Trotter 1970), and we match a gamma distribution to these two moments. The
p99.9 of the whole is the 0.999-quantile of the mixture over classes and
replicas. Where a measured curve exists, :mod:`extrapolate.shrink_scaling` uses
the measured tail shape instead (the tail then comes from data).

A load-independent latency ``fixed_latency`` (network path, interrupt
coalescing, client stack) is added to every request; ``tail_shift`` is added to
the p99.9 only (rare waits behind other NIC queues' interrupt batches on the
same core, see :mod:`extrapolate.crosssocket`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammainc, gammaincinv

from shrink.errors import ExtrapolationError

__all__ = ["Network", "Station", "ps_scv"]

_P999 = 0.999


def ps_scv(rho: float | np.ndarray) -> float | np.ndarray:
    """Squared coefficient of variation of the M/M/1-PS response time at load rho."""
    return (2.0 + rho) / (2.0 - rho)


@dataclass(frozen=True)
class Station:
    """One replica: ``cores`` identical PS cores, each request class with its demand (s)."""

    cores: int
    demands: dict[str, float]
    tail_shift: float = 0.0


@dataclass(frozen=True)
class Network:
    """The whole server under one mapping: replicas fed in proportion to their cores.

    ``mix`` is the fraction of requests of each class (sums to 1).
    """

    stations: tuple[Station, ...]
    mix: dict[str, float]
    fixed_latency: float = 0.0
    _weights: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.stations:
            raise ExtrapolationError("a network needs at least one station (replica)")
        cores = np.array([s.cores for s in self.stations], dtype=np.float64)
        object.__setattr__(self, "_weights", cores / cores.sum())

    @property
    def n_cores(self) -> int:
        return int(sum(s.cores for s in self.stations))

    def mean_demand(self, station: Station) -> float:
        """Mix-weighted demand per request on ``station`` (s)."""
        return float(sum(f * station.demands[c] for c, f in self.mix.items() if f > 0))

    def utilization(self, throughput: float) -> np.ndarray:
        """Per-core utilization of each station at total ``throughput`` (req/s)."""
        per_core = throughput / self.n_cores
        return np.array([per_core * self.mean_demand(s) for s in self.stations])

    def saturation(self) -> float:
        """Throughput at which the busiest station reaches utilization 1."""
        return float(self.n_cores / max(self.mean_demand(s) for s in self.stations))

    def mean_response(self, throughput: float, cls: str | None = None) -> float:
        """Mean response time (s) at ``throughput``: PS insensitivity, per class."""
        rho = self.utilization(throughput)
        if np.any(rho >= 1.0):
            return float("inf")
        total = 0.0
        classes = [cls] if cls is not None else [c for c, f in self.mix.items() if f > 0]
        norm = 1.0 if cls is not None else sum(self.mix[c] for c in classes)
        for w, st, r in zip(self._weights, self.stations, rho, strict=True):
            for c in classes:
                f = 1.0 if cls is not None else self.mix[c] / norm
                total += w * f * st.demands[c] / (1.0 - r)
        return self.fixed_latency + total

    def _components(
        self, throughput: float, cls: str | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rho = self.utilization(throughput)
        weights, shapes, scales, shifts = [], [], [], []
        classes = [cls] if cls is not None else [c for c, f in self.mix.items() if f > 0]
        for w, st, r in zip(self._weights, self.stations, rho, strict=True):
            scv = float(ps_scv(r))
            for c in classes:
                f = 1.0 if cls is not None else self.mix[c]
                mean = st.demands[c] / (1.0 - r)
                weights.append(w * f)
                shapes.append(1.0 / scv)
                scales.append(mean * scv)
                shifts.append(st.tail_shift)
        wa = np.array(weights)
        return wa / wa.sum(), np.array(shapes), np.array(scales), np.array(shifts)

    def quantile_response(
        self, throughput: float, q: float = _P999, cls: str | None = None
    ) -> float:
        """The q-quantile of the response time (s): gamma mixture, see the module docstring."""
        if np.any(self.utilization(throughput) >= 1.0):
            return float("inf")
        w, k, theta, shift = self._components(throughput, cls)
        comp = gammaincinv(k, q) * theta + shift
        lo, hi = float(comp.min()), float(comp.max())
        # Relative, not absolute: a hair under saturation the components' quantiles run
        # to 1e10 s and differ in the last bits only (hypothesis found it).
        if hi - lo <= 1e-12 * hi:
            return self.fixed_latency + hi

        def cdf_gap(t: float) -> float:
            x = np.maximum(t - shift, 0.0) / theta
            return float(np.dot(w, gammainc(k, x))) - q

        # The mixture's quantile lies between its components'; where rounding leaves no
        # sign change across them, the end nearer the quantile is as close as floats get.
        g_lo, g_hi = cdf_gap(lo), cdf_gap(hi)
        if g_lo >= 0 or g_hi <= 0:
            return self.fixed_latency + (lo if abs(g_lo) <= abs(g_hi) else hi)
        return self.fixed_latency + float(brentq(cdf_gap, lo, hi, xtol=1e-12, rtol=1e-10))

    def response(self, throughput: float, stat: str, cls: str | None = None) -> float:
        """``stat`` (mean, p50, p90, p99, p999) of the response time at ``throughput``."""
        if stat == "mean":
            return self.mean_response(throughput, cls)
        q = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}.get(stat)
        if q is None:
            raise ExtrapolationError(f"statistic {stat!r} is not one of mean, p50, p90, p99, p999")
        return self.quantile_response(throughput, q, cls)

    def mat(self, stat: str, threshold: float) -> float:
        """Highest throughput (req/s) at which ``stat`` stays under ``threshold`` seconds.

        Returns 0.0 when even an idle server exceeds the threshold.
        """
        x_sat = self.saturation()
        if self.response(x_sat * 1e-9, stat) >= threshold:
            return 0.0
        demands = [self.mean_demand(s) for s in self.stations]
        if stat == "mean" and max(demands) - min(demands) <= 1e-12 * max(demands):
            # Identical stations: L0 + D/(1 - rho) = T has a closed form.
            rho = 1.0 - demands[0] / (threshold - self.fixed_latency)
            return max(rho, 0.0) * x_sat
        hi = x_sat * (1.0 - 1e-12)
        if self.response(hi, stat) <= threshold:
            return hi
        return float(
            brentq(
                lambda x: self.response(x, stat) - threshold,
                x_sat * 1e-9,
                hi,
                xtol=x_sat * 1e-9,
                rtol=1e-10,
            )
        )

    def curve(self, n: int = 24, *, up_to: float = 0.98) -> dict[str, list[float]]:
        """Latency curve: throughput grid up to ``up_to`` of saturation, mean and p99.9."""
        xs = np.linspace(1.0 / n, up_to, n) * self.saturation()
        return {
            "throughput": xs.tolist(),
            "mean": [self.mean_response(x) for x in xs],
            "p999": [self.quantile_response(x) for x in xs],
            "utilization": [float(self.utilization(x).max()) for x in xs],
        }
