"""The share model and the SHRiNK transform: from a curve measured on a share to the full target.

A prediction is a function of the scaled-down runs. This module holds everything
that turns them into the full target's curve, and the one measurement a CPU-time
share may add on the full target.

**The transform.** A curve measured with a sample fraction alpha of the sessions on
a share of fraction alpha of the full target (:class:`shrink.share.Share`; SHRiNK
needs the two equal, and :func:`share_fraction` checks it) predicts the full target:

* a share of the **cores** (fewer servers, SHRiNK's scaling by servers): the same
  response times at normalized throughput, R_full(X) = R_share(alpha X), so
  MAT_full(T) = MAT_share(T) / alpha. Nothing is measured on the full target.
* a share of the **CPU time** (a slower server): a processor-sharing server at speed
  s, loaded in proportion, has the same utilization and response times 1/s longer,
  so R_full(X) = s R_share(s X) and MAT_full(T) = MAT_share(T / s) / s. Per-class
  latencies are scaled by their class's speed.

**The share's speed s.** Nominally s is the quota, alpha. A time-sliced core costs
more CPU per request than a whole one, by an amount that depends on the request
class (memory-heavy pages lose their caches in every gap of the quota), so s is
below alpha, and a prediction scaled by alpha is too low by alpha / s. One quantity
per request class fixes that, and it can be measured without loading the full
target: the CPU a request costs on each side at the same light load,

    s_c = alpha * cost_full_c / cost_share_c,

each cost being a run's utilization over its throughput (the utilization law). The
calibration (:func:`calibrate`) runs each class of the sample on the full target at
light load (at most :data:`CALIBRATION_BUSY` busy, at most :data:`CALIBRATION_S`
seconds of the full target in all) and on the share at alpha times that rate, so
that both sides are equally loaded relative to their nominal speed. The mix's speed
is the demand-weighted harmonic mean of the classes' (its throughput at saturation
scales by it). What the calibration ran on the full target (seconds, offered rate,
utilization) is recorded with the speed and in prediction.json.

What the calibration cannot see: a busy whole core costs less per request than a
lightly loaded one (it stops idling between requests: a light run's requests each
wake a halted vCPU), and a quota costs more once it is busy; the share never runs
the whole core busy. That, and whatever else separates a share from the server it
stands for, is the model error: measured on a corpus of configurations with known
outcomes (``bench/bench_fidelity.py``), as a mean log error (a bias the prediction's
throughputs are corrected by) and the spread left around it, each configuration
judged with the fit of the others (leave one out), and stored with its provenance in
``shrink/data/model_error.json`` (:func:`model_error`). Both are properties of the
machine kind and the share mechanism; on another machine, refit them. No constant of
this module was set from a demo run.

Without a full target to calibrate on (``calibrate=False``) the share is taken at
its nominal speed, and the report says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from shrink.checks import check_alpha, check_positive
from shrink.errors import ExtrapolationError, MeasurementError
from shrink.loadcurve import ClassStats, LoadCurve
from shrink.share import Share, ShareSpeed
from shrink.target import RunResult, Target
from shrink.trace import Trace

__all__ = [
    "CALIBRATION_BUSY",
    "CALIBRATION_S",
    "ModelError",
    "calibrate",
    "constants",
    "latency_scale",
    "model_error",
    "probe_trace",
    "share_fraction",
    "shrink_scaled_curve",
    "throughput_scale",
]

# The calibration's bounds on the full target: the method's contract (a prediction
# may ask the full target for a light, bounded calibration, never for its capacity).
CALIBRATION_BUSY = 0.10
CALIBRATION_S = 20.0
# The pilot's rate (req/s) on the full target, from which the calibration's rate is
# set: low enough that a page of up to 20 ms of CPU keeps the full target within
# CALIBRATION_BUSY.
PILOT_RATE = 5.0
PILOT_S = (0.3, 2.0)  # warm-up, window of the pilot
WARMUP_S = 0.5
# The share's calibration runs are at most this many times as long as the full target's.
SHARE_RUNS = 4
# Runs after the pilot on the full target, each at the rate its requests so far allow.
RAMP_STEPS = 2
# The calibration aims below its bound: the pilot's cost estimate rests on a second
# of requests.
AIM = 0.7
MIN_REQUESTS = 20
MAX_RATE = 2000.0  # req/s: what one generator CPU sends with a wide margin


def constants() -> dict[str, Any]:
    """This module's constants, as prediction.json records them: the calibration's
    bounds (the method's contract) and its design choices; none was fitted to a run."""
    return {
        "calibration_busy": CALIBRATION_BUSY,
        "calibration_s": CALIBRATION_S,
        "pilot_rate": PILOT_RATE,
        "pilot_s": list(PILOT_S),
        "warmup_s": WARMUP_S,
        "aim": AIM,
        "ramp_steps": RAMP_STEPS,
        "share_runs": SHARE_RUNS,
        "min_requests": MIN_REQUESTS,
        "max_rate": MAX_RATE,
        "provenance": "design choices and the method's bounds (shrink/scaling.py); the "
        "model error is fitted (shrink/data/model_error.json)",
    }


def share_fraction(curve: LoadCurve) -> float:
    """The curve's alpha, checked against its share's fraction (within 1 %).

    SHRiNK needs the sampled fraction of the load on the same fraction of the
    full target; a share of ``all`` (the full target itself) takes any alpha.
    """
    alpha = curve.alpha
    if not 0 < alpha <= 1:
        raise ExtrapolationError(f"curve alpha == {alpha}, must be in (0, 1]")
    share = curve.share
    if share.kind != "all" and abs(share.fraction - alpha) > 0.01 * alpha:
        raise ExtrapolationError(
            f"sample alpha == {alpha:g} but the share's fraction is {share.fraction:g}: SHRiNK "
            "scaling needs the sampled fraction of the load on the same fraction of the "
            "full target"
        )
    return alpha


def latency_scale(curve: LoadCurve) -> float:
    """Factor from the share's latencies to the full target's: s for a CPU-time share, else 1."""
    return curve.share.speed_factor


def throughput_scale(curve: LoadCurve) -> float:
    """Factor from the share's throughputs to the full target's: 1/s (CPU time) or 1/alpha."""
    if curve.share.kind == "cpu_time":
        return 1.0 / curve.share.speed_factor
    return 1.0 / curve.alpha


def _scale_class(c: ClassStats, thr: float, lat: float) -> None:
    c.throughput *= thr
    for name in ("mean", "p50", "p90", "p99", "p999"):
        setattr(c, name, getattr(c, name) * lat)
    if c.dist:
        c.dist = [v * lat for v in c.dist]


def shrink_scaled_curve(curve: LoadCurve, correction: float = 1.0) -> LoadCurve:
    """The full target's predicted curve from a scaled one (see the module docstring);
    its throughputs times ``correction``, the model error's (:class:`ModelError`)."""
    alpha = share_fraction(curve)
    thr = throughput_scale(curve) * correction
    lat = latency_scale(curve)
    share = curve.share
    out = LoadCurve.from_dict(curve.to_dict())
    for lv in out.levels:
        for r in lv.reps:
            r.throughput *= thr
            r.offered *= thr
            _scale_class(r.overall, thr, lat)
            for name, c in r.per_class.items():
                _scale_class(c, thr, share.class_speed(name))
            # The generator's lags bound latencies (Level.stall_bound): they move with them.
            if r.send_lag_p99 is not None:
                r.send_lag_p99 *= lat
            if r.send_lag_max is not None:
                r.send_lag_max *= lat
    out.alpha = 1.0
    out.share = Share("all", (), 1.0, predicted_from=share)
    out.meta = {
        **curve.meta,
        "shrink_scaled": {
            "alpha": alpha,
            "latency_scale": lat,
            "throughput_scale": thr,
            "correction": correction,
            "speed": share.speed.to_dict() if share.speed is not None else None,
        },
    }
    return out


# ---------------------------------------------------------------- the model error


@dataclass(frozen=True)
class ModelError:
    """The share model's error against full-scale runs, for one share kind.

    ``bias``: the mean log error (predicted / measured MAT) over a corpus of
    configurations run to the end; the prediction's throughputs are divided by
    ``exp(bias)`` (:attr:`correction`). ``sigma``: the log-scale sd of the errors left,
    beyond what the scaled runs' own repetitions and drift show. Both are fitted by
    ``bench/bench_fidelity.py --fit``, and judged leaving one configuration out.
    ``provenance``: where they were measured (machine kind, runs, configurations, date).
    """

    sigma: float
    provenance: dict[str, Any]
    bias: float = 0.0

    @property
    def correction(self) -> float:
        return math.exp(-self.bias)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sigma": self.sigma,
            "bias": self.bias,
            "correction": self.correction,
            "provenance": dict(self.provenance),
        }


def model_error(target: str, share_kind: str) -> ModelError:
    """The model error of ``share_kind`` shares on ``target`` (``testbed`` or ``sim``).

    The simulator's share is exactly a slower (or smaller) server: 0. A live share's
    comes from ``shrink/data/model_error.json``, which ``bench/bench_fidelity.py
    --fit`` writes from its corpus.
    """
    if target != "testbed":
        return ModelError(0.0, {"why": "the simulated share is exactly the model's server"})
    data = json.loads(
        resources.files("shrink").joinpath("data/model_error.json").read_text(encoding="utf-8")
    )
    entry = data["share_kinds"].get(share_kind) or data["share_kinds"]["cpu_time"]
    prov = {**data.get("provenance", {}), **entry.get("provenance", {})}
    return ModelError(float(entry["sigma"]), prov, float(entry.get("bias", 0.0)))


# ---------------------------------------------------------------- the calibration


@dataclass(frozen=True)
class _Side:
    """One class on one target: requests measured, capacity (req/s at 100% busy)."""

    n: int
    capacity: float | None  # throughput / utilization; None without a utilization
    latency: float  # mean response time, seconds
    cv: float  # coefficient of variation of the response times (light load: service)
    utilization: float | None
    behind: bool  # the generator fell behind its schedule


class _FullBudget:
    """The full target's seconds the calibration may still spend, and what it ran there.

    The bound is on the seconds the full target carries load (each run's warm-up and
    window), which is what each run records; a seeded calibration then records the
    same bytes every time. A live run's start-up (the generator's processes) leaves the
    full target idle and is not counted.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs: list[dict[str, Any]] = []

    @property
    def planned(self) -> float:
        return round(float(sum(r["seconds"] for r in self.runs)), 6)

    def run(
        self, target: Target, trace: Trace, cls: str, rate: float, warm: float, dur: float,
        seed: int,
    ) -> RunResult | None:  # fmt: skip
        if self.planned + warm + dur > self.seconds + 1e-9:
            return None
        res = _run(target, trace, cls, rate, warm, dur, seed)
        self.runs.append(
            {
                "class": cls,
                "seconds": warm + dur,
                "offered_rate": rate,
                "utilization": res.utilization,
            }
        )
        return res


def calibrate(
    share_target: Target,
    full_target: Target,
    trace: Trace,
    *,
    nominal: float,
    seed: int = 0,
    seconds: float = CALIBRATION_S,
    busy: float = CALIBRATION_BUSY,
) -> ShareSpeed:
    """The CPU-time share's speed per class, from light runs on both sides (module docstring).

    At most ``busy`` of the full target's CPU and ``seconds`` of its time. A class whose
    runs cannot be trusted (too few requests, no budget left, a speed outside (0, 1]) is
    taken at ``nominal``, and ``notes`` says so.
    """
    nominal = check_alpha(nominal, "nominal")
    seconds = check_positive(seconds, "seconds")
    busy = check_alpha(busy, "busy")
    cls = trace.column("cls") if len(trace) else np.array([], dtype=object)
    classes, counts = np.unique(cls.astype(str), return_counts=True)
    if classes.size == 0:
        raise MeasurementError("calibrate: the trace has no requests to probe")
    budget = _FullBudget(seconds)
    share_s = 0.0
    speeds: dict[str, float] = {}
    demand: dict[str, float] = {}
    full_caps: dict[str, float | None] = {}
    sigmas: dict[str, float] = {}
    notes: list[str] = []
    # Each class gets an equal part of the full target's seconds: its pilot, then its
    # run, each allowed RUN_OVERHEAD_S of start-up on a live target.
    # (in tenths of a second, rounded down, so that the sum stays within the bound)
    dur = max(1.0, math.floor(10 * (seconds / classes.size - sum(PILOT_S))) / 10)
    dur = math.floor(10 * (dur - WARMUP_S * RAMP_STEPS)) / 10
    for k, c in enumerate(classes.tolist()):
        rng_seed = seed + 101 * k
        got = _full_side(budget, full_target, trace, c, rng_seed, busy, dur)
        if got is None:
            notes.append(f"class {c!r}: assumed nominal {nominal:g} (calibration time spent)")
            speeds[c], sigmas[c], demand[c], full_caps[c] = nominal, 0.0, 0.0, None
            continue
        full, rate = got
        # The share's time is not bounded: at alpha of the rate it runs 1/alpha as long
        # (at most SHARE_RUNS times), to measure about as many requests as the full side.
        share_dur = min(1.0 / nominal, SHARE_RUNS) * dur
        share = _measured(
            _run(share_target, trace, c, rate * nominal, WARMUP_S, share_dur, rng_seed + 2)
        )
        share_s += WARMUP_S + share_dur
        if full.n == 0 and share.n == 0:
            raise MeasurementError(
                f"calibrate: class {c!r}: no request completed on either target; is the "
                "server answering?"
            )
        speed = _speed(full, share, nominal)
        doubt = _doubt(full, share, speed)
        if doubt:
            notes.append(f"class {c!r}: assumed nominal {nominal:g} ({doubt})")
            speed = nominal
        elif full.behind or share.behind:
            # X / U holds at any load, so a late generator leaves the speed usable.
            notes.append(f"class {c!r}: the generator fell behind; measured lighter than planned")
        speeds[c] = speed
        sigmas[c] = 0.0 if doubt else _sigma(full, share)
        # CPU demand of the class on the full target: its count times its cost.
        cost = 1.0 / full.capacity if full.capacity else full.latency
        demand[c] = float(counts[k]) * cost
        full_caps[c] = full.capacity
    effective, sigma = _mix(speeds, demand, sigmas, nominal)
    return ShareSpeed(
        nominal=nominal,
        per_class=speeds,
        effective=effective,
        method="calibrated",
        cost_s=budget.planned + share_s,
        notes=tuple(notes),
        sigma=sigma,
        full_capacity=_mix_capacity(
            dict(zip(classes.tolist(), counts.tolist(), strict=True)), full_caps
        ),
        full_target_runs=tuple(budget.runs),
    )


def _mix(
    speeds: dict[str, float], demand: dict[str, float], sigmas: dict[str, float], nominal: float
) -> tuple[float, float]:
    """The mix's speed (demand-weighted harmonic mean) and its log-sd.

    Each class weighs in the sd by its share of the time the mix takes on the share
    (d log effective / d log speed_c)."""
    total = sum(demand.values())
    slow = sum(demand[c] / speeds[c] for c in speeds)
    if total <= 0 or slow <= 0:
        return nominal, 0.0
    sd = math.sqrt(sum((demand[c] / speeds[c] / slow) ** 2 * sigmas[c] ** 2 for c in speeds))
    return float(total / slow), float(sd)


def _mix_capacity(counts: dict[str, int], caps: dict[str, float | None]) -> float | None:
    """Requests a second of the mix ``counts`` at 100% busy, from per-class capacities
    (a light-load figure: recorded, never used to predict)."""
    if not counts or any(not caps.get(c) for c in counts):
        return None
    seconds = sum(n / caps[c] for c, n in counts.items())  # type: ignore[operator]
    return sum(counts.values()) / seconds if seconds > 0 else None


def _sigma(full: _Side, share: _Side) -> float:
    """Log-sd of a class's speed from the requests each side measured.

    Each capacity is the reciprocal of a mean service time over n requests, drawn
    separately on each side, so its relative sd is the service times' coefficient of
    variation over sqrt(n). At light load a response time is mostly its service
    time: the full side's response-time CV stands in for it (capped at 2).
    """
    if full.n <= 0 or share.n <= 0:
        return 0.0
    cv = min(2.0, full.cv) if math.isfinite(full.cv) else 1.0
    return cv * math.sqrt(1.0 / full.n + 1.0 / share.n)


def _doubt(full: _Side, share: _Side, speed: float) -> str:
    """Why a class's runs cannot be trusted, or ''."""
    if min(full.n, share.n) < MIN_REQUESTS:
        return f"{min(full.n, share.n)} requests measured, under {MIN_REQUESTS}"
    if (full.behind or share.behind) and not (full.capacity and share.capacity):
        return "the generator fell behind, and a latency needs the planned load"
    if not 0 < speed <= 1:
        return f"measured {speed:.3g}: a share cannot be faster than the whole target"
    return ""


def probe_trace(trace: Trace, cls: str, rate: float, seconds: float, seed: int) -> Trace:
    """``cls``'s requests of ``trace`` (drawn by frequency), one a session, ``rate`` a second."""
    idx = np.flatnonzero(trace.column("cls").astype(str) == cls)
    n = max(2, math.ceil(rate * seconds) + 1)
    rng = np.random.default_rng(seed)
    pick = idx[rng.integers(0, idx.size, n)]
    src = trace.take(pick)
    columns = {
        name: src.column(name)
        for name in ("method", "path", "cls", "bytes", "status", "client")
        if name in src.columns
    }
    if "body" in src.columns:
        columns["body"] = src.column("body")
    return Trace.from_columns(
        {
            **columns,
            "session": np.arange(n, dtype=np.int64),
            "burst": np.zeros(n, dtype=np.int32),
            "t": np.arange(n, dtype=np.float64) / rate,
            "think": np.zeros(n),
            "rt": np.full(n, np.nan),
        },
        meta={"probe": cls, "rate": rate, "seed": seed},
    )


def _run(
    target: Target, trace: Trace, cls: str, rate: float, warm: float, dur: float, seed: int
) -> RunResult:
    probe = probe_trace(trace, cls, rate, warm + dur, seed)
    return target.run(probe, rate_factor=1.0, warmup=warm, duration=dur, seed=seed)


def _full_side(
    budget: _FullBudget, full: Target, trace: Trace, cls: str, seed: int, busy: float,
    dur: float,
) -> tuple[_Side, float] | None:  # fmt: skip
    """``cls`` on the full target, light: a pilot at PILOT_RATE, then RAMP_STEPS runs of
    ``dur`` in all, each at the rate the requests so far say keeps it AIM x ``busy``
    busy, by the upper bound of their cost (a few requests can read a cost low by a
    few standard errors, and the bound must hold). The side pools every run; the rate
    is the last one's. None when the budget cannot pay for the pilot."""
    res = budget.run(full, trace, cls, PILOT_RATE, PILOT_S[0], PILOT_S[1], seed)
    if res is None:
        return None
    runs = [_measured(res)]
    rate = PILOT_RATE
    for step in range(RAMP_STEPS):
        pooled = _pooled(runs)
        # Without a utilization a light server's response time is its service time.
        cap = pooled.capacity or (1 / pooled.latency if pooled.latency > 0 else None)
        if cap:
            upper = 1.0 + 2.0 / math.sqrt(max(1, pooled.n))
            rate = min(MAX_RATE, max(PILOT_RATE / 4, AIM * busy * cap / upper))
        res = budget.run(full, trace, cls, rate, WARMUP_S, dur / RAMP_STEPS, seed + 1 + step)
        if res is None:
            break
        runs.append(_measured(res))
    return _pooled(runs), float(rate)


def _pooled(sides: list[_Side]) -> _Side:
    """Several light runs of one class on one target as one: requests and CPU seconds
    add up, so the capacity is all the requests over all the CPU they took."""
    n = sum(s.n for s in sides)
    cpu = sum(s.n / s.capacity for s in sides if s.capacity and s.n)
    cap = n / cpu if cpu > 0 and all(s.capacity for s in sides if s.n) else None
    lat = [s.latency for s in sides if s.n and math.isfinite(s.latency)]
    w = [s.n for s in sides if s.n and math.isfinite(s.latency)]
    mean_lat = float(np.average(lat, weights=w)) if lat else math.nan
    cvs = [s.cv for s in sides if s.n]
    us = [s.utilization for s in sides if s.utilization is not None]
    return _Side(
        n, cap, mean_lat, float(max(cvs)) if cvs else 1.0, max(us) if us else None,
        any(s.behind for s in sides),
    )  # fmt: skip


def _measured(res: RunResult) -> _Side:
    """One run's side: its requests, capacity (X / U), latency and spread."""
    log = res.runlog.window(*res.window)
    n = int(log.ok_mask().sum())
    span = res.window[1] - res.window[0]
    lat = log.latencies()
    mean_lat = float(np.mean(lat)) if lat.size else math.nan
    cv = float(np.std(lat) / mean_lat) if lat.size > 1 and mean_lat > 0 else 1.0
    u = res.utilization
    cap = (n / span) / u if u and u > 0 and n and span > 0 else None
    return _Side(n, cap, mean_lat, cv, u, bool(res.generator.behind))


def _speed(full: _Side, share: _Side, nominal: float) -> float:
    if full.n == 0 or share.n == 0:
        return nominal  # _doubt says why
    if full.capacity and share.capacity:
        return share.capacity / full.capacity
    if full.latency > 0 and share.latency > 0:
        return full.latency / share.latency
    return nominal
