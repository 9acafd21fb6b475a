"""The report's figures (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import functools
import io
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# isort: off
from shrink.report._mpl import matplotlib  # first: how root may import it

# isort: on
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from shrink.atomic import write_bytes
from shrink.loadcurve import QGRID, Level, LoadCurve
from shrink.mat import isotonic
from shrink.report.text import rate_text

__all__ = ["Series", "cdf_figure", "latency_figure", "level_near_utilization"]

_COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#718096"]
# Lines that lie on top of each other must stay apart: each series has its own dash
# pattern and marker, and lines drawn later are thinner, so the one below shows round it.
_DASHES = ["-", (0, (6, 3)), (0, (2, 2)), (0, (8, 3, 2, 3)), (0, (1, 3)), (0, (4, 1, 1, 1))]
_MARKERS = ["o", "s", "^", "D", "v", "P"]
_STAT_LABEL = {"mean": "mean response time", "p999": "99.9th percentile response time"}
# A p99.9 rests on the slowest 0.1% of a run's requests: from fewer than this many
# requests it is the slowest one or two, and the figure says how many there were.
FEW_FOR_P999 = 1000


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
    # stat -> "ok" | "not_reached" (MAT >= the value) | "below_range" (MAT <= it)
    mat_status: Mapping[str, str] = field(default_factory=dict)
    # Requests per repetition behind each point (the fewest of its repetitions).
    counts: Sequence[int] | None = None


def _plain_text(figure: Callable[..., Path]) -> Callable[..., Path]:
    """Draw ``figure``'s texts as written: a title or label carries names from the trace
    and the machine spec, and mathtext read ``$x^$`` in one as a formula and failed."""

    @functools.wraps(figure)
    def drawn(*args: object, **kwargs: object) -> Path:
        with matplotlib.rc_context({"text.parse_math": False}):
            return figure(*args, **kwargs)

    return drawn


# A figure's title carries names from the trace and the machine spec: a name of thousands
# of characters ran off the CDFs and stretched the latency figure (saved with a tight box)
# to match. Wrapped to the figure's width and cut after two lines, it stays inside.
# DejaVu Sans at 11 pt averages under 6.5 pt a character (11 an inch); wide letters
# (a run of "m") take more, so the drawn width is measured and the wrap narrowed to fit.
_TITLE_CHARS_PER_INCH = 11
_TITLE_LINES = 2


def _wrapped(title: str, width: int) -> str:
    lines = textwrap.wrap(title, width) or [""]
    if len(lines) > _TITLE_LINES:
        lines = lines[:_TITLE_LINES]
        lines[-1] = lines[-1][: width - 1] + "\u2026"
    return "\n".join(lines)


def _title(fig, title: str) -> None:
    """Set ``fig``'s title, wrapped to its width; what does not fit ends in an ellipsis."""
    width = int(fig.get_figwidth() * _TITLE_CHARS_PER_INCH)
    renderer = fig.canvas.get_renderer()
    while True:
        text = fig.suptitle(_wrapped(title, width), fontsize=11)
        if width <= 10 or text.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return
        width = int(width * 0.85)


# A legend label carries a mapping's or a trace's name too: a long one widened the
# legend past the figure (and, saved with a tight box, the figure with it).
_LABEL_CHARS = 90


def _bound_legends(fig) -> None:
    """Cut each legend label of ``fig`` to _LABEL_CHARS characters, ending in an ellipsis."""
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        for text in legend.get_texts() if legend is not None else ():
            label = text.get_text()
            if len(label) > _LABEL_CHARS:
                text.set_text(label[: _LABEL_CHARS - 1] + "\u2026")


def _save(fig, path: str | Path, **kw) -> None:
    """Render ``fig`` in memory, then write it through the one safe writer (never
    through a symlink at ``path``); the format is the file's suffix (png, svg, pdf)."""
    _bound_legends(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **kw)
    write_bytes(path, buf.getvalue())


def _ms_ticks(value: float, _pos: int) -> str:
    """Log-axis ticks in plain milliseconds (0.01, 1, 500), never 10^-2."""
    return f"{value:,.10g}"


def _log_ms(axis) -> None:
    """A log axis labelled in plain ms; call it once the data are drawn.

    Ticks at 1, 2, 3, 5 of each decade over a short range, at each decade otherwise.
    """
    lo, hi = sorted(axis.get_view_interval())
    decades = np.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    subs = (1.0, 2.0, 3.0, 5.0) if decades <= 3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=30))
    axis.set_major_formatter(FuncFormatter(_ms_ticks))
    axis.set_minor_formatter(NullFormatter())


def _thousands(value: float, _pos: int) -> str:
    return f"{value:,.0f}"


def _same_line(a: Series, b: Series, stat: str) -> bool:
    """Whether two line series draw the same curve (within 1%): one hides the other."""
    if a.points or b.points or stat not in a.values or stat not in b.values:
        return False
    xa, xb = np.asarray(a.throughput, float), np.asarray(b.throughput, float)
    ya, yb = np.asarray(a.values[stat], float), np.asarray(b.values[stat], float)
    if xa.shape != xb.shape or ya.shape != yb.shape:
        return False
    return bool(np.allclose(xa, xb, rtol=0.01, equal_nan=True)) and bool(
        np.allclose(ya, yb, rtol=0.01, equal_nan=True)
    )


def _short(label: str) -> str:
    return label.split(": ", 1)[-1]


def _draw_points(ax, s: Series, stat: str, i: int, x, y, ok) -> None:
    c = _COLORS[i % len(_COLORS)]
    lo = np.asarray(s.lo.get(stat, s.values[stat]), float) * 1e3
    hi = np.asarray(s.hi.get(stat, s.values[stat]), float) * 1e3
    err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])[:, ok]
    marker = _MARKERS[i % len(_MARKERS)]
    ax.errorbar(x[ok], y[ok], yerr=err, fmt=marker, ms=4, color=c, capsize=2, label=s.label)
    if stat != "p999" or s.counts is None:
        return
    n = np.asarray(s.counts, float)
    few = ok & (n < FEW_FOR_P999)
    for xi, yi, ni in zip(x[few], y[few], n[few], strict=True):
        ax.annotate(
            f"n={ni:,.0f}", (xi, yi), textcoords="offset points", xytext=(4, 5),
            fontsize=7, color=c,
        )  # fmt: skip
    if few.any():
        ax.plot([], [], " ", label=f"n=: requests behind a p99.9 under {FEW_FOR_P999:,}")


def _draw_line(ax, s: Series, stat: str, i: int, x, y, ok, same_as: list[str]) -> None:
    c = _COLORS[i % len(_COLORS)]
    label = s.label + (f" (on top of {', '.join(same_as)})" if same_as else "")
    # The monotone fit the MAT is read from, in the order of the load levels
    # (a noisy throughput can step back: the line then does too).
    ax.plot(
        x[ok], isotonic(y[ok]), ls=_DASHES[i % len(_DASHES)], lw=max(3.2 - 0.8 * i, 1.2),
        color=c, marker=_MARKERS[i % len(_MARKERS)], ms=4, markevery=_markevery(i, ok),
        label=label, zorder=3 + i,
    )  # fmt: skip
    if stat in s.lo and stat in s.hi:
        lo = np.asarray(s.lo[stat], float) * 1e3
        hi = np.asarray(s.hi[stat], float) * 1e3
        ax.fill_between(x[ok], lo[ok], hi[ok], color=c, alpha=0.15, lw=0)


def _markevery(i: int, ok) -> tuple[int, int]:
    """Markers of different series on different points, so coinciding lines show each."""
    n = int(np.sum(ok))
    every = max(n // 6, 1)
    return (i % every, every)


def _draw_mat(ax, s: Series, stat: str, i: int) -> float | None:
    """Draw the MAT; return it when it is only a bound (the axis then leaves room right)."""
    m, mlo, mhi = s.mats[stat]
    if not np.isfinite(m):
        return None
    c = _COLORS[i % len(_COLORS)]
    status = s.mat_status.get(stat, "ok")
    if status in ("not_reached", "below_range"):
        # Only a bound: a dash-dot line, labelled ">= X" with an arrow the way the MAT lies.
        sign, text = (1, ">=") if status == "not_reached" else (-1, "<=")
        y = 0.93 - 0.08 * i
        ax.axvline(m, color=c, ls="-.", lw=1.0, alpha=0.8)
        ax.annotate(
            f"MAT {text} {rate_text(m)}", xy=(m, y), xycoords=("data", "axes fraction"),
            xytext=(-sign * 4, 0), textcoords="offset points",
            ha="right" if sign > 0 else "left", va="center", fontsize=7, color=c,
        )  # fmt: skip
        ax.annotate(
            "", xy=(m, y), xycoords=("data", "axes fraction"), xytext=(sign * 22, 0),
            textcoords="offset points",
            arrowprops={"arrowstyle": "<-", "color": c, "lw": 1.2},
        )  # fmt: skip
        return m
    ax.axvline(m, color=c, ls=":", lw=1.5)
    if np.isfinite(mlo) and np.isfinite(mhi) and mhi > mlo:
        ax.axvspan(mlo, mhi, color=c, alpha=0.10, lw=0)
    return None


def _legend_below(fig, axes) -> None:
    """One legend for all panels, under them: it never covers a threshold or a curve."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    fig.legend(
        list(seen.values()), list(seen), loc="upper center", bbox_to_anchor=(0.5, 0.0),
        ncol=2 if len(axes) > 1 else 1, fontsize=8, frameon=False,
    )  # fmt: skip


@_plain_text
def latency_figure(
    path: str | Path,
    series: Sequence[Series],
    thresholds: Mapping[str, float],
    *,
    title: str,
    xlabel: str = "normalized throughput (requests/s)",
) -> Path:
    """Mean and p99.9 against load, one panel per statistic, thresholds and MATs marked.

    The legend sits below each panel, clear of the threshold line; a MAT that is only
    a bound (the threshold never crossed) is an arrow labelled ">= X", not a line.
    """
    stats = [s for s in ("mean", "p999") if s in thresholds] or ["mean"]
    fig, axes = plt.subplots(1, len(stats), figsize=(6.2 * len(stats), 5.4), squeeze=False)
    for ax, stat in zip(axes[0], stats, strict=True):
        bounds = crossed = False
        for i, s in enumerate(series):
            if stat not in s.values:
                continue
            x = np.asarray(s.throughput, float)
            y = np.asarray(s.values[stat], float) * 1e3
            ok = np.isfinite(x) & np.isfinite(y) & (y > 0)
            if s.points:
                _draw_points(ax, s, stat, i, x, y, ok)
            else:
                same = [_short(t.label) for t in series[:i] if _same_line(t, s, stat)]
                _draw_line(ax, s, stat, i, x, y, ok, same)
            if stat in s.stalled:
                c = _COLORS[i % len(_COLORS)]
                sx, sy, sb = (np.asarray(v, float) for v in s.stalled[stat])
                sy, sb = sy * 1e3, sb * 1e3
                down = np.where(sb > 0, sy - sb, 0.0)  # a bound <= 0 has no place on a log axis
                ax.errorbar(
                    sx, sy, yerr=np.vstack([down, np.zeros_like(down)]), fmt="o", ms=5,
                    mfc="none", color=c, capsize=2, label=f"{s.label}: generator stalled",
                )  # fmt: skip
            crossed |= stat in s.mats and s.mat_status.get(stat, "ok") == "ok"
            if stat in s.mats and (b := _draw_mat(ax, s, stat, i)) is not None:
                bounds = True
                lo_x, hi_x = ax.get_xlim()
                ax.set_xlim(lo_x, max(hi_x, b + 0.08 * (b - lo_x)))
        if stat in thresholds:
            ax.axhline(
                thresholds[stat] * 1e3,
                color="#c53030",
                ls="--",
                lw=1.2,
                label=f"threshold {thresholds[stat] * 1e3:,g} ms",
                zorder=10,
            )
        if crossed:
            ax.plot([], [], ls=":", color="#4a5568", label="MAT (shading: 95% CI)")
        if bounds:
            ax.plot([], [], ls="-.", color="#4a5568", label="threshold not crossed: MAT >= X")
        ax.set_yscale("log")
        _log_ms(ax.yaxis)
        ax.xaxis.set_major_formatter(FuncFormatter(_thousands))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{_STAT_LABEL.get(stat, stat)} (ms)")
        ax.set_title(_STAT_LABEL.get(stat, stat))
        ax.grid(True, which="both", alpha=0.25)
    _title(fig, title)
    fig.tight_layout()
    _legend_below(fig, axes[0])
    path = Path(path)
    _save(fig, path, dpi=110, bbox_inches="tight")
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


@_plain_text
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
        left = []
        for i, (label, level, scale) in enumerate(entries):
            d = level.quantile_function(cls)
            if d is None:
                continue
            # The axis starts near the 1% point, at most three decades under the median:
            # the fastest few requests (microseconds, or 0 on a log axis) would stretch
            # it over decades nobody reads.
            q01, q50 = np.interp([0.01, 0.5], p, d)
            left.append(max(float(q01), float(q50) / 1000) * scale * 1e3)
            n = sum(
                (r.overall if cls is None else r.per_class[cls]).n
                for r in level.reps
                if cls is None or cls in r.per_class
            )
            ax.plot(
                d * scale * 1e3, p, lw=2, color=_COLORS[i % len(_COLORS)],
                ls=_DASHES[i % len(_DASHES)], label=f"{label} (n={n:,})",
            )  # fmt: skip
        ax.set_xscale("log")
        if left and min(left) > 0:
            ax.set_xlim(left=0.8 * min(left))
        _log_ms(ax.xaxis)
        ax.set_xlabel("response time (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{cls} requests")
        ax.grid(True, which="both", alpha=0.25)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left")  # a CDF leaves the upper left empty
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
    _title(fig, title)
    fig.tight_layout()
    path = Path(path)
    _save(fig, path, dpi=110)
    plt.close(fig)
    return path
