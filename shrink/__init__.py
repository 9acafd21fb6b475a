"""shrink: predict the capacity of multi-core, multi-socket web servers from
scaled-down (SHRiNK) experiments.

The public surface is listed in ``__all__``; everything else is internal.
The trace names are loaded on first use (module ``__getattr__``, PEP 562): they
bring numpy, pyarrow and pydantic, and ``shrink --help`` needs none of them.
"""

from __future__ import annotations

import typing

from shrink._version import __version__
from shrink.errors import (
    CaptureFormatError,
    ExtrapolationError,
    MeasurementError,
    NotFittedError,
    ParameterError,
    ReplayError,
    ShrinkError,
    TestbedError,
    TopologyError,
    TraceFormatError,
)

if typing.TYPE_CHECKING:
    from shrink.trace import COLUMNS, Trace, TraceInfo

__all__ = [
    "COLUMNS",
    "CaptureFormatError",
    "ExtrapolationError",
    "MeasurementError",
    "NotFittedError",
    "ParameterError",
    "ReplayError",
    "ShrinkError",
    "TestbedError",
    "TopologyError",
    "Trace",
    "TraceFormatError",
    "TraceInfo",
    "__version__",
]

# Public names defined in a module that is imported only when a name is first used.
_LAZY = {"COLUMNS": "shrink.trace", "Trace": "shrink.trace", "TraceInfo": "shrink.trace"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shrink' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
