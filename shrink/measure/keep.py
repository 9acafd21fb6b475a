"""The finished levels kept on disk as each ends, not only when the run stops.

A signal, a dead server or a full disk stops a sweep through Python, which then writes
the levels it finished. Whatever stops the process outside Python does not: kill -9,
the OOM killer, an abort in a library's native code, a power cut. So each sweep can
write its curve so far after every level (:class:`KeepLevels`), to the file a stopped
run keeps them in (``X.partial.json``); the whole curve, once written as ``X.json``,
removes it (:meth:`shrink.loadcurve.LoadCurve.write_json`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from shrink.atomic import make_dirs
from shrink.errors import WriteError
from shrink.loadcurve import LoadCurve

__all__ = ["KEPT_AS_MEASURED", "RUN_STARTED", "KeepLevels", "partial_twin"]

# In a kept curve's meta: the run was going on when it was written, so it may lack
# levels the run went on to measure; and when that run started (UTC), which tells it
# from an earlier run's file a run killed before its first level left in place.
KEPT_AS_MEASURED = "kept_as_measured"
RUN_STARTED = "run_started"


def partial_twin(path: Path) -> Path:
    """Where the finished levels of a run that writes ``path`` are kept: ``X.partial.json``."""
    return path.with_name(path.name.removesuffix(".json") + ".partial.json")


class KeepLevels:
    """Called with the curve so far after each finished level: writes it to ``path``.

    A write that fails (a full disk) stops nothing: the run goes on, and its finished
    levels are kept as before when it ends or stops. ``on_fail`` is told once, with the
    error, so that the user knows the levels are not on disk as they end.
    """

    def __init__(self, path: Path, on_fail: Callable[[WriteError], None] | None = None) -> None:
        self.path = path
        self.on_fail = on_fail
        self.failed: WriteError | None = None
        self.started = datetime.now(UTC).isoformat(timespec="seconds")

    def __call__(self, curve: LoadCurve) -> None:
        if self.failed is not None or not curve.levels:
            return
        curve.meta[KEPT_AS_MEASURED] = True
        curve.meta[RUN_STARTED] = self.started
        try:
            make_dirs(self.path.parent)
            curve.write_json(self.path)
        except WriteError as exc:
            self.failed = exc
            if self.on_fail is not None:
                self.on_fail(exc)
