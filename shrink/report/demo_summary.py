"""The demo's last lines, in words, from the summary it writes as JSON."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["closing_lines", "intro_line"]


# A MAT that is only a bound (the curve did not cross its threshold inside the levels):
# "lower", the MAT is at least the value; "upper", below it (shrink.mat.BOUNDS).
_BOUND_WORDS = {"lower": "at least ", "upper": "below "}


def _rate(x: object, bound: object = None) -> str:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return "none"
    return f"{_BOUND_WORDS.get(str(bound), '')}{x:,.0f} req/s"


def closing_lines(summary: dict[str, Any], out: Path) -> list[str]:
    """Each MAT predicted against measured, and where to read more: the demo ended on a
    wall of JSON, whose last field named report.md where the README points to report.html."""
    said = {
        side: (summary.get(side) or {}, summary.get(f"{side}_bound") or {})
        for side in ("predicted", "measured")
    }
    lines = [
        f"{stat} MAT: "
        + ", ".join(f"{side} {_rate(v.get(stat), b.get(stat))}" for side, (v, b) in said.items())
        for stat in said["predicted"][0]
    ]
    kept_up = "yes" if summary.get("generator_kept_up") else "no"
    lines.append(f"took {summary['seconds'] / 60:.1f} min; the load generator kept up: {kept_up}")
    lines.append(
        f"report: {summary['report']} (and {summary['report_md']}); every figure above: "
        f"{out / 'demo-summary.json'}"
    )
    return lines


def intro_line(alpha: float, sweep_budget_s: float, validation_budget_s: float, out: Path) -> str:
    """The demo's first lines: what it will do, and about how long it takes."""
    # Set-up and the report fit in about half a minute beside the two budgets.
    minutes = (sweep_budget_s + validation_budget_s + 30.0) / 60.0
    return (
        f"shrink demo: predicts the capacity of one core of this machine from {alpha:g} of a "
        f"Support-like trace on a {100 * alpha:g}% CPU-time share of it, then validates the "
        f"prediction against the whole core. About {minutes:.0f} minutes: the share's sweep "
        "with the validation's runs beside it (the prediction reads only the share's), the "
        f"validation's own levels, the report. Output: {out / 'report.html'}."
    )
