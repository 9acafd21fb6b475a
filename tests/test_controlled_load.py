"""A load level is a controlled load: every level loops one window of the trace.

The offered load (requests intended per second of the measurement window) must
rise with the level, in proportion to it, whatever the trace does over time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.fake_provider import three_bursts

from shrink.autolevels import AutoPlan, auto_sweep
from shrink.errors import ParameterError
from shrink.machine import Machine
from shrink.measure import (
    level_stats,
    loop_window,
    looped_run,
    offered_check,
    skip_start,
    slow_motion,
    window_for,
)
from shrink.share import Share
from shrink.sim import SimParams, SimTarget, support_trace
from shrink.target import FakeTarget
from shrink.trace import Trace

pytestmark = pytest.mark.compute

LEVELS = (2.0, 3.0, 3.8, 4.5, 6.0, 8.0)


def _surging(seed: int) -> Trace:
    """Sessions whose arrival rate swings fourfold every few seconds (a non-stationary
    trace), three bursts each."""
    rng = np.random.default_rng(seed)
    grid = np.arange(0.0, 240.0, 0.05)
    rate = 20.0 * (1.5 + np.sin(grid / 3.0) + 0.5 * np.sin(grid / 0.7))
    n = rng.poisson(rate * 0.05)
    start = np.repeat(grid, n) + rng.uniform(0, 0.05, n.sum())
    meta = {"source": "test", "mode": "session"}
    return three_bursts(np.sort(start), rng, gap=0.5, static="/s/a.gif", meta=meta)


def _offered(trace: Trace, *, loop: bool, seed: int) -> np.ndarray:
    target = FakeTarget(servers=4, demand={"static": 1e-5, "dynamic": 1e-4})
    window = loop_window(trace, 10.0, 30.0) if loop else skip_start(trace, 10.0)
    out = []
    for i, level in enumerate(LEVELS):
        if loop:
            run = looped_run(window, level, 1.5, 8.0)
            assert run.copies >= 1  # every level here holds whole copies of the window
            tr, warm, dur = run.trace, run.warmup, run.duration
        else:
            tr, warm, dur = window, 1.5, window_for(window, level, 1.5, 8.0)
        res = target.run(tr, rate_factor=level, warmup=warm, duration=dur, seed=seed + i)
        out.append(level_stats(res).offered)
    return np.asarray(out)


@pytest.mark.parametrize("seed", range(4))
def test_offered_load_is_proportional_to_the_level(seed):
    trace = _surging(seed)
    per_level = _offered(trace, loop=True, seed=seed) / np.asarray(LEVELS)
    assert np.all(np.diff(_offered(trace, loop=True, seed=seed)) > 0)
    # Levels hold whole copies of the window: within 4% of linear.
    assert np.max(np.abs(per_level / np.median(per_level) - 1)) < 0.04, per_level
    # The older design replays a different stretch at each level: far from linear on
    # this trace (so the check above can fail).
    old = _offered(trace, loop=False, seed=seed) / np.asarray(LEVELS)
    assert np.max(np.abs(old / np.median(old) - 1)) > 0.08, old


def test_looped_run_holds_whole_copies_and_starts_in_steady_state():
    trace = _surging(1)
    window = loop_window(trace, 10.0, 30.0)
    assert window.meta["loop_span"] == 30.0
    n_units = window.n_sessions
    run = looped_run(window, 4.0, 1.5, 8.0)
    assert run.copies == round(4.0 * 8.0 / 30.0)
    assert run.duration == pytest.approx(run.copies * 30.0 / 4.0)
    assert 0 < run.warmup <= 1.5
    # Sessions intended inside the window: exactly ``copies`` copies of the window's.
    t = run.trace.column("t") / 4.0
    sess = run.trace.column("session")
    starts = {}
    for s, x in zip(sess, t, strict=True):
        starts.setdefault(s, x)
    inside = [s for s, x in starts.items() if run.warmup <= x < run.warmup + run.duration]
    assert len(inside) == run.copies * n_units
    # Sessions of earlier copies still open at the start run from a later burst.
    first_bursts = {}
    for s, b in zip(sess, run.trace.column("burst"), strict=True):
        first_bursts.setdefault(s, b)
    assert any(b > 0 for b in first_bursts.values())
    # Nothing is planned past the window's end: a single pass of the run ends with it
    # (sessions with minutes of think time would otherwise hold a low level for minutes).
    assert t.max() < run.warmup + run.duration


def test_a_window_with_nothing_to_replay_says_what_to_change():
    """A sparse trace and a short window: the error names the window and the remedy
    ("the loop window holds no request to replay" alone left the user no next step)."""
    one = Trace.from_columns(
        {"session": [0], "burst": [0], "t": [50.0], "think": [0.0], "path": ["/a"]},
        meta={"loop_span": 100.0},
    )
    with pytest.raises(ParameterError, match="longer --duration") as err:
        looped_run(one, 1.0, 0.0, 1.0)
    assert "spans 100 s" in str(err.value) and "in 1 s" in str(err.value)


def test_auto_sweep_on_the_simulator_offers_a_controlled_load():
    """Session mode on the simulator: sessions start open-loop at level times the rate,
    their pages run closed-loop, so near saturation the offered load bends a little;
    the older design's fell by half across the sweep (each level a different stretch,
    the sessions the skip cut all starting at once)."""
    machine = Machine(name="one", sockets=1, cores_per_socket=1)
    target = SimTarget(machine, "1-replica", Share.all_of(machine), SimParams())
    trace = support_trace(60, 40.0, seed=3, think_s=0.3)
    checks = {}
    for window in (2.0, 0.0):
        plan = AutoPlan(
            warmup=1.0, duration=2.0, reps=1, max_levels=6, skip=5.0, loop_window=window,
            probe_level=0.3,
        )  # fmt: skip
        curve = auto_sweep(target, trace, {"mean": 0.02}, plan=plan, seed=1)
        checks[window] = offered_check(curve)
    assert checks[2.0]["offered_monotone"], checks[2.0]["offered"]
    assert checks[2.0]["offered_linearity"] < 0.15, checks[2.0]["offered"]
    assert checks[0.0]["offered_linearity"] > 2 * checks[2.0]["offered_linearity"]


def test_the_live_engine_does_not_loop_a_looped_run_again():
    from shrink.providers import _ShareUtilization

    class _Engine(FakeTarget):
        loop = True

        def __init__(self):
            super().__init__()
            self.seen: list[bool] = []

        def run(self, trace, **kw):
            self.seen.append(self.loop)
            return super().run(trace, **kw)

    inner = _Engine()
    target = _ShareUtilization(inner, 0.25, 1)
    window = loop_window(_surging(0), 10.0, 30.0)
    run = looped_run(window, 4.0, 1.0, 8.0)
    target.run(run.trace, rate_factor=4.0, warmup=run.warmup, duration=run.duration, seed=0)
    target.run(window, rate_factor=4.0, warmup=1.0, duration=2.0, seed=0)
    assert inner.seen == [False, True] and inner.loop


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_the_default_window_holds_whole_sessions(seed):
    """A recording's last sessions were cut by its end. Looped, a window ending there
    offered a third of the trace's rate at the start of every copy: a light level,
    which only measures a copy's first seconds, then offered a third of its load.
    The default window ends where sessions still fit, so every level offers about
    its share of the window's rate (the band holds the count noise of 20 s)."""
    from shrink.measure import complete_end, default_loop_window, default_skip
    from shrink.synth import synth_support

    trace = synth_support(150, 240, seed=seed)
    skip = default_skip(trace)
    span = default_loop_window(trace, skip)
    assert skip + span <= complete_end(trace, skip) - float(trace.column("t").min()) + 1.0
    window = loop_window(trace, skip, span)
    unit = len(window) / span
    for level in (0.3, 1.0, 3.0):
        run = looped_run(window, level, 1.5, 20.0)
        real = run.trace.column("t") / level
        n = ((real >= run.warmup) & (real < run.warmup + run.duration)).sum()
        assert 0.75 <= n / run.duration / level / unit <= 1.25, level


def test_open_mode_has_no_cut_sessions():
    from shrink.measure import complete_end

    trace = _surging(0).with_meta(mode="open")
    assert complete_end(trace, 10.0) == np.inf


def test_offered_check_leaves_saturated_levels_out():
    """A saturated server holds a session workload's offered load down (a session's next
    burst waits for its responses): that level says nothing about the load's control,
    and counted, it would flag a controlled sweep as not rising with the level."""
    from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats

    def level(lvl: float, offered: float, u: float) -> Level:
        stats = latency_stats(np.full(100, 0.01), 1.0)
        rep = LevelStats(throughput=offered, overall=stats, offered=offered, utilization=u)
        return Level(lvl, [rep])

    curve = LoadCurve([level(1.0, 100.0, 0.3), level(2.0, 205.0, 0.6), level(3.0, 150.0, 0.99)])
    check = offered_check(curve)
    assert check["offered_monotone"] is True
    assert check["offered_saturated"] == [3.0]
    assert check["offered_linearity"] < 0.05
    unsaturated = LoadCurve([level(1.0, 100.0, 0.3), level(2.0, 150.0, 0.6)])
    assert offered_check(unsaturated)["offered_linearity"] > 0.1


def test_slow_motion_stretches_each_session_but_not_when_sessions_start():
    trace = _surging(2)
    trace = trace.with_column("think", np.full(len(trace), 0.4))
    slow = slow_motion(trace, 5.0)
    assert slow.meta["think_scale"] == 5.0
    np.testing.assert_allclose(slow.column("think"), 5.0 * trace.column("think"))
    starts, slow_starts = trace.session_starts()[1], slow.session_starts()[1]
    np.testing.assert_allclose(slow_starts, starts)
    # Every later request comes five times as far into its session (here 0.5 s a burst).
    into = slow.column("t") - np.repeat(starts, np.bincount(trace.column("session")))
    np.testing.assert_allclose(into, 2.5 * trace.column("burst"), atol=1e-9)
    # A looped run of the slow trace plans the same requests a second: the sessions of
    # earlier copies, still running at its start, are five times as many.
    window = loop_window(trace, 10.0, 30.0)
    slow_window = slow_motion(window, 5.0)
    run, slow_run = looped_run(window, 4.0, 1.5, 8.0), looped_run(slow_window, 4.0, 7.5, 40.0)
    sent = [r.trace.column("t") / 4.0 for r in (run, slow_run)]  # seconds into the run
    rate = [
        np.sum((t >= r.warmup) & (t < r.warmup + r.duration)) / r.duration
        for t, r in zip(sent, (run, slow_run), strict=True)
    ]
    assert rate[1] == pytest.approx(rate[0], rel=0.1)
    # One request a unit (open mode) has nothing to stretch.
    open_trace = Trace.from_columns(
        {"session": [0, 1], "t": [0.0, 1.0], "path": ["/a", "/b"], "cls": ["static"] * 2},
        meta={"mode": "open"},
    )
    np.testing.assert_allclose(slow_motion(open_trace, 5.0).column("t"), [0.0, 1.0])
