"""What kept the generator's CPUs awake is said where a reader looks: the replay
summary, the curve's target record and the sweep's summary say how many spinners ran,
and a run that asked for them and got none says so in one line.

The RunLog's ``awake`` (and the curve's target ``awake``) say what was asked: a core
that started no spinner (built without keep_awake, more than 64 CPUs, no process
made) read there as awake, and only the loop counts, in no summary, said otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from helpers.fake_engines import fake_server_url
from helpers.fake_targets import steady_trace
from typer.testing import CliRunner

from shrink.cli import app
from shrink.cli.sweep_cmd import _print_sweep
from shrink.measure import sweep
from shrink.replay import native
from shrink.replay.fake import FakeEngine
from shrink.replay.live import LiveTarget
from shrink.target import GeneratorPlacement

needs_spinners = pytest.mark.skipif(
    not (native.available() and hasattr(native._core, "keep_awake")),
    reason="the native core is not built with keep_awake",
)


class _Spins(FakeEngine):
    """A fake engine whose runs say they had ``ran[i]`` spinners, in turn."""

    def __init__(self, ran: list[int]) -> None:
        super().__init__()
        self.ran = list(ran)

    def __call__(self, *args: Any, **kw: Any) -> Any:
        stats = super().__call__(*args, **kw)
        stats.extra["loop"] = {"awake_spinners": self.ran.pop(0)}
        return stats


def _target(engine: Any) -> LiveTarget:
    cpu = min(os.sched_getaffinity(0))
    placement = GeneratorPlacement(cpus=(cpu,), engine=engine, realtime=0, awake=True)
    return LiveTarget([("127.0.0.1", 9)], generator=placement, idle_bound=0.0)


def test_the_target_record_says_how_many_spinners_ran() -> None:
    target = _target(_Spins([1, 0]))
    assert target.describe()["awake_spinners"] is None  # no run yet
    first = target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=0.1)
    assert first.describe["engine"]["awake_spinners"] == 1
    assert target.describe()["awake_spinners"] == 1
    second = target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=0.1)
    assert second.describe["engine"]["awake_spinners"] == 0
    assert (target.describe()["awake"], target.describe()["awake_spinners"]) == (True, 0)


@pytest.mark.parametrize(("ran", "said"), [([1], False), ([0], True)])
def test_a_sweep_whose_runs_had_no_spinner_says_so(capsys, ran: list[int], said: bool) -> None:
    curve = sweep(_target(_Spins(ran)), steady_trace(), [1.0], reps=1, warmup=0.0, duration=0.1)
    assert curve.sweep.target["awake_spinners"] == ran[0]
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    err = capsys.readouterr().err
    assert ("no spinner ran in at least one run" in err) is said


@pytest.fixture(scope="module")
def fake():
    with fake_server_url() as url:
        yield url


@needs_spinners
@pytest.mark.parametrize(("most", "said"), [(64, "awake: 1 spinner kept"), (0, "no spinner ran")])
def test_the_replay_summary_says_the_spinners_that_ran(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: str, most: int, said: str
) -> None:
    monkeypatch.setattr(native, "AWAKE_MAX_CPUS", most)  # (0: the core starts none)
    cpu = str(min(os.sched_getaffinity(0)))
    args = ["replay", "--target", fake, "--rate", "200", "--path", "/x", "--duration", "0.3s",
            "--generator-cpus", cpu, "--realtime", "0", "--awake",
            "-o", str(tmp_path / "r.parquet")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert said in res.output
    js = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "j.parquet"), "--json"])
    assert ('"awake_spinners": 1' if most else '"awake_spinners": 0') in js.output


def test_awake_asked_of_the_python_engine_is_refused() -> None:
    # it has no spinners: --awake --engine python ran asleep and said nothing
    from shrink.errors import OptionError

    cpu = min(os.sched_getaffinity(0))
    asked = GeneratorPlacement(cpus=(cpu,), engine="python", realtime=0, awake=True)
    with pytest.raises(OptionError, match="--awake: the Python engine keeps no CPU awake"):
        LiveTarget([("127.0.0.1", 9)], generator=asked, idle_bound=0.0)
    # by default it is not asked there
    plain = GeneratorPlacement(cpus=(cpu,), engine="python", realtime=0)
    assert (
        LiveTarget([("127.0.0.1", 9)], generator=plain, idle_bound=0.0).describe()["awake"] is False
    )


class _NoGroup(FakeEngine):
    """A fake engine whose runs had no spinner because no idle cgroup could be had."""

    WHY = "no idle cpu cgroup for the spinners: another process held the lock of its cgroup"

    def __call__(self, *args: Any, **kw: Any) -> Any:
        stats = super().__call__(*args, **kw)
        stats.extra["loop"] = {"awake_spinners": 0}
        stats.extra["awake_why_not"] = self.WHY
        return stats


def test_a_sweep_says_why_no_spinner_ran_where_it_is_known(capsys) -> None:
    """The sweep said the core's generic reasons ("built without it, on more than 64
    CPUs, or no process could be made") where the run knew the real one, which only
    replay's summary said: the curve's target record now keeps it, and the sweep says it."""
    curve = sweep(_target(_NoGroup()), steady_trace(), [1.0], reps=1, warmup=0.0, duration=0.1)
    assert curve.sweep.target["awake_why_not"] == _NoGroup.WHY
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    err = " ".join(capsys.readouterr().err.split())
    assert f"no spinner ran: {_NoGroup.WHY}, so its CPUs slept" in err, err
    assert "built without it" not in err
