"""HdrHistogram interval logs and wrk2's percentile spectrum, from the exact samples.

Latencies are recorded in microseconds with 3 significant digits (HdrHistogram's
precision: a recorded value is within 0.1% of the latency, and 1 us). Each log
line is one repetition of one level, tagged ``level=L`` (log format 1.3, as
HdrHistogram's Java ``HistogramLogWriter`` writes tagged intervals); the
``hdrhistogram`` package's ``HistogramLogReader`` reads it back.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram

from shrink.atomic import own_dir, write_text
from shrink.export.samples import RunSamples

SIGNIFICANT_DIGITS = 3
LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: longer than any request timeout
US_PER_MS = 1000.0


def histogram(latency_s: np.ndarray) -> HdrHistogram:
    """An HdrHistogram (microseconds) of latencies given in seconds."""
    h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
    us = np.clip(np.rint(np.asarray(latency_s, dtype=np.float64) * 1e6), LOWEST_US, HIGHEST_US)
    values, counts = np.unique(us.astype(np.int64), return_counts=True)
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        h.record_value(v, c)
    return h


def level_tag(level: float) -> str:
    return f"level={level:g}"


def write_interval_log(path: Path, runs: Sequence[RunSamples], *, comment: str = "") -> Path:
    """One interval per repetition, stamped with its window's wall-clock times."""
    base = min((r.epoch for r in runs), default=0.0)
    lines = [
        "#[Histogram log format version 1.3]",
        f"#[StartTime: {base:.3f} (seconds since epoch)]",
        f"#[BaseTime: {base:.3f} (seconds since epoch)]",
    ]
    if comment:
        lines.append(f"#{comment}")
    lines.append(
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'
    )
    for r in runs:
        h = histogram(r.latency)
        start = r.epoch + r.window[0] - base
        length = r.window[1] - r.window[0]
        payload = h.encode().decode("ascii")
        lines.append(
            f"Tag={level_tag(r.level)},{start:.3f},{length:.3f},"
            f"{h.get_max_value() / US_PER_MS:.3f},{payload}"
        )
    write_text(path, "\n".join(lines) + "\n")
    return path


def percentile_spectrum(latency_s: np.ndarray, title: str) -> str:
    """wrk2's ``--latency`` text: the summary percentiles, then the detailed spectrum (ms)."""
    h = histogram(latency_s)
    out = [f"  {title}", "  Latency Distribution (HdrHistogram - Recorded Latency)"]
    for p in (50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0):
        out.append(f" {p:7.3f}%  {h.get_value_at_percentile(p) / US_PER_MS:.3f}ms")
    out.append("")
    out.append("  Detailed Percentile spectrum:")
    buf = io.BytesIO()
    if h.get_total_count():
        h.output_percentile_distribution(buf, US_PER_MS, ticks_per_half_distance=5)
    out.append(_footer_in_ms(buf.getvalue().decode("ascii").rstrip("\n"), h))
    out.append("----------------------------------------------------------")
    return "\n".join(out) + "\n"


def _footer_in_ms(text: str, h: HdrHistogram) -> str:
    """The spectrum with its footer's standard deviation in milliseconds, as its mean.

    The ``hdrhistogram`` package scales the footer's mean and max by the unit ratio but
    writes the standard deviation unscaled (microseconds here): 1000 times too large
    beside a mean in milliseconds.
    """
    return _STDDEV.sub(lambda m: f"{m.group(1)}{h.get_stddev() / US_PER_MS:12.3f}", text)


_STDDEV = re.compile(r"(StdDeviation\s*=\s*)([0-9.eE+-]+|nan|inf)")


def write_hdr(folder: Path, runs: Sequence[RunSamples]) -> list[Path]:
    """``level-L.hlog`` (interval log) and ``level-L.hgrm`` (spectrum) for each level."""
    own_dir(folder)
    written: list[Path] = []
    for level in sorted({r.level for r in runs}):
        mine = [r for r in runs if r.level == level]
        name = f"level-{level:g}"
        written.append(
            write_interval_log(
                folder / f"{name}.hlog",
                mine,
                comment=f"shrink sweep, {level_tag(level)}: one interval per repetition, us",
            )
        )
        lat = np.concatenate([r.latency for r in mine]) if mine else np.array([])
        text = percentile_spectrum(lat, f"{level_tag(level)}, {len(mine)} repetition(s)")
        write_text(folder / f"{name}.hgrm", text)
        written.append(folder / f"{name}.hgrm")
    return written
