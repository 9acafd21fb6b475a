"""The one sampler protocol, the registry the CLI names samplers by, and provenance.

A sampler is anything with a ``name`` and a ``sample(trace, alpha, *, seed)``
method returning a new :class:`~shrink.trace.Trace` that holds a fraction
alpha of the parent. Samplers register a factory under a level name::

    >>> from samplers import get_sampler
    >>> get_sampler("session").name
    'session'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.checks import check_alpha, check_int
from shrink.errors import ParameterError
from shrink.trace import Trace

__all__ = [
    "ConsistencyWarning",
    "Sampler",
    "SamplerWarning",
    "StructureWarning",
    "available",
    "check_seed",
    "get_sampler",
    "register_sampler",
    "sample",
    "sampled",
]


class SamplerWarning(UserWarning):
    """Root of the warnings samplers give (the sample is usable, but read the caveat)."""


class StructureWarning(SamplerWarning):
    """Request-level sampling broke the page/embedded-request structure of the traffic."""


class ConsistencyWarning(SamplerWarning):
    """Sampling at a different level than load balancing was forced (``--force``)."""


@runtime_checkable
class Sampler(Protocol):
    """Keeps a fraction ``alpha`` of a trace; the same (trace, alpha, seed) gives the same rows."""

    name: str

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        """Return the sample; its meta records sampler, alpha, seed and the parent."""
        ...


_REGISTRY: dict[str, Callable[..., Sampler]] = {}


def register_sampler(name: str, factory: Callable[..., Sampler]) -> None:
    """Make ``factory(**options)`` available as ``get_sampler(name, **options)``."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    """Names of the registered samplers, sorted."""
    return sorted(_REGISTRY)


def get_sampler(name: str, **options: Any) -> Sampler:
    """The sampler registered as ``name``, built with ``options`` (e.g. ``column=``)."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ParameterError(
            f"sampler == {name!r}, must be one of {', '.join(available())}."
        ) from None
    return factory(**options)


def check_seed(seed: object) -> int:
    """A seed is a non-negative integer (numpy integers accepted)."""
    if isinstance(seed, np.integer):
        seed = int(seed)
    return check_int(seed, "seed", low=0)


def check_args(alpha: object, seed: object) -> tuple[float, int]:
    """Validated (alpha, seed) with the project's uniform messages."""
    return check_alpha(alpha), check_seed(seed)


def sampled(
    parent: Trace,
    kept: pa.Table,
    sampler: str,
    alpha: float,
    seed: int,
    *,
    scales_users: bool,
    warnings: list[str] | None = None,
    parent_id: str | None = None,
    parent_sessions: int | None = None,
    **extra: Any,
) -> Trace:
    """The sample ``kept`` (rows taken from ``parent``) with its provenance in the meta:
    the parent's meta, plus what produced this sample.

    ``parent`` is the parent's content fingerprint (pass ``parent_id`` and
    ``parent_sessions`` when already known: hashing a large parent costs time).
    A sample of a sample keeps the earlier steps in ``lineage`` and the
    product of the alphas in ``alpha_total``. Where sampling removes users
    (session, stratified, split), ``users`` is scaled to the fraction of users
    the sample models.
    """
    meta = dict(parent.meta)
    meta.pop("shrink_version", None)  # written fresh by write_parquet
    lineage = list(meta.get("lineage", []))
    if "sampler" in meta:
        lineage.append({k: meta[k] for k in ("sampler", "alpha", "seed", "parent") if k in meta})
    if lineage:
        meta["lineage"] = lineage
    prior = float(meta.get("alpha_total", meta.get("alpha", 1.0)))
    meta.update(
        sampler=sampler,
        alpha=alpha,
        seed=seed,
        parent=parent_id if parent_id is not None else parent.fingerprint(),
        parent_requests=len(parent),
        parent_sessions=parent_sessions if parent_sessions is not None else parent.n_sessions,
        kept_requests=kept.num_rows,
        kept_sessions=pc.count_distinct(kept.column("session")).as_py(),
        alpha_total=prior * alpha,
    )
    if warnings:
        meta["warnings"] = [*meta.get("warnings", []), *warnings]
    if scales_users and isinstance(meta.get("users"), (int, float)):
        meta["parent_users"] = meta["users"]
        meta["users"] = max(1, round(meta["users"] * alpha))
    meta.update(extra)
    return Trace(kept, meta)


def sample(
    trace: Trace, alpha: float, *, seed: int = 0, level: str = "session", **options: Any
) -> Trace:
    """Sample ``trace`` with the sampler registered as ``level`` (options go to its factory)."""
    return get_sampler(level, **options).sample(trace, alpha, seed=seed)
