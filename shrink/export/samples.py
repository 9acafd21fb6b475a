"""The requests of each run's measurement window, kept while a sweep runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from shrink.loadcurve import LoadCurve
from shrink.measure import rate_factor_for
from shrink.target import RunResult
from shrink.trace import Trace


@dataclass
class RunSamples:
    """One repetition: the requests intended in its measurement window.

    Times are seconds from the run's start (the RunLog's clock); ``epoch`` is the
    wall-clock time the run was started, for tools that want absolute stamps.
    """

    rate_factor: float
    window: tuple[float, float]
    epoch: float
    intended: np.ndarray
    done: np.ndarray  # NaN: not completed
    ok: np.ndarray
    cls: np.ndarray
    status: np.ndarray
    nbytes: np.ndarray
    level: float = float("nan")
    rep: int = 0

    @property
    def latency(self) -> np.ndarray:
        """Seconds from intended send to the last byte, of the requests that succeeded.

        The same array the LoadCurve's exact statistics are computed from.
        """
        return (self.done - self.intended)[self.ok]

    @classmethod
    def from_result(cls, res: RunResult, rate_factor: float, epoch: float) -> RunSamples:
        log = res.runlog
        start, end = res.window
        intended = log.column("intended")
        win = (intended >= start) & (intended < end)
        return cls(
            rate_factor=float(rate_factor),
            window=(float(start), float(end)),
            epoch=epoch,
            intended=intended[win],
            done=log.column("done")[win],
            ok=log.ok_mask()[win],
            cls=np.asarray(log.column("cls"))[win],
            status=log.column("status")[win],
            nbytes=log.column("bytes")[win],
        )


class RecordingTarget:
    """A target that keeps every run's window requests (:class:`RunSamples`).

    Everything else is the wrapped target's: the sweep cannot tell them apart.
    """

    def __init__(self, target: Any) -> None:
        self._target = target
        self.runs: list[RunSamples] = []

    def run(self, trace: Trace, *, rate_factor: float, **kwargs: Any) -> RunResult:
        epoch = time.time()
        res = self._target.run(trace, rate_factor=rate_factor, **kwargs)
        self.runs.append(RunSamples.from_result(res, rate_factor, epoch))
        return res

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def level_samples(curve: LoadCurve, trace: Trace, runs: list[RunSamples]) -> list[RunSamples]:
    """Tag each recorded run with its level and repetition, in the curve's order.

    A run belongs to the level whose rate factor it ran at; a level's runs are its
    repetitions in the order they ran (as the LoadCurve keeps them).
    """
    out: list[RunSamples] = []
    left = list(runs)
    for lv in curve.levels:
        factor = rate_factor_for(trace, lv.level, curve.knob)
        mine = [r for r in left if np.isclose(r.rate_factor, factor, rtol=1e-9, atol=0)]
        mine = mine[: len(lv.reps)]
        for i, r in enumerate(mine):
            r.level, r.rep = float(lv.level), i
            left.remove(r)
            out.append(r)
    return out
