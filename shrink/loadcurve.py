"""The LoadCurve: latency and throughput across load levels, with repetitions.

A curve is what ``shrink sweep`` (live testbed) and the simulator produce and what
``shrink mat`` and ``extrapolate/`` consume. JSON, ``schema: shrink.loadcurve/1``.

Each :class:`Level` holds one :class:`LevelStats` per repetition; aggregate values
and confidence intervals across repetitions come from :meth:`Level.stat`.
Latencies are seconds, throughputs requests/s of completed requests inside the
measurement window. ``dist`` holds the latency quantile function at the fixed
probability grid :data:`QGRID` (per class and ``all``) so that CDFs and
Wasserstein distances can be computed without the per-request arrays.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat as _stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_validator,
)

from shrink import files
from shrink.atomic import unchanged_since_noted, write_text
from shrink.errors import MeasurementError
from shrink.jsonout import dumps
from shrink.schemas import MAX_LIST, Alpha, Count, CurveMeta, Finite, Name, NonNeg
from shrink.share import Share

__all__ = [
    "CONFIDENCE",
    "CURVE_FORMAT",
    "FAILURE_LIMIT",
    "GENERATOR_SATURATED",
    "QGRID",
    "STATS",
    "ClassStats",
    "Level",
    "LevelStats",
    "LoadCurve",
    "latency_stats",
]

SCHEMA_ID = "shrink.loadcurve/1"
# Generator CPU (seconds per second, all its processes) above which "behind" means
# the generator could not send faster, rather than a passing stall.
GENERATOR_SATURATED = 0.5
STATS = ("mean", "p50", "p90", "p99", "p999")
# A repetition where more than this fraction of the requests intended in its window
# failed (transport error, 4xx or 5xx; :meth:`shrink.runlog.RunLog.failures`) did
# not measure the server serving the trace: its level is never used for a MAT (at most
# as the upper end of a bracket, when it is over the threshold already on the requests
# it served: :func:`shrink.mat.mat`).
# One in a thousand, as a p99.9 SLA reads it: more failures than the tail the SLA
# bounds. (wrk and httperf count them apart; k6's http_req_failed is a rate.)
FAILURE_LIMIT = 0.001
# The two-sided confidence of a level's and a MAT's interval over repetitions: the
# convention of the papers' and the load tools' intervals, recorded in every MAT.
CONFIDENCE = 0.95
# Quantile grid: fine in the tail, where SLAs live.
QGRID: tuple[float, ...] = tuple(
    float(q)
    for q in np.unique(
        np.r_[np.linspace(0.0, 0.9, 91), np.linspace(0.9, 0.99, 46), np.linspace(0.99, 1.0, 51)]
    ).round(6)
)


def _null_is_nan(v: Any) -> Any:
    return float("nan") if v is None else v


def _nan_or_bounded(v: float) -> float:
    if not math.isnan(v) and not 0.0 <= v <= 1e15:
        raise ValueError("must be null or a number in [0, 1e15]")
    return v


def _open_keys(meta: dict[str, Any]) -> dict[str, Any]:
    """A curve's ``meta`` less the keys :class:`CurveMeta` types (``LoadCurve.sweep``)."""
    return {k: v for k, v in meta.items() if k not in CurveMeta.model_fields}


# A measured figure: JSON has no NaN, so "none measured" is written null and read NaN.
Measured = Annotated[float, BeforeValidator(_null_is_nan), AfterValidator(_nan_or_bounded)]


@dataclass
class ClassStats:
    """Latency statistics of one request class (or all) at one level, one repetition."""

    n: Count
    throughput: Measured
    mean: Measured
    p50: Measured
    p90: Measured
    p99: Measured
    p999: Measured
    # latency quantiles at QGRID
    dist: Annotated[list[NonNeg | None], Field(max_length=10_000)] | None = None

    def get(self, stat: str) -> float:
        if stat in ("n", "throughput", "mean", "p50", "p90", "p99", "p999"):
            return float(getattr(self, stat))
        # Any other percentile (p75, p95, p99.99) from the quantile grid, which holds
        # p75 and p95 exactly and is fine in the tail; NaN where none was kept.
        from shrink.checks import stat_quantile

        q = stat_quantile(stat)
        if q is None:
            raise AttributeError(stat)
        if not self.dist:
            return float("nan")
        return float(np.interp(q, QGRID, self.dist))


def latency_stats(latencies: np.ndarray, window: float, *, with_dist: bool = True) -> ClassStats:
    """Exact statistics from the per-request latency array (seconds) over ``window`` seconds."""
    lat = np.asarray(latencies, dtype=np.float64)
    n = int(lat.size)
    if n == 0:
        nan = float("nan")
        return ClassStats(0, 0.0, nan, nan, nan, nan, nan, None)
    # "linear" is the exact empirical percentile between order statistics.
    q = np.quantile(lat, [0.5, 0.9, 0.99, 0.999])
    dist = np.quantile(lat, QGRID).tolist() if with_dist else None
    return ClassStats(
        n=n,
        throughput=n / window if window > 0 else float("nan"),
        mean=float(lat.mean()),
        p50=float(q[0]),
        p90=float(q[1]),
        p99=float(q[2]),
        p999=float(q[3]),
        dist=dist,
    )


@dataclass
class LevelStats:
    """One repetition at one load level."""

    throughput: Measured
    overall: ClassStats
    per_class: Annotated[dict[Name, ClassStats], Field(max_length=1_000)] = field(
        default_factory=dict
    )
    offered: Measured = float("nan")  # intended request rate in the window
    # Busy fraction of what the share may use, 0..1: for a CPU-time share of 25% a
    # core busy 25% of the time is at 1.0 (so utilizations compare across shares).
    utilization: NonNeg | None = None
    errors: Count = 0
    generator_behind: bool = False
    send_lag_p99: Finite | None = None
    send_lag_max: Finite | None = None  # the longest stall before a send (bounds its effect)
    generator_cpu: NonNeg | None = None  # generator CPU seconds / wall seconds
    # the seconds shrink itself was known stopped in the run (a signal, job control)
    generator_stopped: NonNeg | None = None
    # part of the generator gone mid-run (an engine process that ended without its report,
    # a cluster's generator lost): its share of the load was not sent or not recorded
    generator_lost: bool = False
    # CPU (in CPUs) used on the share's CPUs by anything but the server's processes,
    # and the hypervisor's steal on them (a VM's host running something else).
    other_cpu: Finite | None = None
    steal: Finite | None = None
    generator_steal: Finite | None = None  # the largest on any of the generator's CPUs
    # Failures by class over the window (shrink.runlog.FAILURE_CLASSES) and the requests
    # intended in it; None in curves written before they were counted.
    failures: Annotated[dict[Name, Count], Field(max_length=64)] | None = None
    requests: Count | None = None
    # of the transport failures, those that timed out after the answer had begun (its
    # first byte came): the server was up; None in curves written before it was counted
    answering: Count | None = None

    @property
    def failure_fraction(self) -> float | None:
        """Failed requests per request intended in the window (None: not counted)."""
        if self.failures is None or not self.requests:
            return None
        return sum(self.failures.values()) / self.requests

    @property
    def failed(self) -> bool:
        """More than :data:`FAILURE_LIMIT` of the window's requests failed."""
        frac = self.failure_fraction
        return frac is not None and frac > FAILURE_LIMIT

    @property
    def capacity(self) -> float | None:
        """Throughput at 100% busy by the utilization law (X / U); None without both."""
        u = self.utilization
        ok = u is not None and u > 0 and math.isfinite(self.throughput) and self.throughput > 0
        return self.throughput / u if ok and u else None

    def get(self, stat: str, cls: str | None = None) -> float:
        if stat == "throughput":
            return self.throughput if cls is None else self.per_class[cls].throughput
        src = self.overall if cls is None else self.per_class[cls]
        return src.get(stat)


@dataclass
class Level:
    """A load level (the knob's value) with its repetitions."""

    level: NonNeg
    reps: Annotated[list[LevelStats], Field(max_length=10_000)]

    @property
    def kept(self) -> list[LevelStats]:
        """The repetitions whose generator kept to its schedule (all, when none did).

        A repetition where the generator fell behind did not put the intended load on
        the server (on a VM, a stall of the generator's CPU does this): it is left out
        of the level's statistics, and the level is left out of MATs only when no
        repetition kept up.
        """
        ok = [r for r in self.reps if not r.generator_behind]
        return ok or list(self.reps)

    @property
    def failed(self) -> bool:
        """A repetition had failures over :data:`FAILURE_LIMIT`: never used for a MAT.

        Unlike a generator that fell behind, failures are the server's answer (a
        missing page, an overloaded PHP pool, a crashed backend), so one such
        repetition is enough: the level did not serve the trace.
        """
        return any(r.failed for r in self.reps)

    def failure_counts(self) -> dict[str, int]:
        """Failures by class, summed over the repetitions (empty when not counted)."""
        out: dict[str, int] = {}
        for r in self.reps:
            for k, v in (r.failures or {}).items():
                out[k] = out.get(k, 0) + int(v)
        return out

    @property
    def reps_behind(self) -> int:
        return sum(r.generator_behind for r in self.reps)

    def stall_bound(self, stat: str, cls: str | None = None) -> float | None:
        """A lower bound on ``stat`` at a level where no repetition kept to its schedule.

        Such a level is left out of every statistic and never used for a MAT. When
        the generator only stalled (its CPU was mostly idle: a VM's host took it),
        its latencies still bound the server's. Every request was sent at most L
        late, L the run's longest send lag, so for a FIFO server every response
        left at most L later than with the schedule kept (the Lindley recursion is monotone in the
        arrival times: bunched sends add queueing, but no more than L); the stamp
        of its arrival can trail by another stall of at most about L. So each
        latency, and any mean or quantile of them, is at most 2L over what the
        schedule would have given. For other disciplines (a pool of PHP processes
        sharing a CPU) this is a close argument, not a proof. A sweep uses it to
        know the crossing lies lower (it does not measure such a level again), and a
        MAT left open reports it as a hint (``MATResult.stalled_ceiling``).

        The smallest over the repetitions of ``stat - 2 * send_lag_max``; None when
        a level kept up, or any repetition lacks its lag or was CPU-bound (a
        saturated generator queues requests where the lag does not show it).
        """
        if not self.generator_behind:
            return None
        bounds = []
        for r in self.reps:
            if (
                r.send_lag_max is None
                or not math.isfinite(r.send_lag_max)
                or r.generator_cpu is None
                or r.generator_cpu >= GENERATOR_SATURATED
                or not _has(r, cls)
            ):
                return None
            bounds.append(r.get(stat, cls) - 2.0 * r.send_lag_max)
        bound = min(bounds)
        return float(bound) if math.isfinite(bound) else None

    def values(self, stat: str, cls: str | None = None) -> np.ndarray:
        return np.array([r.get(stat, cls) for r in self.kept if _has(r, cls)], dtype=np.float64)

    def quantile_function(self, cls: str | None = None) -> np.ndarray | None:
        """The level's latency quantile function (of ``cls``, else overall), or None.

        The mean of the repetitions' ``dist`` vectors: averaging quantile functions
        gives the W1 barycentre of the repetitions. None when no repetition has one.
        """
        dists = []
        for r in self.reps:
            src = r.overall if cls is None else r.per_class.get(cls)
            if src is not None and src.dist:
                dists.append(np.asarray(src.dist, float))
        return np.mean(dists, axis=0) if dists else None

    def stat(
        self, stat: str, cls: str | None = None, conf: float = CONFIDENCE
    ) -> tuple[float, float, float]:
        """(centre over repetitions, CI low, CI high).

        The centre is the median of the kept repetitions (their mean for one or two):
        a repetition the host disturbed (a slow minute of a VM, a stall) moves a mean
        of three by a third of its excess, and near the knee that is enough to move a
        MAT by 20%; the median of three ignores it. The interval is the t-interval of
        the repetitions' mean (degenerate for one), so it still widens with their spread.
        """
        v = self.values(stat, cls)
        v = v[np.isfinite(v)]
        if v.size == 0:
            nan = float("nan")
            return nan, nan, nan
        m = float(v.mean())
        centre = float(np.median(v))
        if v.size == 1:
            return m, m, m
        from scipy import stats as st

        half = float(st.t.ppf(0.5 + conf / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
        return centre, min(centre, m - half), max(centre, m + half)

    @property
    def throughput(self) -> float:
        return self.stat("throughput")[0]

    @property
    def generator_behind(self) -> bool:
        """No repetition kept up: the level measured nothing usable."""
        return all(r.generator_behind for r in self.reps) if self.reps else False

    @property
    def utilization(self) -> float | None:
        u = [r.utilization for r in self.kept if r.utilization is not None]
        return float(np.mean(u)) if u else None


def _has(rep: LevelStats, cls: str | None) -> bool:
    return cls is None or cls in rep.per_class


@dataclass
class LoadCurve(files.VersionedFile):
    """Latency against load for one target (machine x mapping x share) and one sample.

    ``knob`` names what ``Level.level`` is: ``rate_factor``, ``users`` or ``rate``.
    ``alpha`` is the sample fraction of the trace, ``share`` the part of the full
    target the curve was measured on (:class:`shrink.share.Share`; a mapping in
    :meth:`shrink.share.Share.to_dict`'s form is read as one).

    A file's ``meta`` is two fields here: ``sweep``, the keys later stages read, typed
    and frozen (:class:`shrink.schemas.CurveMeta`), and ``meta``, the other keys as
    written (notes no stage reads as a type). Both are written back as one ``meta``.
    Typed keys passed in ``meta`` to the constructor are moved to ``sweep``.
    """

    levels: Annotated[list[Level], Field(max_length=MAX_LIST)]
    knob: Name = "rate_factor"
    alpha: Alpha = 1.0
    share: Share = field(default_factory=lambda: Share("all", (), 1.0))
    mapping: Name = "1-replica"
    machine: dict[str, Any] = field(default_factory=dict)
    sweep: Annotated[CurveMeta, Field(validation_alias="meta", exclude=True)] = field(
        default_factory=CurveMeta
    )
    meta: Annotated[dict[str, Any], AfterValidator(_open_keys)] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.levels = sorted(self.levels, key=lambda lv: lv.level)
        if not isinstance(self.share, Share):
            self.share = Share.from_dict(self.share)
        typed = {k: v for k, v in self.meta.items() if k in CurveMeta.model_fields}
        if typed:
            self.sweep = self.sweep.with_(**typed)
            self.meta = _open_keys(self.meta)

    # views ------------------------------------------------------------------
    def usable(self) -> list[Level]:
        """Levels fit for a MAT (the generator kept up, no failures over the limit), by knob."""
        # Sorted: an automatic sweep adds refinement levels last, out of order.
        return sorted(
            (lv for lv in self.levels if not lv.generator_behind and not lv.failed),
            key=lambda lv: lv.level,
        )

    def failed_levels(self) -> list[Level]:
        """Levels left out of every MAT because requests failed (:data:`FAILURE_LIMIT`)."""
        return sorted((lv for lv in self.levels if lv.failed), key=lambda lv: lv.level)

    def stalled_over(self, stat: str, threshold: float, cls: str | None = None) -> list[Level]:
        """Excluded levels that are still over ``threshold``: their :meth:`Level.stall_bound` is.

        They stay out of every MAT; they tell a sweep and a reader that the crossing
        lies below them.
        """
        out = []
        for lv in sorted(self.levels, key=lambda x: x.level):
            bound = lv.stall_bound(stat, cls)
            if bound is not None and bound > threshold:
                out.append(lv)
        return out

    def series(
        self, stat: str, cls: str | None = None, *, usable_only: bool = True
    ) -> dict[str, np.ndarray]:
        """Arrays over levels: level, throughput (+CI) and the statistic (+CI)."""
        lv = self.usable() if usable_only else sorted(self.levels, key=lambda x: x.level)
        thr = np.array([x.stat("throughput", cls) for x in lv]).reshape(-1, 3)
        val = np.array([x.stat(stat, cls) for x in lv]).reshape(-1, 3)
        return {
            "level": np.array([x.level for x in lv], dtype=np.float64),
            "throughput": thr[:, 0],
            "throughput_lo": thr[:, 1],
            "throughput_hi": thr[:, 2],
            "value": val[:, 0],
            "lo": val[:, 1],
            "hi": val[:, 2],
        }

    def rep_range(self, stat: str) -> tuple[list[float], list[float]]:
        """Smallest and largest repetition of ``stat`` at each usable level (series order)."""
        lo, hi = [], []
        for lv in self.usable():
            v = lv.values(stat)
            v = v[np.isfinite(v)]
            lo.append(float(v.min()) if v.size else float("nan"))
            hi.append(float(v.max()) if v.size else float("nan"))
        return lo, hi

    def summary(self) -> dict[str, list[float]]:
        """The mean and p99.9 (with CIs) against throughput, for JSON and figures."""
        out: dict[str, list[float]] = {}
        for stat in ("mean", "p999"):
            s = self.series(stat)
            out["throughput"] = s["throughput"].tolist()
            out[stat] = s["value"].tolist()
            out[f"{stat}_lo"] = s["lo"].tolist()
            out[f"{stat}_hi"] = s["hi"].tolist()
            # The spread of the repetitions themselves: with two repetitions a 95% t-interval
            # is +/-12.7 standard errors, too wide to show what was measured.
            out[f"{stat}_min"], out[f"{stat}_max"] = self.rep_range(stat)
        return out

    def normalized(self) -> LoadCurve:
        """The same curve with throughputs divided by alpha * share fraction (SHRiNK)."""
        scale = self.alpha
        out = LoadCurve.from_dict(self.to_dict())
        for lv in out.levels:
            for r in lv.reps:
                r.throughput /= scale
                r.offered /= scale
                r.overall.throughput /= scale
                for c in r.per_class.values():
                    c.throughput /= scale
        out.meta = {**out.meta, "normalized_by_alpha": scale}
        return out

    # I/O ---------------------------------------------------------------------
    SCHEMA = SCHEMA_ID
    WHAT = "load curve"

    @model_validator(mode="before")
    @classmethod
    def _mapping_named(cls, d: Any) -> Any:
        # A curve file without a mapping named none (the default is for new curves).
        return {"mapping": "", **d} if isinstance(d, dict) else d

    @field_serializer("meta", mode="wrap")
    def _one_meta(
        self, meta: dict[str, Any], handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        # The file keeps one ``meta``: the open keys and the typed ones stated.
        return handler({**meta, **self.sweep.model_dump(exclude_unset=True)})

    def write_json(self, path: str | Path) -> Path:
        """Write the curve; a whole one (``X.json``) replaces what a stopped run kept of an
        earlier one beside it (``X.partial.json``, ``X.summary.json``), which stayed, as
        new as it looked, beside the rerun's report."""
        written = write_text(path, dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        stem = written.name.removesuffix(".json")
        if stem != written.name and not stem.endswith((".partial", ".summary")):
            for twin in (f"{stem}.partial.json", f"{stem}.summary.json"):
                stale = written.with_name(twin)
                if not unchanged_since_noted(stale):
                    continue  # another run's, written since this one began (its kept levels)
                with contextlib.suppress(OSError):
                    st = os.lstat(stale)
                    # a file of ours: not a link, nor another user's in a shared folder
                    if _stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        os.unlink(stale)
        return written

    @classmethod
    def read_json(cls, path: str | Path) -> LoadCurve:
        """Read a curve, checked against its type (:data:`CURVE_FORMAT`)."""
        return cls.from_dict(files.read_json(path, what=cls.WHAT), source=path)

    @classmethod
    def from_levels(
        cls, pairs: Iterable[tuple[float, Sequence[LevelStats]]], **kw: Any
    ) -> LoadCurve:
        return cls(levels=[Level(float(k), list(v)) for k, v in pairs], **kw)

    def require_levels(self, n: int = 2, thresholds: Mapping[str, float] | None = None) -> None:
        """Refuse a curve with fewer than ``n`` usable levels, saying why: the levels left
        out (failed requests, the generator behind), a lowest level already past one of
        ``thresholds``, levels the trace was too short for, the time budget. It said
        only "1 usable level(s)"."""
        usable = self.usable()
        if len(usable) >= n:
            return
        why = "; ".join(_why_few(self, usable, thresholds or {}))
        raise MeasurementError(
            f"load curve has {len(usable)} usable level(s), need at least {n}"
            + (f": {why}" if why else "")
        )


def _why_few(curve: LoadCurve, usable: list[Level], thresholds: Mapping[str, float]) -> list[str]:
    """What a user can change when a curve has too few usable levels."""
    out, knob = [], curve.knob
    failed = [f"{lv.level:g}" for lv in curve.failed_levels()]
    if failed:
        out.append(
            f"requests failed (over {100 * FAILURE_LIMIT:g}%) at {knob} {', '.join(failed)}: "
            "left out (see the server's error log)"
        )
    behind = [f"{lv.level:g}" for lv in curve.levels if lv.generator_behind and not lv.failed]
    if behind:
        out.append(f"the generator fell behind at {knob} {', '.join(behind)}: left out")
    if usable:
        low = usable[0]
        over = [
            f"{stat} {1e3 * v:.4g} ms > {1e3 * limit:.4g} ms"
            for stat, limit in thresholds.items()
            if (v := low.stat(stat)[0]) > limit
        ]
        if over:
            out.append(
                f"its lowest level ({knob} {low.level:g}) was already past the threshold "
                f"({', '.join(over)}), so the knee lies below every level measured: "
                "measure lower levels"
            )
    # levels the trace could not fill a window at (no loop window) were never measured
    if short := sorted(set(curve.meta.get("levels_skipped_trace_too_short") or [])):
        shown = ", ".join(f"{x:g}" for x in short)
        out.append(
            f"the trace was too short to fill a window at {knob} {shown}: not measured "
            "(use a longer trace)"
        )
    # a sweep whose time budget left levels out says so: that, not the server, is why
    if left := len(set(curve.meta.get("levels_skipped_time_budget") or [])):
        out.append(f"the time budget (--budget) left {left} more unmeasured: allow more time")
    return out


CURVE_FORMAT = LoadCurve.file_format()


def pooled_capacity(
    reps: Iterable[LevelStats], band: tuple[float, float] = (0.0, math.inf)
) -> tuple[float, int] | None:
    """All the requests over all the CPU of the repetitions whose utilization is in
    ``band`` (from inclusive, to exclusive) and whose generator kept up, and how many
    they are: a capacity by the utilization law. None without one."""
    lo, hi = band
    kept = [
        r for r in reps
        if r.capacity is not None and lo <= float(r.utilization or 0.0) < hi
        and not r.generator_behind
    ]  # fmt: skip
    if not kept:
        return None
    busy = sum(float(r.utilization or 0.0) for r in kept)
    return sum(r.throughput for r in kept) / busy, len(kept)
