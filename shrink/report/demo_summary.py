"""The demo's last lines, in words, from the summary it writes as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["closing_lines"]


def _rate(x: object) -> str:
    return f"{x:,.0f} req/s" if isinstance(x, int | float) else "none"


def closing_lines(summary: dict[str, Any], out: Path) -> list[str]:
    """Each MAT predicted against measured, and where to read more: the demo ended on a
    wall of JSON, whose last field named report.md where the README points to report.html."""
    lines = [
        f"{stat} MAT: predicted {_rate(p)}, measured {_rate(summary['measured'].get(stat))}"
        for stat, p in summary["predicted"].items()
    ]
    kept_up = "yes" if summary.get("generator_kept_up") else "no"
    lines.append(f"took {summary['seconds'] / 60:.1f} min; the load generator kept up: {kept_up}")
    lines.append(
        f"report: {summary['report']} (and {summary['report_md']}); every figure above: "
        f"{out / 'demo-summary.json'}"
    )
    return lines
