"""The share's side of the speed read again on the sweep's own repetitions near its
knee (:func:`knee_speed`), where its MATs are read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from shrink.loadcurve import Level, pooled_capacity
from shrink.share import ShareSpeed

# After the sweep, the share's side is read again on the sweep's own repetitions whose
# utilization is in KNEE_BAND (near its knee, not saturated: X / U holds there), when
# there are MIN_KNEE_REPS or more: many more requests than the calibration's share
# runs, taken at the times the MATs were, so the host's drift moves both alike.
KNEE_BAND = (0.5, 0.95)
MIN_KNEE_REPS = 2
LIGHT_NOTE = (
    "the share was read under its knee and no repetition of the sweep ran near it: a "
    "share read light pays the quota's gaps, so its speed likely errs low and the "
    "prediction high"
)


def knee_speed(speed: ShareSpeed | None, levels: Iterable[Level]) -> ShareSpeed | None:
    """``speed`` with its share side read on the share's own sweep (its ``levels``): all the
    requests over all the CPU of the repetitions whose utilization is in KNEE_BAND and
    whose generator kept up, over the full target's calibrated capacity. The share's
    MATs are read on those same runs, so a slow spell of the host moves the MAT and
    the speed together. Unchanged without a calibrated full capacity, with fewer than
    MIN_KNEE_REPS such repetitions (one is enough where the calibration could only read
    the share under the band: its cheap pages at the generator's MAX_RATE), or if the
    speed read would not be in (0, 1]."""
    if speed is None or speed.method != "calibrated" or not speed.full_capacity:
        return speed
    pooled = pooled_capacity((r for lv in levels for r in lv.reps), KNEE_BAND)
    # A share read light pays the quota's gaps on nearly every request: its speed errs
    # low, and one repetition near the knee is far nearer the truth (on a 1 KiB file
    # the light share read 0.048, the sweep's one repetition at 51% busy 0.24).
    light = bool(speed.share_runs) and all(
        (r.get("utilization") or 0.0) < KNEE_BAND[0] for r in speed.share_runs[-2:]
    )
    if pooled is None or pooled[1] < (1 if light else MIN_KNEE_REPS):
        if light and pooled is None and LIGHT_NOTE not in speed.notes:
            return replace(speed, notes=(*speed.notes, LIGHT_NOTE))
        return speed
    cap, n_reps = pooled
    effective = cap / speed.full_capacity
    if not 0 < effective <= 1:
        return speed
    knee = {
        "capacity": cap,
        "repetitions": n_reps,
        "utilization_band": list(KNEE_BAND),
        "calibration_capacity": speed.effective * speed.full_capacity,
    }
    return replace(speed, effective=float(effective), share_knee=knee)
