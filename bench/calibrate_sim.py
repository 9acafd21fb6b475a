"""Fit the simulator's free parameters to the published figures; verify with the simulator.

    python bench/calibrate_sim.py            # fit (about a minute), print the values
    python bench/calibrate_sim.py --verify   # then run the scaling and mapping checks

What is fitted (everything else in shrink/sim/params.py is published, textbook or
a named assumption):

tcp (open loop, 1 KB static requests; processor sharing per core):
  * static_base_us from the 1-core MAT, MAT8 / 6.3, through the exact M/G/1-PS
    mean response time D / (1 - rho) = 0.5 ms;
  * contention_static from the 2-replica-direct MAT (+12.3%): 4 busy cores per
    socket, no cross-socket effect;
  * remote_nic_us from the 2-replica-indirect MAT (+6.5%): every connection remote;
  * cross_socket_sharing from the 1-replica MAT (146,000 req/s): half the
    connections remote plus the workers' sharing across sockets.
  Each parameter enters a configuration's mean demand D; the simulator's MAT
  per core is 1/D - kappa, where kappa (1/T for one exact PS core; less for
  pooled workers) is measured by simulating, and the solve is repeated with the
  new kappas (a fixed-point iteration; two steps suffice).
support (5% dynamic):
  * dynamic_php_us from the 8-core MAT (23,000 req/s): a secant step on the
    simulated MAT (kappa = 1/D - MAT per core, measured by simulating).
  The L3 parameters (dynamic_llc_refs, contention_memory, working sets) are
  assumptions, not fitted: the 1->8 ratio moves little with them (closed form:
  7.6 to 7.9 over 50k-110k references) so simulated MATs are too noisy to fit
  them; they were chosen so that 2 and 4 cores of a socket cost more per
  request than 1 or 8 (published observation) with the ratio near 7.8.
static_cv (2.0) was set by hand so that tcp's p99.9 scaling lands near 7.2.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from pathlib import Path

import numpy as np

from shrink.machine import Machine
from shrink.mapping import build_mapping
from shrink.share import Share
from shrink.sim import SimParams, SimTarget, support_trace, tcp_trace
from shrink.sim.model import build_layout
from shrink.sim.scaling import THRESHOLDS, MatSearch, compare_mappings, find_mats, scaling

ROOT = Path(__file__).resolve().parent.parent
FITTED_TCP = ("static_base_us", "contention_static", "remote_nic_us", "cross_socket_sharing")
FITTED_SUPPORT = ("dynamic_php_us",)


def published() -> dict:
    return json.loads(
        resources.files("shrink").joinpath("data/published_calibration.json").read_text()
    )


TCP_CONFIGS = (  # (mapping, cores): 1 core, the two 2-replica layouts, 1-replica on 8 cores
    ("1-replica", 1),
    ("2-replica-direct", 8),
    ("2-replica-indirect", 8),
    ("1-replica", 8),
)


def mean_demand_us(machine: Machine, mapping: str, cores: int, p: SimParams, trace) -> float:
    """Exact mean CPU per request (microseconds) of ``trace`` on a layout, averaged over cores."""
    m = build_mapping(mapping, machine, machine.all_cpus[:cores])
    layout = build_layout(machine, m, p)
    kib = np.maximum(trace.table.column("bytes").to_numpy(), 0) / 1024
    dyn = float(np.mean(trace.column("cls") == "dynamic"))
    static = float(np.mean(p.static_base_us + p.static_per_kib_us * kib))
    per_core = []
    for c in layout.cores:
        qs = layout.replica_queue_sockets[c.replica]
        remote = np.mean([q != c.socket for q in qs]) if p.cross_socket else 0.0
        per_core.append(
            static * c.static_factor
            + remote * p.remote_nic_us
            + dyn * (p.dynamic_php_us + c.dyn_stall_us)
        )
    return float(np.mean(per_core))


def offsets(machine, configs, p, trace, stat_thr, search) -> dict:
    """Per config: kappa = 1/D - MAT per core (1/s); what the simulator adds to plain PS."""
    out = {}
    for mapping, cores in configs:
        target = SimTarget(machine, mapping, Share.cores_of(machine, machine.all_cpus[:cores]), p)
        mat = find_mats(target, trace, {"mean": stat_thr}, seed=5, search=search).mats["mean"].mat
        d = mean_demand_us(machine, mapping, cores, p, trace) * 1e-6
        out[(mapping, cores)] = (1.0 / d - mat / cores, mat)
    return out


def fit_tcp(pub: dict, p: SimParams, kappa: dict) -> dict[str, float]:
    """Closed-form solve for the four tcp parameters given the simulator's offsets."""
    mat8 = pub["workloads"]["tcp"]["mat_8_cores_rps"]
    ratio = pub["core_scaling_1_to_8"]["tcp"]["mean"]
    gain = pub["replica_mappings"]["tcp_mean_mat_change"]
    per_core = mat8 / 8
    b = 1.0 / (mat8 / ratio + kappa[("1-replica", 1)][0])
    dd = 1.0 / ((1 + gain["direct"]) * per_core + kappa[("2-replica-direct", 8)][0])
    di = 1.0 / ((1 + gain["indirect"]) * per_core + kappa[("2-replica-indirect", 8)][0])
    d8 = 1.0 / (per_core + kappa[("1-replica", 8)][0])
    c = (dd / b - 1.0) / 3.0  # three more busy cores on the socket
    r = di - dd  # every connection remote instead of none
    s = ((d8 - r / 2) / dd - 1.0) * 7.0 / 4.0  # half remote; 4 of 7 peers on the other socket
    return {
        "static_base_us": b * 1e6 - p.static_per_kib_us,  # the tcp file is 1 KiB
        "contention_static": c,
        "remote_nic_us": r * 1e6,
        "cross_socket_sharing": s,
    }


def observations(machine: Machine, utilization: float = 0.8, reps: int = 3) -> None:
    """Support at one utilization on 1, 2, 4 and 8 cores: mean response time, overall
    and per class (the papers' observations; not fitted). Each value is interpolated
    (log response time, linear in utilization) between runs just below and above."""
    from shrink.measure import level_stats

    trace = support_trace(300, 60.0, seed=3)
    for n in (1, 2, 4, 8):
        target = SimTarget(machine, "1-replica", Share.cores_of(machine, machine.all_cpus[:n]))
        f = 0.1 * n
        for _ in range(2):
            r = target.run(trace, rate_factor=f, warmup=6.0, duration=10.0, seed=99)
            per_factor = level_stats(r).throughput / f
            f *= utilization / r.utilization
        points = []
        for g in (0.93 * f, 1.05 * f):
            rows = []
            for seed in range(reps):
                dur = 60_000 / (per_factor * g)
                r = target.run(trace, rate_factor=g, warmup=6.0, duration=dur, seed=seed)
                st = level_stats(r)
                rows.append(
                    (
                        r.utilization,
                        st.overall.mean,
                        st.per_class["static"].mean,
                        st.per_class["dynamic"].mean,
                    )
                )
            points.append(np.mean(rows, axis=0))
        (u0, *v0), (u1, *v1) = points
        w = (utilization - u0) / (u1 - u0)
        mean, static, dynamic = (
            float(np.exp(np.log(a) + w * (np.log(b) - np.log(a))))
            for a, b in zip(v0, v1, strict=True)
        )
        print(
            f"support {n} cores at {utilization:.0%} busy (runs at {u0:.2f}, {u1:.2f}): "
            f"mean {mean * 1e3:.2f} ms  static {static * 1e3:.2f} ms  "
            f"dynamic {dynamic * 1e3:.1f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--machine", default=str(ROOT / "examples/machines/nehalem-2s.toml"))
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument(
        "--observations", action="store_true", help="only the per-class check at 80%% busy"
    )
    args = ap.parse_args()
    machine = Machine.read_toml(args.machine)
    if args.observations:
        observations(machine)
        return
    pub = published()
    search = MatSearch(requests_per_level=args.requests)
    t0 = time.time()
    tcp_tr = tcp_trace(10_000, 20.0)
    sup_tr = support_trace(300, 40.0, think_s=0.3)
    p = SimParams()
    for it in range(args.iterations):
        k_tcp = offsets(machine, TCP_CONFIGS, p, tcp_tr, THRESHOLDS["tcp"]["mean"], search)
        p = p.with_(**fit_tcp(pub, p, k_tcp))
        mats = {f"tcp {k[0]}@{k[1]}": round(v[1]) for k, v in k_tcp.items()}
        print(f"iteration {it + 1} ({time.time() - t0:.0f} s): MATs before the step {mats}")
    # Support at 8 cores reaches its mean threshold only at saturation (closed-loop
    # sessions slow themselves down), not where one PS queue would: one secant step
    # on the PHP CPU, with the simulated kappa, puts the 8-core MAT on 23,000 req/s.
    k8 = offsets(machine, (("1-replica", 8),), p, sup_tr, THRESHOLDS["support"]["mean"], search)
    kappa, mat8 = k8[("1-replica", 8)]
    want = 1e6 / (pub["workloads"]["support"]["mat_8_cores_rps"] / 8 + kappa)
    have = mean_demand_us(machine, "1-replica", 8, p, sup_tr)
    dyn = float(np.mean(sup_tr.column("cls") == "dynamic"))
    p = p.with_(dynamic_php_us=p.dynamic_php_us + (want - have) / dyn)
    print(f"support 8-core MAT {mat8:,.0f} before the PHP step ({time.time() - t0:.0f} s)")
    fitted = {k: getattr(p, k) for k in (*FITTED_TCP, *FITTED_SUPPORT)}
    current = SimParams()
    for k, v in fitted.items():
        print(f"  {k:<22} fitted {v:12.4g}   default {getattr(current, k):12.4g}")
    if not args.verify:
        return
    for wl, trace in (
        ("tcp", tcp_trace(10_000, 20.0)),
        ("support", support_trace(300, 40.0, think_s=0.3)),
    ):
        res = scaling(machine, trace, (1, 2, 4, 8), params=p, search=search)
        want = pub["core_scaling_1_to_8"][wl]
        for stat in ("mean", "p999"):
            f = res["scaling"][stat]
            print(
                f"{wl:<8} {stat:<5} MAT8 {res['mat'][stat]['8']['mat']:>9,.0f}  scaling "
                + " ".join(f"{n}:{f[n]:.2f}" for n in ("2", "4", "8"))
                + f"  (published 8: {want[stat]})"
            )
    maps = compare_mappings(machine, tcp_trace(10_000, 20.0), params=p, search=search)
    for name, r in maps["mappings"].items():
        print(f"tcp {name:<20} mean MAT {r['mean']['mat']:>9,.0f} ({r['mean_change']:+.1%})")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
