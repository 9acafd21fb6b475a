"""The Prediction value: MATs with intervals and latency curves per mapping, as JSON.

Schema ``shrink.prediction/1`` (fixed by the project's conventions)::

    {"schema": "shrink.prediction/1", "machine": {...},
     "mappings": {name: {"mean": {"mat": req_per_s, "ci": [lo, hi], "threshold": s},
                         "p999": {...},
                         "curve": {"throughput": [...], "mean": [...], "p999": [...]}}},
     "recommended": name, "reason": "...", "calibration": {...}, "assumptions": [...]}

Extra keys (``workload``, ``sweep``, ``checks``) are allowed and ignored by readers
that do not know them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink import files
from shrink.errors import TraceFormatError
from shrink.schemas import PredictionFile

__all__ = ["MappingPrediction", "Prediction", "StatPrediction"]

SCHEMA_ID = "shrink.prediction/1"


@dataclass(frozen=True)
class StatPrediction:
    """A MAT (req/s) under a threshold (s), with its interval."""

    mat: float
    ci: tuple[float, float]
    threshold: float

    def to_dict(self) -> dict[str, Any]:
        return {"mat": self.mat, "ci": [self.ci[0], self.ci[1]], "threshold": self.threshold}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StatPrediction:
        return cls(float(d["mat"]), (float(d["ci"][0]), float(d["ci"][1])), float(d["threshold"]))


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
            if k not in ("curve", "detail") and isinstance(v, dict) and v.get("mat") is not None
        }
        return cls(stats, dict(d.get("curve", {})), dict(d.get("detail", {})))


@dataclass
class Prediction:
    """What the full machine is predicted to do under each mapping."""

    machine: dict[str, Any]
    mappings: dict[str, MappingPrediction]
    recommended: str
    reason: str
    calibration: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_ID,
            "machine": self.machine,
            "mappings": {k: v.to_dict() for k, v in self.mappings.items()},
            "recommended": self.recommended,
            "reason": self.reason,
            "calibration": self.calibration,
            "assumptions": self.assumptions,
            **self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> Prediction:
        if d.get("schema") != SCHEMA_ID:
            raise TraceFormatError(
                f"schema == {d.get('schema')!r}, expected {SCHEMA_ID!r}", path=source
            )
        known = {
            "schema",
            "machine",
            "mappings",
            "recommended",
            "reason",
            "calibration",
            "assumptions",
        }
        return cls(
            machine=dict(d.get("machine", {})),
            mappings={k: MappingPrediction.from_dict(v) for k, v in d["mappings"].items()},
            recommended=str(d.get("recommended", "")),
            reason=str(d.get("reason", "")),
            calibration=dict(d.get("calibration", {})),
            assumptions=list(d.get("assumptions", [])),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def read_json(cls, path: str | Path) -> Prediction:
        """Read a prediction, checked against :class:`shrink.schemas.PredictionFile`."""
        d = files.read_json(path, PredictionFile, what="prediction")
        return cls.from_dict(d, source=str(path))
