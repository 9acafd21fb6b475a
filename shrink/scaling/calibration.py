"""The calibration of a CPU-time share's speed, as :mod:`shrink.scaling` describes it:
the sample's mix light on the full target (in short periods at its knee's load, beside
the share's levels near its knee), near its knee on the share."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shrink.checks import check_alpha, check_positive
from shrink.errors import MeasurementError
from shrink.loadcurve import Level, pooled_capacity
from shrink.measure.interrupt import stop_if_interrupted
from shrink.scaling.knee_read import KNEE_BAND, MIN_KNEE_REPS, knee_speed
from shrink.scaling.probe import MIX, probe_trace
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
# Short runs after the pilot on the full target, each at the rate its requests so far
# allow, and at most RAMP_FACTOR times the last one's: a mix's rare heavy pages can be
# missing from a few requests, and utilization grows in proportion to the rate. They
# set the rates; the capacity is read beside the sweep.
RAMP_STEPS = 2
RAMP_S = 2.0
RAMP_FACTOR = 4.0
# The calibration aims below its bound: the pilot's cost estimate rests on a second
# of requests.
AIM = 0.7
# The share is read where its MATs are read, near its knee: SHARE_STEPS runs, each at
# KNEE_LOAD of the capacity the previous one showed (by the lower bound of its
# requests).
SHARE_STEPS = 3
# The share's first run (as loaded as the full target), and the longest of its runs
# near the knee (each long enough for about as many requests as the full side read).
SHARE_LIGHT_S = 5.0
SHARE_RUN_S = 10.0
MIN_REQUESTS = 20
MAX_RATE = 2000.0  # req/s: what one generator CPU sends with a wide margin
# The full target's runs after the pilot send their requests in short periods at the
# knee's load: PERIOD_S at KNEE_LOAD of the capacity the runs so far show, one period
# every gap, so that the run's mean utilization stays within its bound (a run's window
# holds at least one whole period: at a low mean rate a period is shorter). Through a
# period the core is as busy as at the MATs. Cost per request of the demo's mix over
# that of the whole trace's sessions with the core busy (what a validation measures),
# two runs of bench/bench_burst_cost.py --rounds 8 (2-vCPU VM of the polyglot kind, n=8
# runs a pattern each, interleaved; bench/RESULTS.md "burst cost"): evenly spaced
# light requests 1.42 and 1.43, bursts of 16 sent at once 1.25 and 1.30, periods of
# 0.25 s at the knee's load 1.07 and 1.10, periods of 0.1 s 1.27 (each period a few
# seconds after another; after 40 s idle one cost 1.28x and 1.08x one right after
# another, medians of two runs of 4 rounds, bench/bench_idle_cost.py: not settled).
PERIOD_S = 0.25
KNEE_LOAD = 0.9
# After the ramp, the full target's seconds left run beside the share's sweep: a run
# of one whole period (after BESIDE_WARMUP_S) after each of its levels that ran at
# least KNEE_BAND[0] busy (where its MATs are read), or one after the sweep if none did. The
# host's speed drifted 1.03-3.3x within a prediction (max over min of the whole core's
# busy capacity, 21 runs of bench_fidelity on a 2-vCPU VM of the polyglot kind): a full
# side read before the sweep and a share read during it saw different hosts. Read on a
# period just before the sweep, the MATs of 12 runs of that kind erred by a log-sd of
# 0.33; on one beside it, 0.22: the seconds a period before the sweep took go to more
# periods beside it.
BESIDE_WARMUP_S = 0.2
# Beside the sweep a run's rates grow at most BESIDE_GROWTH times the last one's: a run
# reads one period, one spell of the host, and the next may find it slower (on a 2-vCPU
# VM of the polyglot kind a beside run read the full core 3.2x cheaper than the ramp, the
# rate grew 2.6x, and the next period cost 4.4x the one before: 13.5% busy against 10%).
BESIDE_GROWTH = 1.5
BEHIND_SHORT = 0.9  # a burst run whose generator sent less of its planned rate is behind
# Which calibration made a speed (recorded in prediction.json): a model error is
# fitted on runs of one calibration only.
CALIBRATION = (
    "mix on keep-alive connections: the full target light, in periods at its knee's load "
    "beside the share's levels near its knee, every period there"
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
        "knee_load": KNEE_LOAD,
        "share_steps": SHARE_STEPS,
        "share_light_s": SHARE_LIGHT_S,
        "share_run_s": SHARE_RUN_S,
        "min_requests": MIN_REQUESTS,
        "period_s": PERIOD_S,
        "beside_warmup_s": BESIDE_WARMUP_S,
        "beside_growth": BESIDE_GROWTH,
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

    def run(self, target: Target, planned: _Planned, phase: str = "ramp") -> RunResult | None:
        if self.planned + planned.seconds > self.seconds + 1e-9:
            return None
        res = planned.run(target)
        self.runs.append(
            {
                "class": MIX,
                "seconds": planned.seconds,
                "offered_rate": planned.rate,
                "burst": planned.burst,
                "period_rate": planned.period_rate,
                "phase": phase,
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
    period_rate: float | None = None  # req/s within a burst (None: sent at once)

    @property
    def seconds(self) -> float:
        return round(self.warmup + self.duration, 6)

    def run(self, target: Target) -> RunResult:
        res = target.run(
            self.trace, rate_factor=1.0, warmup=self.warmup, duration=self.duration,
            seed=self.seed,
        )  # fmt: skip
        # A stop signal ends the engine's run early, which returns what it measured: the
        # calibration stops too (beside the sweep, the sweep keeps its finished levels),
        # or the signal would be lost on a short run taken for a whole one.
        stop_if_interrupted(res)
        return res


def _plan(
    trace: Trace, rate: float, warm: float, dur: float, seed: int, burst: int = 1,
    period_rate: float | None = None,
) -> _Planned:  # fmt: skip
    """One run of the sample's mix, the same requests on both sides: drawn by class,
    at a planned rate on keep-alive connections (:func:`probe_trace`), in bursts of
    ``burst`` requests sent at ``period_rate`` (a period at the knee's load), or at
    once without one.
    The sample's own sessions, looped, cannot be slowed to a few requests a second
    (their think times are real seconds), and at the light rates they reach they
    arrive in bursts that a light run's bound cannot hold."""
    if burst <= 1:
        return _Planned(probe_trace(trace, rate, warm + dur, seed), rate, warm, dur, seed)
    # Whole bursts in the window, each mid-way between two gaps: a burst cut by the
    # window's edge would count its CPU on one side and its requests on the other.
    gap = dur / max(1, round(dur * rate / burst))
    rate = burst / gap
    span = (burst - 1) / period_rate if period_rate else 0.0
    offset = (warm + (gap - span) / 2) % gap
    tr = probe_trace(trace, rate, warm + dur, seed, burst, offset, period_rate)
    return _Planned(tr, rate, warm, dur, seed, burst, period_rate)


def calibrate(share_target: Target, full_target: Target, trace: Trace, **kw: Any) -> ShareSpeed:
    """The CPU-time share's speed for the mix of ``trace`` (module docstring), its
    full side run at once: :func:`calibrate_beside` (the same keywords), then
    :meth:`Beside.finish`."""
    return calibrate_beside(share_target, full_target, trace, **kw).finish()


def calibrate_beside(
    share_target: Target,
    full_target: Target,
    trace: Trace,
    *,
    nominal: float,
    seed: int = 0,
    seconds: float = CALIBRATION_S,
    busy: float = CALIBRATION_BUSY,
) -> Beside:
    """The calibration up to the share's sweep: the full target's pilot and ramp, then
    the share near its knee. The full target's seconds left run beside the sweep
    (:class:`Beside`).

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
    ramp_runs, aim = got
    ramp = _pooled(ramp_runs)
    # The share reads about as many requests as the full side will have read.
    full_n = ramp.n + round(aim.rate * (budget.seconds - budget.planned))
    share, share_runs = _share_side(share_target, trace, full_n, aim.rate, nominal, seed)
    return Beside(full_target, trace, budget, ramp_runs,
                  _ShareRead(share, share_runs, nominal), aim, seed)  # fmt: skip


@dataclass(frozen=True)
class _ShareRead:
    """The share's side of a calibration: the pooled runs near its knee, run by run."""

    side: _Side
    runs: list[dict[str, Any]]
    nominal: float


class Beside:
    """A calibration whose full side is not finished: the full target's seconds left
    after its ramp, run beside the share's sweep, one period after each of its levels
    that ran at least half busy (:meth:`slice`), or after it if none did
    (:meth:`finish`).

    The full side's capacity is then read on those runs: taken at the times the
    share's MATs and its knee were, a host whose speed drifts through a prediction
    moves both sides alike. ``speed``: the speed as read before the sweep, at most the
    share's nominal fraction (its scaling and levels rest on it).
    """

    def __init__(
        self, full_target: Target, trace: Trace, budget: _FullBudget, ramp_runs: list[_Side],
        share: _ShareRead, aim: _Aim, seed: int,
    ) -> None:  # fmt: skip
        self.full_target, self.trace, self.budget = full_target, trace, budget
        self.ramp_runs, self.ramp = ramp_runs, _pooled(ramp_runs)
        self.share, self.aim, self.seed = share, aim, seed
        self.runs: list[_Side] = []
        self.levels: list[Level] = []  # the share's levels so far
        read = _speed_of(self.ramp, share, budget)
        # The ramp's short, light periods read the full core dear (its requests cost
        # 1.25-1.42x those of a period at the knee's load, bench_burst_cost), so the
        # speed they read errs high: up to twice the one read beside the sweep on the
        # project's VM, which set the share's first levels twice too fast. A time-sliced
        # share is not faster than its fraction: the sweep starts from the lower.
        self.speed = replace(read, effective=min(read.effective, share.nominal))

    def slice(self, level: Level) -> None:
        """One run on the full target holding one whole period, if the share's ``level``
        ran at least KNEE_BAND[0] busy (where its MATs are read) and the budget holds
        the run."""
        self.levels.append(level)
        if not any((r.utilization or 0.0) >= KNEE_BAND[0] for r in level.reps):
            return
        # Before a run beside the sweep has read the host, the rates were set on the
        # host before it: slowed as the share's level shows it slowed, so that the run
        # stays within its bound (a faster host needs nothing). After one, they are set
        # at the slowest spell read (:func:`_aim`).
        now = pooled_capacity(level.reps, KNEE_BAND)
        if not self.runs and now is not None and self.share.side.capacity:
            self.aim = self.aim.slowed(now[0] / self.share.side.capacity)
        window = self.aim.period_window()
        if self.budget.seconds - self.budget.planned >= BESIDE_WARMUP_S + window - 1e-9:
            self._run(BESIDE_WARMUP_S, window)

    def finish(self) -> ShareSpeed:
        """:meth:`now`, after one run for the seconds left if none ran beside the sweep
        (a run after the last level would move the speed, and the share's thresholds,
        once the sweep can no longer follow them)."""
        left = math.floor(10 * (self.budget.seconds - self.budget.planned - WARMUP_S)) / 10
        if not self.runs and left >= 1.0:
            self._run(WARMUP_S, left)
        return self.now()

    def now(self) -> ShareSpeed:
        """The speed as the runs so far read it: the full side on the runs beside the
        sweep (on every run, the pilot's and the ramp's too, if those measured fewer
        than MIN_REQUESTS requests or no utilization), the share's on the sweep's levels
        near its knee (:func:`knee_speed`) once there are enough of them."""
        beside = _pooled(self.runs) if self.runs else None
        if beside is None or beside.n < MIN_REQUESTS or not beside.capacity:
            beside = _pooled([self.ramp, *self.runs])
        # The pilot's unbursted requests are the only ones whose spread is service's.
        speed = _speed_of(replace(beside, cv=self.ramp.cv), self.share, self.budget)
        if self.levels:
            speed = replace(speed, swept_at=self.speed.effective)
        return knee_speed(speed, self.levels) or speed

    def _run(self, warm: float, window: float) -> None:
        planned = self.aim.plan(self.trace, warm, window, self.seed + 101 + len(self.runs))
        res = self.budget.run(self.full_target, planned, "beside")
        if res is not None:
            self.runs.append(_measured(res, planned))
            # The next run at the rates all the requests so far allow.
            self.aim = _aim([*self.ramp_runs, *self.runs], self.aim, BESIDE_GROWTH)


def _speed_of(full: _Side, read: _ShareRead, budget: _FullBudget) -> ShareSpeed:
    """The speed the two sides read, or the nominal one where they cannot be trusted."""
    share, nominal = read.side, read.nominal
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
        cost_s=round(budget.planned + sum(r["seconds"] for r in read.runs), 6),
        notes=tuple(notes),
        sigma=0.0 if doubt else _sigma(full, share),
        full_capacity=full.capacity,
        full_target_runs=tuple(budget.runs),
        share_runs=tuple(read.runs),
    )


def _share_side(
    target: Target, trace: Trace, full_n: int, rate: float, nominal: float, seed: int
) -> tuple[_Side, list[dict[str, Any]]]:
    """The mix on the share: first as loaded as the full target was (alpha times its
    rate), then SHARE_STEPS runs, each at KNEE_LOAD of the capacity the latest run
    shows by the lower bound of its requests (a run past the knee reads nothing
    steady), for about as many requests as the full side measured. The speed pools
    the last two runs: the share near its knee."""
    runs: list[dict[str, Any]] = []

    def run(r: float, d: float, k: int) -> _Side:
        planned = _plan(trace, r, WARMUP_S, d, seed + 2 + k)
        res = planned.run(target)
        runs.append({"seconds": planned.seconds, "offered_rate": r, "utilization": res.utilization})
        return _measured(res)

    sides = [run(rate * nominal, SHARE_LIGHT_S, 0)]
    for k in range(SHARE_STEPS):
        latest = sides[-1]
        cap = latest.capacity
        if not cap:
            break  # without a utilization the light run's latency is the figure
        cv = max(1.0, latest.cv) if math.isfinite(latest.cv) else 2.0
        upper = 1.0 + 3.0 * cv / math.sqrt(max(1, latest.n))
        r = min(MAX_RATE * nominal, KNEE_LOAD * cap / upper)
        want = max(MIN_REQUESTS, full_n) / SHARE_STEPS
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


def _full_side(
    budget: _FullBudget, full: Target, trace: Trace, seed: int, busy: float
) -> tuple[list[_Side], _Aim] | None:
    """The mix on the full target, light: a pilot at PILOT_RATE, then RAMP_STEPS short
    runs, each in periods at the rates the requests so far allow (:func:`_aim`). The
    side pools every run (the sweep starts from it); the aim is for the runs beside the
    sweep. None when the budget cannot pay for the pilot."""
    res = budget.run(full, _plan(trace, PILOT_RATE, PILOT_S[0], PILOT_S[1], seed), "pilot")
    if res is None:
        return None
    runs = [_measured(res)]
    aim = _Aim(PILOT_RATE, PILOT_RATE, busy)
    for step in range(RAMP_STEPS):
        aim = _aim(runs, aim)
        if budget.seconds - budget.planned < WARMUP_S + RAMP_S:
            break
        planned = aim.plan(trace, WARMUP_S, RAMP_S, seed + 1 + step)
        res = budget.run(full, planned)
        if res is None:
            break
        runs.append(_measured(res, planned))
    return runs, _aim(runs, aim)


@dataclass(frozen=True)
class _Aim:
    """The full target's next run: its mean rate and the rate within its periods."""

    rate: float
    knee_rate: float
    busy: float  # the bound on the run's mean utilization

    def period_window(self) -> float:
        """A window holding one whole period of PERIOD_S (at least 1 s)."""
        return max(1.0, math.ceil(10 * math.floor(self.knee_rate * PERIOD_S) / self.rate) / 10)

    def slowed(self, factor: float) -> _Aim:
        """The rates on a host ``factor`` as fast as the one they were set on (at most
        as fast): the period keeps its requests and its share of the window."""
        f = min(1.0, factor)
        return _Aim(self.rate * f, self.knee_rate * f, self.busy)

    def plan(self, trace: Trace, warm: float, dur: float, seed: int) -> _Planned:
        k = max(1, min(math.floor(self.knee_rate * PERIOD_S), math.floor(self.rate * dur)))
        return _plan(trace, self.rate, warm, dur, seed, k, self.knee_rate if k > 1 else None)


def _aim(sides: list[_Side], last: _Aim, growth: float = RAMP_FACTOR) -> _Aim:
    """The rates the runs so far allow: a mean rate that keeps the full target AIM x
    its bound busy, by the upper bound of their cost (a few requests can read a cost low
    by a few standard errors, and the bound must hold), at most ``growth`` times the
    last one's, in periods at KNEE_LOAD of the capacity (a window holds at least one
    whole period)."""
    pooled = _pooled(sides)
    # Without a utilization a light server's response time is its service time.
    cap = pooled.capacity or (1 / pooled.latency if pooled.latency > 0 else None)
    if not cap:
        return last
    # A mix's costs spread more than one class's: its response times' CV (at least 1)
    # stands in for theirs, three standard errors for the bound.
    cv = max(1.0, pooled.cv) if math.isfinite(pooled.cv) else 2.0
    upper = 1.0 + 3.0 * cv / math.sqrt(max(1, pooled.n))
    aimed = AIM * last.busy * cap / upper
    rate = min(MAX_RATE, growth * last.rate, max(PILOT_RATE / 4, aimed))
    # A period's load needs no bound (the run's mean has one): the point estimate.
    return _Aim(rate, max(rate, KNEE_LOAD * cap), last.busy)


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
        # the window holds whole bursts (_plan): none is cut by its edges
        behind = g.achieved_rate < BEHIND_SHORT * g.intended_rate
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
