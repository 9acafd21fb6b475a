"""A fake target that breaks at a given run, and the steady trace the stop tests replay."""

from __future__ import annotations

import numpy as np

from shrink.target import FakeTarget
from shrink.trace import Trace


def steady_trace(path: str = "/f") -> Trace:
    """Open loop: one request to ``path`` every 10 ms for 50 s."""
    t = np.arange(5000) / 100.0
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": [path] * t.size}, meta={"mode": "open"}
    )


class FailsAt(FakeTarget):
    """A fake target whose ``n``-th run, and any after it, raises ``error``."""

    def __init__(self, n: int, error: BaseException) -> None:
        super().__init__()
        self.n, self.error, self.runs = n, error, 0

    def run(self, trace, **kw):
        self.runs += 1
        if self.runs >= self.n:
            raise self.error
        return super().run(trace, **kw)
