"""The schemas of the JSON and TOML files shrink reads, as pydantic models.

:mod:`shrink.files` validates every such file against one of these before a
stage sees it. Each model bounds every size a file can state (sockets, cores,
list lengths, string lengths, counts) so that a damaged or hostile file fails
here with a one-line error instead of allocating gigabytes later. Models allow
keys they do not know: a newer writer may add some, and readers ignore them.
Floats that a writer stores as ``null`` for NaN are ``float | None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

__all__ = [
    "CurveMeta",
    "ParquetMeta",
    "RegistryEntryFile",
    "TraceMeta",
]

# Bounds: generous for any real file, small enough that nothing derived from them
# (a CPU list per socket, a schedule per level) can exhaust memory.
MAX_LIST = 100_000
MAX_NAME = 4_096
MAX_TEXT = 1_000_000
MAX_CPUS = 8_192

Name = Annotated[str, Field(max_length=MAX_NAME)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Count = Annotated[int, Field(ge=0, le=10**12)]
Pid = Annotated[int, Field(ge=1, le=2**22)]  # the kernel's pid_max limit
Cpu = Annotated[int, Field(ge=0, lt=MAX_CPUS)]
Port = Annotated[int, Field(ge=0, le=65_535)]
Socket = Annotated[int, Field(ge=0, le=63)]
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-1e15, le=1e15)]
NonNeg = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1e15)]
Positive = Annotated[float, Field(allow_inf_nan=False, gt=0.0, le=1e15)]
Fraction = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1.0)]
Alpha = Annotated[float, Field(allow_inf_nan=False, gt=0.0, le=1.0)]


def _bounded_or_nan(v: float) -> float:
    if not math.isnan(v) and abs(v) > 1e15:
        raise ValueError("must be NaN or at most 1e15 in magnitude")
    return v


# A figure a writer may store as NaN (json.dumps writes NaN), but never a huge one.
Loose = Annotated[float, AfterValidator(_bounded_or_nan)]
# A statistic as the files spell it (shrink.checks.parse_stat): mean, or any percentile
# in [1, 100), p95 or p9999 for p99.99 (the decimals never end in 0), as predict writes
# the thresholds users give.
Stat = Annotated[str, Field(pattern=r"^(mean|p(0[1-9]|[1-9][0-9])([0-9]*[1-9])?)$", max_length=64)]


class _Open(BaseModel):
    """A part of a file: known keys checked, unknown keys kept."""

    model_config = ConfigDict(extra="allow")


# LoadCurve (its levels: shrink.loadcurve.CURVE_FORMAT) ------------------------------
class _Stated(BaseModel):
    """A frozen part of a curve: written back with the keys it was given and no others.

    A default is not written where no writer stated it, so a file reads and writes
    back unchanged, and a curve measured now writes what one measured before did.
    """

    model_config = ConfigDict(frozen=True)

    @model_serializer(mode="wrap")
    def _stated(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}

    def with_(self, **changes: Any) -> Self:
        """A copy with ``changes`` stated, checked as a file's would be."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown and self.model_config.get("extra") != "allow":
            raise TypeError(f"{type(self).__name__} has no key {', '.join(unknown)}")
        return self.model_validate({**self.model_dump(exclude_unset=True), **changes})


class GeneratorMeta(_Stated):
    """How a live sweep's load generator was set up (other keys kept as written)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    routing: Name = "hash"
    conns_per_session: Annotated[int, Field(ge=1, le=1_000)] = 1
    engine: Name | None = None
    lag_limit: NonNeg | None = None  # seconds of send lag past which a rep fell behind


class CurveMeta(_Stated):
    """The keys of a curve's ``meta`` that later stages read: ``LoadCurve.sweep``.

    How the curve was measured: the generator's set-up, whether it is the full-scale
    side of a paired sweep, the swept side's time scaling and load per level, the
    trace seconds skipped, the workload and the target's description. The other keys
    of ``meta`` are notes no stage reads as a type (``LoadCurve.meta``).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    generator: GeneratorMeta = GeneratorMeta()
    paired: bool = False
    scaled_time: Positive = 1.0
    share_load: Positive = 1.0
    skip: NonNeg = 0.0
    workload: Name = "measured"
    target: dict[str, Any] = {}


# Testbed registry (the state itself: shrink.testbed.state.TestbedState) -------------
class RegistryOwner(_Open):
    pid: Pid
    starttime: Count | None = None


class RegistryEntryFile(_Open):
    """An entry of the testbed registry (:mod:`shrink.testbed.registry`)."""

    state_path: Text
    owner: RegistryOwner | None = None
    state: dict[str, Any]  # read as shrink.testbed.state.TestbedState by the registry


# Prediction (the rest: shrink.prediction.PREDICTION_FORMAT) --------------------------
class _DocrootWalk(_Open):
    """The document root's walk predict recorded (:func:`shrink.docroot_print.docroot_record`
    less its digest): validate walks it again as far and names what differs."""

    entries: Count | None = None
    bounded: Text | None = None
    unreadable: Annotated[list[Text], Field(max_length=MAX_LIST)] = []
    unreadable_count: Count = 0
    digests: Annotated[dict[Text, Name], Field(max_length=MAX_LIST)] = {}


class _Fingerprints(_Open):
    """The fingerprints of the files a prediction read besides its trace."""

    target: Name | None = None
    machine: Name | None = None
    docroot: Name | None = None
    server: Name | None = None
    docroot_walk: _DocrootWalk | None = None


class _DocrootChanged(_Open):
    """The document root's fingerprints at predict's start and end, when they differ,
    and the names that differ (the report's checks say them)."""

    at_start: Name | None = None
    at_end: Name | None = None
    differ: Annotated[list[Text], Field(max_length=MAX_LIST)] = []


class ValidateInputs(_Open):
    """What ``shrink validate --full-run run`` reads from ``prediction.json``'s inputs."""

    trace: Text | None = None
    target: Name = "testbed"
    machine: Name = "this"
    docroot: Text | None = None
    server_cpus: Annotated[list[Cpu], Field(max_length=MAX_CPUS)] | None = None
    plan: dict[str, Any] | None = None
    skip: NonNeg = 0.0
    # (an edited walk, its entries "x", was an internal error of validate's)
    fingerprints: _Fingerprints | None = None
    docroot_changed: _DocrootChanged | None = None


# Parquet metadata ------------------------------------------------------------------
class ParquetMeta(_Open):
    """The JSON a Parquet file of shrink's (a trace, a run log) keeps in its metadata."""


def _number_in(low: float, high: float, *, above: bool = False) -> Callable[[Any], Any]:
    """A check that a value is a number in [low, high] (``above``: in (low, high]) that keeps
    it as the writer stored it: an int stays an int (not 1 -> 1.0), so a trace read and
    written again has the same metadata bytes."""

    def check(value: Any) -> Any:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not (value > low if above else value >= low)
            or value > high
        ):
            raise ValueError(f"must be a number in {'(' if above else '['}{low:g}, {high:g}]")
        return value

    return check


_MetaAlpha = Annotated[Any, AfterValidator(_number_in(0.0, 1.0, above=True))]
_MetaCount = Annotated[Any, AfterValidator(_number_in(0.0, 1e12))]
_MetaSpan = Annotated[Any, AfterValidator(_number_in(0.0, 1e15, above=True))]
_MetaTime = Annotated[Any, AfterValidator(_number_in(-1e15, 1e15))]


class TraceMeta(ParquetMeta):
    """The JSON a trace keeps in its Parquet metadata (provenance).

    The keys later stages compute with are typed: a trace file whose ``alpha`` was a
    list or ``users`` a word stopped ``sample`` and ``predict`` with a traceback.
    """

    alpha: _MetaAlpha = None
    alpha_total: _MetaAlpha = None
    users: _MetaCount = None
    parent_users: _MetaCount = None
    loop_span: _MetaSpan = None
    t_start: _MetaTime = None
    mode: Literal["session", "open"] | None = None
    lineage: Annotated[list[dict[str, Any]], Field(max_length=MAX_LIST)] | None = None
    warnings: Annotated[list[Text], Field(max_length=MAX_LIST)] | None = None
