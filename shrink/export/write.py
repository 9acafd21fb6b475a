"""Write the exports a user asked for next to a sweep's LoadCurve JSON.

Nothing is written unless asked (``--export hdr,locust,k6``), as k6 writes CSV
only with ``--out csv=...`` and Locust only with ``--csv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shrink.errors import OptionError
from shrink.export import csv as csv_out
from shrink.export.hdr import write_hdr
from shrink.export.samples import RunSamples

# hdr: CURVE-hdr/ (HdrHistogram logs, wrk2 spectra); locust: CURVE_stats.csv and
# CURVE_stats_history.csv; k6: CURVE_requests.csv; csv: locust and k6.
EXPORT_FORMATS = ("hdr", "locust", "k6")
_ALIASES = {"csv": ("locust", "k6"), "all": EXPORT_FORMATS, "wrk2": ("hdr",)}
EXPORT_HELP = "hdr, locust, k6, csv (locust and k6) or all"


def parse_exports(text: str | None, option: str = "--export") -> tuple[str, ...]:
    """The export formats named in ``text`` (``hdr,locust``), in a fixed order; none for None."""
    if text is None or not text.strip() or text.strip() == "none":
        return ()
    asked: set[str] = set()
    for item in (x.strip().lower() for x in text.split(",") if x.strip()):
        if item in EXPORT_FORMATS:
            asked.add(item)
        elif item in _ALIASES:
            asked.update(_ALIASES[item])
        else:
            raise OptionError(option, f"unknown format {item!r}; accepted: {EXPORT_HELP}")
    return tuple(f for f in EXPORT_FORMATS if f in asked)


def export_paths(curve_path: Path) -> dict[str, Path]:
    """Where the exports of ``curve.json`` go: ``curve-hdr/``, ``curve_stats.csv``, ..."""
    stem = curve_path.with_suffix("")
    return {
        "hdr": stem.with_name(stem.name + "-hdr"),
        "stats": stem.with_name(stem.name + "_stats.csv"),
        "history": stem.with_name(stem.name + "_stats_history.csv"),
        "requests": stem.with_name(stem.name + "_requests.csv"),
    }


def write_sweep_exports(
    curve_path: Path, runs: Sequence[RunSamples], formats: Sequence[str] = EXPORT_FORMATS
) -> list[Path]:
    """The ``formats`` asked for (HdrHistogram logs and wrk2 spectra, Locust's CSVs,
    k6's CSV) of the runs; returns the files written."""
    p = export_paths(Path(curve_path))
    written: list[Path] = []
    if "hdr" in formats:
        written.extend(write_hdr(p["hdr"], runs))
    # Each CSV writer writes a temporary file renamed into place (atomic_file): a full
    # disk leaves no truncated CSV, and the error names the file.
    csvs = [
        ("stats", csv_out.write_stats, "locust"),
        ("history", csv_out.write_history, "locust"),
        ("requests", csv_out.write_k6, "k6"),
    ]
    for key, write, fmt in csvs:
        if fmt in formats:
            written.append(write(p[key], runs))
    return written
