"""The speed a CPU-time share really delivers, per request class (issue #15).

Interface (stable; the predict pipeline calls it, the share work fills it in):

    measure_speed(share_target, full_target, trace, *, nominal, seed=0, budget_s=20.0,
                  load=0.4) -> ShareSpeed

``share_target`` runs on the share, ``full_target`` on the whole target (None when
the user has no full target: then the speed is assumed, ``method="nominal"``, and
the report says so). ``trace`` is the (sampled) trace whose request classes are
probed. ``nominal`` is the share's fraction (alpha). ``budget_s`` bounds the
seconds the probe may spend on runs; ``load`` is the full target's utilization
during the probe. The result's ``effective`` is what the SHRiNK transform scales a
CPU-time share by in place of alpha.

Method: a light-load probe, per class. For each request class of the trace a
probe trace is made of that class's requests alone (drawn from the trace with
their frequencies, one request per session, evenly spaced). A pilot on the full
target finds the rate that keeps it ``load`` busy (40%); then the full target
runs the probe at that rate and the share at ``nominal`` times it, as a scaled run
loads it (a share slower than nominal runs busier; one that saturates is probed
again, lighter). Each side's capacity for the class is its throughput over its
utilization (the utilization law: a server X busy U serves at most X / U); the
class's speed is the share's capacity over the full target's. For a live testbed,
utilization is the server processes' CPU over what the share may use, so the
speed is ``nominal * cpu_per_request_full / cpu_per_request_share``: it carries
exactly what a time-sliced core costs a request more than a whole one. A target
that reports no utilization is compared by mean light-load latency instead (a
slower server's response time at light load is its service time). The budget is
split between the classes, and each run's start-up cost (measured on the pilot)
comes out of it, so ``cost_s`` stays near ``budget_s``.

The effective speed is the demand-weighted harmonic mean: with ``w_c`` the full
target's CPU demand of class ``c`` in the trace (count times cost),
``effective = sum(w) / sum(w_c / speed_c)``; throughput at saturation scales by it.

Where MATs are measured both sides are busy, and a light probe misreads them there
(the whole core gets cheaper per request once busy, a quota dearer once behind):
:mod:`shrink.busyspeed` measures both sides busy, and predict uses that speed when
it can; the report gives both.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from shrink.checks import check_alpha, check_positive
from shrink.errors import MeasurementError
from shrink.share import Share, ShareSpeed
from shrink.target import RunResult, Target
from shrink.trace import Trace

__all__ = [
    "measure_speed",
    "probe_trace",
    "speed_assumptions",
]

PILOT_RATE = 10.0  # req/s on the full target: light for any page of the demo's kind
# Full target's utilization during the probe: light, yet enough requests of a
# cheap class for its CPU to be measured well.
TARGET_BUSY = 0.4
# The share's probe rate, relative to nominal times the full target's. 1.0 is what a
# scaled run does (alpha of the sessions): a server's cost per request falls as
# requests arrive closer together (lighttpd handles more per wake-up: 0.13 ms a
# static file at 300/s, 0.09 ms at 1,200/s here), so the share is probed at the same
# arrival rate per unit of nominal speed. A share slower than nominal then runs
# busier, and X / U fails once it saturates: it is probed again, lighter.
SHARE_LOAD = 1.0
SATURATED = 0.9
MIN_REQUESTS = 20
MAX_RATE = 2000.0  # req/s on the full target: what one generator CPU sends with margin
# The loaded runs' rates (loaded_speed), as fractions of the capacity the light probe
# gave each side: the full target busy but short of its knee (cheap in generator
# capacity, and busy enough to stop idling between requests; its cost per request was
# flat from 55% busy to saturation here); the share busy but keeping up (about 75% busy
# at the 0.8 of its light speed it served busy here). The share's loaded speed places
# its levels (AutoPlan.share_load), and its knee lies where it stops keeping up: over
# six demo runs on a steady host the share's keeping-up capacity put its knee within
# 0-10% of the whole core's knee in level, where a run saturated past it (1.2 here
# until 2026-11-25) read 0.13-0.22 of the whole core, against 0.19-0.21 keeping up,
# and once left the share's knee 40% above the whole core's, out of the sweep's time.
FULL_BUSY = 0.6
SHARE_BUSY = 0.6
PILOT_S = (0.3, 1.0)  # warmup, duration of the pilot run
WARMUP_S = 0.5


@dataclass(frozen=True)
class _Side:
    """One class on one target: requests measured, capacity (req/s at 100% busy)."""

    n: int
    capacity: float | None  # throughput / utilization; None without a utilization
    latency: float  # mean response time, seconds
    cv: float  # coefficient of variation of the response times (light load: service)
    utilization: float | None
    behind: bool  # the generator fell behind its schedule


def measure_speed(
    share_target: Target,
    full_target: Target | None,
    trace: Trace,
    *,
    nominal: float,
    seed: int = 0,
    budget_s: float = 20.0,
    load: float = TARGET_BUSY,
) -> ShareSpeed:
    """The share's measured speed per class (see the module docstring for the method).

    A class whose probe cannot be trusted (too few requests, a latency measured
    with the generator behind, a speed outside (0, 1]: a share faster than the
    whole target) is taken at ``nominal``, and ``notes`` says so.
    """
    nominal = check_alpha(nominal, "nominal")
    budget_s = check_positive(budget_s, "budget_s")
    load = check_alpha(load, "load")
    if full_target is None:
        return ShareSpeed.assumed(nominal)
    t0 = time.monotonic()
    cls = trace.column("cls") if len(trace) else np.array([], dtype=object)
    classes, counts = np.unique(cls.astype(str), return_counts=True)
    if classes.size == 0:
        raise MeasurementError("measure_speed: the trace has no requests to probe")
    per_class_s = budget_s / classes.size
    speeds: dict[str, float] = {}
    demand: dict[str, float] = {}
    full_caps: dict[str, float | None] = {}
    sigmas: dict[str, float] = {}
    notes: list[str] = []
    for k, (c, n_c) in enumerate(zip(classes.tolist(), counts.tolist(), strict=True)):
        rng_seed = seed + 101 * k
        t_pilot = time.monotonic()
        rate = _light_rate(full_target, trace, c, rng_seed, load)
        # What a run costs beyond its seconds (a live target starts its generator
        # processes each time): the pilot says, and the budget pays it too.
        spent = time.monotonic() - t_pilot
        if getattr(full_target, "simulated", False):
            spent = sum(PILOT_S)  # same seed, same probe: wall time must not steer it
        overhead = max(0.0, spent - sum(PILOT_S))
        duration = max(1.0, (per_class_s - spent - 2 * (WARMUP_S + overhead)) / 2)
        full = _side(full_target, trace, c, rate, duration, rng_seed + 1)
        share = _side(share_target, trace, c, rate * nominal * SHARE_LOAD, duration, rng_seed + 2)
        if share.utilization is not None and share.utilization >= SATURATED:
            # Much slower than nominal: X / U needs U under 1.
            r = rate * nominal * SHARE_LOAD * load / share.utilization
            share = _side(share_target, trace, c, r, duration, rng_seed + 3)
        if full.n == 0 and share.n == 0:
            raise MeasurementError(
                f"measure_speed: class {c!r}: no request completed in the probe's window "
                "on either target; is the server answering?"
            )
        speed = _speed(full, share, nominal)
        doubt = _doubt(full, share, speed)
        if doubt:
            notes.append(f"class {c!r}: assumed nominal {nominal:g} ({doubt})")
            speed = nominal
        elif full.behind or share.behind:
            # X / U holds at any load, so a late generator leaves the speed usable.
            notes.append(f"class {c!r}: the generator fell behind; probed lighter than planned")
        speeds[c] = speed
        sigmas[c] = 0.0 if doubt else _sigma(full, share)
        # CPU demand of the class on the full target: its count times its cost.
        cost = 1.0 / full.capacity if full.capacity else full.latency
        demand[c] = n_c * cost
        full_caps[c] = full.capacity
    total = sum(demand.values())
    effective = total / sum(demand[c] / speeds[c] for c in speeds) if total > 0 else nominal
    # The effective speed's log-sd: each class weighs by its share of the time the mix
    # takes on the share (d log effective / d log speed_c).
    slow = sum(demand[c] / speeds[c] for c in speeds)
    sigma = (
        math.sqrt(sum((demand[c] / speeds[c] / slow) ** 2 * sigmas[c] ** 2 for c in speeds))
        if total > 0 and slow > 0
        else 0.0
    )
    return ShareSpeed(
        nominal=nominal,
        per_class=speeds,
        effective=float(effective),
        method="probe",
        cost_s=time.monotonic() - t0,
        notes=tuple(notes),
        sigma=float(sigma),
        full_capacity=_mix_capacity(
            dict(zip(classes.tolist(), counts.tolist(), strict=True)), full_caps
        ),
    )


def _mix_capacity(counts: dict[str, int], caps: dict[str, float | None]) -> float | None:
    """Requests a second of the mix ``counts`` at 100% busy, from per-class capacities."""
    if not counts or any(not caps.get(c) for c in counts):
        return None
    seconds = sum(n / caps[c] for c, n in counts.items())  # type: ignore[operator]
    return sum(counts.values()) / seconds if seconds > 0 else None


def _sigma(full: _Side, share: _Side) -> float:
    """Log-sd of a class's speed from the requests each side measured.

    Each capacity is the reciprocal of a mean service time over n requests, drawn
    separately on each side, so its relative sd is the service times' coefficient of
    variation over sqrt(n). At the probe's light load a response time is mostly its
    service time: the full side's response-time CV stands in for it (capped at 2).
    """
    if full.n <= 0 or share.n <= 0:
        return 0.0
    cv = min(2.0, full.cv) if math.isfinite(full.cv) else 1.0
    return cv * math.sqrt(1.0 / full.n + 1.0 / share.n)


def _doubt(full: _Side, share: _Side, speed: float) -> str:
    """Why a class's probe cannot be trusted, or ''."""
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


def _run(target: Target, trace: Trace, cls: str, rate: float, warm: float, dur: float, seed: int):
    probe = probe_trace(trace, cls, rate, warm + dur, seed)
    return target.run(probe, rate_factor=1.0, warmup=warm, duration=dur, seed=seed)


def _light_rate(full: Target, trace: Trace, cls: str, seed: int, load: float) -> float:
    """The rate that keeps ``full`` about ``load`` busy on ``cls`` (from a pilot)."""
    res = _run(full, trace, cls, PILOT_RATE, PILOT_S[0], PILOT_S[1], seed)
    side = _measured(res)
    x = side.n / PILOT_S[1]
    u = res.utilization
    if u is None and math.isfinite(side.latency):
        # Little's law: requests in the system, X * R, is the utilization of one server
        # at light load (and over it with several, which only makes the probe lighter).
        u = x * side.latency
    if not u or u <= 0:
        return PILOT_RATE
    # A cheap class would ask for more than the generator itself can send.
    return float(min(MAX_RATE, max(PILOT_RATE / 4, load * x / u)))


def _measured(res: RunResult, *, by_completion: bool = False) -> _Side:
    """One run's side. ``by_completion``: its throughput counts the requests that
    completed in the window, not those sent in it: the two differ once a server is
    behind, and only completions a second over utilization give its capacity."""
    log = res.runlog.window(*res.window)
    ok = log.ok_mask()
    n = int(ok.sum())
    span = res.window[1] - res.window[0]
    if by_completion:
        done = res.runlog.column("done")[res.runlog.ok_mask()]
        n = int(np.sum((done >= res.window[0]) & (done < res.window[1])))
    lat = log.latencies()
    mean_lat = float(np.mean(lat)) if lat.size else math.nan
    cv = float(np.std(lat) / mean_lat) if lat.size > 1 and mean_lat > 0 else 1.0
    u = res.utilization
    cap = (n / span) / u if u and u > 0 and n and span > 0 else None
    return _Side(n, cap, mean_lat, cv, u, bool(res.generator.behind))


def _side(target: Target, trace: Trace, cls: str, rate: float, dur: float, seed: int) -> _Side:
    return _measured(_run(target, trace, cls, rate, WARMUP_S, dur, seed))


def _speed(full: _Side, share: _Side, nominal: float) -> float:
    if full.n == 0 or share.n == 0:
        return nominal  # _doubt says why
    if full.capacity and share.capacity:
        return share.capacity / full.capacity
    if full.latency > 0 and share.latency > 0:
        return full.latency / share.latency
    return nominal


def speed_assumptions(share: Share) -> list[str]:
    """What the report says about the share's speed: nominal, measured or assumed, and cost."""
    sp = share.speed or ShareSpeed.assumed(share.cpu_fraction)
    if sp.method == "nominal":
        speed = (
            f"Share speed: assumed, not measured: {sp.nominal:g} (the nominal CPU-time "
            "fraction; no full target to compare with, or no probe). A time-sliced core "
            "costs more CPU per request than a whole one, so the share's real speed is "
            "likely lower, and a prediction scaled by this one likely too low."
        )
    else:
        per = ", ".join(f"{c} {v:.3g}" for c, v in sorted(sp.per_class.items()))
        speed = (
            f"Share speed: nominal {sp.nominal:g}, measured {sp.effective:.3g} for the "
            f"trace's mix ({per or 'no per-class figures'}; {sp.method}, "
            f"{sp.cost_s:.1f} s of probe runs). The scaling uses the measured speed."
        )
        if sp.light is not None:
            where = (
                "the share's saturated repetitions of the sweep, over the full target's "
                f"capacity measured busy (the median of {max(1, len(sp.full_capacities))} "
                f"run(s) of the mix at {FULL_BUSY:.0%} of its probe capacity, before, during "
                "and after the sweep)"
                if sp.method == "probe+knee"
                else "one run of the mix on each side, both busy"
            )
            speed += (
                f" The light-load probe read {sp.light:.3g}; {where} gave {sp.effective:.3g}, "
                "and that one is used: a busy whole core stops idling between requests and "
                "gets cheaper per request, while a quota idles in every gap and gets dearer "
                "once behind, which a light probe cannot see."
            )
        if sp.notes:
            speed += f" Probe notes: {'; '.join(sp.notes)}."
    each = (
        " Each repetition is scaled by the speed it delivered itself (its throughput "
        "over its utilization, over the full target's capacity measured busy), not by "
        "this one s: a quota near its knee serves at different speeds from one "
        "repetition to the next (shrink.scaling.rep_speed)."
        if sp.measured_busy
        else ""
    )
    return [
        speed,
        f"CPU-time share: the server is taken as a processor-sharing server at speed "
        f"s = {share.speed_factor:.3g} of the full target's, so response times are scaled "
        f"by s and throughputs by 1/s (R_full(X) = s * R_share(s * X)).{each} CFS "
        "bandwidth control is coarse (a quota per period of 16 ms or so): a request "
        "that arrives after the quota is spent waits for the next period, so the share's "
        "light-load latencies run above an ideal slower server's. Whatever else runs on "
        "the share's CPUs in the quota's gaps evicts the server's caches (see the "
        "self-check on other work).",
    ]
