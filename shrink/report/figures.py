"""The report's figures (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from shrink.loadcurve import QGRID, Level, LoadCurve
from shrink.mat import isotonic

__all__ = ["Series", "cdf_figure", "latency_figure", "level_near_utilization"]

_COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#718096"]
_STAT_LABEL = {"mean": "mean response time", "p999": "99.9th percentile response time"}


@dataclass
class Series:
    """One curve on a latency figure: x is normalized throughput (req/s)."""

    label: str
    throughput: Sequence[float]
    values: Mapping[str, Sequence[float]]  # stat -> seconds
    lo: Mapping[str, Sequence[float]] = field(default_factory=dict)
    hi: Mapping[str, Sequence[float]] = field(default_factory=dict)
    mats: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)  # mat, lo, hi
    points: bool = False  # measured points (markers + error bars) instead of a line
    # Levels where the generator only stalled: stat -> (x, measured, stall bound), drawn
    # hollow with a bar down to the bound (the most the stalls can have added).
    stalled: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]] = field(
        default_factory=dict
    )


def latency_figure(
    path: str | Path,
    series: Sequence[Series],
    thresholds: Mapping[str, float],
    *,
    title: str,
    xlabel: str = "normalized throughput (requests/s)",
) -> Path:
    """Mean and p99.9 against load, one panel per statistic, thresholds and MATs marked."""
    stats = [s for s in ("mean", "p999") if s in thresholds] or ["mean"]
    fig, axes = plt.subplots(1, len(stats), figsize=(6.2 * len(stats), 4.4), squeeze=False)
    for ax, stat in zip(axes[0], stats, strict=True):
        for i, s in enumerate(series):
            if stat not in s.values:
                continue
            c = _COLORS[i % len(_COLORS)]
            x = np.asarray(s.throughput, float)
            y = np.asarray(s.values[stat], float) * 1e3
            ok = np.isfinite(x) & np.isfinite(y) & (y > 0)
            if s.points:
                lo = np.asarray(s.lo.get(stat, s.values[stat]), float) * 1e3
                hi = np.asarray(s.hi.get(stat, s.values[stat]), float) * 1e3
                err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])[:, ok]
                ax.errorbar(
                    x[ok], y[ok], yerr=err, fmt="o", ms=4, color=c, capsize=2, label=s.label
                )
            else:
                # The monotone fit the MAT is read from, in the order of the load levels
                # (a noisy throughput can step back: the line then does too).
                ax.plot(x[ok], isotonic(y[ok]), "-", lw=2, color=c, label=s.label)
                if stat in s.lo and stat in s.hi:
                    lo = np.asarray(s.lo[stat], float) * 1e3
                    hi = np.asarray(s.hi[stat], float) * 1e3
                    ax.fill_between(x[ok], lo[ok], hi[ok], color=c, alpha=0.15, lw=0)
            if stat in s.stalled:
                sx, sy, sb = (np.asarray(v, float) for v in s.stalled[stat])
                sy, sb = sy * 1e3, sb * 1e3
                down = np.where(sb > 0, sy - sb, 0.0)  # a bound <= 0 has no place on a log axis
                ax.errorbar(
                    sx, sy, yerr=np.vstack([down, np.zeros_like(down)]), fmt="o", ms=5,
                    mfc="none", color=c, capsize=2, label=f"{s.label}: generator stalled",
                )  # fmt: skip
            if stat in s.mats:
                m, mlo, mhi = s.mats[stat]
                if np.isfinite(m):
                    ax.axvline(m, color=c, ls=":", lw=1.5)
                    if np.isfinite(mlo) and np.isfinite(mhi) and mhi > mlo:
                        ax.axvspan(mlo, mhi, color=c, alpha=0.10, lw=0)
        if stat in thresholds:
            ax.axhline(
                thresholds[stat] * 1e3,
                color="#c53030",
                ls="--",
                lw=1.2,
                label=f"threshold {thresholds[stat] * 1e3:g} ms",
            )
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{_STAT_LABEL.get(stat, stat)} (ms)")
        ax.set_title(_STAT_LABEL.get(stat, stat))
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def level_near_utilization(curve: LoadCurve, target: float = 0.8) -> Level | None:
    """The usable level whose utilization is closest to ``target`` (else ~80% of the top)."""
    usable = curve.usable()
    if not usable:
        return None
    with_u = [lv for lv in usable if lv.utilization is not None]
    if with_u:
        return min(with_u, key=lambda lv: abs(float(lv.utilization) - target))
    top = max(lv.throughput for lv in usable)
    return min(usable, key=lambda lv: abs(lv.throughput - target * top))


def _dist(level: Level, cls: str | None) -> np.ndarray | None:
    ds = []
    for r in level.reps:
        src = r.overall if cls is None else r.per_class.get(cls)
        if src is not None and src.dist:
            ds.append(np.asarray(src.dist, float))
    return np.mean(ds, axis=0) if ds else None


def cdf_figure(
    path: str | Path,
    entries: Sequence[tuple[str, Level, float]],
    *,
    title: str,
) -> Path:
    """Response-time CDFs per class (static, dynamic) for each (label, level, latency scale)."""
    classes = ("static", "dynamic")
    fig, axes = plt.subplots(1, 2, figsize=(12.4, 4.4), squeeze=False)
    p = np.asarray(QGRID)
    for ax, cls in zip(axes[0], classes, strict=True):
        for i, (label, level, scale) in enumerate(entries):
            d = _dist(level, cls)
            if d is None:
                continue
            ax.plot(d * scale * 1e3, p, lw=2, color=_COLORS[i % len(_COLORS)], label=label)
        ax.set_xscale("log")
        ax.set_xlabel("response time (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{cls} requests")
        ax.grid(True, which="both", alpha=0.25)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
        else:
            ax.text(
                0.5,
                0.5,
                f"no {cls} requests measured",
                transform=ax.transAxes,
                ha="center",
                va="center",
                color="#718096",
            )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
