"""The report's sections, one module each, in the order the report gives them.

Each ``add_*`` function appends its section's blocks to a :class:`shrink.report.blocks.Doc`
(and writes its figures, if any); :func:`shrink.report.build.write_report` calls them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shrink.loadcurve import LoadCurve
    from shrink.prediction import Prediction

__all__ = ["Measured"]


@dataclass(frozen=True)
class Measured:
    """What the checks and the curves report on: the prediction, its thresholds, and the
    curves measured (the share's, named by ``label``, and the full run's, if any)."""

    pred: Prediction
    thresholds: dict[str, float]
    curve: LoadCurve | None
    label: str
    full_run: LoadCurve | None
    # the share's curve file as a command run in the report's folder names it
    curve_file: str = "measured-curve.json"
