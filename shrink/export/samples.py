"""The requests of each run's measurement window, kept while a sweep runs."""

from __future__ import annotations

import time
from collections.abc import Sequence
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
    # Requests that completed whole inside the window (intended in it or before): the
    # LoadCurve's throughput counts these (an overloaded server's real rate); None
    # where unknown, and the successes intended in the window stand in.
    completed: int | None = None
    knob: str = ""

    @property
    def throughput(self) -> float:
        """Requests completed a second in the window, as the LoadCurve's throughput."""
        width = self.window[1] - self.window[0]
        done = int(self.ok.sum()) if self.completed is None else self.completed
        return done / width if width > 0 else float("nan")

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
        done = log.column("done")
        win = (intended >= start) & (intended < end)
        ok = log.ok_mask()
        return cls(
            rate_factor=float(rate_factor),
            window=(float(start), float(end)),
            epoch=epoch,
            intended=intended[win],
            done=done[win],
            ok=ok[win],
            cls=np.asarray(log.column("cls"))[win],
            status=log.column("status")[win],
            nbytes=log.column("bytes")[win],
            completed=int(np.sum(ok & (done >= start) & (done < end))),
        )


class RecordingTarget:
    """A target that keeps every run's window requests (:class:`RunSamples`).

    Everything else is the wrapped target's: the sweep cannot tell them apart.
    ``levels`` (the sweep's levels in its ``knob``, with the trace) tags each run with
    the level it ran at as it is recorded, for what reads the runs while the sweep
    runs (:mod:`shrink.export.metrics`).

    ``keep=False`` (no export and no metrics asked for) keeps none: every run's
    requests, about 90 bytes each, were held until the sweep ended, for nothing.
    ``last_only`` (metrics asked for, no export) keeps the last run of each rate factor
    only, and counts the runs and their requests (:meth:`totals`): the exposition needs
    no more, and every run's requests were held for it.
    """

    def __init__(
        self,
        target: Any,
        levels: tuple[Trace, Sequence[float], str] | None = None,
        *,
        keep: bool = True,
        last_only: bool = False,
    ) -> None:
        self._target = target
        self._keep = keep
        self._last_only = last_only
        self.runs: list[RunSamples] = []
        self._count = self._requests = 0
        self._levels: list[tuple[float, float]] = []
        self._knob = ""
        if levels is not None:
            trace, values, self._knob = levels
            self._levels = [(rate_factor_for(trace, v, self._knob), float(v)) for v in values]

    def run(self, trace: Trace, *, rate_factor: float, **kwargs: Any) -> RunResult:
        epoch = time.time()
        res = self._target.run(trace, rate_factor=rate_factor, **kwargs)
        if not self._keep:
            return res
        rec = RunSamples.from_result(res, rate_factor, epoch)
        for factor, level in self._levels:
            if np.isclose(rate_factor, factor, rtol=1e-9, atol=0):
                rec.level, rec.knob = level, self._knob
                break
        self._count, self._requests = self._count + 1, self._requests + int(rec.ok.size)
        same = [i for i, r in enumerate(self.runs) if r.rate_factor == rate_factor]
        if self._last_only and same:
            self.runs[same[-1]] = rec  # (in place: a scrape's order of levels stays)
        else:
            self.runs.append(rec)
        return res

    def totals(self) -> tuple[int, int]:
        """(runs finished, their requests), kept ones or not."""
        return self._count, self._requests

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
