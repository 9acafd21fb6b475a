"""CSV files laid out as Locust's ``--csv`` and k6's ``--out csv`` write them.

- ``PREFIX_stats.csv``: one row per level and request class, plus the level's
  ``Aggregated`` row, with Locust's ``_stats.csv`` columns (times in ms, exact
  percentiles from the per-request arrays). A leading ``Level`` column says which
  load level a row is; Locust's own columns follow unchanged.
- ``PREFIX_stats_history.csv``: Locust's ``_stats_history.csv``, one row per
  level, repetition and second of the measurement window.
- ``PREFIX_requests.csv``: k6's ``--out csv`` rows, ``http_req_duration`` (ms)
  per request, tagged with level and repetition in ``extra_tags``.

A request class comes from the trace, which a recorded log's author controls. A
class that starts as a spreadsheet formula does (``=``, ``+``, ``-``, ``@``, TAB,
CR) is written after a single quote, OWASP's advice against CSV injection, so a
spreadsheet shows it as text instead of running it; a class with a comma, quote or
line break is quoted, as RFC 4180 says.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shrink.atomic import atomic_file
from shrink.export.samples import RunSamples

PERCENTILES = (50, 66, 75, 80, 90, 95, 98, 99, 99.9, 99.99, 100)
_PCT_NAMES = [f"{p:g}%" for p in PERCENTILES]
STATS_COLUMNS = [
    "Level",
    "Type",
    "Name",
    "Request Count",
    "Failure Count",
    "Median Response Time",
    "Average Response Time",
    "Min Response Time",
    "Max Response Time",
    "Average Content Size",
    "Requests/s",
    "Failures/s",
    *_PCT_NAMES,
]
HISTORY_COLUMNS = [
    "Level",
    "Repetition",
    "Timestamp",
    "User Count",
    "Type",
    "Name",
    "Requests/s",
    "Failures/s",
    *_PCT_NAMES,
    "Total Request Count",
    "Total Failure Count",
    "Total Median Response Time",
    "Total Average Response Time",
    "Total Min Response Time",
    "Total Max Response Time",
    "Total Average Content Size",
]
K6_COLUMNS = [
    "metric_name",
    "timestamp",
    "metric_value",
    "check",
    "error",
    "error_code",
    "expected_response",
    "group",
    "method",
    "name",
    "proto",
    "scenario",
    "service",
    "status",
    "subproto",
    "tls_version",
    "url",
    "extra_tags",
    "metadata",
]


def _text_cell(text: str) -> str:
    """A cell of trace text a spreadsheet shows and does not evaluate (see the module)."""
    return "'" + text if text.startswith(("=", "+", "-", "@", "\t", "\r")) else text


def _ms(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x * 1e3:.3f}"


def _latency_cells(lat: np.ndarray) -> list[str]:
    if lat.size == 0:
        return ["N/A"] * len(PERCENTILES)
    return [_ms(v) for v in np.quantile(lat, [p / 100 for p in PERCENTILES])]


def _stats_row(level: float, cls: str, runs: Sequence[RunSamples], mask_of) -> list[str]:
    n = failures = 0
    lats, sizes = [], []
    seconds = 0.0
    for r in runs:
        m = mask_of(r)
        n += int(m.sum())
        failures += int((m & ~r.ok).sum())
        lats.append((r.done - r.intended)[m & r.ok])
        sizes.append(r.nbytes[m & r.ok & (r.nbytes >= 0)])
        seconds += r.window[1] - r.window[0]
    lat = np.concatenate(lats) if lats else np.array([])
    size = np.concatenate(sizes) if sizes else np.array([])
    nan = float("nan")
    return [
        f"{level:g}",
        "" if cls == "Aggregated" else _text_cell(cls),
        _text_cell(cls),
        str(n),
        str(failures),
        _ms(float(np.median(lat)) if lat.size else nan),
        _ms(float(lat.mean()) if lat.size else nan),
        _ms(float(lat.min()) if lat.size else nan),
        _ms(float(lat.max()) if lat.size else nan),
        f"{size.mean():.1f}" if size.size else "",
        f"{n / seconds:.3f}" if seconds else "",
        f"{failures / seconds:.3f}" if seconds else "",
        *_latency_cells(lat),
    ]


def write_stats(path: Path, runs: Sequence[RunSamples]) -> Path:
    """Locust's ``_stats.csv``: per level, one row per class and an Aggregated row."""
    with atomic_file(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        w.writerow(STATS_COLUMNS)
        for level in sorted({r.level for r in runs}):
            mine = [r for r in runs if r.level == level]
            classes = sorted({str(c) for r in mine for c in r.cls})
            for c in classes:
                w.writerow(_stats_row(level, c, mine, lambda r, c=c: r.cls == c))
            w.writerow(
                _stats_row(level, "Aggregated", mine, lambda r: np.ones(r.ok.size, dtype=bool))
            )
    return path


def write_history(path: Path, runs: Sequence[RunSamples]) -> Path:
    """Locust's ``_stats_history.csv``: each second of each repetition's window.

    A second holds the requests that completed in it (their latencies, and the
    failures among requests intended in it); the Total columns are the
    repetition's so far. Timestamp is Unix seconds.
    """
    with atomic_file(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HISTORY_COLUMNS)
        for r in sorted(runs, key=lambda r: (r.level, r.rep)):
            start, end = r.window
            lat = r.done - r.intended
            failed = 0
            for s in np.arange(start, end, 1.0):
                width = min(1.0, end - s)
                done_in = r.ok & (r.done >= s) & (r.done < s + width)
                failed_in = ~r.ok & (r.intended >= s) & (r.intended < s + width)
                failed += int(failed_in.sum())
                so_far = r.ok & (r.done >= start) & (r.done < s + width)
                w.writerow(
                    [
                        f"{r.level:g}",
                        str(r.rep + 1),
                        str(int(r.epoch + s)),
                        "",
                        "",
                        "Aggregated",
                        f"{done_in.sum() / width:.3f}",
                        f"{failed_in.sum() / width:.3f}",
                        *_latency_cells(lat[done_in]),
                        str(int(so_far.sum()) + failed),
                        str(failed),
                        *_summary_cells(lat[so_far], r.nbytes[so_far]),
                    ]
                )
    return path


def _summary_cells(lat: np.ndarray, nbytes: np.ndarray) -> list[str]:
    """Median, average, min, max (ms) and the average reply size."""
    if lat.size == 0:
        return ["", "", "", "", ""]
    size = nbytes[nbytes >= 0]
    return [
        _ms(float(np.median(lat))),
        _ms(float(lat.mean())),
        _ms(float(lat.min())),
        _ms(float(lat.max())),
        f"{size.mean():.1f}" if size.size else "",
    ]


def write_k6(path: Path, runs: Sequence[RunSamples]) -> Path:
    """k6's ``--out csv``: an ``http_req_duration`` row (ms) per request.

    Written through pyarrow's CSV writer: a row per request is most of the bytes.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    tables = []
    quote = False  # k6 quotes nothing; a class that needs it makes the file quote strings
    for r in sorted(runs, key=lambda r: (r.level, r.rep)):
        order = np.argsort(r.intended, kind="stable")
        ok = r.ok[order]
        n = int(order.size)
        lat_ms = np.where(ok, (r.done - r.intended)[order] * 1e3, np.nan)
        cols: dict[str, pa.Array] = {c: pa.nulls(n, pa.string()) for c in K6_COLUMNS}
        cols["metric_name"] = pa.array(["http_req_duration"] * n)
        cols["timestamp"] = pa.array((r.epoch + r.intended[order]).astype(np.int64))
        cols["metric_value"] = pa.array(np.round(lat_ms, 6), mask=~ok)
        cols["error"] = pa.array(np.where(ok, None, "request failed"), pa.string())
        cols["expected_response"] = pa.array(np.where(ok, "true", "false"))
        classes, which = np.unique(r.cls[order].astype(str), return_inverse=True)
        names = np.array([_text_cell(str(c)) for c in classes], dtype=object)
        quote = quote or any(ch in v for v in names for ch in ',"\r\n')
        cols["name"] = pa.array(names[which], pa.string())
        cols["status"] = pa.array(r.status[order].astype(np.int64))
        cols["extra_tags"] = pa.array([f"level={r.level:g}&rep={r.rep + 1}"] * n)
        tables.append(pa.table([cols[c] for c in K6_COLUMNS], names=K6_COLUMNS))
    table = pa.concat_tables(tables) if tables else pa.table({c: [] for c in K6_COLUMNS})
    with atomic_file(path, "wb") as f:
        style = "needed" if quote else "none"
        pacsv.write_csv(table, f, write_options=pacsv.WriteOptions(quoting_style=style))
    return path
