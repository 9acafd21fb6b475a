"""Failed responses are failures: counted by class, and a level with them is never a MAT's
level (at most the upper end of its bracket, when over the threshold already)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from shrink.loadcurve import FAILURE_LIMIT, LoadCurve
from shrink.mat import mat
from shrink.measure import level_stats, sweep
from shrink.runlog import RunLog
from shrink.target import FakeTarget, RunResult
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _log(status, error=None, done=None):
    n = len(status)
    return RunLog.from_columns(
        {
            "intended": np.arange(n) * 0.01,
            "sent": np.arange(n) * 0.01,
            "done": np.arange(n) * 0.01 + 1e-3 if done is None else np.asarray(done),
            "status": np.asarray(status),
            "error": error or [""] * n,
        }
    )


def test_only_whole_2xx_3xx_responses_succeed():
    log = _log(
        [200, 304, 404, 503, 500, 0, 200, 101],
        error=["", "", "", "", "", "refused", "timeout", ""],
    )
    assert log.ok_mask().tolist() == [True, True, False, False, False, False, False, False]
    # 101 without a final response arrived as nothing usable: a transport failure
    assert log.failures() == {"transport": 3, "http_4xx": 1, "http_5xx": 2}


def test_a_row_without_status_but_with_a_response_reads_as_200():
    log = RunLog.from_columns({"intended": [0.0, 1.0], "done": [0.1, np.nan]})
    assert log.column("status").tolist() == [200, 0]
    assert log.ok_mask().tolist() == [True, False]


class _FailingAbove(FakeTarget):
    """The fake server answers 503 to a share of requests above a rate factor."""

    def __init__(self, above: float, share: float) -> None:
        super().__init__(servers=1, demand={"static": 0.001})
        self.above, self.share = above, share

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        res = super().run(
            trace, rate_factor=rate_factor, warmup=warmup, duration=duration, seed=seed
        )
        if rate_factor <= self.above:
            return res
        tab = res.runlog.table
        n = tab.num_rows
        bad = np.random.default_rng(seed).random(n) < self.share
        status = np.where(bad, 503, 200).astype(np.int32)
        tab = tab.set_column(tab.schema.get_field_index("status"), "status", pa.array(status))
        return RunResult(RunLog(tab, res.runlog.meta), res.window, res.generator, res.utilization)


def _trace() -> Trace:
    t = np.arange(20000) / 100.0
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/f"] * t.size}, meta={"mode": "open"}
    )


def test_a_level_with_failures_is_counted_kept_in_the_curve_and_never_used_for_a_mat():
    curve = sweep(_FailingAbove(6, 0.02), _trace(), [3, 5, 7, 8.5], warmup=1, duration=10)
    assert [lv.failed for lv in curve.levels] == [False, False, True, True]
    rep = curve.levels[2].reps[0]
    assert rep.failures["http_5xx"] == rep.errors > 0 and rep.failures["transport"] == 0
    assert rep.failure_fraction == pytest.approx(0.02, abs=0.01)
    assert [lv.level for lv in curve.usable()] == [3, 5]
    assert [lv.level for lv in curve.failed_levels()] == [7, 8.5]
    # a MAT from the usable levels only: the 503 levels (fast, since they fail) cannot
    # push the MAT up
    res = mat(curve, "mean", 0.005)
    assert res.status == "not_reached" and res.mat < 600
    # the counts survive the JSON round trip
    back = LoadCurve.from_dict(json.loads(json.dumps(curve.to_dict())))
    assert back.levels[2].failed and back.levels[2].reps[0].failures == rep.failures


def test_the_limit_is_a_fraction_of_the_windows_requests():
    from shrink.loadcurve import ClassStats, LevelStats

    def rep(n_failed: int) -> LevelStats:
        cs = ClassStats(1, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1)
        counts = {"transport": n_failed, "http_4xx": 0, "http_5xx": 0}
        return LevelStats(1.0, cs, failures=counts, requests=2000)

    assert not rep(2).failed  # 0.1%: at the limit
    assert rep(3).failed and FAILURE_LIMIT == 0.001


def test_curves_written_before_failures_were_counted_still_read():
    curve = sweep(FakeTarget(), _trace(), [3], warmup=1, duration=5)
    d = curve.to_dict()
    for lv in d["levels"]:
        for r in lv["reps"]:
            del r["failures"], r["requests"]
    back = LoadCurve.from_dict(d)
    assert back.levels[0].reps[0].failures is None and not back.levels[0].failed


def test_level_stats_counts_only_the_window():
    log = _log([503] * 50 + [200] * 50)
    res = RunResult(
        log,
        (0.5, 1.0),
        FakeTarget().run(_trace(), rate_factor=1, warmup=0, duration=1, seed=0).generator,
    )
    st = level_stats(res)
    assert st.requests == 50 and st.failures == {"transport": 0, "http_4xx": 0, "http_5xx": 0}
    res = RunResult(log, (0.0, 0.5), res.generator)
    assert level_stats(res).failures["http_5xx"] == 50 and level_stats(res).failed


def test_an_automatic_sweep_measures_below_a_level_where_requests_failed():
    from shrink.autolevels import _above
    from shrink.loadcurve import ClassStats, Level, LevelStats

    def rep(thr: float, mean: float, failed: int) -> LevelStats:
        cs = ClassStats(1000, thr, mean, mean, mean, mean, mean)
        counts = {"transport": failed, "http_4xx": 0, "http_5xx": 0}
        return LevelStats(thr, cs, failures=counts, requests=1000, generator_cpu=0.1)

    levels = {
        1.0: Level(1.0, [rep(100, 0.001, 0)]),
        2.0: Level(2.0, [rep(200, 0.002, 0)]),
        4.0: Level(4.0, [rep(150, 0.002, 300)]),  # overloaded: 30% timed out
    }
    curve = LoadCurve(levels=list(levels.values()))
    assert mat(curve, "mean", 0.005).status == "not_reached"
    assert _above(levels, curve, {"mean": 0.005}) == 3.0


def test_a_level_that_failed_while_over_the_threshold_closes_the_bracket():
    # An overloaded server that timed 2% of its requests out while the rest waited 20 ms
    # is over a 5 ms mean whatever the failed ones took: the crossing lies below it.
    from shrink.loadcurve import ClassStats, Level, LevelStats

    def rep(thr: float, mean: float, failed: int, behind: bool = False) -> LevelStats:
        cs = ClassStats(1000, thr, mean, mean, mean, mean, mean)
        counts = {"transport": failed, "http_4xx": 0, "http_5xx": 0}
        return LevelStats(
            thr, cs, failures=counts, requests=1000, generator_cpu=0.1, generator_behind=behind
        )

    usable = [Level(1.0, [rep(100, 0.001, 0)]), Level(2.0, [rep(200, 0.002, 0)])]
    over = Level(4.0, [rep(260, 0.020, 20)])
    res = mat(LoadCurve(levels=[*usable, over]), "mean", 0.005)
    assert res.status == "ok" and res.bracket == (2.0, 4.0)
    # a queue's curve a / (C - X) through (200, 2 ms) and (260, 20 ms): C = 266.7, and
    # 5 ms where C - X = 2 / 5 of C - 200
    c = (20 * 260 - 2 * 200) / 18
    assert res.mat == pytest.approx(c - 2 * (c - 200) / 5)
    # under the threshold on what it served (fast failures): no evidence, still a bound
    fast = Level(4.0, [rep(260, 0.003, 20)])
    assert mat(LoadCurve(levels=[*usable, fast]), "mean", 0.005).status == "not_reached"
    # the generator behind as well: the load was not the level's, still a bound
    late = Level(4.0, [rep(260, 0.020, 20, behind=True)])
    assert mat(LoadCurve(levels=[*usable, late]), "mean", 0.005).status == "not_reached"
    # a crossing among the usable levels is not moved by a failed level above
    crossed = [*usable, Level(3.0, [rep(250, 0.008, 0)])]
    assert mat(LoadCurve(levels=[*crossed, over]), "mean", 0.005).bracket == (2.0, 3.0)
