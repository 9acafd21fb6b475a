"""Maximum achievable throughput (MAT): the highest throughput at which a latency
statistic (mean or p99.9) stays under a threshold.

Latency does not fall as load rises, but measured levels are noisy (a p99.9 from
a few thousand requests moves by tens of percent), so the statistic is first made
monotone in throughput by isotonic regression (scikit-learn's pool adjacent violators): a noisy
dip above the threshold no longer decides the MAT alone. The crossing is then
interpolated between the last level under the threshold and the first level over
it, along a queue's curve through both: latency a / (C - X), C the throughput it
grows without bound at (fitted from the two levels). Near a knee latency stays low
until the last few percent of the capacity, then shoots up; a straight line in log
latency, used before, bends up too early and put the crossing too low (a demo run
whose share was bracketed from 80% busy to saturated under-predicted by 10.2% read
the old way, 6.0% the new; bench/RESULTS.md has every saved run re-read with
``bench/bench_demo.py --revalidate``). Where throughput did not rise across the
bracket (an overloaded server serves less), the MAT is the throughput of the level
under the threshold: nothing higher was served, and that was served under it. Its
confidence interval comes from the same interpolation on the
statistic's CI band: where the upper band crosses gives the low end, where the
lower band crosses the high end. Levels where the
generator fell behind its schedule are never used.

A level where more than :data:`shrink.loadcurve.FAILURE_LIMIT` of the requests
failed is not used either, with one exception. When the statistic stays under the
threshold at every usable level and such a level above them (the generator kept up)
is over it on the requests it did serve, that level closes the bracket: a failed
request met no threshold, so its statistic counting them is higher still, and the
crossing lies below it. An overloaded server times requests out (the demo's share,
one level above its knee, failed 0.7-1.9% of them with its mean latency several times
the threshold), and without this its MAT was left a bound when the time budget
allowed no level in between.

When the statistic stays under the threshold at every usable level, the result
may carry ``stalled_ceiling``: the throughput of the lowest level above them
where the generator only stalled (a VM's host took its CPU) and whose latency
is over the threshold even with twice its longest send lag taken off
(:meth:`shrink.loadcurve.Level.stall_bound`). It is not a MAT and no MAT is
computed from it; it says where the crossing most likely lies.

A MAT the curve does not bracket is a bound, and is never shown as a point
value: ``not_reached`` (the statistic stayed under the threshold at every
level) is a lower bound, written ``>= X`` with X the highest throughput
measured; ``below_range`` (over the threshold already at the lowest level) is
an upper bound, written ``< X`` with X the lowest. :func:`mat_text` is that
one representation, used by every command, report and validation. In JSON
(``shrink.mat/1``) ``bound`` is ``"lower"``, ``"upper"`` or null; ``mat``
keeps X for compatibility (a reader must look at ``bound``), ``text`` holds
the written form and ``ci`` is null for a bound (an interval of a bound means
nothing). ``shrink mat`` exits with :data:`EXIT_BOUND` when the MAT is a
bound: the threshold was not crossed within the measured range (as k6 exits
99 when a threshold fails).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import computed_field, model_serializer, model_validator

from shrink import files
from shrink.errors import MeasurementError, ParameterError
from shrink.loadcurve import CONFIDENCE, FAILURE_LIMIT, Level, LoadCurve
from shrink.schemas import Loose, Name, NonNeg

__all__ = [
    "BOUNDS",
    "EXIT_BOUND",
    "MATResult",
    "bound_of",
    "check_class",
    "crossing",
    "mat",
    "mat_text",
]

# status -> which side of the true MAT the reported value lies on
BOUNDS = {"not_reached": "lower", "below_range": "upper"}
# A MAT command's exit status when a MAT is only a bound (k6 uses 99 for a failed threshold).
EXIT_BOUND = 99


def bound_of(status: str | None) -> str | None:
    """``"lower"`` (the MAT is at least the value), ``"upper"`` (below it) or None (a point)."""
    return BOUNDS.get(status or "ok")


def mat_text(
    value: float | None,
    status: str | None = "ok",
    ci: Sequence[float | None] | None = None,
    *,
    fmt: str = ",.0f",
) -> str:
    """The one written form of a MAT: ``>= 608``, ``< 335``, or ``450 [420, 480]``.

    ``ci`` is shown only for a point value (an interval of a bound means nothing).
    """
    if value is None or not math.isfinite(value):
        return "-"
    bound = bound_of(status)
    if bound == "lower":
        return f">= {_rate(value, fmt)}"
    if bound == "upper":
        return f"< {_rate(value, fmt)}"
    text = _rate(value, fmt)
    lo, hi = ci if ci is not None and len(ci) == 2 else (None, None)
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        text += f" [{_rate(lo, fmt)}, {_rate(hi, fmt)}]"
    return text


def _rate(x: float, fmt: str) -> str:
    """``x`` as ``fmt`` writes it, but with three significant digits under 10: written
    ``,.0f`` a bound of 0.215 req/s read ``< 0``, which says nothing."""
    if x == 0 or abs(x) >= 10:
        return f"{x:{fmt}}"
    decimals = 2 - math.floor(math.log10(abs(x)))
    return f"{x:.{decimals}f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class MATResult(files.VersionedFile):
    """A MAT with its interval (``shrink.mat/1``).

    ``status`` is ``ok`` (crossing bracketed by two levels), ``not_reached``
    (the statistic stayed under the threshold at every level: ``mat`` is a lower
    bound, the highest throughput measured) or ``below_range`` (already over the
    threshold at the lowest level: ``mat`` is an upper bound). Written beside the
    fields: ``bound`` and ``text``; ``ci`` is null for a bound.
    """

    mat: Loose
    ci: tuple[Loose, Loose]
    stat: Name
    threshold: NonNeg
    status: Literal["ok", "not_reached", "below_range"] = "ok"
    bracket: tuple[Loose, Loose] | None = None  # the two levels' knob values
    cls: Name | None = None
    # Not reached: where a level the generator stalled at was still over (a hint, not a
    # MAT; see the module docstring).
    stalled_ceiling: NonNeg | None = None

    SCHEMA = "shrink.mat/1"
    WHAT = "MAT"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def confidence(self) -> float:
        """The two-sided confidence of ``ci`` (:data:`shrink.loadcurve.CONFIDENCE`)."""
        return CONFIDENCE

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bound(self) -> Literal["lower", "upper"] | None:
        """``"lower"``, ``"upper"`` or None: see the module docstring."""
        return bound_of(self.status)  # type: ignore[return-value]

    def text(self, fmt: str = ",.1f") -> str:
        return mat_text(self.mat, self.status, self.ci, fmt=fmt)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        # A bound is written without its interval (it means nothing): read as NaN.
        if isinstance(d, Mapping) and d.get("ci", ()) is None:
            return {**d, "ci": (math.nan, math.nan)}
        return d

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        return {**d, "text": self.text(), "ci": None if self.bound else d["ci"]}

    def scaled(self, factor: float) -> MATResult:
        """The MAT with throughputs multiplied by ``factor`` (e.g. 1/alpha)."""
        return MATResult(
            self.mat * factor,
            (self.ci[0] * factor, self.ci[1] * factor),
            self.stat,
            self.threshold,
            self.status,
            self.bracket,
            self.cls,
            None if self.stalled_ceiling is None else self.stalled_ceiling * factor,
        )


def isotonic(y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Non-decreasing least-squares fit to ``y`` (scikit-learn's pool adjacent violators)."""
    # Imported here: scikit-learn takes seconds to import, and most commands need no MAT.
    from sklearn.isotonic import isotonic_regression

    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        return y
    return np.asarray(isotonic_regression(y, sample_weight=w, increasing=True), dtype=np.float64)


def crossing(x: np.ndarray, y: np.ndarray, threshold: float) -> tuple[float, str, int]:
    """First upward crossing of ``threshold`` by y(x), x sorted ascending.

    Returns (x at crossing, status, index of the first level over).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size == 0:
        raise MeasurementError("no level has a finite throughput and statistic")
    over = np.flatnonzero(y > threshold)
    if over.size == 0:
        return float(x.max()), "not_reached", -1
    i = int(over[0])
    if i == 0:
        return float(x[0]), "below_range", 0
    x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
    if x1 <= x0:
        # The level over the threshold served no more than the one under it (an
        # overloaded server serves less): no throughput above x0 was seen, and x0 was
        # achieved under the threshold, so x0 is the MAT. Interpolating towards x1 put
        # it below a throughput measured under the threshold: the whole core of one demo
        # run served 5,415 req/s at 1.7 ms mean, then 4,292 at 28 ms one level up, and
        # read 4,704.
        return float(x0), "ok", i
    if y0 > 0 and threshold > 0:
        # A queue's latency near its knee, a / (C - X), through both levels (see the
        # module docstring): C from y0 (C - x0) = y1 (C - x1), then a / (C - X) = threshold.
        c = (y1 * x1 - y0 * x0) / (y1 - y0)
        return float(c - y0 * (c - x0) / threshold), "ok", i
    # A zero latency or threshold (no queue's curve through it): a straight line.
    f = (threshold - y0) / (y1 - y0)
    return float(x0 + f * (x1 - x0)), "ok", i


def _finite(band: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(band), band, fallback)


def _why_none(curve: LoadCurve) -> str:
    """Why a curve has no usable level: failed requests, the generator, or both."""
    if not curve.levels:
        return "it has no level"  # was blamed on the generator
    failed = [f"{lv.level:g}" for lv in curve.failed_levels()]
    if not failed:
        return "the generator fell behind at every level"
    why = f"requests failed (over {100 * FAILURE_LIMIT:g}%) at levels {', '.join(failed)}"
    if len(failed) < len(curve.levels):
        why += "; the generator fell behind at the others"
    return why


def check_class(curve: LoadCurve, cls: str | None) -> None:
    """Refuse a request class no repetition of ``curve`` measured, naming those it did."""
    if cls is None:
        return
    # A typo was "no level has a finite throughput and statistic": the class went unnamed.
    classes = sorted({c for lv in curve.levels for r in lv.reps for c in r.per_class})
    if cls not in classes:
        raise ParameterError(
            f"cls == {cls!r}, must be a class the curve measured: "
            + (", ".join(classes) if classes else "it measured none")
        )


def mat(curve: LoadCurve, stat: str, threshold: float, *, cls: str | None = None) -> MATResult:
    """MAT of ``curve`` for ``stat`` (mean, p50, p90, p99, p999) under ``threshold`` seconds."""
    s = curve.series(stat, cls)
    if s["level"].size == 0:
        raise MeasurementError(f"load curve has no usable level: {_why_none(curve)}")
    order = np.argsort(s["level"])
    ok = np.isfinite(s["throughput"][order]) & np.isfinite(s["value"][order])
    order = order[ok]
    if order.size == 0:
        raise MeasurementError("no level has a finite throughput and statistic")
    cols = {k: s[k][order] for k in ("level", "throughput", "value", "lo", "hi")}
    fit = isotonic(cols["value"])
    over = None if np.any(fit > threshold) else _failed_over(curve, cols, stat, threshold, cls)
    if over is not None:
        # The crossing lies below a level that failed while already over: the
        # bracket's upper end (see the module docstring).
        v, v_lo, v_hi = over.stat(stat, cls)
        extra = (over.level, over.stat("throughput", cls)[0], v, v_lo, v_hi)
        cols = {k: np.append(c, e) for (k, c), e in zip(cols.items(), extra, strict=True)}
        fit = isotonic(cols["value"])
    x, values = cols["throughput"], cols["value"]
    value, status, i = crossing(x, fit, threshold)
    lo, _, _ = crossing(x, isotonic(_finite(cols["hi"], values)), threshold)
    hi, _, _ = crossing(x, isotonic(_finite(cols["lo"], values)), threshold)
    levels = cols["level"]
    bracket = (float(levels[i - 1]), float(levels[i])) if status == "ok" else None
    ceiling = _stalled_ceiling(curve, float(levels.max()), stat, threshold, cls)
    return MATResult(
        mat=value,
        ci=(min(lo, value), max(hi, value)),
        stat=stat,
        threshold=threshold,
        status=status,
        bracket=bracket,
        cls=cls,
        stalled_ceiling=ceiling if status == "not_reached" else None,
    )


def _failed_over(
    curve: LoadCurve, cols: dict[str, np.ndarray], stat: str, threshold: float, cls: str | None
) -> Level | None:
    """The lowest level above the usable ones (``cols``) left out because requests
    failed (the generator kept up) whose ``stat`` over the requests it served is over
    ``threshold`` already, or None."""
    top = float(cols["level"].max())
    for lv in curve.failed_levels():
        if lv.level <= top or lv.generator_behind:
            continue
        v = lv.stat(stat, cls)[0]
        if math.isfinite(v) and v > threshold and math.isfinite(lv.stat("throughput", cls)[0]):
            return lv
    return None


def _stalled_ceiling(
    curve: LoadCurve, top: float, stat: str, threshold: float, cls: str | None
) -> float | None:
    """Throughput of the lowest stalled level above knob value ``top`` still over ``threshold``."""
    over = [lv for lv in curve.stalled_over(stat, threshold, cls) if lv.level > top]
    if not over:
        return None
    return float(min(over, key=lambda lv: lv.level).stat("throughput", cls)[0])
