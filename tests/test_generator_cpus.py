"""Generator CPUs this process may not use (``--generator-cpus 5`` on a 2-CPU machine) are
refused before anything starts, naming the option: a replay said it would run SCHED_FIFO
"on CPU 5" and then failed with "Invalid argument", and predict started a testbed first."""

from __future__ import annotations

import os

import pytest

from shrink.errors import ReplayError, TopologyError
from shrink.providers import TestbedProvider
from shrink.replay.live import LiveTarget
from shrink.target import GeneratorPlacement

pytestmark = pytest.mark.compute

ABSENT = max(os.sched_getaffinity(0)) + 1  # a CPU this process may not use


NOT_ALLOWED = rf"^--generator-cpus: CPUs \[{ABSENT}\] are not among the CPUs this process may use"


def test_a_replay_on_generator_cpus_not_allowed_is_refused_naming_them():
    with pytest.raises(
        ReplayError,
        match=NOT_ALLOWED,
    ):
        LiveTarget([("127.0.0.1", 8080)], generator=GeneratorPlacement((ABSENT,)))


def test_a_testbed_with_generator_cpus_not_allowed_is_refused_before_it_starts(tmp_path):
    with pytest.raises(
        TopologyError,
        match=NOT_ALLOWED,
    ):
        TestbedProvider(tmp_path, generator=GeneratorPlacement((ABSENT,)), run_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_more_unpinned_engine_processes_than_cpus_are_refused(tmp_path, command):
    """``replay --processes 1000`` without ``--generator-cpus`` started 1,000 engines
    taking turns on 2 CPUs; the run only said it fell behind. As many as the CPUs
    this process may use still run."""
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        trace
    )
    args = {
        "replay": ["replay", str(trace), "-o", str(tmp_path / "r.parquet")],
        "sweep": ["sweep", str(trace), "--levels", "1", "-o", str(tmp_path / "s.json")],
    }[command]
    cpus = len(os.sched_getaffinity(0))
    for n in (cpus + 1, 1000):
        r = CliRunner().invoke(app, [*args, "--target", "127.0.0.1:1", "--processes", str(n)])
        text = " ".join(r.output.split())
        assert r.exit_code == 2, text
        assert f"--processes: {n} engine processes on the {cpus} CPUs" in text, text
        assert f"at most {cpus}" in text
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "s.json").exists()
