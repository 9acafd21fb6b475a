"""shrink: predict the capacity of multi-core, multi-socket web servers from
scaled-down (SHRiNK) experiments.

The public surface is listed in ``__all__``; everything else is internal.
"""

from __future__ import annotations

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
