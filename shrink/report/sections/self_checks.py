"""Section 5: can the measurement be trusted? The generator, failures, load, utilization, steal."""

from __future__ import annotations

from typing import Any

from shrink.loadcurve import LoadCurve
from shrink.prediction import Prediction
from shrink.report.blocks import Doc
from shrink.report.tables import level_table
from shrink.report.text import STAT_NAME
from shrink.scaling import latency_scale

__all__ = ["add_self_checks", "cluster_text"]


def add_self_checks(
    doc: Doc,
    pred: Prediction,
    thresholds: dict[str, float],
    measured: LoadCurve | None,
    measured_label: str,
    full_run: LoadCurve | None,
) -> None:
    """5. Can the measurement be trusted?

    One item per check (the generator, failed requests, offered load, the server
    and its CPUs), then the levels of each curve.
    """
    doc.h(1, "Self-checks")
    checks = pred.self_checks or {}
    full_checks = (pred.full_run or {}).get("self_checks") or {}
    items = [
        *_generator_items(checks),
        *_failure_items(checks),
        *_server_items(checks, full_checks),
        *_steal_items(checks, full_checks),
        *_host_items(checks),
    ]
    if checks.get("generator_capacity_note"):
        items.append(checks["generator_capacity_note"])
    if items:
        doc.ul(items)
    if measured is not None:
        doc.p(
            f"Levels {measured_label} (throughput, mean and p99.9: the median over the "
            "repetitions that kept up):"
        )
        scale = latency_scale(measured)
        h, r = level_table(measured, {s: t / scale for s, t in thresholds.items()})
        doc.table(h, r)
    if full_run is not None:
        doc.p("Levels of the full-scale run:")
        h, r = level_table(full_run, thresholds)
        doc.table(h, r)


def _generator_items(checks: dict[str, Any]) -> list[str]:
    """Whether the load generator kept to its schedule, and where it ran."""
    items = []
    if "generator_kept_up" in checks:
        items.append(
            "Load generator kept to its schedule at every level used: "
            + (
                "**yes**"
                if checks["generator_kept_up"]
                else f"**no** - levels excluded: {checks.get('levels_behind')}"
            )
            + (
                f" ({checks['repetitions_excluded']} repetition(s) where it fell behind "
                "were left out)"
                if checks.get("repetitions_excluded")
                else ""
            )
            + _stalled_text(checks.get("levels_stalled_over") or {})
            + (
                f" (replay engine: {checks['generator_engine']})"
                if checks.get("generator_engine")
                else ""
            )
        )
    if checks.get("generator_cluster"):
        items.append(cluster_text(checks["generator_cluster"]))
    return items


def _failure_items(checks: dict[str, Any]) -> list[str]:
    """Whether every level used was answered whole, and the failures counted."""
    if "levels_failed" not in checks:
        return []
    totals = checks.get("failures") or {}
    limit = 100 * float(checks.get("failure_limit") or 0.001)
    return [
        "Requests answered whole with a 2xx/3xx status at every level used: "
        + (
            "**yes**"
            if not checks["levels_failed"]
            else f"**no** - levels excluded (failures over {limit:g}% of their requests): "
            f"{checks['levels_failed']}"
        )
        + (
            " (failures over all runs: "
            + ", ".join(f"{k.replace('http_', '')} {v}" for k, v in totals.items())
            + ")"
            if any(totals.values())
            else ""
        )
    ]


def _server_items(checks: dict[str, Any], full_checks: dict[str, Any]) -> list[str]:
    """Offered load, the utilization reached, and other work on the share's CPUs."""
    items = []
    if checks.get("offered_monotone") is not None:
        items.append(_offered_text(checks, full_checks))
    if checks.get("max_utilization") is not None:
        reached = (
            "saturated: the knee was measured"
            if checks.get("utilization_reached")
            else "**the server was not driven to saturation**"
        )
        items.append(
            f"Highest utilization of the share reached: "
            f"{100 * checks['max_utilization']:.0f}% ({reached})."
        )
    if checks.get("max_other_cpu") is not None:
        other = 100 * float(checks["max_other_cpu"])
        items.append(
            f"Other work on the share's CPUs (kernel threads, softirqs, other processes): "
            f"up to {other:.0f}% of a CPU in a window"
            + (
                ". **The share was not quiet**: on a CPU-time share whatever runs in the "
                "quota's gaps evicts the server's caches and slows it more than the full "
                "server; rerun on a quiet machine."
                if other > 10
                else " (quiet)."
            )
        )
    return items


def _steal_items(checks: dict[str, Any], full_checks: dict[str, Any]) -> list[str]:
    """Steal time (a VM's host taking the CPU) on the server's and the generator's CPUs."""
    items = []
    steals = [
        f"{100 * float(c['max_steal']):.0f}% {what}"
        for c, what in ((checks, "during the scaled runs"), (full_checks, "during the full runs"))
        if c.get("max_steal") is not None
    ]
    if steals:
        items.append(
            "Steal time on the server's CPUs (the VM's host running something else), worst "
            f"window: {', '.join(steals)}. It slows whichever runs it hits, and pairing "
            "cannot cancel what hits one side only."
        )
    gen = [
        float(c["max_generator_steal"])
        for c in (checks, full_checks)
        if c.get("max_generator_steal") is not None
    ]
    if gen:
        items.append(
            f"Steal on the load generator's CPU, worst window: {100 * max(gen):.0f}%. "
            "A vCPU the host takes away stalls the generator: the sends it owes go out "
            "late and bunched, and the level is flagged behind."
        )
    return items


def _host_items(checks: dict[str, Any]) -> list[str]:
    """How far the host's speed moved over the sweep (shrink.busyspeed.host_drift)."""
    if checks.get("host_spread") is None:
        return []
    lo, hi = checks["host_capacity_range"]
    text = (
        f"The full target's capacity, measured busy {checks['host_checks']} times over the "
        f"sweep: {lo:,.0f}-{hi:,.0f} req/s (max / min {checks['host_spread']:.2f})"
    )
    if checks.get("host_steady"):
        return [text + ": the host held steady."]
    return [
        text + ". **The host's speed moved during the run**: a MAT measured on it, the "
        "prediction's and a full-scale run's alike, is only as sure as that spread (the "
        "interval carries it). Rerun when the host is steadier."
    ]


def cluster_text(cluster: dict[str, Any]) -> str:
    """One self-check line per Ray generator slot: where it ran, what was lost, its clock."""
    slots = cluster.get("slots") or []
    per = "; ".join(
        f"slot {s['slot']} on {s['node']}: {s['runs']} run(s)"
        + (f", **lost in {s['lost']}** (those levels left out)" if s.get("lost") else "")
        + f", clock offset up to {1e3 * float(s['max_clock_offset']):.2f} ms"
        for s in slots
    )
    return (
        f"Load generators on a Ray cluster ({cluster.get('address')}, "
        f"{cluster.get('generators')} slot(s)): " + (per or "no run reported its slots") + "."
    )


def _stalled_text(stalled: dict[str, list[float]]) -> str:
    """The excluded levels that still count as over a threshold, per statistic."""
    if not stalled:
        return ""
    parts = [
        f"{', '.join(f'{x:.4g}' for x in levels)} ({STAT_NAME.get(s, s)})"
        for s, levels in stalled.items()
    ]
    return (
        ". Of the excluded levels, the generator only stalled at "
        f"{'; '.join(parts)}, and there the latency stays over the threshold even with "
        "twice the longest send lag taken off: the crossing lies below it (hollow "
        "markers in the figure, with a bar down to that bound; not used for a MAT)."
    )


def _linear_verdict(c: dict[str, Any]) -> str:
    """Whether the offered load followed the level, and what to check when it did not."""
    ok = c.get("offered_linear")
    if ok is None:
        return ""
    tol = 100 * c.get("offered_linear_tolerance", 0.1)
    if ok:
        return f" (linear: within {tol:g}%)"
    worst = c.get("offered_worst_level")
    at = "" if worst is None else f", furthest at level {worst:g}"
    return (
        f" (**not linear**: more than {tol:g}%{at}; the load did not follow the level "
        "there: check that the generator kept up, and that the trace window the "
        "levels loop holds enough sessions (a longer trace or --skip))"
    )


def _offered_text(checks: dict[str, Any], full: dict[str, Any]) -> str:
    """Offered load against the level: a controlled load rises with it, ~linearly."""
    parts = []
    for c, what in ((checks, "scaled"), (full, "full-scale")):
        if c.get("offered_monotone") is None:
            continue
        rises = (
            "rises with the level" if c["offered_monotone"] else "**does not rise with the level**"
        )
        parts.append(
            f"{what} runs: {rises}, {c['offered_per_level']:,.0f} req/s per unit of level, "
            f"within {100 * c['offered_linearity']:.1f}% of linear{_linear_verdict(c)}"
        )
    return (
        "Offered load (every level loops the same window of the trace at level times its "
        "rate): " + "; ".join(parts) + "."
    )
