"""The calibration of a CPU-time share's speed, as :mod:`shrink.scaling` describes it:
the sample's mix light on the full target, near its knee on the share."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shrink.checks import check_alpha, check_positive
from shrink.errors import MeasurementError
from shrink.loadcurve import LoadCurve, pooled_capacity
from shrink.share import ShareSpeed
from shrink.target import RunResult, Target
from shrink.trace import Trace

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
# Short runs after the pilot on the full target, then one for the seconds left, each at
# the rate its requests so far allow, and at most RAMP_FACTOR times the last one's: a
# mix's rare heavy pages can be missing from a few requests, and utilization grows in
# proportion to the rate.
RAMP_STEPS = 3
RAMP_S = 2.0
RAMP_FACTOR = 4.0
# The calibration aims below its bound: the pilot's cost estimate rests on a second
# of requests.
AIM = 0.7
# The share is read where its MATs are read, near its knee: SHARE_STEPS runs, each at
# SHARE_LOAD of the capacity the previous one showed (by the lower bound of its
# requests).
SHARE_LOAD = 0.9
SHARE_STEPS = 3
# The share's first run (as loaded as the full target), and the longest of its runs
# near the knee (each long enough for about as many requests as the full side read).
SHARE_LIGHT_S = 5.0
SHARE_RUN_S = 10.0
MIN_REQUESTS = 20
MAX_RATE = 2000.0  # req/s: what one generator CPU sends with a wide margin
# The full target's runs after the pilot send their requests in bursts of up to BURST
# at once (a run's window holds at least MIN_BURSTS of them): the core then works
# through each burst busy, as it does at the MATs, instead of waking from idle for
# every request. Evenly spaced requests read the demo's mix at 0.62-0.77 ms a request
# at 5-6% busy against 0.55-0.63 ms at 83-94% busy; bursts of 16 read 0.42-0.66 ms
# at 3-5% busy (2-vCPU VM of the polyglot kind, n=3 runs a pattern, interleaved;
# bench/bench_burst_cost.py, bench/RESULTS.md "burst cost").
# The bound is on the run's mean utilization; a burst is busy for a few ms.
BURST = 16
MIN_BURSTS = 4
BEHIND_SHORT = 0.9  # a burst run whose generator sent less of its planned rate is behind
# After the sweep, the share's side is read again on the sweep's own repetitions whose
# utilization is in KNEE_BAND (near its knee, not saturated: X / U holds there), when
# there are MIN_KNEE_REPS or more: many more requests than the calibration's share
# runs, taken at the times the MATs were, so the host's drift moves both alike.
KNEE_BAND = (0.5, 0.95)
MIN_KNEE_REPS = 2
# The calibration runs the trace's mix (its requests drawn by frequency), not a class.
MIX = "mix"
# Which calibration made a speed (recorded in prediction.json): a model error is
# fitted on runs of one calibration only.
CALIBRATION = (
    "mix on keep-alive connections: the full target light in bursts, the share near its knee"
)


def constants() -> dict[str, Any]:
    """This module's constants, as prediction.json records them: the calibration's
    bounds (the method's contract) and its design choices; none was fitted to a run."""
    return {
        "calibration": CALIBRATION,
        "calibration_busy": CALIBRATION_BUSY,
        "calibration_s": CALIBRATION_S,
        "pilot_rate": PILOT_RATE,
        "pilot_s": list(PILOT_S),
        "warmup_s": WARMUP_S,
        "aim": AIM,
        "ramp_steps": RAMP_STEPS,
        "ramp_s": RAMP_S,
        "ramp_factor": RAMP_FACTOR,
        "share_load": SHARE_LOAD,
        "share_steps": SHARE_STEPS,
        "share_light_s": SHARE_LIGHT_S,
        "share_run_s": SHARE_RUN_S,
        "min_requests": MIN_REQUESTS,
        "burst": BURST,
        "min_bursts": MIN_BURSTS,
        "behind_short": BEHIND_SHORT,
        "knee_band": list(KNEE_BAND),
        "min_knee_reps": MIN_KNEE_REPS,
        "max_rate": MAX_RATE,
        "provenance": "design choices and the method's bounds (shrink/scaling/calibration.py); the "
        "model error is fitted (shrink/data/model_error.json)",
    }


@dataclass(frozen=True)
class _Side:
    """The mix on one target: requests measured, capacity (req/s at 100% busy)."""

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

    def run(self, target: Target, planned: _Planned) -> RunResult | None:
        if self.planned + planned.seconds > self.seconds + 1e-9:
            return None
        res = planned.run(target)
        self.runs.append(
            {
                "class": MIX,
                "seconds": planned.seconds,
                "offered_rate": planned.rate,
                "burst": planned.burst,
                "utilization": res.utilization,
            }
        )
        return res


@dataclass(frozen=True)
class _Planned:
    """One calibration run: what to replay, at which rate, for how long."""

    trace: Trace
    rate: float  # req/s planned
    warmup: float
    duration: float
    seed: int
    burst: int = 1

    @property
    def seconds(self) -> float:
        return round(self.warmup + self.duration, 6)

    def run(self, target: Target) -> RunResult:
        return target.run(
            self.trace, rate_factor=1.0, warmup=self.warmup, duration=self.duration,
            seed=self.seed,
        )  # fmt: skip


def _plan(
    trace: Trace, rate: float, warm: float, dur: float, seed: int, burst: int = 1
) -> _Planned:
    """One run of the sample's mix, the same requests on both sides: drawn by class,
    at a planned rate on keep-alive connections (:func:`probe_trace`), in bursts of
    ``burst``.
    The sample's own sessions, looped, cannot be slowed to a few requests a second
    (their think times are real seconds), and at the light rates they reach they
    arrive in bursts that a light run's bound cannot hold."""
    if burst <= 1:
        return _Planned(probe_trace(trace, rate, warm + dur, seed), rate, warm, dur, seed)
    # Whole bursts in the window, each mid-way between two gaps: a burst cut by the
    # window's edge would count its CPU on one side and its requests on the other.
    gap = dur / max(1, round(dur * rate / burst))
    rate = burst / gap
    tr = probe_trace(trace, rate, warm + dur, seed, burst, offset=(warm + gap / 2) % gap)
    return _Planned(tr, rate, warm, dur, seed, burst)


def _burst(rate: float, dur: float) -> int:
    """The full target's burst at ``rate`` for a window of ``dur`` s: BURST, fewer when
    the window would hold under MIN_BURSTS bursts."""
    return max(1, min(BURST, math.floor(rate * dur / MIN_BURSTS)))


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
    """The CPU-time share's speed for the mix of ``trace`` (module docstring).

    The full target runs the mix light: at most ``busy`` of its CPU and ``seconds`` of
    its time. The share runs the same mix near its knee, where its MATs are read.
    Runs that cannot be trusted (too few requests, a speed outside (0, 1]) leave the
    share at ``nominal``, and ``notes`` says so.
    """
    nominal = check_alpha(nominal, "nominal")
    seconds = check_positive(seconds, "seconds")
    busy = check_alpha(busy, "busy")
    if len(trace) == 0:
        raise MeasurementError("calibrate: the trace has no requests to probe")
    budget = _FullBudget(seconds)
    got = _full_side(budget, full_target, trace, seed, busy)
    if got is None:
        raise MeasurementError(
            f"calibrate: {seconds:g} s of the full target cannot pay for the pilot run"
        )
    full, rate = got
    share, share_runs = _share_side(share_target, trace, full, rate, nominal, seed)
    if full.n == 0 and share.n == 0:
        raise MeasurementError(
            "calibrate: no request completed on either target; is the server answering?"
        )
    notes: list[str] = []
    speed = _speed(full, share, nominal)
    doubt = _doubt(full, share, speed)
    if doubt:
        notes.append(f"assumed nominal {nominal:g} ({doubt})")
        speed = nominal
    elif full.behind or share.behind:
        # X / U holds at any load, so a late generator leaves the speed usable.
        notes.append("the generator fell behind; measured lighter than planned")
    return ShareSpeed(
        nominal=nominal,
        per_class={},
        effective=float(speed),
        method="calibrated",
        cost_s=budget.planned + sum(r["seconds"] for r in share_runs),
        notes=tuple(notes),
        sigma=0.0 if doubt else _sigma(full, share),
        full_capacity=full.capacity,
        full_target_runs=tuple(budget.runs),
        share_runs=tuple(share_runs),
    )


def _share_side(
    target: Target, trace: Trace, full: _Side, rate: float, nominal: float, seed: int
) -> tuple[_Side, list[dict[str, Any]]]:
    """The mix on the share: first as loaded as the full target was (alpha times its
    rate), then SHARE_STEPS runs, each at SHARE_LOAD of the capacity the latest run
    shows by the lower bound of its requests (a run past the knee reads nothing
    steady), for about as many requests as the full side measured. The speed pools
    the last two runs: the share near its knee."""
    runs: list[dict[str, Any]] = []

    def run(r: float, d: float, k: int) -> _Side:
        planned = _plan(trace, r, WARMUP_S, d, seed + 2 + k)
        res = planned.run(target)
        runs.append(
            {"seconds": planned.seconds, "offered_rate": r, "utilization": res.utilization}
        )
        return _measured(res)

    sides = [run(rate * nominal, SHARE_LIGHT_S, 0)]
    for k in range(SHARE_STEPS):
        latest = sides[-1]
        cap = latest.capacity
        if not cap:
            break  # without a utilization the light run's latency is the figure
        cv = max(1.0, latest.cv) if math.isfinite(latest.cv) else 2.0
        upper = 1.0 + 3.0 * cv / math.sqrt(max(1, latest.n))
        r = min(MAX_RATE * nominal, SHARE_LOAD * cap / upper)
        want = max(MIN_REQUESTS, full.n) / SHARE_STEPS
        d = min(SHARE_RUN_S, max(PILOT_S[1], want / r))
        sides.append(run(r, math.ceil(10 * d) / 10, 1 + k))
    return _pooled(sides[-2:]) if len(sides) > 2 else sides[-1], runs


def _sigma(full: _Side, share: _Side) -> float:
    """Log-sd of the speed from the requests each side measured.

    Each capacity is the reciprocal of a mean service time over n requests, drawn
    separately on each side, so its relative sd is the service times' coefficient of
    variation over sqrt(n). At light load a response time is mostly its service
    time: the full side's unbursted runs' response-time CV stands in for it, or the
    share's if larger (near its knee, queueing adds to it: the bound errs wide). A
    mix's page costs are heavy-tailed, so it is not capped (capped at 2, the
    simulator's Support mix read a sigma of 5% against a spread of 15% over seeds).
    """
    if full.n <= 0 or share.n <= 0:
        return 0.0
    cvs = [c for c in (full.cv, share.cv) if math.isfinite(c)]
    cv = max(cvs) if cvs else 1.0
    return cv * math.sqrt(1.0 / full.n + 1.0 / share.n)


def _doubt(full: _Side, share: _Side, speed: float) -> str:
    """Why the runs cannot be trusted, or ''."""
    if min(full.n, share.n) < MIN_REQUESTS:
        return f"{min(full.n, share.n)} requests measured, under {MIN_REQUESTS}"
    if (full.behind or share.behind) and not (full.capacity and share.capacity):
        return "the generator fell behind, and a latency needs the planned load"
    if not 0 < speed <= 1:
        return f"measured {speed:.3g}: a share cannot be faster than the whole target"
    return ""


def probe_trace(
    trace: Trace, rate: float, seconds: float, seed: int, burst: int = 1, offset: float = 0.0
) -> Trace:
    """Requests of ``trace`` drawn by frequency (its mix, by class), ``rate`` a second:
    an exactly planned load at any rate, evenly spaced, or in bursts of ``burst``
    requests sent at once, the first ``offset`` seconds in.

    The probe is replayed open-loop on keep-alive connections (a pool, reused from
    burst to burst), as the sweep replays the sample's sessions (over a hundred
    requests a connection in the Support traces) and an open-loop trace's requests. A
    connection opened for every request made the probe dear on a cheap page: on the
    1 KiB static trace the calibrated full capacity was a third of the whole core's
    busy one, on the Support mix 0.59-0.95. A target told to open a connection for
    every request (``--conn-per-request``) does so for the probe too."""
    if burst < 1:
        raise MeasurementError(f"probe_trace: a burst of {burst} requests")
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
    if "body" in src.columns:
        columns["body"] = src.column("body")
    return Trace.from_columns(
        {
            **columns,
            "session": np.arange(n, dtype=np.int64),
            "burst": np.zeros(n, dtype=np.int32),
            "t": offset + (np.arange(n) // burst * burst).astype(np.float64) / rate,
            "think": np.zeros(n),
            "rt": np.full(n, np.nan),
        },
        meta={"probe": MIX, "mode": "open", "rate": rate, "seed": seed, "burst": burst},
    )


def _full_side(
    budget: _FullBudget, full: Target, trace: Trace, seed: int, busy: float
) -> tuple[_Side, float] | None:
    """The mix on the full target, light: a pilot at PILOT_RATE, RAMP_STEPS short runs,
    then one run for the seconds left, each at the rate the requests so far say keeps
    it AIM x ``busy`` busy, by the upper bound of their cost (a few requests can read a
    cost low by a few standard errors, and the bound must hold), and at most
    RAMP_FACTOR times the last one's. The side pools every run; the rate is the last
    one's. None when the budget cannot pay for the pilot."""
    res = budget.run(full, _plan(trace, PILOT_RATE, PILOT_S[0], PILOT_S[1], seed))
    if res is None:
        return None
    runs = [_measured(res)]
    rate = PILOT_RATE
    for step in range(RAMP_STEPS + 1):
        pooled = _pooled(runs)
        # Without a utilization a light server's response time is its service time.
        cap = pooled.capacity or (1 / pooled.latency if pooled.latency > 0 else None)
        if cap:
            # A mix's costs spread more than one class's: its response times' CV (at
            # least 1) stands in for theirs, three standard errors for the bound.
            cv = max(1.0, pooled.cv) if math.isfinite(pooled.cv) else 2.0
            upper = 1.0 + 3.0 * cv / math.sqrt(max(1, pooled.n))
            aimed = AIM * busy * cap / upper
            rate = min(MAX_RATE, RAMP_FACTOR * rate, max(PILOT_RATE / 4, aimed))
        left = budget.seconds - budget.planned - WARMUP_S
        dur = RAMP_S if step < RAMP_STEPS else math.floor(10 * left) / 10
        if dur < 1.0:
            break
        planned = _plan(trace, rate, WARMUP_S, dur, seed + 1 + step, _burst(rate, dur))
        res = budget.run(full, planned)
        if res is None:
            break
        runs.append(_measured(res, planned))
    return _pooled(runs), float(rate)


def _pooled(sides: list[_Side]) -> _Side:
    """Several runs on one target as one: requests and CPU seconds add up, so the
    capacity is all the requests over all the CPU they took."""
    n = sum(s.n for s in sides)
    cpu = sum(s.n / s.capacity for s in sides if s.capacity and s.n)
    cap = n / cpu if cpu > 0 and all(s.capacity for s in sides if s.n) else None
    lat = [s.latency for s in sides if s.n and math.isfinite(s.latency)]
    w = [s.n for s in sides if s.n and math.isfinite(s.latency)]
    mean_lat = float(np.average(lat, weights=w)) if lat else math.nan
    cvs = [s.cv for s in sides if s.n and math.isfinite(s.cv)]
    us = [s.utilization for s in sides if s.utilization is not None]
    return _Side(
        n, cap, mean_lat, float(max(cvs)) if cvs else 1.0, max(us) if us else None,
        any(s.behind for s in sides),
    )  # fmt: skip


def _measured(res: RunResult, planned: _Planned | None = None) -> _Side:
    """One run's side: its requests, capacity (X / U), latency and spread. In a burst,
    requests queue behind each other: their spread is not their service times', and
    is left unknown (nan); and a burst's last requests leave late by design, so the
    generator is behind only if it sent fewer of the window's requests than planned."""
    burst = planned.burst if planned is not None else 1
    log = res.runlog.window(*res.window)
    n = int(log.ok_mask().sum())
    span = res.window[1] - res.window[0]
    lat = log.latencies()
    mean_lat = float(np.mean(lat)) if lat.size else math.nan
    cv = float(np.std(lat) / mean_lat) if lat.size > 1 and mean_lat > 0 else 1.0
    u = res.utilization
    cap = (n / span) / u if u and u > 0 and n and span > 0 else None
    behind = bool(res.generator.behind)
    if planned is not None and burst > 1:
        cv = math.nan
        g = res.generator
        # a window may cut a burst: one burst's worth of slack
        behind = g.achieved_rate < BEHIND_SHORT * g.intended_rate - burst / max(span, 1e-9)
    return _Side(n, cap, mean_lat, cv, u, behind)


def _speed(full: _Side, share: _Side, nominal: float) -> float:
    """alpha x (CPU a request costs on the full target) / (on the share): the ratio of
    the two capacities, the share's normalized to its quota."""
    if full.n == 0 or share.n == 0:
        return nominal  # _doubt says why
    if full.capacity and share.capacity:
        return share.capacity / full.capacity
    if full.latency > 0 and share.latency > 0:
        return full.latency / share.latency
    return nominal


def knee_speed(speed: ShareSpeed | None, curve: LoadCurve) -> ShareSpeed | None:
    """``speed`` with its share side read on the share's own sweep (``curve``): all the
    requests over all the CPU of the repetitions whose utilization is in KNEE_BAND and
    whose generator kept up, over the full target's calibrated capacity. The share's
    MATs are read on those same runs, so a slow spell of the host moves the MAT and
    the speed together. Unchanged without a calibrated full capacity, with fewer than
    MIN_KNEE_REPS such repetitions, or if the speed read would not be in (0, 1]."""
    if speed is None or speed.method != "calibrated" or not speed.full_capacity:
        return speed
    pooled = pooled_capacity((r for lv in curve.levels for r in lv.reps), KNEE_BAND)
    if pooled is None or pooled[1] < MIN_KNEE_REPS:
        return speed
    cap, n_reps = pooled
    effective = cap / speed.full_capacity
    if not 0 < effective <= 1:
        return speed
    knee = {
        "capacity": cap,
        "repetitions": n_reps,
        "utilization_band": list(KNEE_BAND),
        "calibration_capacity": speed.effective * speed.full_capacity,
    }
    return replace(speed, effective=float(effective), share_knee=knee)
