"""A sweep stopped by SIGINT/SIGTERM/SIGHUP: how a run shows it, and the levels kept."""

from __future__ import annotations

from shrink import interrupts
from shrink.loadcurve import LoadCurve
from shrink.target import RunResult

__all__ = ["SweepInterrupted", "stop_if_interrupted", "was_interrupted"]


def was_interrupted(result: RunResult) -> bool:
    """The replay engine was stopped by SIGINT/SIGTERM/SIGHUP during this run."""
    engine = (result.describe or {}).get("engine") or {}
    return bool(engine.get("interrupted", False))


def stop_if_interrupted(result: RunResult, *, held: bool = True) -> None:
    """Raise KeyboardInterrupt when the run was stopped by SIGINT/SIGTERM/SIGHUP.

    The replay engine catches those signals to close its run log cleanly and return
    what it measured; a sweep must then stop too, not go on to the next run (a user's
    Ctrl-C would otherwise stop one run of dozens). The run logs already written stay.
    ``held``: also for a signal that came once the run was over and was held while its
    result was made (:func:`shrink.interrupts.deferred`); a caller that keeps the
    result first passes False and raises it after (:func:`shrink.interrupts.raise_if_held`).
    """
    if was_interrupted(result):
        raise KeyboardInterrupt
    if held:
        interrupts.raise_if_held()


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT/SIGTERM/SIGHUP, carrying the levels measured before it.

    ``curve`` holds the swept target's finished levels (meta ``interrupted``); a
    companion's finished levels stay in ``companion.levels``. Whoever writes them
    to disk appends the paths to ``kept``, so that the message about what was kept
    names only files that exist.
    """

    def __init__(self, curve: LoadCurve) -> None:
        super().__init__()
        self.curve = curve
        self.kept: list[str] = []
