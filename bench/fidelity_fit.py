"""The share model's error, fitted on the corpus's runs and judged leaving one
configuration out (``bench_fidelity.py --summarize DIR... [--fit]``).

A run's log error is log(predicted / measured MAT) of its uncorrected prediction. The
model predicts it as ``bias - slope * x``, x the run's content term
(``shrink.scaling.content_term``: its dynamic work's part times ln(1 / alpha)):

* a CPU-time share whose runs have a content term is fitted the slope alone, through
  the origin: a share at alpha 1, or one serving static pages only, is the server it
  stands for;
* any other share (a core subset, or runs recorded without their content) is fitted a
  constant bias, the mean log error.

Either needs two configurations or more (one cannot be judged leaving one out): else
0. The spread is the variance of the log errors about the model beyond what each run's
repetitions, drift and calibration noise explain. Its degrees of freedom are the
conclusive runs less the one parameter fitted.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from shrink.scaling import content_term
from shrink.uncertainty import ErrorBudget, interval

STATS = ("mean", "p999")


class Model(NamedTuple):
    """A fitted model error: the log error ``bias - slope * x``, ``sigma`` about it."""

    bias: float = 0.0
    slope: float = 0.0
    sigma: float = 0.0

    def at(self, cell: dict[str, Any]) -> float:
        """The bias at ``cell``'s content term."""
        return self.bias - self.slope * cell.get("x", 0.0)


def content_x(row: dict[str, Any]) -> float:
    """A run's content term: 0 but for a CPU-time share whose dynamic part was kept."""
    if row.get("share_kind") != "cpu_time":
        return 0.0
    return content_term(float(row.get("alpha") or 1.0), row.get("dynamic_share"))


def _budget(b: dict[str, Any], sigma: float = 0.0, dof: int | None = None) -> ErrorBudget:
    """A run's recorded error budget with the model error ``sigma`` of ``dof`` in place
    of the one it ran with: the prediction's own interval (shrink.uncertainty)."""
    return ErrorBudget(
        b.get("repetition", 0.0), b.get("drift", 0.0), sigma, b.get("speed", 0.0),
        int(b.get("dof") or 0) or None, dof,
    )  # fmt: skip


def _measured_var(b: dict[str, Any]) -> float:
    """The variance the measured terms of a budget give (all but the model error)."""
    return _budget(b).total ** 2


def fit_dof(pairs: list[tuple[str, dict]], fitted: bool) -> int | None:
    """The model error's degrees of freedom: its conclusive runs (a run's two statistics
    are not independent), less one for a fitted parameter."""
    dof = len({c["run"] for _, c in pairs}) - int(fitted)
    return dof if dof > 0 else None


def _pairs(rows: list[dict[str, Any]], kind: str | None = None) -> list[tuple[str, dict]]:
    """Conclusive (configuration, statistic cell) pairs, of share ``kind`` if given; each
    cell with its run and content term ``x``."""
    out = []
    for r in rows:
        if "error" in r or (kind is not None and r.get("share_kind") != kind):
            continue
        for s in STATS:
            c = r.get(s)
            if c and c["status"] == "ok/ok" and c["log_error"] is not None:
                out.append((r["config"], {**c, "run": r["dir"], "x": content_x(r)}))
    return out


def fit_bias(pairs: list[tuple[str, dict]]) -> float:
    """A constant bias: the mean uncorrected log error (0 without pairs)."""
    return statistics.fmean(c["log_error"] for _, c in pairs) if pairs else 0.0


def fit_slope(pairs: list[tuple[str, dict]]) -> float | None:
    """The content term's slope through the origin (least squares), None when no pair
    has a content term."""
    sxx = sum(c["x"] ** 2 for _, c in pairs)
    if sxx <= 0:
        return None
    return -sum(c["x"] * c["log_error"] for _, c in pairs) / sxx


def fit_sigma(pairs: list[tuple[str, dict]], model: Model | float = 0.0) -> float:
    """The model error's spread: the log errors' variance about ``model`` (or a constant
    bias) beyond the measured terms' (at least 0)."""
    if not pairs:
        return 0.0
    m = model if isinstance(model, Model) else Model(bias=model)
    excess = [(c["log_error"] - m.at(c)) ** 2 - _measured_var(c["budget"]) for _, c in pairs]
    return math.sqrt(max(0.0, statistics.fmean(excess)))


def fit_model(pairs: list[tuple[str, dict]]) -> Model:
    """The model error over ``pairs`` (the module docstring's rules)."""
    if len({n for n, _ in pairs}) < 2:
        return Model(sigma=fit_sigma(pairs))
    slope = fit_slope(pairs)
    model = Model(bias=fit_bias(pairs)) if slope is None else Model(slope=slope)
    return model._replace(sigma=fit_sigma(pairs, model))


def corrected(cell: dict[str, Any], bias: float) -> float:
    """The cell's predicted MAT as the share model with ``bias`` corrects it."""
    return cell["measured"] * math.exp(cell["log_error"] - bias)


def cell_interval(
    cell: dict[str, Any], bias: float, sigma: float, dof: int | None = None
) -> tuple[float, float]:
    """The 95% interval of a cell corrected by ``bias``, with model error ``sigma`` of
    ``dof`` degrees of freedom."""
    return interval(corrected(cell, bias), _budget(cell["budget"], sigma, dof))


def leave_one_out(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per configuration: the model error fitted without it, and its cells' intervals."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({r.get("share_kind") for r in rows if "error" not in r} - {None}):
        pairs = _pairs(rows, kind)
        for name in sorted({n for n, _ in pairs}):
            others = [p for p in pairs if p[0] != name]
            model = fit_model(others)
            dof = fit_dof(others, fitted=True)
            cells = []
            for n, c in pairs:
                if n != name:
                    continue
                bias = model.at(c)
                lo, hi = cell_interval(c, bias, model.sigma, dof)
                cells.append(
                    {
                        "stat": c["stat"],
                        "covered": lo <= c["measured"] <= hi,
                        "half_width": (hi / lo) ** 0.5 - 1,
                        "error": corrected(c, bias) / c["measured"] - 1,
                    }
                )
            out[name] = {
                "bias": model.bias, "slope": model.slope, "sigma": model.sigma,
                "n_fit": len(others), "cells": cells,
            }  # fmt: skip
    return out
