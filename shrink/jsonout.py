"""The one JSON writer: every JSON document shrink writes or prints goes through :func:`dumps`.

JSON has no NaN or Infinity (``JSON.parse`` and Go's encoding/json refuse them), so a
number that is not finite is written ``null``; the document says why beside it where
its writer knows (a ``note`` or ``reason`` key). ``allow_nan=False`` then makes any
value that slipped past a bug here, never a file another tool cannot read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:  # pydantic is heavy: the CLI's start-up must not load it
    from pydantic import TypeAdapter

__all__ = ["dumps", "finite", "plain"]


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (numpy's too) replaced by None, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return obj
    if isinstance(obj, np.generic):
        return finite(obj.item())
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist())
    return obj


def dumps(
    obj: Any,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
    separators: tuple[str, str] | None = None,
) -> str:
    """``json.dumps`` that writes ``null`` for NaN and Infinity and refuses to write either.

    ``default`` (for objects JSON does not know) has its result cleaned the same way.
    """

    def clean_default(o: Any) -> Any:
        if default is None:
            cleaned = finite(o)
            if cleaned is o:
                raise TypeError(f"not JSON serializable: {type(o).__name__}")
            return cleaned
        return finite(default(o))

    return json.dumps(
        finite(obj),
        indent=indent,
        sort_keys=sort_keys,
        default=clean_default,
        allow_nan=False,
        separators=separators,
    )


def plain(adapter: TypeAdapter[T], value: T) -> dict[str, Any]:
    """``value`` in its file form, by the TypeAdapter of its type: JSON values, NaN as None."""
    return finite(adapter.dump_python(value, mode="json", by_alias=True, fallback=finite))
