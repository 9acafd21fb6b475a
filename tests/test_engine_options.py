"""The live load generator's options are one group: replay and sweep show and read it alike."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from typer.testing import CliRunner

from shrink.cli import app
from shrink.cli._replay_opts import EngineOptions

GIVEN = [
    "--mode", "open", "--routing", "round-robin", "--conns", "3", "--timeout", "2s",
    "--generator-cpus", "0", "--allow-overlap", "--allow-remote", "--lag-limit", "5ms",
    "--realtime", "7", "--conn-per-request", "--processes", "2", "--engine", "python",
    "--cluster", "ray:auto", "--generators", "4",
]  # fmt: skip
WANT = EngineOptions(
    mode="open", routing="round-robin", conns=3, timeout="2s", generator_cpus="0",
    allow_overlap=True, allow_remote=True, lag_limit="5ms", realtime=7,
    conn_per_request=True, processes=2, engine="python", cluster="ray:auto", generators=4,
)  # fmt: skip


def _options(command: str) -> list[str]:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return [p.name for p in cmd.params]


@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_each_field_is_an_option_in_field_order(command: str) -> None:
    fields = [f.name for f in dataclasses.fields(EngineOptions)]
    names = _options(command)
    start = names.index(fields[0])
    assert names[start : start + len(fields)] == fields


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("replay", ["--rate", "10", "--duration", "1s"]),
        ("sweep", ["TRACE", "--levels", "1"]),
    ],
)
def test_the_command_gets_the_options_as_one_value(command, args, tmp_path, monkeypatch) -> None:
    got: list[EngineOptions] = []

    def stop(self: EngineOptions, *a: object, **kw: object) -> None:
        got.append(self)
        raise SystemExit(3)

    monkeypatch.setattr(EngineOptions, "target", stop)
    trace = tmp_path / "t.parquet"
    if command == "sweep":
        from shrink.trace import Trace

        Trace.from_columns({"session": [0], "t": [0.0], "path": ["/"]}).write_parquet(trace)
    argv = [command, *[str(trace) if a == "TRACE" else a for a in args]]
    argv += ["--target", "http://127.0.0.1:9", "-o", str(tmp_path / "out"), *GIVEN]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 3, r.output
    assert got == [WANT]


def test_generator_cpus_outside_this_process_s_cpus_is_a_refused_option(tmp_path) -> None:
    # `taskset -c 0 shrink replay ... --generator-cpus 0,1` exited 1, where semantics.md's
    # table gives 2 for an option's value refused before anything runs
    import os

    from shrink import topology
    from shrink.errors import ForeignCpusError, ReplayError, TopologyError
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement

    allowed = sorted(os.sched_getaffinity(0))
    foreign = max(allowed) + 1
    args = ["replay", "--target", "http://127.0.0.1:9", "--rate", "10", "--duration", "0.1s",
            "--generator-cpus", f"{allowed[0]},{foreign}",
            "-o", str(tmp_path / "r.parquet")]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert f"--generator-cpus: CPUs [{foreign}] are not among the CPUs this process may use" in (
        r.stderr
    )
    assert not (tmp_path / "r.parquet").exists()
    # to the library, a replay (and a topology) error as before
    with pytest.raises(ForeignCpusError) as exc:
        LiveTarget([("127.0.0.1", 9)], generator=GeneratorPlacement(cpus=(foreign,)))
    assert isinstance(exc.value, ReplayError) and isinstance(exc.value, TopologyError)
    assert topology.foreign_cpus(allowed) is None
