"""The corpus read at the nominal speed: what a CPU-time share's prediction errs by
without a calibration (``shrink predict --no-calibrate``), the user who cannot run the
full target at all.

Each CPU-time row becomes the row of a prediction that took the share at its nominal
fraction alpha:

* a run made without a calibration keeps its own cells (its speed was alpha);
* a calibrated run's cells are its share's measured curve transformed at s = alpha
  (``fidelity_speed.decompose``'s ``nominal``, uncorrected), against the same
  measured MAT, with the same repetition and drift terms and no calibration term. It
  approximates a run made that way: its levels and its time scaling were set by the
  calibrated speed, not by alpha.

The rows then go through the same fit and leave-one-configuration-out tables as the
calibrated ones (``bench_fidelity.py --summarize DIR... --speed nominal [--fit]``).
"""

from __future__ import annotations

import math
from typing import Any

STATS = ("mean", "p999")


def nominal_rows(rows: list[dict[str, Any]], nominal: str) -> list[dict[str, Any]]:
    """``rows`` as predictions at the nominal speed; ``nominal`` is the calibration
    label of runs made without a calibration. Those, the failed runs and the other
    shares' runs (a core subset has no calibration) are kept as they are."""
    out = []
    for r in rows:
        if "error" in r or r.get("share_kind") != "cpu_time" or r.get("calibration") == nominal:
            out.append(r)
            continue
        row = {**r, "calibration": nominal, "recomputed": True}
        for stat in STATS:
            row[stat] = _cell(r.get(stat), (r.get("speeds") or {}).get(stat))
        out.append(row)
    return out


def _cell(cell: dict[str, Any] | None, speeds: dict[str, Any] | None) -> dict[str, Any] | None:
    """A calibrated run's statistic as the nominal speed predicts it (None where the run
    has no nominal MAT: a record made before it was kept)."""
    if cell is None or speeds is None or "nominal_status" not in speeds:
        return None
    measured = cell.get("measured")
    got = speeds.get("nominal")
    status = speeds["nominal_status"]
    measured_status = str(cell.get("status", "/")).split("/")[-1]
    ok = status == "ok" and measured_status == "ok" and got and measured
    return {
        **cell,
        "predicted": got,
        "ci": None,
        "covered": None,
        "status": f"{status}/{measured_status}",
        "log_error": math.log(got / measured) if ok else None,
        "applied_bias": 0.0,
        "budget": {**(cell.get("budget") or {}), "speed": 0.0},
    }
