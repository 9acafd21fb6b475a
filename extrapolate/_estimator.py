"""Checks the estimators share: fitted-ness, and the share a curve describes."""

from __future__ import annotations

from typing import Any

from shrink.errors import ExtrapolationError, NotFittedError

__all__ = ["check_is_fitted", "share_kind"]


def check_is_fitted(model: object, attribute: str) -> None:
    """Raise :class:`NotFittedError` unless ``model`` has ``attribute`` (set by fit)."""
    if not hasattr(model, attribute):
        raise NotFittedError(
            f"{type(model).__name__} is not fitted yet: call fit() before using it"
        )


def share_kind(share: dict[str, Any] | None) -> str:
    """``cores``, ``cpu_time`` or ``all`` from a LoadCurve's share description."""
    kind = (share or {}).get("kind", "all")
    if kind not in ("cores", "cpu_time", "all"):
        raise ExtrapolationError(f"share kind == {kind!r}, must be one of cores, cpu_time, all")
    return str(kind)
