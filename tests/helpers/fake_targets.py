"""A fake target that breaks at a given run, one whose results are altered, the steady
trace the stop tests replay, and what the sweep command makes of a stopped sweep."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer

from shrink.cli._common import cli_errors
from shrink.cli._sweep_keep import _keep_partial_sweep
from shrink.errors import ShrinkError
from shrink.loadcurve import LoadCurve
from shrink.measure import SweepInterrupted
from shrink.replay.live import LiveTarget
from shrink.target import FakeTarget, GeneratorPlacement, RunResult
from shrink.trace import Trace


def steady_trace(path: str = "/f") -> Trace:
    """Open loop: one request to ``path`` every 10 ms for 50 s."""
    t = np.arange(5000) / 100.0
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": [path] * t.size}, meta={"mode": "open"}
    )


class Altered:
    """A target that runs ``inner`` and hands each result, with the run's keywords, to
    :meth:`alter`: a server that reports less or answers nothing, a generator that stalls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def run(self, trace: Trace, **kw: Any) -> RunResult:
        res = self.inner.run(trace, **kw)
        self.alter(res, kw)
        return res

    def alter(self, res: RunResult, kw: dict[str, Any]) -> None:
        raise NotImplementedError


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


def partial_sweep_exit(stop: ShrinkError | SweepInterrupted, out: Path) -> tuple[list[float], int]:
    """What ``shrink sweep -o out`` does with a sweep stopped by ``stop``: the levels it
    keeps in ``out``'s ``.partial.json``, and the exit status it gives."""
    _keep_partial_sweep(stop, out, None)
    kept = LoadCurve.read_json(out.with_name(f"{out.stem}.partial.json"))
    with pytest.raises(typer.Exit) as ex, cli_errors():
        raise stop
    return [lv.level for lv in kept.levels], ex.value.exit_code


def live_target(state: dict[str, Any], engine: Any) -> LiveTarget:
    """A LiveTarget over ``state`` whose runs ``engine`` (a fake) makes: the share on
    this process's last CPU, the generator on its first, no wait for an idle server."""
    cpus = sorted(os.sched_getaffinity(0))
    return LiveTarget(
        [("127.0.0.1", 9)], state=state, share_cpus=cpus[-1:],
        generator=GeneratorPlacement(tuple(cpus[:1]), True, engine=engine), idle_bound=0.1,
    )  # fmt: skip
