"""Checks the estimators share: fitted-ness."""

from __future__ import annotations

from shrink.errors import NotFittedError

__all__ = ["check_is_fitted"]


def check_is_fitted(model: object, attribute: str) -> None:
    """Raise :class:`NotFittedError` unless ``model`` has ``attribute`` (set by fit)."""
    if not hasattr(model, attribute):
        raise NotFittedError(
            f"{type(model).__name__} is not fitted yet: call fit() before using it"
        )
