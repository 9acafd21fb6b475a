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
    doc: Doc,
    pred: Prediction,
    thresholds: dict[str, float],
    validation: Validation | None,
    *,
    appendix: Doc | None = None,
) -> None:
    """1. The answer: which mapping, its MATs with their intervals, and the validation's
    errors when there is one; the dagger's explanation goes to ``appendix``."""
    rec = pred.recommended
    doc.h(1, "Answer")
    if rec:
        doc.note(f"Deploy **{rec}**. {pred.reason}")
    elif pred.reason:
        doc.note(pred.reason[0].upper() + pred.reason[1:])
    headers, rows = mat_table(pred, thresholds)
    doc.p(
        f"Maximum achievable throughput (MAT) of {pred.target_description or 'the whole machine'}"
        " per replica mapping: the highest throughput at which the statistic stays under "
        "its threshold."
    )
    doc.table(headers, rows)
    if _any_stalled(pred, thresholds):
        where = appendix if appendix is not None else doc
        if appendix is not None:
            doc.p("\u2020 Only a bound, with a hint where the crossing lies: see the appendix.")
            where.h(2, "Levels where the generator stalled")
        where.p(STALLED_NOTE)
    if pred.confidence_summary:
        doc.p(pred.confidence_summary)
    if validation is not None:
        text = _validation_text(validation)
        if text:
            doc.p(text)


def _validation_text(validation: Validation) -> str:
    """One sentence: the validation's errors and which intervals held the measured MAT."""
    vmats = validation.to_dict()["mats"]
    said = {
        STAT_NAME.get(s, s): error_text(vmats[s])
        for s, e in validation.mat_error.items()
        if e is not None and math.isfinite(e) and s in vmats
    }
    # Two bounds on the same side say nothing of the error: not 'off by ... unknown'.
    errs = [f"{s} {t}" for s, t in said.items() if not t.startswith("unknown")]
    unknown = [f"for {s} the error is {t}" for s, t in said.items() if t.startswith("unknown")]
    held = [STAT_NAME.get(st, st) for st, c in validation.covered.items() if c]
    missed = [STAT_NAME.get(st, st) for st, c in validation.covered.items() if c is False]
    parts = []
    if errs:
        parts.append(f"the predicted MATs were off by {', '.join(errs)}")
    if unknown:
        parts.extend(unknown)
    if held or missed:
        parts.append(
            "the 95% intervals held the measured MAT for "
            + (", ".join(held) or "none")
            + ("; **missed** for " + ", ".join(missed) if missed else "")
        )
    if not parts:
        return ""
    return "Checked against a full-scale run: " + "; ".join(parts) + " (see Validation)."


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
