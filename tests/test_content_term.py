"""The share model's content term: a time-sliced share reads a MAT low by its dynamic
work's part times ln(1 / alpha) times a fitted slope (shrink.scaling.content_term), the
dynamic part read at the share's lightest level, the slope fitted on the corpus
through the origin (bench/fidelity_fit.py)."""

from __future__ import annotations

import math
import random
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fidelity_fit

from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.scaling import content_term, dynamic_share
from shrink.share import Share


def _cls(x: float, mean: float) -> ClassStats:
    return ClassStats(n=int(x * 10), throughput=x, mean=mean, p50=mean, p90=mean, p99=mean,
                      p999=mean)  # fmt: skip


def _rep(static: tuple[float, float], dynamic: tuple[float, float] | None, behind=False):
    per = {"static": _cls(*static)}
    if dynamic is not None:
        per["dynamic"] = _cls(*dynamic)
    x = sum(c.throughput for c in per.values())
    return LevelStats(throughput=x, overall=_cls(x, 0.001), per_class=per,
                      generator_behind=behind)  # fmt: skip


def _curve(*levels: tuple[float, list[LevelStats]]) -> LoadCurve:
    return LoadCurve(
        levels=[Level(level=lv, reps=reps) for lv, reps in levels],
        share=Share("cpu_time", (1,), 0.25),
        alpha=0.25,
    )


def test_the_dynamic_part_is_read_at_the_lightest_level_pooled_over_its_kept_reps():
    # At level 0.1: 100 static req/s of 0.1 ms and 5 dynamic of 20 ms (busy 10 and 100),
    # and a second repetition of the same; a behind one is left out.
    light = [_rep((100, 1e-4), (5, 0.02)), _rep((100, 1e-4), (5, 0.02)),
             _rep((100, 1e-4), (50, 0.02), behind=True)]  # fmt: skip
    # A busier level, whose queueing falls on the dynamic pages, is not read.
    busy = [_rep((1000, 1e-4), (50, 0.2))]
    got = dynamic_share(_curve((1.0, busy), (0.1, light)))
    assert got == pytest.approx(100 / 110)
    # Static pages only: none. No levels: unknown.
    assert dynamic_share(_curve((0.1, [_rep((100, 1e-4), None)]))) == 0.0
    assert dynamic_share(_curve()) is None
    # Any class but "static" counts as dynamic work (a trace's own classes).
    odd = _rep((100, 1e-4), None)
    odd.per_class["api"] = _cls(10, 0.001)
    assert dynamic_share(_curve((0.1, [odd]))) == pytest.approx(10 / 20)


def test_the_content_term_is_zero_without_dynamic_work_or_without_a_share():
    assert content_term(0.25, 0.9) == pytest.approx(0.9 * math.log(4))
    assert content_term(0.125, 1.0) == pytest.approx(3 * content_term(0.5, 1.0))
    assert content_term(1.0, 0.9) == 0.0 and content_term(0.25, 0.0) == 0.0
    assert content_term(0.25, None) == 0.0 and content_term(0.0, 0.5) == 0.0


def _row(config: str, alpha: float, dynamic: float, log_error: float, i: int) -> dict:
    cell = {
        "stat": "mean", "predicted": 100 * math.exp(log_error), "measured": 100.0,
        "status": "ok/ok", "log_error": log_error, "applied_bias": 0.0, "ci": None,
        "budget": {"repetition": 0.02, "drift": 0.0, "speed": 0.0, "dof": 10},
    }  # fmt: skip
    return {"config": config, "dir": f"{config}/{i}", "share_kind": "cpu_time", "alpha": alpha,
            "dynamic_share": dynamic, "mean": cell}  # fmt: skip


def _corpus(slope: float, sd: float, seed: int) -> list[dict]:
    """Runs whose log error is -slope * x plus noise of ``sd``: dynamic pages at three
    alphas and static ones (x = 0), four runs of each."""
    rnd = random.Random(seed)
    configs = [("d50", 0.5, 0.9), ("d25", 0.25, 0.9), ("d125", 0.125, 0.9), ("s25", 0.25, 0.0)]
    return [
        _row(name, a, d, -slope * content_term(a, d) + rnd.gauss(0, sd), i)
        for name, a, d in configs
        for i in range(4)
    ]


def test_the_slope_is_fitted_through_the_origin_within_its_standard_error_over_seeds():
    """Over 200 seeds the fitted slope's error stays within 3 standard errors of the
    least-squares slope (sd / sqrt(sum x^2)) in all but a few, and the spread left
    about it estimates the noise beyond the repetitions' term."""
    slope, sd = 0.34, 0.08
    xs = [fidelity_fit.content_x(r) for r in _corpus(slope, sd, 0)]
    se = sd / math.sqrt(sum(x * x for x in xs))
    misses, sigmas = 0, []
    for seed in range(200):
        pairs = fidelity_fit._pairs(_corpus(slope, sd, seed))
        model = fidelity_fit.fit_model(pairs)
        assert model.bias == 0.0
        misses += abs(model.slope - slope) > 3 * se
        sigmas.append(model.sigma)
    assert misses <= 3  # P(|z| > 3) = 0.27%: about 0.5 expected of 200
    want = math.sqrt(sd**2 - 0.02**2)
    assert statistics.median(sigmas) == pytest.approx(want, rel=0.15)


def test_static_runs_do_not_move_the_slope_and_runs_without_content_get_a_constant_bias():
    rows = _corpus(0.3, 0.0, 0)
    base = fidelity_fit.fit_model(fidelity_fit._pairs(rows)).slope
    assert base == pytest.approx(0.3)
    # A static run errs however it errs: its x is 0, so the slope does not see it.
    shifted = [
        {**r, "mean": {**r["mean"], "log_error": 0.2}} if r["config"] == "s25" else r
        for r in rows
    ]  # fmt: skip
    assert fidelity_fit.fit_model(fidelity_fit._pairs(shifted)).slope == pytest.approx(base)
    # Records kept before the dynamic part was: no content term, a constant bias.
    bare = [{k: v for k, v in r.items() if k != "dynamic_share"} for r in rows]
    model = fidelity_fit.fit_model(fidelity_fit._pairs(bare))
    assert model.slope == 0.0
    assert model.bias == pytest.approx(statistics.fmean(r["mean"]["log_error"] for r in rows))
    # A core subset's runs never take the term (no time slices).
    cores = [{**r, "share_kind": "cores"} for r in rows]
    assert all(c["x"] == 0.0 for _, c in fidelity_fit._pairs(cores))


def test_leaving_out_the_smallest_alpha_the_others_predict_it():
    """Fitted on alphas 0.5 and 0.25 and static pages, the slope corrects the 12.5%
    share it never saw: its leave-one-out errors are the noise's, not the bias's."""
    loo = fidelity_fit.leave_one_out(_corpus(0.34, 0.0, 0))
    cells = loo["d125"]["cells"]
    assert len(cells) == 4 and all(abs(c["error"]) < 1e-9 and c["covered"] for c in cells)
    # A constant bias, fitted the same way, would miss it by far.
    const = fidelity_fit.Model(bias=statistics.fmean(
        -0.34 * content_term(a, d) for a, d in ((0.5, 0.9), (0.25, 0.9), (0.25, 0.0))
    ))  # fmt: skip
    x = content_term(0.125, 0.9)
    assert abs(math.exp(-0.34 * x - const.bias) - 1) > 0.25


def test_the_forms_bench_ranks_the_form_the_errors_follow_first():
    """On runs whose errors follow d * ln(1/alpha), that form errs least leaving one
    configuration out, and a constant bias most."""
    import fidelity_forms

    rows = _corpus(0.34, 0.01, 3)
    got = {form: fidelity_forms.judge(rows, form)["median"] for form in fidelity_forms.FORMS}
    assert min(got, key=got.get) == "d * ln(1/alpha)"
    assert max(got, key=got.get) == "constant"
