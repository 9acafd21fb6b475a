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

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    computed_field,
    model_serializer,
    model_validator,
)

from shrink import files
from shrink.atomic import write_text
from shrink.jsonout import dumps
from shrink.schemas import (
    MAX_LIST,
    Alpha,
    Loose,
    Name,
    NonNeg,
    Positive,
    Stat,
    Text,
    ValidateInputs,
)
from shrink.share import Share

__all__ = [
    "PREDICTION_FORMAT",
    "SCHEMA_ID",
    "MappingPrediction",
    "Prediction",
    "StatPrediction",
    "rank_mappings",
]

SCHEMA_ID = "shrink.prediction/1"


def _none(value: Any) -> bool:
    return value is None


def _empty(value: Any) -> bool:
    return not value


def _inputs_checked(inputs: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``shrink validate`` reads back checked (:class:`ValidateInputs`), all kept."""
    return (
        None
        if inputs is None
        else ValidateInputs.model_validate(inputs).model_dump(exclude_unset=True)
    )


Bounds = tuple[Loose | None, Loose | None]


@dataclass(frozen=True)
class StatPrediction(files.FileFormat):
    """A MAT (req/s) under a threshold (s), with its interval.

    ``status`` (``ok``, ``not_reached``, ``below_range``) comes with a MAT read
    off a curve (:class:`shrink.mat.MATResult`); the what-if's modelled MATs have
    none, and write none. ``stalled_ceiling`` is the hint a measured curve's
    stalled levels give; a curve the cross-socket model re-mapped has no stalled
    levels and writes no hint (``measured`` False).
    """

    mat: Loose | None
    ci: Bounds
    threshold: Positive
    status: Annotated[
        Literal["ok", "not_reached", "below_range"] | None, Field(exclude_if=_none)
    ] = None
    stalled_ceiling: NonNeg | None = None
    # Not written: a reader knows it by the "stalled_ceiling" key being there.
    measured: Annotated[bool, Field(exclude=True)] = True
    # The main job's intervals are prediction intervals (shrink.uncertainty): the
    # repetitions' own CI and the terms added to it are kept beside them.
    ci_repetitions: Annotated[Bounds | None, Field(exclude_if=_none)] = None
    error_budget: Annotated[dict[str, float] | None, Field(exclude_if=_none)] = None

    @property
    def is_bound(self) -> bool:
        """Whether the MAT is only a bound (the curve did not cross inside its levels)."""
        return self.status not in (None, "ok")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bound(self) -> Literal["lower", "upper"] | None:
        """ "lower" (the MAT is at least mat), "upper" (below it) or None: see shrink.mat."""
        return {"not_reached": "lower", "below_range": "upper"}.get(self.status or "")

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        if isinstance(d, Mapping):
            return {**d, "measured": "stalled_ceiling" in d, "ci": d.get("ci") or (None, None)}
        return d

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        # A MAT read off a curve says what it is (status, bound) and, where measured,
        # the hint its stalled levels give; a modelled MAT writes neither.
        d: dict[str, Any] = handler(self)
        if self.status is None:
            d.pop("bound", None)
        if self.status is None or not self.measured:
            d.pop("stalled_ceiling", None)
        return d

    WHAT = "MAT"


STAT_FORMAT = StatPrediction.file_format()


@dataclass(frozen=True)
class MappingPrediction(files.FileFormat):
    stats: Annotated[dict[Name, StatPrediction], Field(max_length=1_000)]
    curve: dict[Name, Annotated[list[Loose | None], Field(max_length=MAX_LIST)]] = field(
        default_factory=dict
    )
    detail: Annotated[dict[str, Any], Field(exclude_if=_empty)] = field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        # The file holds the statistics beside the curve: any key holding a MAT is one.
        if isinstance(d, Mapping) and "stats" not in d:
            stats = {
                k: v
                for k, v in d.items()
                if k not in ("curve", "detail") and isinstance(v, Mapping) and "mat" in v
            }
            return {"stats": stats, "curve": d.get("curve", {}), "detail": d.get("detail", {})}
        return d

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        return {**d.pop("stats"), **d}

    WHAT = "mapping's prediction"


MAPPING_FORMAT = MappingPrediction.file_format()


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


@dataclass
class Prediction(files.VersionedFile):
    """What the full machine is predicted to do under each mapping."""

    machine: dict[str, Any]
    mappings: Annotated[dict[Name, MappingPrediction], Field(max_length=1_000)]
    # None: no mapping is recommended (the MATs compared are bounds); ``reason`` says why
    recommended: Name | None
    reason: Text
    calibration: dict[str, Any] = field(default_factory=dict)
    assumptions: Annotated[list[Any], Field(max_length=MAX_LIST)] = field(default_factory=list)
    # What the main job measured, and how (see the module docstring); None: not written.
    target: Annotated[Name | None, Field(exclude_if=_none)] = None
    target_description: Annotated[Text | None, Field(exclude_if=_none)] = None
    alpha: Annotated[Alpha | None, Field(exclude_if=_none)] = None
    level: Annotated[Name | None, Field(exclude_if=_none)] = None
    seed: Annotated[Annotated[int, Field(ge=0, le=2**63)] | None, Field(exclude_if=_none)] = None
    share: Annotated[Share | None, Field(exclude_if=_none)] = None
    thresholds: Annotated[dict[Stat, Positive] | None, Field(exclude_if=_none)] = None
    measured_mats: Annotated[dict[Stat, StatPrediction] | None, Field(exclude_if=_none)] = None
    confidence_summary: Annotated[Text | None, Field(exclude_if=_none)] = None
    self_checks: Annotated[dict[str, Any] | None, Field(exclude_if=_none)] = None
    trace: Annotated[dict[str, Any] | None, Field(exclude_if=_none)] = None
    provenance: Annotated[dict[str, Any] | None, Field(exclude_if=_none)] = None
    full_run: Annotated[dict[str, Any] | None, Field(exclude_if=_none)] = None
    inputs: Annotated[
        dict[str, Any] | None, AfterValidator(_inputs_checked), Field(exclude_if=_none)
    ] = None
    whatif: Annotated[dict[str, Any] | None, Field(exclude_if=_none)] = None
    # the testbed's recipe: name, source, versions
    server: Annotated[dict[str, Any] | None, Field(exclude_if=_none)] = None
    # Keys this version does not know (``workload``, ``sweep``), kept and written back.
    extra: Annotated[dict[str, Any], Field(exclude=True)] = field(default_factory=dict)

    SCHEMA = SCHEMA_ID
    WHAT = "prediction"

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        if not isinstance(d, Mapping):
            return d
        known = {f.name for f in fields(cls)}
        out = {k: v for k, v in d.items() if k in known}
        out["schema"] = d.get("schema")  # checked by VersionedFile, in either order
        out["extra"] = {k: v for k, v in d.items() if k not in known and k != "schema"}
        out["recommended"] = d.get("recommended") or None
        # The what-if's files may lack the main job's machine and reason.
        out.setdefault("machine", {})
        out.setdefault("reason", "")
        return out

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        return {**handler(self), **self.extra}

    def mapping_stat(self, mapping: str, stat: str) -> StatPrediction | None:
        """The prediction for ``stat`` under ``mapping``, or None when it has none."""
        m = self.mappings.get(mapping)
        return None if m is None else m.stats.get(stat)

    def write_json(self, path: str | Path, *, indent: int = 1) -> Path:
        text = dumps(self.to_dict(), indent=indent, sort_keys=True)
        return write_text(path, text + "\n")  # atomic: never a half-written file

    @classmethod
    def read_json(cls, path: str | Path) -> Prediction:
        """Read a prediction, checked against its type (:data:`PREDICTION_FORMAT`)."""
        return cls.from_dict(files.read_json(path, what=cls.WHAT), source=path)


PREDICTION_FORMAT = Prediction.file_format()
