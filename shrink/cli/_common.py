"""Helpers shared by the CLI modules: error reporting and JSON output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from shrink.errors import ShrinkError

console = Console(stderr=True)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn shrink's errors into one clear line on stderr and exit code 1."""
    try:
        yield
    except ShrinkError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt as exc:
        # Say only what exists: a command that kept files lists them on the exception.
        kept = [str(k) for k in getattr(exc, "kept", [])]
        console.print(
            "[yellow]interrupted[/]: "
            + (f"kept {', '.join(kept)}" if kept else "nothing measured was written"),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=130) from None


def echo_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=_default) + "\n")


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def parse_duration_option(text: str, name: str) -> float:
    """An option's duration in seconds: ``2s``, ``500ms``, ``1m`` (one spelling everywhere)."""
    from shrink.checks import parse_duration

    return parse_duration(text, name)


def plural(n: int, noun: str) -> str:
    """``1 session``, ``2 sessions``, ``1,328 requests``: counts with thousands separators."""
    if n == 1:
        return f"{n:,} {noun}"
    return f"{n:,} {noun}es" if noun.endswith(("s", "x", "ch", "sh")) else f"{n:,} {noun}s"


def fmt_number(x: float, digits: int = 4) -> str:
    """One way to write a measured number: thousands separators, never ``5.304e+04``.

    ``digits`` significant digits, but never fewer than the integer part's.
    """
    import math

    if not math.isfinite(x):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{x:,.0f}"
    magnitude = math.floor(math.log10(abs(x))) + 1
    decimals = max(digits - magnitude, 0)
    return f"{x:,.{decimals}f}"


STATS = ("mean", "p50", "p90", "p99", "p999")
_STAT_ALIASES = {"p99.9": "p999", "p50.0": "p50", "p90.0": "p90", "p99.0": "p99", "median": "p50"}


def stat_name(text: str) -> str:
    """A statistic's name as the files spell it: ``p99.9`` (as users write it) is ``p999``."""
    t = text.strip().lower()
    return _STAT_ALIASES.get(t, t)


def stat_thresholds(text: str) -> str:
    """``mean=5ms,p99.9=500ms`` with each statistic spelled as the files spell it."""
    parts = []
    for part in text.split(","):
        stat, eq, value = part.partition("=")
        parts.append(stat_name(stat) + eq + value if eq else part)
    return ",".join(parts)


def stat_label(stat: str) -> str:
    """How a statistic is written for people: ``p999`` is ``p99.9``."""
    return "p99.9" if stat == "p999" else stat
