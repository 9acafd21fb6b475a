"""A sweep's latencies in the formats other load testers' users read.

The exact percentiles in the LoadCurve (from the per-request arrays) stay the
reference; these files are views of the same requests for other tools:

- :mod:`shrink.export.hdr`: an HdrHistogram interval log per level (one interval
  per repetition) and wrk2's ``--latency`` percentile spectrum;
- :mod:`shrink.export.csv`: Locust's ``--csv`` files (per level, per second) and
  k6's ``--out csv`` rows (one per request);
- :mod:`shrink.export.metrics`: OpenMetrics (Prometheus text) for a live view.

:class:`RecordingTarget` wraps a target and keeps, per run, the requests of its
measurement window (the same ones the LoadCurve's statistics are taken over).
"""

from __future__ import annotations

from shrink.export.samples import RecordingTarget, RunSamples, level_samples
from shrink.export.write import EXPORT_FORMATS, EXPORT_HELP, parse_exports, write_sweep_exports

__all__ = [
    "EXPORT_FORMATS",
    "EXPORT_HELP",
    "RecordingTarget",
    "RunSamples",
    "level_samples",
    "parse_exports",
    "write_sweep_exports",
]
