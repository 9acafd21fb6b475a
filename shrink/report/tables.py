"""The report's two tables: the MATs per mapping, and the levels of a measured curve."""

from __future__ import annotations

from typing import Any

import numpy as np

from shrink.loadcurve import Level, LoadCurve
from shrink.prediction import Prediction, StatPrediction
from shrink.report.text import STAT_NAME, bound_prefix, level_text, rate_text, seconds_text

__all__ = ["level_table", "mat_table"]


def mat_table(pred: Prediction, thresholds: dict[str, float]) -> tuple[list[str], list]:
    headers = ["mapping"]
    for s, t in thresholds.items():
        headers += [f"MAT, {STAT_NAME.get(s, s)} < {seconds_text(t)} (req/s)", "95% interval"]
    rows = []
    for name, m in pred.mappings.items():
        row = [f"**{name}**" if name == pred.recommended else name]
        for s in thresholds:
            r = m.stats.get(s) or StatPrediction(None, (None, None), thresholds[s])
            if r.status == "not_reached":
                # The threshold was never crossed: the MAT is at least the top measured load.
                ceiling = r.stalled_ceiling
                row += [
                    f"{bound_prefix(r.status)}{rate_text(r.mat)} (not reached)"
                    + (f", under {rate_text(ceiling)} \u2020" if ceiling else ""),
                    "-",
                ]
            elif r.status == "below_range":
                row += [
                    f"{bound_prefix(r.status)}{rate_text(r.mat)} (over at the lowest load)",
                    "-",
                ]
            else:
                row += [rate_text(r.mat), f"{rate_text(r.ci[0])} - {rate_text(r.ci[1])}"]
        rows.append(row)
    return headers, rows


def _errors_cell(lv: Level) -> str:
    """Failed requests, by class where counted; a level over the limit says it is excluded."""
    n = sum(r.errors for r in lv.reps)
    counts = lv.failure_counts()
    parts = [f"{k.replace('http_', '')} {v}" for k, v in counts.items() if v]
    text = str(n) + (f" ({', '.join(parts)})" if parts else "")
    return f"**{text}: failed, excluded**" if lv.failed else text


def _generator_cell(lv: Level, limits: dict[str, float], stopped: list[float] | None = None) -> str:
    """``stopped``: how long shrink itself was stopped in each repetition a stop made late."""
    stop = ""
    if stopped:
        within = "" if len(stopped) == len(lv.reps) else f" in {_count(len(stopped))}"
        stop = f"shrink itself was stopped for {seconds_text(max(stopped))}{within}"
    if lv.generator_behind:
        over = [
            STAT_NAME.get(s, s)
            for s, t in limits.items()
            if (b := lv.stall_bound(s)) is not None and b > t
        ]
        if over:
            lags = [r.send_lag_max for r in lv.reps if r.send_lag_max is not None]
            return (
                f"**stalled** (longest send lag {seconds_text(max(lags))}): excluded, but over the "
                f"{' and '.join(over)} threshold even without twice that"
            )
        if stop and len(stopped or ()) == len(lv.reps):
            return f"**{stop}: excluded**"
        return "**fell behind: excluded**" + (f" ({stop})" if stop else "")
    if lv.reps_behind:
        return (
            f"kept up in {len(lv.reps) - lv.reps_behind} of {len(lv.reps)} "
            f"repetitions (the others excluded{'; ' + stop if stop else ''})"
        )
    return "kept up"


def _count(n: int) -> str:
    return "one" if n == 1 else str(n)


def level_table(curve: LoadCurve, limits: dict[str, float]) -> tuple[list[str], list]:
    """One row per level; ``limits`` are the thresholds in the curve's own seconds."""
    headers = [
        "level",
        "offered (req/s)",
        "throughput (req/s)",
        "utilization",
        "mean",
        "p99.9",
        "errors",
        "send lag p99",
        "generator",
    ]
    from shrink.replay.selfcheck import stop_explains

    limit = curve.sweep.generator.lag_limit
    rows = []
    for lv in curve.levels:
        lag = [r.send_lag_p99 for r in lv.reps if r.send_lag_p99 is not None]
        util = lv.utilization
        rows.append(
            [
                level_text(lv.level),
                rate_text(float(np.mean([r.offered for r in lv.kept]))),
                rate_text(lv.throughput),
                "-" if util is None else f"{100 * util:.0f}%",
                seconds_text(lv.stat("mean")[0]),
                seconds_text(lv.stat("p999")[0]),
                _errors_cell(lv),
                seconds_text(max(lag)) if lag else "-",
                _generator_cell(lv, limits, _stops(lv, limit, stop_explains)),
            ]
        )
    return headers, rows


def _stops(lv: Level, limit: float | None, explains: Any) -> list[float]:
    """The times shrink itself was stopped in ``lv``'s repetitions left out as behind,
    where that stop made them late (:func:`shrink.selfchecks.stopped_levels`, each)."""
    return [
        float(r.generator_stopped)
        for r in lv.reps
        if r.generator_behind and r.generator_stopped and explains(r.generator_stopped, limit)
    ]
