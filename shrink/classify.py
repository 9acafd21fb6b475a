"""Request class (static or dynamic) from the URL, by configurable rules.

Default: a request is dynamic when its path has a query string or ends in a
script extension (.php, .cgi, .pl, .py, .asp, .aspx, .jsp, .do, .action) or lies
under /cgi-bin/. Users pass their own rules as regular expressions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_DYNAMIC_RULES", "Classifier"]

DEFAULT_DYNAMIC_RULES: tuple[str, ...] = (
    r"\?",
    r"\.(php\d?|phtml|cgi|pl|py|asp|aspx|jsp|do|action)(/|$|;)",
    r"^/cgi-bin/",
)


@dataclass(frozen=True)
class Classifier:
    """Classify paths: dynamic if any ``dynamic`` pattern matches (case-insensitive)."""

    dynamic: Sequence[str] = DEFAULT_DYNAMIC_RULES

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_rx", re.compile("|".join(f"(?:{p})" for p in self.dynamic), re.IGNORECASE)
        )

    def classify(self, path: str) -> str:
        return "dynamic" if self._rx.search(path) else "static"  # type: ignore[attr-defined]

    def classify_many(self, paths: Iterable[str]) -> np.ndarray:
        cache: dict[str, str] = {}
        out = []
        for p in paths:
            c = cache.get(p)
            if c is None:
                c = cache[p] = self.classify(p)
            out.append(c)
        return np.asarray(out, dtype=object)
