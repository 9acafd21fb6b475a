"""The finished levels are on disk as each ends: a run stopped where Python cannot
keep them (kill -9, the OOM killer, an abort in native code) leaves them in
``X.partial.json``; the whole curve, once written, removes that file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.fake_targets import FailsAt, steady_trace
from typer.testing import CliRunner

from shrink.cli import app, sim_cmd
from shrink.loadcurve import LoadCurve
from shrink.measure import SweepHooks, sweep
from shrink.measure.keep import KEPT_AS_MEASURED, RUN_STARTED, KeepLevels
from tests.conftest import ROOT, require_root
from tests.test_export import _trace

SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"


class Killed(BaseException):
    """A stop Python's handlers do not see, as kill -9 is: nothing is written after it."""


def _sim_sweep(trace: Path, out: Path, levels: str) -> object:
    return CliRunner().invoke(
        app,
        ["sim", "sweep", str(trace), "--machine", str(SPEC), "-o", str(out), "--levels", levels,
         "--reps", "1", "--warmup", "500ms", "--duration", "2s"],
    )  # fmt: skip


def _killed_at_the_third_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``sim sweep -o curve.json`` of three levels, killed outright in its third: the
    output it was to write."""
    trace, out = tmp_path / "t.parquet", tmp_path / "curve.json"
    steady_trace().write_parquet(trace)
    monkeypatch.setattr(sim_cmd, "_sim_target", lambda *a: FailsAt(3, Killed()))
    with pytest.raises(Killed):
        CliRunner().invoke(
            app,
            ["sim", "sweep", str(trace), "--machine", str(SPEC), "-o", str(out), "--levels",
             "1,2,3", "--reps", "1", "--warmup", "500ms", "--duration", "2s"],
            catch_exceptions=False,
        )  # fmt: skip
    return out


def test_a_sweep_killed_outright_has_its_finished_levels_on_disk(tmp_path, monkeypatch):
    out = _killed_at_the_third_level(tmp_path, monkeypatch)
    kept = LoadCurve.read_json(tmp_path / "curve.partial.json")
    assert [lv.level for lv in kept.levels] == [1, 2]
    assert kept.meta[KEPT_AS_MEASURED] is True
    assert kept.meta[RUN_STARTED].endswith("+00:00")  # tells it from an earlier run's
    assert not out.exists()


def test_the_whole_curve_removes_the_levels_kept_as_they_ended(tmp_path):
    trace, out = tmp_path / "t.parquet", tmp_path / "curve.json"
    steady_trace().write_parquet(trace)
    r = _sim_sweep(trace, out, "1,2")
    assert r.exit_code == 0, r.output
    assert [lv.level for lv in LoadCurve.read_json(out).levels] == [1, 2]
    assert not (tmp_path / "curve.partial.json").exists()


def test_predict_killed_outright_has_the_measured_levels_on_disk(tmp_path, monkeypatch):
    import shrink.autolevels._sweep as auto

    trace, out = tmp_path / "t.parquet", tmp_path / "out"
    _trace().write_parquet(trace)
    real, calls = auto.run_level, []

    def dies_third(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise Killed
        return real(*a, **kw)

    monkeypatch.setattr(auto, "run_level", dies_third)
    with pytest.raises(Killed):
        CliRunner().invoke(
            app, ["predict", str(trace), "--target", f"sim:{SPEC}", "-o", str(out)],
            catch_exceptions=False,
        )  # fmt: skip
    kept = LoadCurve.read_json(out / "measured-curve.partial.json")
    # the first call warms the server up (not a level): one level was measured before
    assert len(kept.levels) == 1 and kept.meta[KEPT_AS_MEASURED] is True


def test_a_keep_that_cannot_write_stops_nothing_and_says_so_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    said: list[Exception] = []
    keep = KeepLevels(blocker / "curve.partial.json", said.append)  # under a file: unwritable
    curve = sweep(FailsAt(99, Killed()), steady_trace(), [1, 2, 3], reps=1, warmup=0.5,
                  duration=2, hooks=SweepHooks(keep=keep))  # fmt: skip
    assert [lv.level for lv in curve.levels] == [1, 2, 3]
    assert len(said) == 1 and keep.failed is said[0]


def test_the_whole_curve_leaves_another_user_s_file_of_that_name(tmp_path):
    # a shared folder: root's run removed another user's curve.partial.json
    require_root("chown a file to another user")
    partial = tmp_path / "curve.partial.json"
    partial.write_text("{}")
    os.chown(partial, 4242, 4242)
    steady_curve = LoadCurve.read_json(_whole(tmp_path))
    steady_curve.write_json(tmp_path / "curve.json")
    assert partial.exists()


def _whole(tmp_path: Path) -> Path:
    trace, out = tmp_path / "t.parquet", tmp_path / "w.json"
    steady_trace().write_parquet(trace)
    assert _sim_sweep(trace, out, "1").exit_code == 0
    return out


def test_mat_and_extrapolate_say_a_kept_curve_may_lack_levels(tmp_path, monkeypatch):
    # a MAT read from X.partial.json said nothing of the levels the run did not reach
    out = _killed_at_the_third_level(tmp_path, monkeypatch)
    partial = out.with_name("curve.partial.json")
    for args in (["mat", str(partial), "--threshold", "1s"],
                 ["extrapolate", str(partial), "--machine", str(SPEC)]):  # fmt: skip
        r = CliRunner().invoke(app, args)
        assert f"note: {partial} holds the levels a run finished before it stopped" in " ".join(
            r.stderr.split()
        ), (args[0], r.output)
    whole = _whole(tmp_path)
    r = CliRunner().invoke(app, ["mat", str(whole), "--threshold", "1s"])
    assert "holds the levels a run finished" not in r.stderr


def test_a_level_the_trace_cannot_fill_is_refused_before_any_level_runs(tmp_path):
    """--levels 1,2,4,8,16,24,32 on a 120 s trace ran six levels (minutes on a live
    server), then refused 32 (too fast to fill a window) and kept them as partial:
    every level's window is known before the first run."""
    from shrink.errors import ParameterError
    from shrink.target import FakeTarget

    class Counting(FakeTarget):
        runs = 0

        def run(self, trace, **kw):
            Counting.runs += 1
            return super().run(trace, **kw)

    trace = steady_trace()
    span = float(trace.table.column("t").to_numpy().max())
    too_fast = span / 2.0  # its window would end before 1 s of warm-up and 3 s of window
    with pytest.raises(ParameterError, match=r"nothing was run") as info:
        sweep(Counting(), trace, [1.0, 2.0, too_fast, too_fast * 2], warmup=1.0, duration=4.0)
    assert Counting.runs == 0
    assert f"rate_factor {too_fast:g} (and 1 more)" in str(info.value)
    assert not getattr(info.value, "curve", None)


class _AnotherRunStopsAt(FailsAt):
    """A fake target during whose ``n``-th run a second ``sweep -o`` of the same output,
    stopped, keeps its finished levels in ``partial`` (as its Ctrl-C does)."""

    def __init__(self, n: int, partial: Path) -> None:
        super().__init__(99, Killed())
        self.at, self.partial = n, partial

    def run(self, trace, **kw):
        if self.runs + 1 == self.at:
            theirs = self.partial.with_name(".theirs")
            theirs.write_text('{"another run": "its kept levels"}')
            os.replace(theirs, self.partial)
        return super().run(trace, **kw)


def test_another_runs_kept_levels_are_neither_replaced_nor_removed(tmp_path, monkeypatch):
    """Two ``sweep -o curve.json``, the second stopped while the first ran: its levels,
    kept in curve.partial.json, were replaced by the first's next level and the file then
    removed as stale by the first's whole curve, though the second had said it kept them.
    This run's levels as they ended go beside (curve.partial.1.json), said once, and
    that file goes once the whole curve is written (it stayed, with the first levels)."""
    trace, out = tmp_path / "t.parquet", tmp_path / "curve.json"
    partial = tmp_path / "curve.partial.json"
    steady_trace().write_parquet(trace)
    monkeypatch.setattr(sim_cmd, "_sim_target", lambda *a: _AnotherRunStopsAt(2, partial))
    r = _sim_sweep(trace, out, "1,2,3")
    assert r.exit_code == 0, r.output
    assert [lv.level for lv in LoadCurve.read_json(out).levels] == [1, 2, 3]
    assert partial.read_text() == '{"another run": "its kept levels"}'
    assert r.output.count("another run wrote") == 1
    assert "levels are kept in " + str(tmp_path / "curve.partial.1.json") in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "curve.json",
        "curve.partial.json",
        "t.parquet",
    ]


class _StopsAfterAnotherRun(_AnotherRunStopsAt):
    """As :class:`_AnotherRunStopsAt`, and this run is stopped (Ctrl-C) in its 4th run."""

    def run(self, trace, **kw):
        if self.runs + 1 == 4:
            raise KeyboardInterrupt
        return super().run(trace, **kw)


def test_a_stopped_run_beside_another_keeps_its_levels_in_one_file_it_names(tmp_path, monkeypatch):
    """The same, this run then stopped: it left curve.partial.1.json (levels 1-2) and
    curve.partial.2.json (1-3), and named curve.partial.json, the other run's, as its
    own 'only the first 1 finished level'. Its levels now go on in the one file beside."""
    trace, out = tmp_path / "t.parquet", tmp_path / "curve.json"
    partial = tmp_path / "curve.partial.json"
    steady_trace().write_parquet(trace)
    monkeypatch.setattr(sim_cmd, "_sim_target", lambda *a: _StopsAfterAnotherRun(2, partial))
    r = _sim_sweep(trace, out, "1,2,3,4")
    assert r.exit_code == 130, r.output
    ours = tmp_path / "curve.partial.1.json"
    line = " ".join(r.output.split("interrupted: ")[1].split())
    assert line == f"kept {ours} (3 finished levels)", line
    assert [lv.level for lv in LoadCurve.read_json(ours).levels] == [1, 2, 3]
    assert partial.read_text() == '{"another run": "its kept levels"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "curve.partial.1.json",
        "curve.partial.json",
        "t.parquet",
    ]


@pytest.mark.compute
def test_a_costly_keep_is_spaced_so_many_quick_levels_are_not_rewritten_quadratically(
    tmp_path, monkeypatch
):
    # 1,000 quick levels (the simulator's) spent nearly all their time rewriting the
    # whole curve after each: 100 levels 7 s, 300 levels 57 s. A write costing 1 s on
    # the clock (more than CHEAP_S) waits SPACING seconds before the next.
    now = [0.0]
    real = LoadCurve.write_json

    def slow_write(self, path, *a, **k):
        now[0] += 1.0
        return real(self, path, *a, **k)

    monkeypatch.setattr(LoadCurve, "write_json", slow_write)
    keep = KeepLevels(tmp_path / "curve.partial.json")
    keep.clock = lambda: now[0]
    writes = []
    for n in range(1, 101):
        now[0] += 1.0  # a level of 1 s
        before = now[0]
        keep(LoadCurve(levels=[_level(i) for i in range(n)], knob="rate_factor", alpha=1.0))
        writes += [n] if now[0] > before else []
    assert writes[0] == 1 and 8 <= len(writes) <= 15  # a tenth of the time, not half
    assert keep.levels_written == writes[-1]
    assert len(LoadCurve.read_json(keep.path).levels) == writes[-1]


@pytest.mark.compute
def test_a_very_slow_keep_waits_a_bounded_time_before_the_next(tmp_path, monkeypatch):
    # a write of 10 s (a loaded disk's fsync, a hung NFS server) waited 90 s before the
    # next: a real sweep's levels of 20 s ended four times unwritten, all lost to a kill -9
    now = [0.0]
    real = LoadCurve.write_json

    def slow_write(self, path, *a, **k):
        now[0] += 10.0
        return real(self, path, *a, **k)

    monkeypatch.setattr(LoadCurve, "write_json", slow_write)
    keep = KeepLevels(tmp_path / "curve.partial.json")
    keep.clock = lambda: now[0]
    unwritten = 0
    for n in range(1, 12):
        now[0] += 20.0  # a level of 20 s
        keep(LoadCurve(levels=[_level(i) for i in range(n)], knob="rate_factor", alpha=1.0))
        unwritten = max(unwritten, n - keep.levels_written)
    assert unwritten <= 1  # (at most MAX_WAIT_S = 30 s of levels since the last write)
    assert keep.MAX_WAIT_S <= 30


@pytest.mark.compute
def test_a_cheap_keep_writes_after_every_level(tmp_path):
    keep = KeepLevels(tmp_path / "curve.partial.json")
    for n in range(1, 6):
        keep(LoadCurve(levels=[_level(i) for i in range(n)], knob="rate_factor", alpha=1.0))
        assert keep.levels_written == n


def _level(i: int):
    from shrink.loadcurve import ClassStats, Level, LevelStats

    x = 10.0 * (i + 1)
    stats = ClassStats(n=10, throughput=x, mean=0.001, p50=0.001, p90=0.001, p99=0.001,
                       p999=0.001)  # fmt: skip
    return Level(float(i + 1), [LevelStats(throughput=x, overall=stats)])
