"""Write every export of a sweep next to its LoadCurve JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shrink.atomic import atomic_path
from shrink.export import csv as csv_out
from shrink.export.hdr import write_hdr
from shrink.export.samples import RunSamples


def export_paths(curve_path: Path) -> dict[str, Path]:
    """Where the exports of ``curve.json`` go: ``curve-hdr/``, ``curve_stats.csv``, ..."""
    stem = curve_path.with_suffix("")
    return {
        "hdr": stem.with_name(stem.name + "-hdr"),
        "stats": stem.with_name(stem.name + "_stats.csv"),
        "history": stem.with_name(stem.name + "_stats_history.csv"),
        "requests": stem.with_name(stem.name + "_requests.csv"),
    }


def write_sweep_exports(curve_path: Path, runs: Sequence[RunSamples]) -> list[Path]:
    """HdrHistogram logs, wrk2 spectra, Locust and k6 CSVs of the runs; returns the files."""
    p = export_paths(Path(curve_path))
    written = write_hdr(p["hdr"], runs)
    # Each CSV goes to a temporary file renamed into place: a full disk leaves no
    # truncated CSV, and the error names the file.
    for key, write in (
        ("stats", csv_out.write_stats),
        ("history", csv_out.write_history),
        ("requests", csv_out.write_k6),
    ):
        with atomic_path(p[key]) as tmp:
            write(tmp, runs)
        written.append(p[key])
    return written
