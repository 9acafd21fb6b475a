"""The hook :func:`shrink.predict.predict` calls for the cross-socket step.

``shrink.pipeline`` hands :func:`extrapolate_mappings` to predict, which calls it
with the SHRiNK-scaled curve of the share (from
:func:`shrink.scaling.shrink_scaled_curve`); it gets back, per mapping, the
MATs with intervals and the predicted curve, in the prediction JSON's form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extrapolate.calibration import CrossSocketModel, load_calibration
from extrapolate.remap import extrapolate_curve
from shrink.loadcurve import LoadCurve
from shrink.machine import Machine
from shrink.mat import mat

__all__ = ["extrapolate_mappings"]


def extrapolate_mappings(
    curve: LoadCurve,
    *,
    machine: Machine,
    mappings: Sequence[str],
    thresholds: Mapping[str, float],
    calibration: str | CrossSocketModel = "published",
) -> dict[str, dict[str, Any]]:
    """``{mapping: {"mean": {...}, "p999": {...}, "curve": {...}, "detail": {...}}}``.

    ``curve`` is a share's curve, raw or already SHRiNK-scaled; ``calibration``
    is ``published``, a calibration file, or a fitted model.
    """
    model = (
        calibration if isinstance(calibration, CrossSocketModel) else load_calibration(calibration)
    )
    pred, curves = extrapolate_curve(
        curve, model, machine, mappings=list(mappings), thresholds=dict(thresholds)
    )
    out: dict[str, dict[str, Any]] = {}
    for name, mp in pred.mappings.items():
        d: dict[str, Any] = {}
        for stat, sp in mp.stats.items():
            status = mat(curves[name], stat, sp.threshold).status
            d[stat] = {**sp.to_dict(), "status": status}
        d["curve"] = curves[name].summary()
        d["detail"] = {**mp.detail, "reason": pred.reason if name == pred.recommended else ""}
        out[name] = d
    return out
