"""Calibration: fit the physical parameters to observations, with their uncertainty.

:class:`CrossSocketModel` is a scikit-learn style estimator: its parameters (which
physics to fit, the fixed values, the priors) are set in ``__init__``; ``fit``
takes a list of :class:`~extrapolate.observations.Observation` and returns self;
the fitted state ends in ``_``: ``physics_`` (the point estimate), ``cov_`` (the
parameters' covariance in the fitted, transformed space), ``residuals_``.

The fit is weighted nonlinear least squares (scipy ``least_squares``): each
figure's residual is divided by its precision (half a unit of its last printed
digit for the published figures, the measured CI for a user's own runs), and a
weak prior on each parameter (a log-normal, or logit-normal for fractions, a
factor e^1.5 wide) keeps parameters that the figures leave undetermined at
physically plausible values instead of drifting. With every figure present the
prior moves the fit by far less than the figures' precision; when a figure is
held out (leave-one-out) the prior is what predicts the parameter it fixed.

Uncertainty: the Laplace approximation (Gauss-Newton covariance
(J^T J)^-1 at the optimum) gives the parameters' covariance; predictions carry
intervals by the delta method on log MAT (:meth:`CrossSocketModel.interval`),
widened by ``model_error_`` -- the root mean square relative misfit of the
figures the model could not reproduce, so that a model that does not fit says so.

Calibrations are stored as JSON (``schema: shrink.calibration/1``), in the form
:class:`CalibrationFile` defines (its fields are the file's keys).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field, model_validator
from scipy.optimize import least_squares
from sklearn.base import BaseEstimator

from extrapolate._estimator import check_is_fitted
from extrapolate.crosssocket import Physics, Workload
from extrapolate.measured_share import share_of
from extrapolate.observations import (
    Config,
    Observation,
    model_value,
    paper_machine,
    published_observations,
    published_workloads,
)
from extrapolate.shrink_scaling import scale_to_full
from extrapolate.usl import usl_summary
from shrink import files
from shrink.atomic import write_text
from shrink.errors import ExtrapolationError, ShrinkError, TraceFormatError
from shrink.jsonout import dumps
from shrink.loadcurve import LoadCurve
from shrink.machine import Machine
from shrink.mat import mat as mat_of
from shrink.schemas import MAX_LIST, Finite, Name

__all__ = [
    "DEFAULT_FREE",
    "DEFAULT_PRIORS",
    "CalibrationFile",
    "CrossSocketModel",
    "fit_curves",
    "fit_published",
    "load_calibration",
    "observations_from_curves",
]

SCHEMA_ID = "shrink.calibration/1"

# What the published figures can determine (sigma/kappa cannot be told apart
# without 2- and 4-core MATs, so sigma stays at its prior 0 there).
DEFAULT_FREE = (
    "demand_static",
    "demand_dynamic",
    "usl_kappa",
    "nic_remote_penalty",
    "share_penalty",
    "llc_miss_fraction",
    "fixed_latency",
    "queue_tail",
)
# Prior centre and width (in log, or logit for fractions). Centres are order-of-
# magnitude physics: ~40 us for a small static reply, a few ms for a PHP page,
# a few per cent for a cross-socket penalty, ~100 us of network latency.
DEFAULT_PRIORS: dict[str, tuple[float, float]] = {
    "demand_static": (40e-6, 1.5),
    "demand_dynamic": (5e-3, 1.5),
    "usl_sigma": (0.01, 1.5),
    "usl_kappa": (0.01, 1.5),
    "usl_sigma_dynamic": (0.01, 1.5),
    "usl_kappa_dynamic": (0.01, 1.5),
    "nic_remote_penalty": (0.05, 1.5),
    "share_penalty": (0.05, 1.5),
    "llc_miss_fraction": (0.3, 1.5),
    "llc_exponent": (1.0, 0.5),
    "fixed_latency": (100e-6, 1.5),
    "queue_tail": (50e-6, 1.5),
}
_FRACTIONS = {"llc_miss_fraction"}


def _to_x(name: str, v: float) -> float:
    v = max(v, 1e-12)
    if name in _FRACTIONS:
        v = min(v, 1 - 1e-9)
        return math.log(v / (1 - v))
    return math.log(v)


def _from_x(name: str, x: float) -> float:
    x = float(np.clip(x, -40.0, 40.0))
    if name in _FRACTIONS:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x)


Row = Annotated[list[Finite], Field(max_length=100)]


@dataclass
class CalibrationFile(files.VersionedFile):
    """A fitted :class:`CrossSocketModel` as written (``shrink.calibration/1``).

    ``x`` and ``cov`` are the free parameters in the fitted (log or logit) space;
    ``parameters`` (each free parameter's value and interval), ``checks`` and ``usl``
    are written for the reader of the file and are not needed to use the model.
    """

    physics: Physics
    free: Annotated[list[Name], Field(max_length=100)]
    x: Row
    cov: Annotated[list[Row], Field(max_length=100)]
    machine: Machine
    workloads: Annotated[dict[Name, Workload], Field(max_length=1_000)]
    model_error: Finite = 0.0
    parameters: dict[Name, dict[Name, float]] = field(default_factory=dict)
    observations: Annotated[list[Observation], Field(max_length=MAX_LIST)] = field(
        default_factory=list
    )
    fitted: dict[Name, Finite] = field(default_factory=dict)
    fixed: dict[Name, Finite] | None = None
    name: Name | None = None  # None: the file's name
    checks: Annotated[list[Any], Field(max_length=MAX_LIST)] = field(default_factory=list)
    usl: dict[Name, Any] = field(default_factory=dict)

    SCHEMA = SCHEMA_ID
    WHAT = "calibration"

    @model_validator(mode="after")
    def _shapes(self) -> CalibrationFile:
        n = len(self.free)
        if len(self.x) != n or len(self.cov) != n or any(len(r) != n for r in self.cov):
            raise ValueError(f"x and cov must have {n} entries (one per free parameter)")
        # The interval works from x, the point from physics: an edited physics that x
        # does not give made the interval's half-width overflow (exit 70).
        given = {"usl_sigma": 0.0, **(self.fixed or {})}
        given.update({k: _from_x(k, v) for k, v in zip(self.free, self.x, strict=True)})
        for f in fields(Physics):
            want, have = given.get(f.name, f.default), getattr(self.physics, f.name)
            both = isinstance(want, float) and isinstance(have, float)
            if both and not math.isclose(want, have, rel_tol=1e-6, abs_tol=1e-12):
                raise ValueError(
                    f"physics.{f.name} == {have:g}, but x and fixed give {want:g}: "
                    "a calibration's physics is what its fit gives"
                )
        return self


class CrossSocketModel(BaseEstimator):
    """The machine model fitted to observations (published figures or a user's runs).

    Parameters
    ----------
    free : names of :class:`~extrapolate.crosssocket.Physics` fields to fit.
    fixed : values for the other fields (defaults: Physics()'s; usl_sigma 0).
    priors : {name: (centre, width)}; width in log (logit for fractions) units.
    machine : the machine the observations were taken on (default: the papers').
    workloads : {name: Workload} the observations refer to (default: tcp, support).
    n_starts : optimizer starts (the prior, then a shifted one); the best is kept.
    """

    def __init__(
        self,
        free: Sequence[str] = DEFAULT_FREE,
        fixed: dict[str, float] | None = None,
        priors: dict[str, tuple[float, float]] | None = None,
        machine: Machine | None = None,
        workloads: dict[str, Workload] | None = None,
        n_starts: int = 2,
    ) -> None:
        self.n_starts = n_starts
        self.free = free
        self.fixed = fixed
        self.priors = priors
        self.machine = machine
        self.workloads = workloads

    # ------------------------------------------------------------------ helpers
    def _setup(self) -> tuple[list[str], dict[str, tuple[float, float]], Machine, dict]:
        names = [f.name for f in fields(Physics)]
        free = list(self.free)
        bad = [n for n in free if n not in names]
        if bad:
            raise ExtrapolationError(f"free parameters {bad} are not Physics fields {names}")
        priors = {**DEFAULT_PRIORS, **(self.priors or {})}
        missing = [n for n in free if n not in priors]
        if missing:
            raise ExtrapolationError(f"free parameters {missing} have no prior")
        machine = self.machine or paper_machine()
        workloads = self.workloads or published_workloads()
        return free, priors, machine, workloads

    def _physics(self, free: list[str], x: np.ndarray) -> Physics:
        base = {"usl_sigma": 0.0, **(self.fixed or {})}
        base.update({n: _from_x(n, v) for n, v in zip(free, x, strict=True)})
        return Physics(**base)

    # ------------------------------------------------------------------ fit
    def fit(self, observations: Sequence[Observation], y: Any = None) -> CrossSocketModel:
        """Fit the free parameters to ``observations``; returns self."""
        free, priors, machine, workloads = self._setup()
        obs = list(observations)
        if not obs:
            raise ExtrapolationError("nothing to fit: no observations")
        unknown = {o.workload for o in obs} - set(workloads)
        if unknown:
            raise ExtrapolationError(f"observations name unknown workloads {sorted(unknown)}")
        x_prior = np.array([_to_x(n, priors[n][0]) for n in free])
        width = np.array([priors[n][1] for n in free])
        scale = np.array([o.precision for o in obs])
        target = np.array([o.value for o in obs])

        def residuals(x: np.ndarray) -> np.ndarray:
            ph = self._physics(free, x)
            model = np.array([model_value(ph, o, machine, workloads) for o in obs])
            model = np.where(np.isfinite(model), model, target + 1e6 * scale)
            return np.r_[(model - target) / scale, (x - x_prior) / width]

        best = None
        # Two starts: the prior, and a stronger-contention start; keep the better.
        for start in (x_prior, x_prior + 0.5)[: max(1, int(self.n_starts))]:
            sol = least_squares(
                residuals, start, method="trf", x_scale=1.0, diff_step=1e-4, max_nfev=400
            )
            if best is None or sol.cost < best.cost:
                best = sol
        assert best is not None
        self.free_ = free
        self.x_ = best.x
        self.physics_ = self._physics(free, best.x)
        self.observations_ = obs
        self.machine_ = machine
        self.workloads_ = workloads
        n_obs = len(obs)
        fig_res = best.fun[:n_obs]
        self.residuals_ = {
            o.name: float(r * o.precision) for o, r in zip(obs, fig_res, strict=True)
        }
        self.predicted_ = {o.name: float(o.value + self.residuals_[o.name]) for o in obs}
        jac = best.jac
        self.cov_ = np.linalg.pinv(jac.T @ jac)
        # Misfit beyond a figure's precision is model error: carry it into intervals.
        rel = [
            abs(self.residuals_[o.name]) / abs(o.value)
            for o in obs
            if abs(self.residuals_[o.name]) > o.precision and o.value != 0
        ]
        self.model_error_ = float(math.sqrt(np.mean(np.square(rel)))) if rel else 0.0
        self.cost_ = float(best.cost)
        return self

    # ------------------------------------------------------------------ use
    def predict(self, observations: Sequence[Observation]) -> np.ndarray:
        """The fitted model's value for each observation (its ``value`` is not used)."""
        check_is_fitted(self, "physics_")
        return np.array(
            [model_value(self.physics_, o, self.machine_, self.workloads_) for o in observations]
        )

    def score(self, observations: Sequence[Observation], y: Any = None) -> float:
        """Minus the mean squared relative error on ``observations`` (higher is better),
        so ``sklearn.model_selection.cross_val_score`` can hold figures out."""
        pred = self.predict(observations)
        value = np.array([o.value for o in observations])
        return -float(np.mean(((pred - value) / np.abs(value)) ** 2))

    def sample_physics(self, n: int, *, seed: int = 0) -> list[Physics]:
        """Parameter draws from the Laplace posterior (for Monte Carlo intervals)."""
        check_is_fitted(self, "physics_")
        rng = np.random.default_rng(seed)
        xs = rng.multivariate_normal(self.x_, self.cov_, size=n, check_valid="ignore")
        return [self._physics(self.free_, x) for x in xs]

    def interval(
        self, fn: Callable[[Physics], float], conf: float = 0.95, *, log: bool = True
    ) -> tuple[float, tuple[float, float]]:
        """``fn(physics_)`` and its interval by the delta method, plus model error.

        ``log`` (for positive quantities such as MATs) works on log(fn), so the
        interval is multiplicative; ``log=False`` on fn itself (for changes that
        may be 0 or negative).
        """
        check_is_fitted(self, "physics_")
        from scipy.stats import norm

        v0 = fn(self.physics_)
        if not math.isfinite(v0) or (log and v0 <= 0):
            return v0, (v0, v0)
        h = 1e-3
        grad = np.zeros(len(self.x_))
        for i in range(len(self.x_)):
            x = self.x_.copy()
            x[i] += h
            vi = fn(self._physics(self.free_, x))
            grad[i] = ((math.log(max(vi, 1e-300)) - math.log(v0)) if log else (vi - v0)) / h
        err = self.model_error_ if log else self.model_error_ * abs(v0)
        var = float(grad @ self.cov_ @ grad) + err**2
        half = float(norm.ppf(0.5 + conf / 2)) * math.sqrt(max(var, 0.0))
        if log:
            return v0, (v0 * math.exp(-half), v0 * math.exp(half))
        return v0, (v0 - half, v0 + half)

    def parameter_intervals(self, conf: float = 0.95) -> dict[str, dict[str, float]]:
        """Each free parameter: value and interval (from the covariance, in its own units)."""
        check_is_fitted(self, "physics_")
        from scipy.stats import norm

        z = float(norm.ppf(0.5 + conf / 2))
        out = {}
        for i, n in enumerate(self.free_):
            sd = math.sqrt(max(self.cov_[i, i], 0.0))
            out[n] = {
                "value": _from_x(n, self.x_[i]),
                "lo": _from_x(n, self.x_[i] - z * sd),
                "hi": _from_x(n, self.x_[i] + z * sd),
            }
        return out

    # ------------------------------------------------------------------ I/O
    def to_file(self) -> CalibrationFile:
        """The fitted model as its file."""
        check_is_fitted(self, "physics_")
        return CalibrationFile(
            physics=self.physics_,
            free=list(self.free_),
            x=self.x_.tolist(),
            cov=self.cov_.tolist(),
            machine=self.machine_,
            workloads=dict(self.workloads_),
            model_error=self.model_error_,
            parameters=self.parameter_intervals(),
            observations=list(self.observations_),
            fitted=self.predicted_,
            fixed=dict(self.fixed or {}),
            name=getattr(self, "name_", "custom"),
            checks=list(getattr(self, "checks_", [])),
            usl=dict(getattr(self, "usl_", {})),
        )

    @classmethod
    def from_file(cls, f: CalibrationFile, *, source: str | None = None) -> CrossSocketModel:
        """The model a calibration file holds (its name, when it states none, the file's)."""
        m = cls(free=tuple(f.free), fixed=f.fixed or None, machine=f.machine, workloads=f.workloads)
        m.free_ = list(f.free)
        m.x_ = np.array(f.x, dtype=np.float64)
        m.cov_ = np.array(f.cov, dtype=np.float64)
        m.physics_ = f.physics
        m.model_error_ = f.model_error
        m.machine_ = f.machine
        m.workloads_ = f.workloads
        m.observations_ = f.observations
        m.predicted_ = f.fitted
        m.name_ = f.name if f.name is not None else Path(source).stem if source else "custom"
        m.checks_ = f.checks
        m.usl_ = f.usl
        m.residuals_ = {
            o.name: m.predicted_.get(o.name, o.value) - o.value for o in m.observations_
        }
        return m

    def to_dict(self) -> dict[str, Any]:
        return self.to_file().to_dict()

    @classmethod
    def from_dict(cls, d: Any, *, source: str | None = None) -> CrossSocketModel:
        try:
            f = CalibrationFile.from_dict(d, source=source)
        except TraceFormatError:
            raise
        except ShrinkError as exc:  # what the fields say together (an observation, a machine)
            raise TraceFormatError(str(exc), path=source) from None
        return cls.from_file(f, source=source)

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        write_text(path, dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        return path


_PUBLISHED: CrossSocketModel | None = None

# Published figures kept out of the default fit and reported as checks. Support's
# "80% utilization at 22,000 req/s" cannot hold together with its 23,000 req/s
# mean-threshold MAT under PS with Poisson arrivals (PS puts the 5 ms crossing
# near 94% utilization): Support's closed-loop sessions send a page's embedded
# requests in bursts, which queue more than Poisson arrivals -- a mechanism this
# model does not have. We say so rather than let it bend the other parameters.
CHECK_ONLY = ("support_utilization_at_80pct",)


def fit_published(exclude: Sequence[str] = ()) -> CrossSocketModel:
    """The default calibration: fitted to the papers' figures (minus ``exclude``).

    Figures in :data:`CHECK_ONLY` are never fitted; the model's value for each is
    kept in ``checks_`` next to the printed one.
    """
    global _PUBLISHED
    if not exclude and _PUBLISHED is not None:
        return _PUBLISHED
    skip = set(exclude) | set(CHECK_ONLY)
    every = published_observations()
    model = CrossSocketModel().fit([o for o in every if o.name not in skip])
    model.name_ = "published" if not exclude else f"published without {', '.join(exclude)}"
    model.checks_ = [
        {
            "figure": o.name,
            "published": o.value,
            "model": model_value(model.physics_, o, model.machine_, model.workloads_),
            "precision": o.precision,
        }
        for o in every
        if o.name in skip
    ]
    if not exclude:
        _PUBLISHED = model
    return model


def load_calibration(spec: str | Path) -> CrossSocketModel:
    """``published`` (fit the papers' figures) or a calibration JSON file."""
    if str(spec) == "published":
        return fit_published()
    path = Path(spec)
    return CrossSocketModel.from_dict(files.read_json(path, what="calibration"), source=str(path))


CURVE_FREE = (
    "demand_static",
    "demand_dynamic",
    "usl_sigma",
    "usl_kappa",
    "nic_remote_penalty",
    "share_penalty",
    "llc_miss_fraction",
    "fixed_latency",
)


def observations_from_curves(
    curves: Sequence[Any],
    thresholds: dict[str, float],
    *,
    machine: Machine | None = None,
    min_precision: float = 0.005,
) -> tuple[list[Observation], dict[str, Workload]]:
    """MAT observations from measured LoadCurves (one per curve and threshold).

    Each curve's configuration is its share's CPU list (all of the machine's
    when it has none) and its mapping; its workload is ``sweep.workload`` with
    the class mix of its per-class throughputs. The precision is the MAT's
    interval half-width, at least ``min_precision`` of the value.
    """
    obs: list[Observation] = []
    mixes: dict[str, list[float]] = {}
    for i, c in enumerate(curves):
        if not isinstance(c, LoadCurve):
            raise ExtrapolationError(f"curve {i} is a {type(c).__name__}, not a LoadCurve")
        m = machine or Machine.from_dict(c.machine)
        cpus, c, per_cpu = _full_speed(c, m)
        wl = c.sweep.workload
        thr = {
            k: sum(
                r.per_class[k].throughput for lv in c.usable() for r in lv.reps if k in r.per_class
            )
            for k in ("static", "dynamic")
        }
        tot = sum(thr.values())
        mixes.setdefault(wl, []).append(thr["dynamic"] / tot if tot > 0 else 0.0)
        for stat, t in thresholds.items():
            r = mat_of(c, stat, t).scaled(per_cpu)
            if r.status != "ok":
                continue
            half = max(0.5 * (r.ci[1] - r.ci[0]), min_precision * r.mat)
            obs.append(
                Observation(
                    f"{wl}:{c.mapping}:{len(cpus)}:{stat}:{i}",
                    "mat",
                    wl,
                    stat,
                    Config(len(cpus), c.mapping, cpus),
                    r.mat,
                    half,
                    source=str(c.meta.get("source", f"curve {i}")),
                )
            )
    if not obs:
        raise ExtrapolationError("no curve crossed its threshold: no MAT to calibrate with")
    workloads = {
        name: Workload(
            name, float(np.mean(f)), 0.0 if np.mean(f) == 0 else 1.0 / 3.6, dict(thresholds)
        )
        for name, f in mixes.items()
    }
    return obs, workloads


def _full_speed(curve: Any, machine: Machine) -> tuple[tuple[int, ...], Any, float]:
    """The CPUs a curve ran on, the curve to take MATs from, and the factor to them.

    A core share or a full run is used as measured (throughputs on its CPUs). A
    CPU-time share (or a curve already SHRiNK-scaled from one) is first scaled
    to full speed: the scaled curve stands for n c / alpha full-speed cores with
    the share's per-core behaviour, so the MAT of its n CPUs at full speed is the
    scaled MAT times alpha / c.
    """
    share, cpus, alpha = share_of(curve, machine)
    already = curve.share.predicted_from is not None
    if share.kind != "cpu_time":
        if already:
            return cpus, curve, alpha  # scaled by 1/alpha: back to the share's own CPUs
        return cpus, curve, 1.0
    speed = share.cpu_fraction
    scaled = curve if already else scale_to_full(curve)
    return cpus, scaled, alpha / speed


def fit_curves(
    curves: Sequence[Any],
    thresholds: dict[str, float],
    *,
    machine: Machine | None = None,
    free: Sequence[str] = CURVE_FREE,
) -> CrossSocketModel:
    """``shrink calibrate``: fit the model to a user's own measured LoadCurves."""
    if not curves:
        raise ExtrapolationError("calibrate needs at least one load curve")
    m = machine or Machine.from_dict(curves[0].machine)
    obs, workloads = observations_from_curves(curves, thresholds, machine=m)
    free = list(free)
    if all(w.dynamic_fraction == 0 for w in workloads.values()):
        free = [f for f in free if f not in ("demand_dynamic", "llc_miss_fraction")]
    mixes = {round(w.dynamic_fraction, 3) for w in workloads.values()}
    one_socket_counts = {
        o.config.n_cores
        for o in obs
        if len({m.socket_of(c) for c in (o.config.cpus or m.all_cpus[: o.config.n_cores])}) == 1
    }
    model = CrossSocketModel(free=tuple(free), machine=m, workloads=workloads, n_starts=1)
    model.fit(obs)
    if len(mixes) >= 2 and max(mixes) > 0 and len(one_socket_counts) >= 3:
        # Two mixes at three or more core counts can tell the classes' USLs apart. Keep
        # the dynamic class's own pair only if it fits significantly better: a likelihood
        # ratio test, 2 extra parameters at the 1% level (chi2(2) = 9.21; cost = chi2 / 2).
        split = CrossSocketModel(
            free=(*free, "usl_sigma_dynamic", "usl_kappa_dynamic"),
            machine=m,
            workloads=workloads,
            n_starts=1,
        ).fit(obs)
        if model.cost_ - split.cost_ > 9.21 / 2:
            model = split
    model.name_ = f"fitted to {len(curves)} curves"
    model.usl_ = usl_summary(curves, thresholds)
    return model
