"""The prediction's assumptions and confidence, in words (prediction.json carries them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from shrink.share import Share, ShareSpeed

if TYPE_CHECKING:
    from shrink.loadcurve import LoadCurve
    from shrink.prediction import MappingPrediction
    from shrink.uncertainty import ErrorBudget

__all__ = [
    "MODEL_ASSUMPTIONS",
    "ONE_SOCKET_ASSUMPTION",
    "PAIRED_FULL_RUN_NOTE",
    "REMAPPED_SHAPE_ASSUMPTION",
    "assumptions",
    "confidence",
    "cross_socket_assumption",
]


def assumptions(
    alpha: float, config: Any, share: Share, measured: LoadCurve, left_out: tuple[str, ...] = ()
) -> list[str]:
    """What the prediction assumes, in words for the report (``config``: the
    prediction's PredictConfig, read for its level and seed; ``left_out``: the built-in
    mappings ``--mappings all`` left out, which the server's CPUs cannot give)."""
    assumptions = [
        f"SHRiNK: {alpha:g} of the sessions ({config.level} level, seed {config.seed}) on "
        f"{alpha:g} of the server ({share.kind} share of CPUs {list(share.cpus)}) behaves like "
        "the whole trace on the whole server at normalized load.",
    ]
    if share.kind == "cpu_time":
        assumptions.extend(speed_assumptions(share))
    if share.kind == "cores":
        assumptions.extend(core_subset_assumptions(share, measured))
    if measured.sweep.skip:
        assumptions.append(
            f"Every run starts {measured.sweep.skip:.3g} s into the trace: a trace's first "
            "seconds (sessions starting together, or cut by the start of a log) are not "
            "its steady mix."
        )
    k = measured.sweep.scaled_time
    if k != 1.0:
        assumptions.append(
            f"Time scaling: the share's warm-up and measurement windows, and its users' "
            f"think times, were {k:.3g} times the full-scale ones (1 over the speed the "
            "sweep assumed): the share ran the whole server in slow motion. A server at s "
            "of the speed moves through its queueing states 1/s slower and sees s of the "
            "requests a second: with shorter windows the share would be caught nearer its "
            "empty start, with fewer requests in its tail; with the users' own think times "
            "its response time above the knee would stay the whole server's, not 1/s of it."
        )
    load = measured.sweep.share_load
    if load != 1.0:
        assumptions.append(
            f"Matched load: at every level the share replayed the sample at {load:.3g} "
            "times the level's rate factor (its calibrated speed over alpha, and over the "
            "sample's share of the loop window's requests relative to alpha), so that it "
            "was as loaded as the full target at the same level; the scaling reads "
            "throughputs, not levels, so this only chooses where the share is measured."
        )
    return assumptions + left_out_assumption(left_out)


def core_subset_assumptions(share: Share, measured: LoadCurve) -> list[str]:
    """What a core subset cannot show, on this machine: the generator on a server CPU,
    the loopback work it carries, and the full target's workers behind one socket."""
    target = measured.sweep.target
    gen = set(target.get("generator_cpus") or [])
    shared = sorted(gen & set(share.cpus))
    gen_cpu = [r.generator_cpu for lv in measured.levels for r in lv.reps if r.generator_cpu]
    out = [
        "Core subset: alpha of the cores, alpha of the sessions; nothing of the full target "
        "was run for the prediction. The subset cannot show what its cores do not share "
        "with the others: one listening socket in front of all the full target's workers "
        "(a connection waits for whichever worker is free first, so the whole target "
        "queues less at the same load per core), and work on the cores outside the subset."
    ]
    if shared:
        took = f" (up to {100 * max(gen_cpu):.0f}% of a CPU)" if gen_cpu else ""
        out.append(
            f"The load generator ran on CPU {', '.join(map(str, shared))}, one of the "
            f"subset's{took}, and carries the loopback network work of every request it "
            "sends. On the full target it sends 1/alpha times as many requests from the "
            "same CPU, so it takes about the same part of each core: the SHRiNK ratio "
            "holds to the extent that its cost per request stays the same. On a machine "
            "with a CPU to spare, give the generator its own (--generator-cpus)."
        )
    return out


def speed_assumptions(share: Share) -> list[str]:
    """What the report says about a CPU-time share's speed."""
    sp = share.speed or ShareSpeed.assumed(share.cpu_fraction)
    if sp.method == "nominal":
        speed = (
            f"Share speed: assumed, not measured: {sp.nominal:g} (the nominal CPU-time "
            "fraction; no calibration on the full target). A time-sliced core costs more "
            "CPU per request than a whole one, so the share's real speed is likely lower, "
            "and a prediction scaled by this one too low unless the share model's bias, "
            "fitted for shares at their nominal speed, corrects it (the intervals, below)."
        )
    else:
        busy = sp.full_target_busy
        share_u = [r["utilization"] for r in sp.share_runs[-2:] if r.get("utilization") is not None]
        where = (
            f"on the share at {100 * min(share_u):.0f}-{100 * max(share_u):.0f}% of its quota"
            if share_u
            else "on the share"
        )
        speed = (
            f"Share speed: nominal {sp.nominal:g}, calibrated {sp.effective:.3g} for the "
            "trace's mix: the CPU a request costs on the full target, lightly loaded, over "
            f"what it costs {where}, near its knee (a share's cost depends on its load, a "
            "whole core's does not). The calibration ran the full target for "
            f"{sp.full_target_seconds:.1f} s at most "
            f"{'an unknown load' if busy is None else f'{100 * busy:.1f}% busy'}; nothing "
            "else of the full target reached the prediction."
        )
        if sp.notes:
            speed += f" Calibration notes: {'; '.join(sp.notes)}."
    return [
        speed,
        f"CPU-time share: the server is taken as a processor-sharing server at speed "
        f"s = {share.speed_factor:.3g} of the full target's, so response times are scaled "
        "by s and throughputs by 1/s (R_full(X) = s * R_share(s * X)). Whatever else "
        "separates the share from the server it stands for is the model error in the "
        "interval, fitted on a corpus.",
    ]


def confidence(
    base: MappingPrediction,
    config: Any,
    budgets: Mapping[str, ErrorBudget],
    emulation: float,
    correction: float = 1.0,
) -> str:
    """The intervals' width and what makes it, and the model's correction, in words."""
    # One drift for every statistic: the pooled cost spread of the runs.
    drift = max((b.drift for b in budgets.values()), default=0.0)
    speed = max((b.speed for b in budgets.values()), default=0.0)
    stats = [base.stats[s] for s in config.thresholds]
    # A bound's interval is that of the level it stopped at, not of a MAT: not quoted.
    widths = [(v.ci[1] - v.ci[0]) / v.mat / 2 for v in stats if v.mat and not v.is_bound]
    if not widths and any(v.is_bound for v in stats):
        return (
            "Every MAT is a bound (the curve did not cross its threshold inside the levels "
            "run), so no interval is quoted for it; run levels that reach the threshold."
        )
    conf = (
        f"The MAT intervals are +/-{100 * max(widths):.0f}% at most: 95% prediction "
        f"intervals for a full-scale run at another time, from the spread of "
        f"{config.plan.reps} repetitions per level, the machine's drift between runs "
        f"({100 * drift:.1f}%), the share's measured speed ({100 * speed:.0f}%) and the "
        f"share model's error ({100 * emulation:.0f}%)."
        if widths
        else ""
    )
    if conf and correction != 1.0:
        conf += (
            f" The predicted throughputs are {correction:.3g} times the share's scaled ones: "
            "the share model's bias, fitted on a corpus of runs of this machine kind "
            "against the full target (prediction.json: extra.model_error)."
        )
    return conf


def cross_socket_assumption(calibration: str) -> str:
    """What the mappings' predictions assume where the full target spans sockets."""
    return (
        "Cross-socket effects (remote NIC processing, sharing between workers on two "
        "sockets, the LLC a replica sees) are modelled with the "
        f"'{calibration}' calibration; they cannot be measured on a share inside "
        "one socket."
    )


def left_out_assumption(left_out: tuple[str, ...]) -> list[str]:
    """The built-in mappings ``--mappings all`` left out: the server's CPUs cannot give them."""
    if not left_out:
        return []
    return [
        f"Not predicted: {', '.join(left_out)}, which the server's CPUs cannot give "
        "(--mappings all takes the built-in mappings they can give)."
    ]


ONE_SOCKET_ASSUMPTION = (
    "The full target lies on one socket: no traffic crosses sockets, so the "
    "mappings differ only in how the cores are split; on loopback each replica's "
    "'NIC' is an address and its socket is nominal."
)

PAIRED_FULL_RUN_NOTE = (
    "For validation only: the whole trace was also run on the full target, each "
    "repetition right before or after the scaled one (alternating), then at levels "
    "of its own search. None of it reached the predicted numbers or chose the "
    "share's levels."
)

# What the cross-socket model (extrapolate.crosssocket) assumes, for the what-if and a
# re-mapped curve.
MODEL_ASSUMPTIONS = (
    "each core is an M/G/1 processor-sharing station fed 1/n of the load (RSS and the "
    "listening socket spread connections); mean response per class D_c/(1-rho) is exact "
    "for PS whatever the demand distribution",
    "p99.9: per class, the M/M/1-PS response time's mean and variance matched by a gamma "
    "distribution; the whole is the mixture over classes and replicas",
    "cross-socket effects act on per-class demands: remote NIC processing and cross-socket "
    "data sharing add time to every request; dynamic requests' LLC-miss time shrinks when "
    "their replica sees both sockets' LLC (misses then hit the remote LLC at 1/1.6 the cost)",
    "within a socket the Universal Scalability Law inflates demands with active cores",
    "baseline 1-core demands come from the calibration (published: derived from the papers' "
    "MATs; Support's static requests cost what tcp's 1 KB file costs)",
    "load is balanced across replicas in proportion to their cores",
)

REMAPPED_SHAPE_ASSUMPTION = (
    "the measured curve's shape (mean and quantiles vs utilization) is kept; only the "
    "utilization and latency axes are re-mapped by the demand ratios"
)
