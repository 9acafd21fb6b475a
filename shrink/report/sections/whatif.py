"""Section 5: the what-if on another machine."""

from __future__ import annotations

from pathlib import Path

from shrink.errors import printable
from shrink.prediction import Prediction
from shrink.report.blocks import Doc
from shrink.report.figures import latency_figure
from shrink.report.series import mapping_series
from shrink.report.tables import mat_table

__all__ = ["add_whatif"]


def add_whatif(
    doc: Doc, out: Path, files: dict[str, Path], whatif: Prediction, thresholds: dict[str, float]
) -> None:
    """5. What-if on another machine."""
    name = whatif.machine.get("name", "")
    doc.h(1, f"What-if: {name or 'another machine'}")
    doc.p(whatif.extra.get("summary", "Predicted with the published calibration."))
    limits = {k: float(v) for k, v in (whatif.thresholds or thresholds).items()}
    wh, wr = mat_table(whatif, limits)
    doc.table(wh, wr)
    if whatif.recommended:
        doc.note(f"On that machine: **{whatif.recommended}**. {whatif.reason}")
    ws = mapping_series(whatif)
    if ws:
        files["whatif"] = latency_figure(
            out / "whatif.png",
            ws,
            limits,
            title=f"What-if on {printable(name)}: predicted curves",
        )
        doc.img(
            "whatif.png",
            "Predicted latency against load for each mapping of the what-if machine.",
            alt="What-if curves",
        )
