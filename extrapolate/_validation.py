"""Checks shared by the models: fitted-ness."""

from __future__ import annotations

from shrink.errors import ExtrapolationError

__all__ = ["check_is_fitted"]


def check_is_fitted(model: object, attribute: str) -> None:
    """Raise :class:`ExtrapolationError` unless ``model`` has ``attribute`` (set by fit)."""
    if not hasattr(model, attribute):
        raise ExtrapolationError(
            f"{type(model).__name__} is not fitted yet: call fit() before using it"
        )
