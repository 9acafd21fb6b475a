"""Section 3: the curves: latency against load, and the CDFs near 80% utilization."""

from __future__ import annotations

from pathlib import Path

from shrink.loadcurve import Level
from shrink.report.blocks import Doc
from shrink.report.figures import cdf_figure, latency_figure, level_near_utilization
from shrink.report.sections import Measured
from shrink.report.series import curve_series, mapping_series
from shrink.report.text import level_text
from shrink.scaling import latency_scale

__all__ = ["add_curves", "cdf_levels_text"]


def add_curves(
    doc: Doc,
    out: Path,
    files: dict[str, Path],
    m: Measured,
    *,
    appendix: Doc | None = None,
) -> None:
    """3. The curves: latency against load, and the CDFs at the level nearest 80%
    utilization, titled with the utilization of the level each one shows."""
    doc.h(1, "Latency against load")
    series = mapping_series(m.pred)
    if m.curve is not None:
        series.append(
            curve_series(
                m.curve,
                f"{m.label} (normalized)",
                points=True,
                thr_scale=1.0 / m.curve.alpha,
                lat_scale=latency_scale(m.curve),
            )
        )
    if m.full_run is not None:
        series.append(curve_series(m.full_run, "full-scale run (validation)", points=True))
    if series:
        files["latency"] = latency_figure(
            out / "latency.png",
            series,
            m.thresholds,
            title="Latency against normalized load",
        )
        doc.img(
            "latency.png",
            "Mean and p99.9 response time against normalized throughput per mapping: "
            "thresholds red, MATs dotted (shading: their 95% interval). Lines are the "
            "monotone fit the MATs are read from; bars and bands span the repetitions.",
            alt="Latency against load",
        )
    cdf_entries = []
    if m.curve is not None:
        lv = level_near_utilization(m.curve)
        if lv is not None:
            cdf_entries.append(("predicted from the share", lv, latency_scale(m.curve)))
    if m.full_run is not None:
        lv = level_near_utilization(m.full_run)
        if lv is not None:
            cdf_entries.append(("full-scale run", lv, 1.0))
    if not cdf_entries:
        return
    shown = cdf_levels_text(cdf_entries)
    files["cdf"] = cdf_figure(
        out / "cdf.png",
        [(f"{label}, {_utilization(lv)}", lv, scale) for label, lv, scale in cdf_entries],
        title=f"Response-time CDFs per class{shown} (cf. the papers' Fig. 7, 11)",
    )
    doc.img(
        "cdf.png",
        # The level shown first, then how it was chosen: " at 80% utilization (level
        # 35.64)" after "nearest 80% utilization of the server" said 80% twice.
        f"Response-time distribution of static and dynamic requests{shown}, the measured "
        "level nearest 80% utilization of the server.",
        alt="Response-time CDFs",
    )
    if m.pred.share is not None and m.pred.share.kind == "cpu_time":
        where = appendix if appendix is not None else doc
        if appendix is not None:
            where.h(2, "Distributions on a CPU-time share")
        where.p(
            "On a CPU-time share the server runs at full speed until its quota is spent, "
            "then not at all until the next period. A short (static) request either "
            "finishes at full speed or waits for the next period, so its predicted "
            "distribution splits in two where a slower server's would not; long "
            "(dynamic) requests span many periods and come closer to a slower server. The MATs "
            "rest on the mean and p99.9, which the long requests dominate here."
        )


def _utilization(lv: Level) -> str:
    if lv.utilization is None:
        return f"{lv.throughput:,.0f} req/s (level {level_text(lv.level)})"
    return f"{100 * lv.utilization:.0f}% utilization (level {level_text(lv.level)})"


def cdf_levels_text(entries: list[tuple[str, Level, float]]) -> str:
    """The levels the CDF figure shows, as its title ends: " at" one utilization where
    every entry's level has the same (rounded), else ":" and each entry's."""
    texts = [_utilization(lv) for _, lv, _ in entries]
    if len(set(texts)) == 1:
        return f" at {texts[0]}"
    return ": " + "; ".join(
        f"{label} at {t}" for (label, _, _), t in zip(entries, texts, strict=True)
    )
