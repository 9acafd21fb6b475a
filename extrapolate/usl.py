"""Core-count scaling inside a socket: the Universal Scalability Law (Gunther).

    X(n) = lambda * n / (1 + sigma (n - 1) + kappa n (n - 1))

sigma is contention (serialisation on a shared resource: the socket's LLC,
memory controller, a lock), kappa coherency (pairwise exchanges, e.g. cache
lines bouncing between cores). The papers saw sub-linear scaling from 1 to 4
cores of one socket; fitting the USL to MATs measured at several core counts
lets :mod:`extrapolate.crosssocket` inflate demands for a full socket that has
more cores than any measured share (the denominator is that inflation).

:class:`USLModel` follows the scikit-learn estimator contract. ``fit(n, X)``
takes one row per measurement, repetitions as repeated core counts. The fit is
nonlinear least squares (scipy ``least_squares``, relative residuals, sigma and
kappa bounded at 0); intervals come from a bootstrap over repetitions: each
core count's repetitions are resampled with replacement and the model refitted.
``tests/test_extrapolate_usl.py`` checks the fit against the independent
``pyusl`` implementation (scipy ``curve_fit``) on the same data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from sklearn.base import BaseEstimator

from extrapolate._estimator import check_is_fitted
from shrink.checks import check_int
from shrink.errors import ExtrapolationError

__all__ = ["USLModel", "usl_from_curves", "usl_summary", "usl_throughput"]


def usl_throughput(n: np.ndarray | float, lam: float, sigma: float, kappa: float) -> np.ndarray:
    """USL throughput at ``n`` cores."""
    n = np.asarray(n, dtype=np.float64)
    return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def _linearized(n: np.ndarray, x: np.ndarray, lam: float) -> tuple[float, float]:
    """sigma, kappa from the USL made linear by a known lambda:
    n lambda / X(n) - 1 = sigma (n - 1) + kappa n (n - 1)."""
    a = np.c_[n - 1.0, n * (n - 1.0)]
    b = n * lam / x - 1.0
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    return max(float(coef[0]), 0.0), max(float(coef[1]), 0.0)


def _fit_once(n: np.ndarray, x: np.ndarray) -> np.ndarray:
    lam0 = float(np.mean(x[n == n.min()] / n.min()))
    s0, k0 = _linearized(n, x, lam0)

    def res(p: np.ndarray) -> np.ndarray:
        return usl_throughput(n, p[0], p[1], p[2]) / x - 1.0

    def jac(p: np.ndarray) -> np.ndarray:
        den = 1.0 + p[1] * (n - 1.0) + p[2] * n * (n - 1.0)
        f = p[0] * n / den / x
        return np.c_[f / p[0], -f * (n - 1.0) / den, -f * n * (n - 1.0) / den]

    sol = least_squares(
        res,
        [lam0, s0 + 1e-6, k0 + 1e-7],
        jac=jac,
        bounds=([1e-12, 0.0, 0.0], [np.inf, 10.0, 10.0]),
        x_scale=[lam0, 0.01, 0.001],
        method="trf",
    )
    return sol.x


class USLModel(BaseEstimator):
    """Universal Scalability Law fitted to (core count, throughput) pairs.

    Parameters
    ----------
    n_bootstrap : bootstrap resamples for the intervals (0: none).
    conf : interval coverage.
    random_state : seed of the bootstrap.
    """

    def __init__(self, n_bootstrap: int = 200, conf: float = 0.95, random_state: int = 0) -> None:
        self.n_bootstrap = n_bootstrap
        self.conf = conf
        self.random_state = random_state

    def fit(self, n: np.ndarray, y: np.ndarray) -> USLModel:
        """Fit to core counts ``n`` (1-D, or a column) and throughputs ``y``; returns self."""
        n = np.asarray(n, dtype=np.float64).reshape(-1)
        x = np.asarray(y, dtype=np.float64).reshape(-1)
        if n.size != x.size:
            raise ExtrapolationError(f"USL fit: {n.size} core counts but {x.size} throughputs")
        ok = np.isfinite(n) & np.isfinite(x) & (x > 0) & (n >= 1)
        n, x = n[ok], x[ok]
        levels = np.unique(n)
        if levels.size < 3:
            raise ExtrapolationError(
                f"USL fit needs throughputs at >= 3 core counts (sigma, kappa, lambda), "
                f"got {levels.tolist()}"
            )
        check_int(int(self.n_bootstrap), "n_bootstrap", low=0)
        p = _fit_once(n, x)
        self.lambda_, self.sigma_, self.kappa_ = (float(v) for v in p)
        self.n_levels_ = levels
        boot = []
        rng = np.random.default_rng(self.random_state)
        groups = [np.flatnonzero(n == v) for v in levels]
        for _ in range(int(self.n_bootstrap)):
            idx = np.concatenate([rng.choice(g, size=g.size, replace=True) for g in groups])
            boot.append(_fit_once(n[idx], x[idx]))
        self.bootstrap_ = np.array(boot).reshape(-1, 3)
        return self

    def _ci(self, values: np.ndarray) -> tuple[float, float]:
        a = (1.0 - self.conf) / 2
        if values.size == 0:
            return float("nan"), float("nan")
        return float(np.quantile(values, a)), float(np.quantile(values, 1 - a))

    @property
    def sigma_ci_(self) -> tuple[float, float]:
        check_is_fitted(self, "sigma_")
        return self._ci(self.bootstrap_[:, 1])

    @property
    def kappa_ci_(self) -> tuple[float, float]:
        check_is_fitted(self, "kappa_")
        return self._ci(self.bootstrap_[:, 2])

    def predict(self, n: np.ndarray | float) -> np.ndarray:
        """Throughput at ``n`` cores."""
        check_is_fitted(self, "sigma_")
        return usl_throughput(n, self.lambda_, self.sigma_, self.kappa_)

    def inflation(self, n: np.ndarray | float) -> np.ndarray:
        """Per-request demand inflation at ``n`` cores: n * X(1) / X(n)."""
        check_is_fitted(self, "sigma_")
        n = np.asarray(n, dtype=np.float64)
        return 1.0 + self.sigma_ * (n - 1.0) + self.kappa_ * n * (n - 1.0)

    def predict_interval(self, n: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap interval of the throughput at ``n`` cores."""
        check_is_fitted(self, "sigma_")
        if self.bootstrap_.size == 0:
            v = self.predict(n)
            return v, v
        sims = np.array([usl_throughput(n, *b) for b in self.bootstrap_])
        a = (1.0 - self.conf) / 2
        return np.quantile(sims, a, axis=0), np.quantile(sims, 1 - a, axis=0)

    def score(self, n: np.ndarray, y: np.ndarray) -> float:
        """Negative mean squared relative error (higher is better, for cross-validation)."""
        pred = self.predict(np.asarray(n, dtype=np.float64).reshape(-1))
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        return -float(np.mean((pred / y - 1.0) ** 2))


def usl_from_curves(
    curves: list, stat: str, threshold: float, *, n_bootstrap: int = 200, random_state: int = 0
) -> USLModel:
    """Fit the USL to MATs of one-socket shares at several core counts.

    Every repetition of every curve whose CPUs lie on one socket gives one
    (cores, MAT) row, so the bootstrap resamples repetitions. MAT(n) is only
    approximately X(1) n / inflation(n) (the threshold fixes a utilization that
    itself depends on the demand); the joint fit in
    :func:`extrapolate.calibration.fit_curves` uses the exact relation, this one
    gives the familiar sigma and kappa with bootstrap intervals.
    """
    from shrink.loadcurve import Level, LoadCurve
    from shrink.machine import Machine
    from shrink.mat import mat

    n_rows, x_rows = [], []
    for c in curves:
        m = Machine.from_dict(c.machine)
        cpus = c.share.cpus or m.all_cpus
        if len({m.socket_of(cpu) for cpu in cpus}) != 1:
            continue
        n_reps = min(len(lv.reps) for lv in c.levels) if c.levels else 0
        for r in range(n_reps):
            one = LoadCurve(
                [Level(lv.level, [lv.reps[r]]) for lv in c.levels],
                alpha=c.alpha,
                share=c.share,
                mapping=c.mapping,
                machine=c.machine,
            )
            res = mat(one, stat, threshold)
            if res.status == "ok":
                n_rows.append(len(cpus))
                x_rows.append(res.mat)
    return USLModel(n_bootstrap=n_bootstrap, random_state=random_state).fit(
        np.array(n_rows), np.array(x_rows)
    )


def usl_summary(curves: Sequence[Any], thresholds: dict[str, float]) -> dict[str, Any]:
    """USL sigma/kappa with bootstrap intervals from one-socket shares, per workload."""
    stat = "mean" if "mean" in thresholds else next(iter(thresholds))
    out: dict[str, Any] = {}
    by_wl: dict[str, list[Any]] = {}
    for c in curves:
        by_wl.setdefault(c.sweep.workload, []).append(c)
    for wl, cs in by_wl.items():
        try:
            u = usl_from_curves(cs, stat, thresholds[stat], n_bootstrap=100)
        except ExtrapolationError as exc:
            out[wl] = {"skipped": str(exc)}
            continue
        out[wl] = {
            "stat": stat,
            "sigma": u.sigma_,
            "sigma_ci": list(u.sigma_ci_),
            "kappa": u.kappa_,
            "kappa_ci": list(u.kappa_ci_),
            "lambda": u.lambda_,
            "core_counts": u.n_levels_.tolist(),
        }
    return out
