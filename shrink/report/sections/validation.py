"""Section 4: validation against a full-scale run, and the error texts the answer repeats."""

from __future__ import annotations

import math
from typing import Any

from shrink.report.blocks import Doc
from shrink.report.text import STAT_NAME, bound_prefix, rate_text, seconds_text
from shrink.validate import Validation

__all__ = ["add_validation", "error_text"]


def add_validation(doc: Doc, validation: Validation, *, appendix: Doc | None = None) -> None:
    """4. Validation against a full-scale run: the MATs side by side here; how the runs
    were paired, their cost per request and the distributions' distances in ``appendix``."""
    vd = validation.to_dict()
    more = appendix if appendix is not None else doc
    doc.h(1, "Validation against a full-scale run")
    vrows = []
    for s, m in vd["mats"].items():
        vrows.append(
            [
                STAT_NAME.get(s, s),
                seconds_text(m["threshold"]),
                bound_prefix(m.get("predicted_status")) + rate_text(m["predicted"]),
                bound_prefix(m.get("measured_status")) + rate_text(m["measured"]),
                error_text(m),
            ]
        )
    doc.table(["statistic", "threshold", "predicted MAT", "measured MAT", "error"], vrows)
    if not vd.get("full_quiet", True):
        doc.p(
            f"**Inconclusive:** other work took up to {100 * vd['full_other_cpu']:.0f}% of "
            "the full target's CPUs during its runs, so its measured MATs are not the "
            "server's alone."
        )
    differs = differences_text((vd.get("meta") or {}).get("differs") or {})
    if differs:
        doc.p(f"**Not like for like:** {differs}")
    if appendix is not None:
        more.h(2, "Validation details")
    if (vd.get("meta") or {}).get("paired"):
        doc.p("The full-scale runs were paired with the scaled ones, seconds apart.")
        more.p(
            "The full-scale runs were taken alongside the scaled ones: each repetition of "
            "each load level ran on the share and on the full target back to back, in "
            "alternating order, so both saw the machine at nearly the same moment. The "
            "prediction itself uses the scaled runs only."
        )
        cost = vd.get("cost_ratio")
        if cost:
            more.p(_cost_text(cost))
    else:
        doc.p(
            "The full-scale run was measured after the prediction. On a machine whose "
            "speed drifts (a VM), part of the error is that drift; predict with "
            "--paired-full-run to take the two side by side."
        )
    if vd["wasserstein"]:
        wrows = [
            [
                rate_text(w["throughput"]),
                seconds_text(w["measured_mean"]),
                seconds_text(w["predicted_mean"]),
                seconds_text(w["w1"]),
                f"{100 * w['w1_relative_to_mean']:.0f}%",
            ]
            for w in vd["wasserstein"]
        ]
        more.p(
            "Latency distributions at matched normalized loads (Wasserstein-1 distance "
            "between the predicted and measured response-time distributions):"
        )
        more.table(
            ["throughput (req/s)", "measured mean", "predicted mean", "W1", "W1 / mean"], wrows
        )


_DIFFERS = {
    "shrink_version": "shrink version",
    "mapping": "mapping",
    "machine": "machine",
    "trace": "trace source",
}


def differences_text(differs: dict[str, list[str]]) -> str:
    """What the full-scale curve records otherwise than the prediction, in words ('' when
    nothing): its error then compares two different things."""
    if not differs:
        return ""
    each = [
        f"{_DIFFERS.get(k, k)} {a!r} predicted, {b!r} measured" for k, (a, b) in differs.items()
    ]
    return (
        "the full-scale curve records other facts than the prediction ("
        + "; ".join(each)
        + "): the error may not compare like with like"
    )


def error_text(m: dict[str, Any]) -> str:
    """A validation error, honest about bounds: a MAT that is a lower bound ("not
    reached") on the predicted side makes the error a lower bound too, and so on."""
    e = m.get("error")
    if e is None or not math.isfinite(e):
        return "-"
    # +1: the error can only be larger; -1: only smaller; 0: exact.
    sides = {
        {"not_reached": 1, "below_range": -1}.get(m.get("predicted_status") or "ok", 0),
        {"not_reached": -1, "below_range": 1}.get(m.get("measured_status") or "ok", 0),
    } - {0}
    text = f"{100 * e:+.1f}%"
    if not sides:
        return text
    if len(sides) == 2:  # bounds on the same side: the error could be anything
        return f"unknown (both MATs are only bounds, {text} apart)"
    return ("at least " if sides == {1} else "at most ") + text + _hint_text(m)


def _hint_text(m: dict[str, Any]) -> str:
    """The other end of a one-sided error, from a stalled level's hint, when there is one."""
    pred, meas = m.get("predicted"), m.get("measured")
    if not pred or not meas:
        return ""
    if m.get("measured_status") == "not_reached" and m.get("measured_stalled_ceiling"):
        c = float(m["measured_stalled_ceiling"])
        return f" (at least {100 * (pred - c) / c:+.1f}% by the stalled levels' hint)"
    if m.get("predicted_status") == "not_reached" and m.get("predicted_stalled_ceiling"):
        c = float(m["predicted_stalled_ceiling"])
        return f" (at most {100 * (c - meas) / meas:+.1f}% by the stalled levels' hint)"
    return ""


def _cost_text(cost: dict[str, Any]) -> str:
    """What the paired runs' CPU per request says about the validation error."""
    r = float(cost["median"])
    more = "more" if r >= 1 else "less"
    return (
        f"Near the measured MATs the full-scale runs spent {100 * abs(r - 1):.0f}% {more} "
        "CPU per request than the share did in the paired repetition next to them "
        f"(median of {cost['pairs']} pairs, range {cost['min']:.2f}-{cost['max']:.2f}x). "
        "A server that spends x% more per request reaches a threshold at roughly x% "
        "less throughput (more, near the knee), so about that much of the error comes "
        "from the two sides' cost per request, not from scaling load and latency by "
        "alpha. Either the machine's speed moved between the two runs of a pair (a VM's "
        "host can make one 5 s window cost 40% more than the next), the two runs replayed "
        "different seconds of the trace (with time scaling the share's window spans 1/s "
        "times the trace seconds of the full one's, s its speed), or the share itself "
        "changes the cost: whatever runs in the quota's gaps, other work "
        "or, on a VM, the host's other tenants while the idle vCPU halts (steal on the "
        "share), evicts the share's caches."
    ) + _adjusted_text(cost)


def _adjusted_text(cost: dict[str, Any]) -> str:
    adj = cost.get("adjusted_error") or {}
    parts = [f"{STAT_NAME.get(s, s)} {100 * e:+.1f}%" for s, e in adj.items() if math.isfinite(e)]
    if not parts:
        return ""
    return (
        " With the measured MATs scaled by that ratio (the full target at the share's cost "
        f"per request), the errors would be {', '.join(parts)}: a rough figure, since near "
        "the knee latency grows with the cost too."
    )
