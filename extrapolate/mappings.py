"""The hook :func:`shrink.predict.predict` calls for the cross-socket step.

``shrink.pipeline`` hands :func:`extrapolate_mappings` to predict, which calls it
with the SHRiNK-scaled curve of the share (from
:func:`shrink.scaling.shrink_scaled_curve`); it gets back, per mapping, the
MATs with intervals and the predicted curve, as MappingPredictions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from extrapolate.calibration import CrossSocketModel, load_calibration
from extrapolate.remap import extrapolate_curve
from shrink.loadcurve import LoadCurve
from shrink.machine import Machine
from shrink.mat import mat
from shrink.prediction import MappingPrediction

__all__ = ["extrapolate_mappings"]


def extrapolate_mappings(
    curve: LoadCurve,
    *,
    machine: Machine,
    mappings: Sequence[str],
    thresholds: Mapping[str, float],
    calibration: str | CrossSocketModel = "published",
) -> dict[str, MappingPrediction]:
    """Each mapping's MATs (with intervals and status), curve and detail.

    ``curve`` is a share's curve, raw or already SHRiNK-scaled; ``calibration``
    is ``published``, a calibration file, or a fitted model.
    """
    model = (
        calibration if isinstance(calibration, CrossSocketModel) else load_calibration(calibration)
    )
    pred, curves = extrapolate_curve(
        curve, model, machine, mappings=list(mappings), thresholds=dict(thresholds)
    )
    out: dict[str, MappingPrediction] = {}
    for name, mp in pred.mappings.items():
        stats = {
            # A re-mapped model curve has no stalled levels: no stalled hint (measured False).
            stat: replace(sp, status=mat(curves[name], stat, sp.threshold).status, measured=False)
            for stat, sp in mp.stats.items()
        }
        detail = {**mp.detail, "reason": pred.reason if name == pred.recommended else ""}
        out[name] = MappingPrediction(stats, curves[name].summary(), detail)
    return out
