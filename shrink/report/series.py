"""The figure series the report draws: a measured load curve, or a prediction's mappings."""

from __future__ import annotations

import numpy as np

from shrink.errors import printable
from shrink.loadcurve import LoadCurve
from shrink.mat import bound_of
from shrink.prediction import Prediction
from shrink.report.figures import Series

__all__ = ["curve_series", "mapping_series"]


def curve_series(
    curve: LoadCurve, label: str, *, points: bool, thr_scale: float = 1.0, lat_scale: float = 1.0
) -> Series:
    """A figure series from a load curve, optionally rescaled (normalized load)."""
    vals, lo, hi = {}, {}, {}
    x = None
    for stat in ("mean", "p999"):
        s = curve.series(stat)
        x = s["throughput"] * thr_scale
        rmin, rmax = curve.rep_range(stat)
        vals[stat], lo[stat], hi[stat] = (
            s["value"] * lat_scale,
            np.asarray(rmin) * lat_scale,
            np.asarray(rmax) * lat_scale,
        )
    stalled = {}
    for stat in ("mean", "p999") if points else ():
        rows = [
            (lv.stat("throughput")[0] * thr_scale, lv.stat(stat)[0] * lat_scale, b * lat_scale)
            for lv in curve.levels
            if (b := lv.stall_bound(stat)) is not None
        ]
        if rows:
            xs, ys, bs = zip(*rows, strict=True)
            stalled[stat] = (list(xs), list(ys), list(bs))
    counts = [min((r.overall.n for r in lv.reps), default=0) for lv in curve.usable()]
    return Series(
        label, x if x is not None else [], vals, lo, hi, points=points, stalled=stalled,
        counts=counts,
    )  # fmt: skip


def mapping_series(pred: Prediction) -> list[Series]:
    out = []
    for name, m in pred.mappings.items():
        c = m.curve or {}
        if not c.get("throughput"):
            continue
        vals = {s: c[s] for s in ("mean", "p999") if s in c}
        # The band shows the repetitions' range (older files: the 95% interval).
        lo = {s: c.get(f"{s}_min", c.get(f"{s}_lo")) for s in ("mean", "p999") if s in c}
        hi = {s: c.get(f"{s}_max", c.get(f"{s}_hi")) for s in ("mean", "p999") if s in c}
        lo = {k: v for k, v in lo.items() if v is not None}
        hi = {k: v for k, v in hi.items() if v is not None}
        mats, status = {}, {}
        for s in ("mean", "p999"):
            sp = m.stats.get(s)
            # A bound is not a crossing: no MAT line for it (the table says ">= X").
            if sp is not None and sp.mat is not None and not bound_of(sp.status):
                lo_ci, hi_ci = (float("nan") if x is None else x for x in sp.ci)
                mats[s] = (float(sp.mat), float(lo_ci), float(hi_ci))
                status[s] = sp.status or "ok"
        # Escaped: a control character in a (hand-edited) mapping name has no glyph, and
        # matplotlib warned of it on the terminal, with its own source path.
        label = f"predicted: {printable(name)}"
        out.append(Series(label, c["throughput"], vals, lo, hi, mats=mats, mat_status=status))
    return out
