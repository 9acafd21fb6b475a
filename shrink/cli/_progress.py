"""Progress off a terminal: one line per step, where a bar would show nothing.

A rich progress bar drawn to a pipe, a log or CI prints nothing until the end,
so a sweep of minutes looked hung. The lines go to stderr, so that ``--json``
keeps stdout for the JSON.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from shrink.cli._common import console

Progress = Callable[[str, int, int], None]


def on_terminal() -> bool:
    """Whether a progress bar can be seen: stdout and the (stderr) console are terminals."""
    return sys.stdout.isatty() and console().is_terminal


def line_progress(title: str, unit: str = "") -> Progress:
    """A progress callback that writes ``TITLE: WHAT  [STEP/TOTAL UNIT, ELAPSED s]``."""
    t0 = time.monotonic()
    unit = f" {unit}" if unit else ""

    def line(what: str, step: int, total: int) -> None:
        elapsed = time.monotonic() - t0
        prefix = f"{title}: " if title else ""
        sys.stderr.write(f"{prefix}{what}  [{step}/{total}{unit}, {elapsed:,.0f} s]\n")
        sys.stderr.flush()

    return line
