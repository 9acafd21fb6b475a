"""Synthetic LoadCurves from known parameters, for testing the fits (ground truth).

Written apart from the fitting code on purpose: it imports nothing from
``extrapolate.queueing``/``crosssocket``/``calibration`` and computes the truth
by its own formulas -- per-core processor sharing (mean response D/(1-rho) per
class, exact for PS) with known USL sigma/kappa, remote-NIC and sharing
penalties and an LLC effect. Its tail is the gamma matched to M/M/1-PS's first
two moments, the same *approximation* the model uses, so a p99.9 recovery test
checks consistency of the fitting, not the approximation itself.

Noise: each repetition's latencies get multiplicative log-normal noise and the
throughput a small one, seeded per curve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammainc, gammaincinv

from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.machine import Machine
from shrink.mapping import build_mapping
from shrink.schemas import CurveMeta
from shrink.share import Share

__all__ = [
    "DESIGN_MAPPINGS",
    "DESIGN_WORKLOADS",
    "Truth",
    "design_curves",
    "design_runs",
    "truth_curve",
    "truth_demands",
    "truth_mat",
]

# The calibration design's workloads: name -> (dynamic fraction, SMR).
DESIGN_WORKLOADS = {"static": (0.0, 0.0), "mixed": (0.05, 1 / 3.6)}
DESIGN_MAPPINGS = ("1-replica", "2-replica-direct", "2-replica-indirect")


@dataclass(frozen=True)
class Truth:
    demand_static: float = 50e-6
    demand_dynamic: float = 2e-3
    sigma: float = 0.02
    kappa: float = 0.003
    sigma_dynamic: float | None = None  # None: the static class's
    kappa_dynamic: float | None = None
    nic_penalty: float = 0.08
    share_penalty: float = 0.12
    miss_fraction: float = 0.4
    miss_exponent: float = 1.0
    remote_cache_cost: float = 0.625
    llc_ref_mib: float = 12.0
    fixed_latency: float = 50e-6


def truth_demands(
    t: Truth, machine: Machine, mapping: str, cpus: tuple[int, ...], dyn: float, smr: float
) -> list[tuple[int, dict[str, float]]]:
    """(cores, {class: demand}) per replica."""
    mp = build_mapping(mapping, machine, cpus)
    sock = {c: machine.socket_of(c) for c in cpus}
    active = {s: sum(1 for c in cpus if sock[c] == s) for s in set(sock.values())}
    reps_on: dict[int, int] = {}
    for r in mp.replicas:
        for s in set(r.sockets):
            reps_on[s] = reps_on.get(s, 0) + 1
    out = []
    for r in mp.replicas:
        socks = set(r.sockets)
        sd = t.sigma if t.sigma_dynamic is None else t.sigma_dynamic
        kd = t.kappa if t.kappa_dynamic is None else t.kappa_dynamic
        u = {
            k: float(
                np.mean(
                    [
                        1
                        + sg * (active[sock[c]] - 1)
                        + kp * active[sock[c]] * (active[sock[c]] - 1)
                        for c in r.cpus
                    ]
                )
            )
            for k, sg, kp in (("static", t.sigma, t.kappa), ("dynamic", sd, kd))
        }
        if r.nic_socket is None:
            p = 1 - 1 / len(socks)
        else:
            p = sum(1 for s in r.sockets if s != r.nic_socket) / len(r.sockets)
        cap = sum(machine.llc_mib / reps_on[s] for s in socks) / t.llc_ref_mib
        m_all = cap**-t.miss_exponent
        m_loc = (cap / len(socks)) ** -t.miss_exponent
        mem = m_all + t.remote_cache_cost * (m_loc - m_all)
        extra = t.demand_static * (t.nic_penalty * p + t.share_penalty * (1 - 1 / len(socks)))
        d = {}
        for c, base, mu in (
            ("static", t.demand_static, t.miss_fraction * smr),
            ("dynamic", t.demand_dynamic, t.miss_fraction),
        ):
            d[c] = float(u[c] * (base * (1 - mu + mu * mem) + extra))
        out.append((len(r.cpus), d))
    return out


def _responses(t: Truth, reps: list, mix: dict[str, float], x: float) -> dict[str, float]:
    n = sum(c for c, _ in reps)
    w = np.array([c / n for c, _ in reps])
    rho = np.array([x / n * sum(mix[k] * d[k] for k in mix) for _, d in reps])
    if np.any(rho >= 1):
        return {"mean": np.inf, "p999": np.inf}
    means = {
        k: float(sum(wi * d[k] / (1 - r) for wi, (_, d), r in zip(w, reps, rho, strict=True)))
        for k in mix
    }
    comps = []
    for wi, (_, d), r in zip(w, reps, rho, strict=True):
        scv = (2 + r) / (2 - r)
        for k, f in mix.items():
            if f > 0:
                comps.append((wi * f, 1 / scv, d[k] / (1 - r) * scv))
    ws, ks, th = (np.array(v) for v in zip(*comps, strict=True))
    lo = float((gammaincinv(ks, 0.999) * th).min())
    hi = float((gammaincinv(ks, 0.999) * th).max())
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if float(np.dot(ws, gammainc(ks, mid / th))) < 0.999:
            lo = mid
        else:
            hi = mid
    total = sum(mix[k] * means[k] for k in mix)
    out = {"mean": t.fixed_latency + total, "p999": t.fixed_latency + 0.5 * (lo + hi)}
    out.update({f"mean_{k}": t.fixed_latency + v for k, v in means.items()})
    return out


def truth_mat(
    t: Truth,
    machine: Machine,
    mapping: str,
    cpus: tuple[int, ...],
    dyn: float,
    smr: float,
    stat: str,
    threshold: float,
) -> float:
    """The true MAT (by bisection on the truth's own response function)."""
    reps = truth_demands(t, machine, mapping, cpus, dyn, smr)
    mix = {"static": 1 - dyn, "dynamic": dyn}
    n = sum(c for c, _ in reps)
    sat = min(c / sum(mix[k] * d[k] for k in mix) * n / c for c, d in reps)
    lo, hi = 0.0, sat * (1 - 1e-12)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _responses(t, reps, mix, mid)[stat] <= threshold:
            lo = mid
        else:
            hi = mid
    return lo


def truth_curve(
    t: Truth,
    machine: Machine,
    mapping: str,
    cpus: tuple[int, ...],
    *,
    dyn: float,
    smr: float,
    workload: str,
    alpha: float = 1.0,
    levels: int = 24,
    reps: int = 3,
    noise: float = 0.01,
    seed: int = 0,
) -> LoadCurve:
    """A measured-looking LoadCurve on ``cpus`` under ``mapping`` (a share if alpha < 1).

    Throughputs are what ``cpus`` carry; with alpha < 1 the curve stands for an
    alpha-sample replayed on that share (normalized load = throughput / alpha).
    """
    rng = np.random.default_rng(seed)
    rd = truth_demands(t, machine, mapping, cpus, dyn, smr)
    mix = {"static": 1 - dyn, "dynamic": dyn}
    n = sum(c for c, _ in rd)
    sat = n / max(sum(mix[k] * d[k] for k in mix) for _, d in rd)
    # Denser near saturation, where the MATs are.
    u = np.r_[np.linspace(0.1, 0.8, levels // 3), np.linspace(0.82, 0.995, levels - levels // 3)]
    out = []
    for ui in u:
        x = ui * sat
        r = _responses(t, rd, mix, x)
        rep_stats = []
        for _ in range(reps):
            e = float(np.exp(rng.normal(0, noise)))
            xe = x * float(np.exp(rng.normal(0, noise / 4)))
            per = {}
            for k, f in mix.items():
                if f > 0:
                    m = r[f"mean_{k}"] * e
                    per[k] = ClassStats(1000, xe * f, m, m, m, m, m)
            overall = ClassStats(
                1000, xe, r["mean"] * e, r["mean"] * e, r["mean"] * e, r["p999"] * e, r["p999"] * e
            )
            # The share's own throughput: what a replay on ``cpus`` measures.
            rep_stats.append(
                LevelStats(
                    throughput=xe, overall=overall, per_class=per, offered=xe, utilization=float(ui)
                )
            )
        out.append(Level(float(ui), rep_stats))
    share = Share("cores" if alpha < 1 else "all", tuple(cpus), alpha)
    return LoadCurve(
        out,
        knob="rate_factor",
        alpha=alpha,
        share=share,
        mapping=mapping,
        machine=machine.to_dict(),
        sweep=CurveMeta(workload=workload),
        meta={"synthetic": True},
    )


def design_runs(machine: Machine) -> list[tuple[str, tuple[int, ...]]]:
    """The calibration design's runs, as (mapping, CPUs): shares of 1-4 cores on socket 0
    under ``1-replica``, and 2 + 2 cores over both sockets in each mapping."""
    both = machine.cpus[0][:2] + machine.cpus[1][:2]
    runs = [("1-replica", machine.cpus[0][:n]) for n in (1, 2, 3, 4)]
    return runs + [(mp, both) for mp in DESIGN_MAPPINGS]


def design_curves(
    t: Truth, machine: Machine, seed: int, *, seed_stride: int = 100
) -> list[LoadCurve]:
    """The calibration design's runs (:func:`design_runs`) for each workload, each with
    its share of the machine's CPUs as alpha.

    Curve k of the design draws its noise with seed ``seed * seed_stride + k``.
    """
    n_cpus = len(machine.all_cpus)
    curves = []
    k = 0
    for name, (dyn, smr) in DESIGN_WORKLOADS.items():
        for mapping, cpus in design_runs(machine):
            alpha = len(cpus) / n_cpus
            curves.append(
                truth_curve(
                    t, machine, mapping, cpus, dyn=dyn, smr=smr, workload=name, alpha=alpha,
                    seed=seed * seed_stride + k,
                )
            )  # fmt: skip
            k += 1
    return curves
