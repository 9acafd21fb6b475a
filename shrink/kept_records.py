"""Files written as records of what ran, not measurements (a testbed's state once it
is down): a stopped command does not name them as kept.

Light on purpose (no numpy, no pandas): a stopped command's last line reads it, and a
signal that lands while numpy is being imported would otherwise turn that line into an
ImportError's traceback ("cannot load module more than once per process").
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["is_record", "record_only"]

_RECORDS: set[str] = set()


def record_only(path: str | Path) -> None:
    """Note ``path`` as a record of what ran, not a measurement (a testbed's state once
    it is down): a stopped command does not name it as kept."""
    _RECORDS.add(os.path.realpath(path))


def is_record(path: str | Path) -> bool:
    """Whether ``path`` was noted by :func:`record_only` (by either of its names)."""
    return os.path.realpath(path) in _RECORDS
