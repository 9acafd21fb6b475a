"""The prediction is a function of the scaled-down runs: the full target reaches it only
through the calibration's light runs, which stay within their bounds and are recorded."""

from __future__ import annotations

import json
from contextlib import contextmanager

import numpy as np
import pytest
from helpers.fake_provider import DEMAND, FakeProvider, sessions

from shrink.autolevels import AutoPlan
from shrink.predict import PredictConfig, predict
from shrink.scaling import CALIBRATION_BUSY, CALIBRATION_S, calibrate
from shrink.scaling.calibration import RAMP_STEPS
from shrink.target import FakeTarget

pytestmark = pytest.mark.compute

PLAN = AutoPlan(warmup=1, duration=10, reps=2, max_levels=6, probe_level=1.0)
THRESHOLDS = {"mean": 0.004, "p999": 0.040}


class _BusyCheaper(FakeTarget):
    """A whole core whose cost per request falls by ``discount`` once it is more than
    ``knee`` busy (a busy core stops idling between requests): the same as any other
    whole core under the calibration's load, a different capacity above it."""

    def __init__(self, demand, discount, knee=2 * CALIBRATION_BUSY):
        super().__init__(servers=1, demand=demand)
        self.light, self.discount, self.knee = dict(demand), discount, knee

    def run(self, trace, *, rate_factor, warmup, duration, seed):
        span = float(trace.column("t").max() - trace.column("t").min()) or 1.0
        cls = trace.column("cls").astype(str)
        work = sum(self.light.get(c, self.light["static"]) for c in cls) * rate_factor / span
        f = 1.0 - self.discount if work > self.knee else 1.0
        self.demand = {k: v * f for k, v in self.light.items()}
        return super().run(
            trace, rate_factor=rate_factor, warmup=warmup, duration=duration, seed=seed
        )


class _TwoCores(FakeProvider):
    """The share is the ideal slower server of FakeProvider; the full target is a
    _BusyCheaper core, with ``discount`` of its cost gone when busy."""

    def __init__(self, discount):
        super().__init__()
        self.discount = discount
        self.full_runs: list[tuple[float, float]] = []  # (seconds, rate factor)

    @contextmanager
    def open(self, share, mapping):
        if share.kind == "cpu_time":
            with super().open(share, mapping) as target:
                yield target
            return
        target = _BusyCheaper(dict(DEMAND), self.discount)
        desc = target.describe
        target.describe = lambda: {**desc(), "share": share.to_dict(), "mapping": {"name": mapping}}
        yield target


def _prediction_bytes(provider, tmp_path, **kw) -> bytes:
    cfg = PredictConfig(
        alpha=0.25,
        thresholds=THRESHOLDS,
        mappings=["1-replica"],
        seed=4,
        plan=PLAN,
        **{"calibrate": True, **kw},
    )
    res = predict(sessions(8000, 2), provider, cfg, tmp_path)
    return (tmp_path / "prediction.json").read_bytes(), res


def test_full_targets_of_different_capacity_give_byte_identical_predictions(tmp_path):
    """Two full targets alike at light load, 40% apart in capacity when busy: the same
    share runs predict the same bytes, with or without the paired validation runs."""
    a, res_a = _prediction_bytes(_TwoCores(0.0), tmp_path / "a", paired_full_run=True)
    b, res_b = _prediction_bytes(_TwoCores(0.4), tmp_path / "b", paired_full_run=True)
    c, _ = _prediction_bytes(_TwoCores(0.4), tmp_path / "c")
    # The validation's curves do differ: the full targets are not alike when busy.
    full_a = max(lv.throughput for lv in res_a.full.usable())
    full_b = max(lv.throughput for lv in res_b.full.usable())
    assert full_b > 1.2 * full_a
    assert a == b
    # Without the paired runs only the validation's summary is missing.
    da, dc = json.loads(a), json.loads(c)
    assert da.pop("full_run") is not None and dc.pop("full_run", None) is None
    assert da == dc


def test_the_companion_chooses_no_level_of_the_share(tmp_path):
    """A validation's runs alongside the share's (for a drifting VM) steer nothing: the
    share's curve is the same level for level, repetition for repetition."""
    _, paired = _prediction_bytes(_TwoCores(0.4), tmp_path / "p", paired_full_run=True)
    _, alone = _prediction_bytes(_TwoCores(0.4), tmp_path / "u")
    assert [lv.level for lv in paired.measured.levels] == [lv.level for lv in alone.measured.levels]
    assert paired.measured.to_dict()["levels"] == alone.measured.to_dict()["levels"]


@pytest.mark.parametrize("discount", [0.0, 0.4])
def test_the_calibration_stays_light_and_short_and_is_recorded(tmp_path, discount):
    _, res = _prediction_bytes(_TwoCores(discount), tmp_path)
    use = res.prediction.extra["full_target_use"]
    assert use["runs"] and use["seconds"] <= CALIBRATION_S
    assert use["max_utilization"] <= CALIBRATION_BUSY
    assert use["bounds"] == {"seconds": CALIBRATION_S, "utilization": CALIBRATION_BUSY}
    assert use["within_bounds"] is True
    for run in use["runs"]:
        assert {"class", "seconds", "offered_rate", "utilization"} <= set(run)
    speed = res.prediction.share.speed
    assert speed.method == "calibrated" and speed.full_target_seconds == use["seconds"]
    # The model error the interval carries says where it came from.
    assert "provenance" in res.prediction.extra["model_error"]
    assert res.prediction.extra["share_model"]["calibration_busy"] == CALIBRATION_BUSY


def test_calibration_reads_a_time_sliced_share_within_its_bounds():
    """Static pages at 0.9 of the quota, dynamic ones at 0.4 (a memory-heavy page loses
    its caches in every gap): the calibration finds the mix's speed within its own
    stated noise over many seeds, and never runs the full target over its bounds.

    The fake's service times are exponential (a CV of 1, far above a real page's);
    three of the speed's sigmas leave one seed in 370 outside."""
    full = {"static": 0.001, "dynamic": 0.005}
    true = {"static": 0.25 * 0.9, "dynamic": 0.25 * 0.4}
    share = {c: full[c] / true[c] for c in full}
    trace = sessions(4000, 1)
    cls = list(trace.column("cls").astype(str))
    mix = sum(full[c] for c in cls) / sum(share[c] for c in cls)
    got = []
    for seed in range(12):
        sp = calibrate(
            FakeTarget(demand=share), FakeTarget(demand=full), trace, nominal=0.25, seed=seed
        )
        assert sp.full_target_seconds <= CALIBRATION_S
        assert sp.full_target_busy is not None and sp.full_target_busy <= CALIBRATION_BUSY
        assert abs(np.log(sp.effective / mix)) < 3 * sp.sigma, (seed, sp)
        got.append(sp.effective)
    assert np.median(got) == pytest.approx(mix, rel=0.1), got


def test_a_core_subset_needs_no_calibration(tmp_path):
    """alpha of the cores, alpha of the sessions: the full target is never opened."""
    from shrink.machine import Machine

    opened = []

    class Cores(FakeProvider):
        def machine(self):
            return Machine(name="fake-2c", sockets=1, cores_per_socket=2)

        def server_cpus(self):
            return (0, 1)

        @contextmanager
        def open(self, share, mapping):
            opened.append(share.kind)
            target = FakeTarget(servers=len(share.cpus), demand=dict(DEMAND))
            desc = target.describe
            target.describe = lambda: {**desc(), "share": share.to_dict(), "mapping": {}}
            yield target

    cfg = PredictConfig(alpha=0.5, thresholds=THRESHOLDS, mappings=["1-replica"], plan=PLAN)
    res = predict(sessions(8000, 2), Cores(), cfg, tmp_path)
    assert opened == ["cores"]
    assert res.prediction.share.kind == "cores" and res.prediction.share.speed is None
    assert res.prediction.extra["full_target_use"]["runs"] == []


def test_predict_takes_the_generators_placement_and_no_calibration(tmp_path, monkeypatch):
    """A core subset on a small machine: the generator on the share's CPU, allowed, at a
    SCHED_FIFO priority; --no-calibrate for a full target the user cannot run."""
    from typer.testing import CliRunner

    import shrink.pipeline
    from shrink.cli import app
    from shrink.pipeline import GeneratorPlacement

    seen = {}

    def run_predict(trace_path, out, config, **kwargs):
        seen.update(kwargs, config=config)
        raise SystemExit(0)

    monkeypatch.setattr(shrink.pipeline, "run_predict", run_predict)
    trace = tmp_path / "t.parquet"
    sessions(10, 1).write_parquet(trace)
    args = ["predict", str(trace), "-o", str(tmp_path / "p"), "--share-kind", "cores",
            "--server-cpus", "0-1", "--generator-cpus", "0", "--allow-overlap",
            "--realtime", "10", "--lag-limit", "5ms", "--no-calibrate"]  # fmt: skip
    CliRunner().invoke(app, args)
    assert seen["target"].generator == GeneratorPlacement((0,), True, 10, lag_limit=0.005)
    assert seen["config"].calibrate is False and seen["target"].server_cpus == (0, 1)


def test_a_generator_on_the_servers_cpus_needs_allow_overlap(tmp_path):
    from shrink.errors import TopologyError
    from shrink.providers import TestbedProvider
    from shrink.target import GeneratorPlacement

    with pytest.raises(TopologyError, match="--allow-overlap"):
        TestbedProvider(tmp_path, server_cpus=(0, 1), generator=GeneratorPlacement((0,)))
    ok = TestbedProvider(tmp_path, server_cpus=(0, 1), generator=GeneratorPlacement((0,), True))
    assert ok.describe()["allow_overlap"] and ok.generator_cpus == (0,)


def test_a_core_subset_says_what_it_cannot_show_and_what_the_generator_took():
    from shrink.loadcurve import Level, LevelStats, LoadCurve
    from shrink.report.assumptions import core_subset_assumptions
    from shrink.share import Share

    rep = LevelStats(100.0, {"mean": 0.002}, generator_cpu=0.12)
    curve = LoadCurve([Level(1.0, [rep])], knob="rate_factor", alpha=0.5,
                      share={"kind": "cores", "cpus": [0], "fraction": 0.5},
                      meta={"target": {"generator_cpus": [0]}})  # fmt: skip
    words = core_subset_assumptions(Share("cores", (0,), 0.5), curve)
    assert len(words) == 2 and "one listening socket" in words[0]
    assert "CPU 0" in words[1] and "12% of a CPU" in words[1]
    curve.sweep = curve.sweep.with_(target={"generator_cpus": [2]})  # a generator on its own CPU
    assert len(core_subset_assumptions(Share("cores", (0,), 0.5), curve)) == 1


def test_the_fitted_bias_corrects_the_predicted_throughputs_and_is_recorded(tmp_path, monkeypatch):
    """A model error with a bias of log(0.8) (predictions 20% low over the corpus) makes
    every predicted MAT 1/0.8 times the uncorrected one, and prediction.json says so."""
    import math

    from shrink.scaling import ModelError

    _, plain = _prediction_bytes(_TwoCores(0.0), tmp_path / "plain")
    fitted = ModelError(0.1, {"source": "test"}, bias=math.log(0.8))
    monkeypatch.setattr("shrink.predict.model_error", lambda target, kind, **_: fitted)
    _, corrected = _prediction_bytes(_TwoCores(0.0), tmp_path / "corrected")
    for stat in THRESHOLDS:
        a = plain.prediction.mappings["1-replica"].stats[stat]
        b = corrected.prediction.mappings["1-replica"].stats[stat]
        if a.status == "ok":
            assert b.mat == pytest.approx(a.mat / 0.8, rel=1e-6)
    rec = corrected.prediction.extra["model_error"]
    assert rec["correction"] == pytest.approx(1.25) and rec["sigma"] == 0.1
    assert corrected.predicted.meta["shrink_scaled"]["correction"] == pytest.approx(1.25)


def test_the_full_targets_load_dependence_is_a_self_check():
    """The validation's curve says whether the full target's cost moved with its load
    (the calibration reads it light): light over busy capacity, or nothing without both."""
    from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats
    from shrink.selfchecks import load_dependence
    from shrink.share import Share

    def rep(x, u):
        stats = latency_stats(np.full(50, 0.001), 1.0)
        return LevelStats(throughput=x, overall=stats, utilization=u)

    def curve(reps):
        levels = [Level(level=i + 1.0, reps=[r]) for i, r in enumerate(reps)]
        return LoadCurve(levels=levels, share=Share.whole((1,)), alpha=1.0)

    got = load_dependence(curve([rep(100, 0.1), rep(900, 0.6), rep(1300, 0.9)]))
    assert got["light_capacity"] == pytest.approx(1000)
    assert got["busy_capacity"] == pytest.approx((1500 + 1444.44) / 2, rel=1e-3)
    assert got["light_over_busy"] == pytest.approx(1000 / got["busy_capacity"])
    assert load_dependence(curve([rep(900, 0.6), rep(1300, 0.9)])) == {}


def test_how_far_the_host_moved_after_the_share_is_a_self_check():
    """The validation's busy capacity on its own levels over that on the levels it ran
    beside the share's: what a drifting host moved the measured MAT by."""
    from shrink.loadcurve import Level, LevelStats, LoadCurve, latency_stats
    from shrink.selfchecks import host_moved
    from shrink.share import Share

    def curve(points):
        stats = latency_stats(np.full(50, 0.001), 1.0)
        levels = [
            Level(level=lv, reps=[LevelStats(throughput=x, overall=stats, utilization=u)])
            for lv, x, u in points
        ]
        return LoadCurve(levels=levels, share=Share.whole((1,)), alpha=1.0)

    share = curve([(1.0, 90, 0.3), (2.0, 180, 0.6)])
    # beside the share: 1.0 (too light to count) and 2.0; after it: 3.0 and 4.0
    full = curve([(1.0, 300, 0.3), (2.0, 600, 0.6), (3.0, 1100, 0.88), (4.0, 1200, 0.96)])
    got = host_moved(full, share)
    assert got["host_beside_share"] == pytest.approx(1000)
    assert got["host_after_share"] == pytest.approx(2300 / 1.84)
    assert got["host_after_over_beside"] == pytest.approx(2300 / 1.84 / 1000)
    assert host_moved(curve([(2.0, 600, 0.6)]), share) == {}  # nothing after the share


class _Host:
    """A host whose speed changes once the share's sweep starts (its first run of a
    trace that is not the calibration's probe): every demand divided by ``after``."""

    def __init__(self, after: float) -> None:
        self.after, self.sweeping = after, False


class _OnHost(FakeTarget):
    def __init__(self, host: _Host, demand: dict[str, float], share: bool) -> None:
        super().__init__(servers=1, demand=demand)
        self.host, self.base, self.share = host, dict(demand), share

    def run(self, trace, **kw):
        if self.share and "probe" not in trace.meta:
            self.host.sweeping = True
        f = self.host.after if self.host.sweeping else 1.0
        self.demand = {k: v / f for k, v in self.base.items()}
        return super().run(trace, **kw)


class _Drifting(FakeProvider):
    """FakeProvider's share (its nominal fraction of the core) and full core, both on
    one host that gets ``after`` times faster when the share's sweep starts."""

    def __init__(self, after: float) -> None:
        super().__init__()
        self.host = _Host(after)

    @contextmanager
    def open(self, share, mapping):
        f = share.cpu_fraction if share.kind == "cpu_time" else 1.0
        target = _OnHost(
            self.host, {k: v / f for k, v in self.demand.items()}, share.kind == "cpu_time"
        )
        desc = target.describe
        target.describe = lambda: {**desc(), "share": share.to_dict(), "mapping": {"name": mapping}}
        yield target


@pytest.mark.parametrize("after", [0.7, 1.5])
def test_the_full_side_is_read_beside_the_sweep_so_the_hosts_drift_cancels(tmp_path, after):
    """The host gets faster (or slower) once the share's sweep starts: the calibration's
    full side, read on its runs beside the sweep's levels near the knee, sees the same
    host as the share's knee, and the speed is what it is without the drift. A full
    side read before the sweep would be off by the drift, ``after``."""
    _, steady = _prediction_bytes(_Drifting(1.0), tmp_path / "steady")
    _, res = _prediction_bytes(_Drifting(after), tmp_path / "drift")
    speed, still = res.prediction.share.speed, steady.prediction.share.speed
    assert speed.share_knee is not None  # the share's side read on the sweep's runs
    # Within the speed's own noise of the steady host's (the rates after each run
    # follow what it measured, so the requests differ), and of the truth: the drift
    # (x0.7, x1.5) is four to six of its sigmas.
    assert abs(np.log(speed.effective / still.effective)) < 2 * speed.sigma, (speed, still)
    assert abs(np.log(speed.effective / 0.25)) < 2 * speed.sigma < abs(np.log(after)) / 2
    runs = res.prediction.extra["full_target_use"]["runs"]
    beside = [r for r in runs if r["phase"] == "beside"]
    assert beside and sum(r["seconds"] for r in runs) <= CALIBRATION_S
    # Before the sweep, only the pilot and the ramp that set the rates: every period
    # that reads the full side runs beside the share's levels.
    before = [r["phase"] for r in runs[: len(runs) - len(beside)]]
    assert before == ["pilot"] + ["ramp"] * RAMP_STEPS
    assert all(r["phase"] == "beside" for r in runs[len(runs) - len(beside) :])
    assert max(r["utilization"] for r in runs) <= CALIBRATION_BUSY
