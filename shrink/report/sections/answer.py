"""Section 1: the answer: which mapping to deploy, its MATs, and how sure the tool is."""

from __future__ import annotations

import math

from shrink.prediction import Prediction
from shrink.report.blocks import Doc
from shrink.report.sections.validation import error_text
from shrink.report.tables import mat_table
from shrink.report.text import STAT_NAME
from shrink.validate import Validation

__all__ = ["STALLED_NOTE", "add_answer"]


def add_answer(
    doc: Doc, pred: Prediction, thresholds: dict[str, float], validation: Validation | None
) -> None:
    """1. The answer: which mapping, its MATs, how sure."""
    rec = pred.recommended
    doc.h(1, "Answer")
    if rec:
        doc.note(f"Deploy **{rec}**. {pred.reason}")
    elif pred.reason:
        doc.note(pred.reason[0].upper() + pred.reason[1:])
    headers, rows = mat_table(pred, thresholds)
    doc.p(
        f"Predicted maximum achievable throughput (MAT) of the full target "
        f"({pred.target_description or 'the whole machine'}) for each replica "
        "mapping: the highest throughput at which the statistic stays under its threshold."
    )
    doc.table(headers, rows)
    if _any_stalled(pred, thresholds):
        doc.p(STALLED_NOTE)
    sure = pred.confidence_summary
    if sure:
        doc.p(sure)
    speed = _speed_text(pred)
    if speed:
        doc.p(speed)
    if validation is not None:
        vmats = validation.to_dict()["mats"]
        held = [STAT_NAME.get(st, st) for st, c in validation.covered.items() if c]
        missed = [STAT_NAME.get(st, st) for st, c in validation.covered.items() if c is False]
        if held or missed:
            doc.p(
                "The intervals held the measured MAT for: "
                + (", ".join(held) or "none")
                + ("; **missed** for: " + ", ".join(missed) if missed else "")
                + "."
            )
        errs = [
            f"{STAT_NAME.get(s, s)} {error_text(vmats[s])}"
            for s, e in validation.mat_error.items()
            if e is not None and math.isfinite(e) and s in vmats
        ]
        if errs:
            doc.p(
                "Checked against a full-scale run of the whole trace: the predicted MATs "
                f"were off by {', '.join(errs)} (details under Validation)."
            )
    other = (pred.self_checks or {}).get("max_other_cpu")
    if other is not None and other > 0.10:
        doc.note(
            f"Caution: other work took up to {100 * other:.0f}% of a CPU on the share's CPUs "
            "while it was measured; see the self-checks."
        )


STALLED_NOTE = (
    "\u2020 No level that kept to its schedule crossed the threshold: the levels above "
    "the highest of them ran while the load generator stalled (the VM's host took its "
    "CPU; it was not short of CPU itself), so they are left out of every statistic and "
    "the MAT is only a lower bound. They still say where the crossing lies: a stall of "
    "L seconds delays a response by at most about 2L (L before the send, L before the "
    "reply is read), and at the throughput named the latency stays over the threshold "
    "with twice the longest send lag taken off. That is a hint, not a measurement; "
    "rerun on a quieter host for the MAT itself."
)


def _any_stalled(pred: Prediction, thresholds: dict[str, float]) -> bool:
    return any(
        m.stats[s].stalled_ceiling
        for m in pred.mappings.values()
        for s in thresholds
        if s in m.stats
    )


def _speed_text(pred: Prediction) -> str:
    """The CPU-time share's speed: nominal and measured (or assumed), and what it cost."""
    share = pred.share
    if share is None or share.kind != "cpu_time":
        return ""
    sp = share.speed
    if sp is None or sp.method == "nominal":
        return (
            f"Share speed: {share.cpu_fraction:g} of the full target's, **assumed** (its "
            "nominal CPU-time fraction, not measured)."
        )
    return (
        f"Share speed: nominal {sp.nominal:g}, measured {sp.effective:.3g} ({sp.method}, "
        f"{sp.cost_s:.1f} s of runs); the scaling uses the measured speed."
    )
