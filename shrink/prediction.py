"""The Prediction value: MATs with intervals and latency curves per mapping, as JSON.

Schema ``shrink.prediction/1``::

    {"schema": "shrink.prediction/1", "machine": {...},
     "mappings": {name: {"mean": {"mat": req_per_s, "ci": [lo, hi], "threshold": s},
                         "p999": {...},
                         "curve": {"throughput": [...], "mean": [...], "p999": [...]}}},
     "recommended": name, "reason": "...", "calibration": {...}, "assumptions": [...]}

The what-if (:mod:`extrapolate.whatif`) fills in only these. The main job
(:func:`shrink.predict.predict`) also gives each MAT its ``status`` and
``stalled_ceiling`` and records what it measured and how (``target``,
``alpha``, ``share``, ``thresholds``, ``measured_mats``, ``self_checks``,
``trace``, ``provenance``, ``full_run``; ``inputs``, ``whatif`` and ``server``
(the testbed's recipe and its versions) from its caller's :mod:`shrink.run_inputs`).
A field that is None is not written.
Other keys (``workload``, ``sweep``, ``source_curve``) are kept in ``extra``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from shrink import files
from shrink.atomic import write_text
from shrink.errors import TraceFormatError
from shrink.jsonout import dumps
from shrink.schemas import PredictionFile
from shrink.share import SHARE_FORMAT, Share

__all__ = ["SCHEMA_ID", "MappingPrediction", "Prediction", "StatPrediction", "rank_mappings"]

SCHEMA_ID = "shrink.prediction/1"


def _float(x: Any) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True)
class StatPrediction:
    """A MAT (req/s) under a threshold (s), with its interval.

    ``status`` (``ok``, ``not_reached``, ``below_range``) comes with a MAT read
    off a curve (:class:`shrink.mat.MATResult`); the what-if's modelled MATs have
    none, and write none. ``stalled_ceiling`` is the hint a measured curve's
    stalled levels give; a curve the cross-socket model re-mapped has no stalled
    levels and writes no hint (``measured`` False).
    """

    mat: float | None
    ci: tuple[float | None, float | None]
    threshold: float
    status: str | None = None
    stalled_ceiling: float | None = None
    measured: bool = True
    # The main job's intervals are prediction intervals (shrink.uncertainty): the
    # repetitions' own CI and the terms added to it are kept beside them.
    ci_repetitions: tuple[float | None, float | None] | None = None
    error_budget: dict[str, float] | None = None

    @property
    def is_bound(self) -> bool:
        """Whether the MAT is only a bound (the curve did not cross inside its levels)."""
        return self.status not in (None, "ok")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mat": self.mat, "ci": [self.ci[0], self.ci[1]]}
        d["threshold"] = self.threshold
        if self.status is not None:
            d["status"] = self.status
            # "lower" (the MAT is at least mat), "upper" (below it) or None: see shrink.mat
            d["bound"] = {"not_reached": "lower", "below_range": "upper"}.get(self.status)
            if self.measured:
                d["stalled_ceiling"] = self.stalled_ceiling
        if self.ci_repetitions is not None:
            d["ci_repetitions"] = list(self.ci_repetitions)
        if self.error_budget is not None:
            d["error_budget"] = dict(self.error_budget)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StatPrediction:
        ci = d.get("ci") or (None, None)
        rep = d.get("ci_repetitions")
        return cls(
            _float(d["mat"]),
            (_float(ci[0]), _float(ci[1])),
            float(d["threshold"]),
            None if d.get("status") is None else str(d["status"]),
            _float(d.get("stalled_ceiling")),
            "stalled_ceiling" in d,
            None if rep is None else (_float(rep[0]), _float(rep[1])),
            None if d.get("error_budget") is None else dict(d["error_budget"]),
        )


@dataclass(frozen=True)
class MappingPrediction:
    stats: dict[str, StatPrediction]
    curve: dict[str, list[float]]
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: v.to_dict() for k, v in self.stats.items()}
        d["curve"] = self.curve
        if self.detail:
            d["detail"] = self.detail
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MappingPrediction:
        stats = {
            k: StatPrediction.from_dict(v)
            for k, v in d.items()
            if k not in ("curve", "detail") and isinstance(v, dict) and "mat" in v
        }
        return cls(stats, dict(d.get("curve", {})), dict(d.get("detail", {})))


def rank_mappings(
    mappings: dict[str, MappingPrediction], stats: list[str], *, decimals: int | None = None
) -> list[str]:
    """The mappings best first: the recommendation rule.

    A mapping ranks by its MATs for ``stats`` in that order (the first decides,
    the next breaks a tie), higher first; a missing MAT ranks last, and equals
    keep their given order. ``decimals`` rounds the MATs first (``-1``: to tens
    of req/s, so that a model's numerical noise decides nothing).
    """

    def key(name: str) -> tuple[float, ...]:
        out = []
        for stat in stats:
            sp = mappings[name].stats.get(stat)
            x = sp.mat if sp is not None and sp.mat else float("-inf")
            out.append(round(x, decimals) if decimals is not None and x != float("-inf") else x)
        return tuple(out)

    # reverse=True keeps equals in their given order (sorting stays stable).
    return sorted(mappings, key=key, reverse=True)


# The main job's fields, in the order a reader meets them; None: not written.
_RECORDED = (
    "target",
    "target_description",
    "alpha",
    "level",
    "seed",
    "share",
    "thresholds",
    "measured_mats",
    "confidence_summary",
    "self_checks",
    "trace",
    "provenance",
    "full_run",
    "inputs",
    "whatif",
    "server",
)


@dataclass
class Prediction:
    """What the full machine is predicted to do under each mapping."""

    machine: dict[str, Any]
    mappings: dict[str, MappingPrediction]
    # None: no mapping is recommended (the MATs compared are bounds); ``reason`` says why
    recommended: str | None
    reason: str
    calibration: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    # What the main job measured, and how (see the module docstring).
    target: str | None = None
    target_description: str | None = None
    alpha: float | None = None
    level: str | None = None
    seed: int | None = None
    share: Share | None = None
    thresholds: dict[str, float] | None = None
    measured_mats: dict[str, StatPrediction] | None = None
    confidence_summary: str | None = None
    self_checks: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    full_run: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    whatif: dict[str, Any] | None = None
    server: dict[str, Any] | None = None  # the testbed's recipe: name, source, versions
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "machine": self.machine,
            "mappings": {k: v.to_dict() for k, v in self.mappings.items()},
            "recommended": self.recommended,
            "reason": self.reason,
            "calibration": self.calibration,
            "assumptions": self.assumptions,
        }
        for name in _RECORDED:
            value = getattr(self, name)
            if value is None:
                continue
            if name == "measured_mats":
                value = {k: v.to_dict() for k, v in value.items()}
            elif name == "share":
                value = value.to_dict()
            d[name] = value
        return {**d, **self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | Path | None = None) -> Prediction:
        if d.get("schema") != SCHEMA_ID:
            raise TraceFormatError(
                f"schema == {d.get('schema')!r}, expected {SCHEMA_ID!r}", path=source
            )
        if not isinstance(d.get("mappings"), dict):
            raise TraceFormatError("a prediction without 'mappings'", path=source)
        known = {f.name for f in fields(cls)} | {"schema"}
        recorded: dict[str, Any] = {k: d.get(k) for k in _RECORDED}
        if recorded["share"] is not None:
            recorded["share"] = files.adapt(
                SHARE_FORMAT, recorded["share"], what="prediction", at="share", source=source
            )
        if recorded["measured_mats"] is not None:
            recorded["measured_mats"] = {
                k: StatPrediction.from_dict(v) for k, v in recorded["measured_mats"].items()
            }
        return cls(
            machine=dict(d.get("machine", {})),
            mappings={k: MappingPrediction.from_dict(v) for k, v in d["mappings"].items()},
            recommended=str(d["recommended"]) if d.get("recommended") else None,
            reason=str(d.get("reason", "")),
            calibration=dict(d.get("calibration", {})),
            assumptions=list(d.get("assumptions", [])),
            extra={k: v for k, v in d.items() if k not in known},
            **recorded,
        )

    def mapping_stat(self, mapping: str, stat: str) -> StatPrediction | None:
        """The prediction for ``stat`` under ``mapping``, or None when it has none."""
        m = self.mappings.get(mapping)
        return None if m is None else m.stats.get(stat)

    def write_json(self, path: str | Path, *, indent: int = 1) -> Path:
        text = dumps(self.to_dict(), indent=indent, sort_keys=True, default=_json)
        return write_text(path, text + "\n")  # atomic: never a half-written file

    @classmethod
    def read_json(cls, path: str | Path) -> Prediction:
        """Read a prediction, checked against :class:`shrink.schemas.PredictionFile`."""
        d = files.read_json(path, PredictionFile, what="prediction")
        return cls.from_dict(d, source=path)


def _json(o: Any) -> Any:
    """numpy scalars as Python numbers (a MAT computed with numpy is a numpy float)."""
    item = getattr(o, "item", None)
    if item is None:
        raise TypeError(type(o).__name__)
    return item()
