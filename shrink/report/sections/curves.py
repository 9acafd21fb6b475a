"""Section 2: the curves: latency against load, and the CDFs near 80% utilization."""

from __future__ import annotations

from pathlib import Path

from shrink.loadcurve import LoadCurve
from shrink.prediction import Prediction
from shrink.report.blocks import Doc
from shrink.report.figures import cdf_figure, latency_figure, level_near_utilization
from shrink.report.series import curve_series, mapping_series
from shrink.scaling import latency_scale

__all__ = ["add_curves"]


def add_curves(
    doc: Doc,
    out: Path,
    files: dict[str, Path],
    pred: Prediction,
    thresholds: dict[str, float],
    measured: LoadCurve | None,
    measured_label: str,
    full_run: LoadCurve | None,
) -> None:
    """2. The curves: latency against load, and the CDFs near 80% utilization."""
    doc.h(1, "Latency against load")
    series = mapping_series(pred)
    if measured is not None:
        series.append(
            curve_series(
                measured,
                f"{measured_label} (normalized)",
                points=True,
                thr_scale=1.0 / measured.alpha,
                lat_scale=latency_scale(measured),
            )
        )
    if full_run is not None:
        series.append(curve_series(full_run, "full-scale run (validation)", points=True))
    if series:
        files["latency"] = latency_figure(
            out / "latency.png",
            series,
            thresholds,
            title="Latency against normalized load; dotted: MATs (vertical shading: 95% CI); "
            "bars and bands: range of the repetitions",
        )
        doc.img(
            "latency.png",
            "Mean and 99.9th-percentile response time against normalized "
            "throughput for each mapping, with the thresholds (red) and the MATs (dotted). "
            "Lines are the monotone fit the MATs are read from, through each level's "
            "median repetition; bars and bands span the repetitions at each level.",
        )
    cdf_entries = []
    if measured is not None:
        lv = level_near_utilization(measured)
        if lv is not None:
            u = "" if lv.utilization is None else f", {100 * lv.utilization:.0f}% utilization"
            cdf_entries.append((f"predicted from the share{u}", lv, latency_scale(measured)))
    if full_run is not None:
        lv = level_near_utilization(full_run)
        if lv is not None:
            u = "" if lv.utilization is None else f", {100 * lv.utilization:.0f}% utilization"
            cdf_entries.append((f"full-scale run{u}", lv, 1.0))
    if not cdf_entries:
        return
    files["cdf"] = cdf_figure(
        out / "cdf.png",
        cdf_entries,
        title="Response-time CDFs per class at the level nearest 80% utilization (its "
        "utilization in the legend; cf. the papers' Fig. 7, 11)",
    )
    doc.img(
        "cdf.png",
        "Response-time distribution of static and dynamic requests at the level "
        "nearest 80% utilization of the server (the legend gives its utilization).",
    )
    if pred.share is not None and pred.share.kind == "cpu_time":
        doc.p(
            "On a CPU-time share the server runs at full speed until its quota is spent, "
            "then not at all until the next period. A short (static) request either "
            "finishes at full speed or waits for the next period, so its predicted "
            "distribution splits in two where a slower server's would not; long "
            "(dynamic) requests span many periods and come closer to a slower server. The MATs "
            "rest on the mean and p99.9, which the long requests dominate here."
        )
