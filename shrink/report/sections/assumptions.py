"""Section 6: assumptions, calibration and provenance."""

from __future__ import annotations

from shrink.prediction import Prediction
from shrink.report.blocks import Doc

__all__ = ["add_assumptions"]


def add_assumptions(doc: Doc, pred: Prediction) -> None:
    """6. Assumptions and provenance."""
    doc.h(1, "Assumptions and calibration")
    doc.ul([str(a) for a in pred.assumptions] or ["none recorded"])
    cal = pred.calibration
    if cal:
        doc.p(f"Calibration: {cal.get('name', cal) if isinstance(cal, dict) else cal}")
    prov = pred.provenance or {}
    if prov:
        doc.h(1, "Provenance")
        doc.table(["what", "value"], [[k, f"`{v}`"] for k, v in sorted(prov.items())])
