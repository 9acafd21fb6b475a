"""The time budget bounds the wall time: no repetition starts that would end past it
(``predict --budget 1m`` ran two 40 s repetitions of the probe, and a warm run, first)."""

from __future__ import annotations

import numpy as np
import pytest

from shrink.autolevels import AutoPlan, auto_sweep
from shrink.errors import MeasurementError, ParameterError
from shrink.target import FakeTarget
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _trace(rate: float = 50.0, duration: float = 400.0) -> Trace:
    t = np.arange(int(rate * duration)) / rate
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/f"] * t.size}, meta={"mode": "open"}
    )


class _Clocked(FakeTarget):
    """A fake target that advances a fake clock by each run's warm-up and window."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(demand={"static": 0.001})
        self.clock = clock

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        self.clock[0] += warmup + duration
        return super().run(trace, rate_factor=rate_factor, warmup=warmup, duration=duration,
                           seed=seed)  # fmt: skip


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("shrink.autolevels._clock.time.monotonic", lambda: now[0])
    return now


@pytest.mark.parametrize("budget", [60.0, 100.0, 200.0])
def test_no_repetition_ends_past_the_budget(clock, budget):
    plan = AutoPlan(warmup=10, duration=30, reps=2, budget_s=budget, loop_window=0, max_levels=8)
    target = _Clocked(clock)
    auto_sweep(target, _trace(), {"mean": 0.005}, plan=plan)
    assert 0 < clock[0] <= budget


def test_a_budget_that_holds_no_repetition_is_refused_before_measuring(clock):
    plan = AutoPlan(warmup=10, duration=30, reps=2, budget_s=30, loop_window=0)
    target = _Clocked(clock)
    with pytest.raises(ParameterError, match="budget of 30 s cannot hold one repetition"):
        auto_sweep(target, _trace(), {"mean": 0.005}, plan=plan)
    assert clock[0] == 0


def test_a_budget_short_of_the_coarse_pass_keeps_its_highest_fractions(clock):
    """The crossing lies at or above the knee: with room for three levels after the
    probe, the coarse pass measures its three highest fractions, and the mean's
    crossing is bracketed. Its three lowest (35-80% of the capacity) would all have
    stayed under the threshold, leaving the MAT a bound."""
    plan = AutoPlan(
        warmup=1, duration=9, reps=1, budget_s=40, loop_window=0, max_levels=8, warm_run=False
    )
    target = _Clocked(clock)
    curve = auto_sweep(target, _trace(), {"mean": 0.004}, plan=plan)
    levels = sorted(lv.level for lv in curve.levels)
    assert len(levels) == 4 and clock[0] <= 40  # the probe and three
    cap = 1.0 / 0.001 / 50.0  # the fake's capacity in rate factors
    assert all(lv > 0.75 * cap for lv in levels[1:]), levels  # 35-80%: 7-16
    means = [lv.stat("mean", None)[0] for lv in sorted(curve.levels, key=lambda lv: lv.level)]
    assert means[0] < 0.004 < max(means), means


class _Slow(_Clocked):
    """Each run costs a fifth more than its warm-up and window (start-up, drain)."""

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        self.clock[0] += 0.2 * (warmup + duration)
        return super().run(trace, rate_factor=rate_factor, warmup=warmup, duration=duration,
                           seed=seed)  # fmt: skip


def test_the_probes_repetitions_are_counted_at_what_the_warm_run_took(clock):
    """The probe's repetitions were counted before the warm run, at their planned
    seconds: ``predict --budget 30s`` on a time-scaled CPU share (10 s planned a run,
    11.7 s taken) ran the warm run and both repetitions, 35 s."""
    plan = AutoPlan(warmup=2, duration=8, reps=2, budget_s=30, loop_window=0, max_levels=8)
    auto_sweep(_Slow(clock), _trace(), {"mean": 0.005}, plan=plan)
    assert 0 < clock[0] <= 30  # the warm run (12 s) and one repetition (12 s)


def test_a_budget_the_warm_run_shows_too_short_says_so(clock):
    plan = AutoPlan(warmup=2, duration=8, reps=1, budget_s=20, loop_window=0, max_levels=8)
    with pytest.raises(ParameterError, match="held the warm-up run, but not one repetition"):
        auto_sweep(_Slow(clock), _trace(), {"mean": 0.005}, plan=plan)
    assert clock[0] <= 20


class _NeverOpened:
    """A provider whose servers must not start, nor its sample be drawn."""

    name = "never"

    def machine(self):
        from shrink.machine import Machine

        return Machine(name="fake-1s", sockets=1, cores_per_socket=2)

    def server_cpus(self):
        return (1,)

    def open(self, share, mapping):
        raise AssertionError("a server was started for a budget that cannot hold one run")


@pytest.mark.parametrize(
    ("paired", "least"),
    [(False, r"40 s \(\(2 s warm-up \+ 8 s window\) x 4 in slow motion"), (True, "50 s")],
)
def test_predict_refuses_a_budget_short_of_one_repetition_before_anything_starts(
    monkeypatch, paired, least
):
    # `predict --budget 12s` on a CPU-time share of 0.25 (40 s a repetition in slow
    # motion) passed the CLI's check of warm-up + window (10 s), then drew the sample
    # and started the servers before the sweep refused it.
    from shrink.errors import OptionError
    from shrink.predict import PredictConfig, predict

    def no_sample(*a, **k):
        raise AssertionError("the sample was drawn")

    monkeypatch.setattr("shrink.predict._sample", no_sample)
    plan = AutoPlan(warmup=2, duration=8, reps=2, budget_s=12)
    cfg = PredictConfig(alpha=0.25, thresholds={"mean": 0.01}, mappings=["1-replica"],
                        share_kind="cpu_time", plan=plan, paired_full_run=paired)  # fmt: skip
    with pytest.raises(
        OptionError, match=rf"--budget: 12 s cannot hold .* least that could is {least}"
    ):
        predict(_trace(), _NeverOpened(), cfg)


def test_too_few_levels_for_a_budget_say_the_budget():
    """`predict --budget 5s` on the simulator: "load curve has 1 usable levels, need at
    least 2", and nothing said that the budget, not the server, had left them out."""
    from shrink.measure import sweep

    curve = sweep(FakeTarget(demand={"static": 0.001}), _trace(), [1.0], reps=1, warmup=1.0,
                  duration=4.0, seed=3)  # fmt: skip
    curve.meta["levels_skipped_time_budget"] = [2.0, 3.0, 3.0]
    with pytest.raises(MeasurementError, match=r"1 usable level\(s\), need at least 2: the "
                       r"time budget \(--budget\) left 2 more unmeasured"):  # fmt: skip
        curve.require_levels()
    curve.meta.pop("levels_skipped_time_budget")
    with pytest.raises(MeasurementError) as got:
        curve.require_levels()
    assert "budget" not in str(got.value)


def test_predict_says_when_its_budget_left_levels_unmeasured(tmp_path):
    """`predict --budget 4s` measured one level of ten, printed "done [10/10]" and the
    MATs as bounds, and nothing on the terminal said the budget had cut the sweep (the
    curve's meta alone recorded it)."""
    from typer.testing import CliRunner

    from shrink.cli import app
    from tests.conftest import ROOT

    spec = ROOT / "examples" / "machines" / "nehalem-2s.toml"
    trace = tmp_path / "t.parquet"
    _trace(rate=2000.0, duration=60.0).write_parquet(trace)
    args = ["predict", str(trace), "--target", f"sim:{spec}", "--alpha", "0.5", "--reps", "1",
            "--warmup", "0s", "--duration", "2s", "--mappings", "1-replica", "--max-levels", "4",
            "-o"]  # fmt: skip
    cut = CliRunner().invoke(app, [*args, str(tmp_path / "a"), "--budget", "9s"])
    assert "note: the time budget (--budget 9s) left" in cut.stderr, cut.output
    whole = CliRunner().invoke(app, [*args, str(tmp_path / "b")])
    assert "note: the time budget" not in whole.stderr, whole.output


def test_too_few_levels_say_which_were_left_out_and_a_lowest_level_past_the_threshold():
    """`predict --target sim:` of the NASA excerpt: "load curve has 1 usable level(s),
    need at least 2", no reason: its only level (the probe) was already past the
    threshold. The refusal names that, and the levels left out and why."""
    from shrink.measure import sweep

    curve = sweep(FakeTarget(demand={"static": 0.001}), _trace(), [1.0, 2.0, 3.0], reps=1,
                  warmup=1.0, duration=4.0, seed=3)  # fmt: skip
    for r in curve.levels[1].reps:
        r.generator_behind = True
    for r in curve.levels[2].reps:
        r.failures = {"503": r.requests}
    mean = curve.levels[0].stat("mean")[0]
    with pytest.raises(MeasurementError) as got:
        curve.require_levels(2, {"mean": mean / 2})
    said = str(got.value)
    assert said.startswith("load curve has 1 usable level(s), need at least 2: "), said
    assert "requests failed (over 0.1%) at rate_factor 3: left out" in said, said
    assert "the generator fell behind at rate_factor 2: left out" in said, said
    assert (
        f"its lowest level (rate_factor 1) was already past the threshold (mean "
        f"{1e3 * mean:.4g} ms > {1e3 * mean / 2:.4g} ms)"
    ) in said, said
    with pytest.raises(MeasurementError) as got:  # under the threshold: not said
        curve.require_levels(2, {"mean": 2 * mean})
    assert "past the threshold" not in str(got.value)


def test_too_few_levels_say_the_levels_the_trace_was_too_short_for():
    """A trace without a loop window too short to fill a window above its probe: the
    sweep measured the probe alone, and the refusal gave no reason ("load curve has 1
    usable level(s), need at least 2"), though the sweep had recorded the levels it
    skipped for that."""
    import shrink.autolevels as autolevels

    plan = autolevels.AutoPlan(warmup=1, duration=4, reps=1, max_levels=10, loop_window=0,
                               probe_level=1.0, warm_run=False, min_duration=4)  # fmt: skip
    curve = autolevels.auto_sweep(FakeTarget(demand={"static": 0.001}), _trace(100.0, 5.6),
                                  {"mean": 0.005}, plan=plan)  # fmt: skip
    assert [lv.level for lv in curve.levels] == [1.0]
    with pytest.raises(MeasurementError) as got:
        curve.require_levels(2, {"mean": 0.005})
    said = str(got.value)
    assert "1 usable level(s), need at least 2: the trace was too short to fill a " in said
    assert "window at rate_factor 1.2, 3.2553: not measured (use a longer trace)" in said, said


def test_a_too_short_level_asked_again_is_recorded_once():
    """The refinement's search up from a level whose next one the trace cannot fill asks
    for that level again: it was recorded twice (``[3.255303, 2.0736, 2.0736]``)."""
    import shrink.autolevels as autolevels

    plan = autolevels.AutoPlan(warmup=1, duration=4, reps=1, max_levels=10, loop_window=0,
                               probe_level=1.0, warm_run=False, min_duration=4)  # fmt: skip
    curve = autolevels.auto_sweep(FakeTarget(demand={"static": 0.001}), _trace(100.0, 10.0),
                                  {"mean": 0.005}, plan=plan)  # fmt: skip
    skipped = curve.meta["levels_skipped_trace_too_short"]
    assert skipped == [3.255303, 2.0736], skipped
