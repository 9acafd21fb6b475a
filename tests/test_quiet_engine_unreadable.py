"""An engine process past its run's deadline that never reports is killed when it makes
no progress. Its progress was only its writes (``wchar`` of /proc/PID/io): where that
cannot be read (refused, or a kernel without CONFIG_TASK_IO_ACCOUNTING) a hung process
was waited for without end, and nothing said so. Its CPU time is the sign then, and
where neither can be read, a bound on the wall time."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.fake_engines import Part0Hangs

from shrink.replay import scaleout, waiting
from shrink.target import GeneratorPlacement


def _said_within(quiet: waiting._Quiet, seconds: float) -> str | None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if (said := quiet.hung()) is not None:
            return said
        time.sleep(0.05)
    return None


@pytest.fixture
def unreadable_io(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "_written", lambda pid: None)
    monkeypatch.setattr(waiting, "QUIET_PAST_END_S", 0.5)


def test_a_hung_process_whose_writes_cannot_be_read_is_said_by_its_cpu_time(unreadable_io):
    child = subprocess.Popen(["sleep", "30"])
    try:
        said = _said_within(waiting._Quiet(child.pid), 5.0)
    finally:
        child.kill()
        child.wait()
    assert said is not None, "waited for without end"
    assert "using no CPU time for 0.5 s (its writes cannot be read" in said, said


def test_a_busy_process_whose_writes_cannot_be_read_is_not_said_hung(unreadable_io):
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # (started)
        said = _said_within(waiting._Quiet(child.pid), 1.5)
    finally:
        child.kill()
        child.wait()
    assert said is None, said


def test_a_process_of_which_nothing_can_be_read_is_given_a_wall_bound(
    unreadable_io, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "_cpu_ticks", lambda pid: None)
    monkeypatch.setattr(waiting, "WALL_PAST_END_S", 0.5)
    child = subprocess.Popen(["sleep", "30"])
    try:
        said = _said_within(waiting._Quiet(child.pid), 5.0)
    finally:
        child.kill()
        child.wait()
    assert said is not None and "running 0.5 s past the run's end" in said, said
    assert "nothing of its progress can be read" in said, said


@pytest.mark.timeout(40)
def test_a_scaled_out_run_whose_hung_process_cannot_be_read_ends(tmp_path: Path, unreadable_io):
    # (before: run_engines waited for process 0 for ever; pytest-timeout ends it at 40 s)
    from shrink.replay.engine import EngineConfig
    from shrink.schedule import open_loop_trace

    placement = GeneratorPlacement(processes=2, engine=Part0Hangs(), realtime=0)
    log, run = scaleout.run_engines(
        open_loop_trace("/x", 100.0, 0.2),
        EngineConfig(targets=[("127.0.0.1", 9)], timeout=0.5),
        rate_factor=1.0, horizon=0.2, generator=placement, out=tmp_path / "r.parquet",
    )  # fmt: skip
    said = [e for e in run.extra["errors"] if "engine process 0" in e]
    assert said and "using no CPU time for 0.5 s" in said[0], run.extra
    assert len(log) > 0  # the other process's rows


def test_a_busy_process_whose_writes_cannot_be_read_is_given_the_wall_bound(
    unreadable_io, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (before: its CPU time moved, so it was waited for without end)
    monkeypatch.setattr(waiting, "WALL_PAST_END_S", 1.0)
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        said = _said_within(waiting._Quiet(child.pid), 5.0)
    finally:
        child.kill()
        child.wait()
    assert said is not None, "a busy loop was waited for without end"
    assert "running 1 s past the run's end" in said and "busy loop" in said, said
