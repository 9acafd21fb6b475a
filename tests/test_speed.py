"""calibrate: a CPU-time share's speed for the trace's mix, on fakes and the sim."""

from __future__ import annotations

import itertools
import math
import socketserver
import statistics
import threading
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from helpers.fake_targets import Altered

from shrink.errors import MeasurementError, ParameterError
from shrink.machine import Machine
from shrink.scaling import calibrate, calibrate_beside, probe_trace
from shrink.share import Share, ShareSpeed
from shrink.sim import SimTarget
from shrink.target import FakeTarget, RunResult
from shrink.trace import Trace

FULL = {"static": 0.001, "dynamic": 0.005}
# the share at alpha 0.25, but static pages run at 0.9 of that and dynamic at 0.4
TRUE = {"static": 0.25 * 0.9, "dynamic": 0.25 * 0.4}
SHARE = {c: FULL[c] / TRUE[c] for c in FULL}


def _trace(n: int = 400, dynamic_every: int = 4) -> Trace:
    cls = ["dynamic" if i % dynamic_every == 0 else "static" for i in range(n)]
    path = [f"/app/p.php?id={i}" if c == "dynamic" else f"/s/{i}.html" for i, c in enumerate(cls)]
    return Trace.from_columns(
        {"session": np.arange(n), "t": np.arange(n) / 100.0, "path": path, "cls": cls}
    )


class _NoUtilization(Altered):
    """A target that reports no utilization (the latency fallback is used)."""

    def alter(self, res: RunResult, kw: dict[str, Any]) -> None:
        res.utilization = None


def _mix_speed(trace: Trace, share: dict[str, float]) -> float:
    """The trace's mix's true speed on a share with per-class demands ``share``."""
    cls = list(trace.column("cls").astype(str))
    return sum(FULL[c] for c in cls) / sum(share[c] for c in cls)


class _Recording(FakeTarget):
    """A FakeTarget that keeps what it was asked to replay."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.ran: list[tuple[Trace, float]] = []

    def run(self, trace: Trace, **kw: Any) -> RunResult:
        self.ran.append((trace, kw["rate_factor"]))
        return super().run(trace, **kw)


def test_the_calibration_runs_the_samples_mix_at_the_planned_rate():
    trace = _trace(n=2000)
    full, share = _Recording(demand=FULL), _Recording(demand=SHARE)
    got = calibrate(share, full, trace, nominal=0.25)
    paths = set(trace.column("path"))
    for target, runs in ((full, got.full_target_runs), (share, got.share_runs)):
        assert len(target.ran) == len(runs)
        cls = np.concatenate([t.column("cls").astype(str) for t, _ in target.ran])
        # one dynamic page in four, as in the trace: drawn by class, so each run's
        # count is its share to one request
        assert cls.size > 300 and 0.24 < float(np.mean(cls == "dynamic")) < 0.26
        for (t, factor), run in zip(target.ran, runs, strict=True):
            assert set(t.column("path")) <= paths  # the trace's own requests
            assert factor == 1.0  # at the planned rate exactly, one request a session
            k = run.get("burst", 1)
            # the full target's runs after the pilot in periods at the knee's rate, the
            # share's evenly spaced: the planned mean rate either way
            assert (k > 1) == (target is full and run is not runs[0])
            within = run.get("period_rate") or math.inf
            i = np.arange(len(t))
            at = i // k * k / run["offered_rate"] + i % k / within
            assert np.allclose(t.column("t") - t.column("t")[0], at)
            if k > 1:  # whole periods in the window, centred half a gap from its edges
                assert run["offered_rate"] < within < math.inf
                gap, span = k / run["offered_rate"], (k - 1) / within
                starts = t.column("t")[i % k == 0]
                inside = starts[(starts >= 0.5) & (starts < run["seconds"])]
                assert inside.size and np.allclose((inside + span / 2 - 0.5) % gap, gap / 2)
            assert t.n_sessions == len(t)


def test_a_period_is_at_the_knees_rate_and_the_window_holds_a_whole_one():
    from shrink.scaling.calibration import PERIOD_S, _Aim

    trace = _trace(n=50)
    for rate, knee, dur in ((80.0, 1000.0, 1.5), (80.0, 1000.0, 12.0), (3.0, 500.0, 2.0)):
        planned = _Aim(rate, knee, 0.1).plan(trace, 0.2, dur, 0)
        # PERIOD_S at the knee's rate, shorter where the window would not hold one
        assert planned.burst == max(1, min(math.floor(knee * PERIOD_S), math.floor(rate * dur)))
        # the window holds whole periods, each within it
        assert planned.rate * dur >= planned.burst - 1e-9
        if planned.period_rate:
            assert (planned.burst - 1) / planned.period_rate <= dur
    assert _Aim(1.0, 1.0, 0.1).plan(trace, 0.2, 2.0, 0).period_rate is None  # one at a time
    with pytest.raises(MeasurementError, match="burst of 0"):
        probe_trace(trace, 10.0, 1.0, 0, burst=0)
    with pytest.raises(MeasurementError, match="period at 5"):
        probe_trace(trace, 10.0, 1.0, 0, burst=4, period_rate=5.0)


def test_the_mix_speed_is_recovered_over_seeds():
    """The mix's speed (its classes' CPU weighted by their counts) is found within its
    noise over many seeds, and the full target's bounds hold every time."""
    trace = _trace()
    true = _mix_speed(trace, SHARE)
    ratios = []
    for seed in range(12):
        got = calibrate(
            FakeTarget(demand=SHARE), FakeTarget(demand=FULL), trace, nominal=0.25, seed=seed
        )
        assert got.method == "calibrated" and got.nominal == 0.25 and got.per_class == {}
        assert got.full_target_seconds <= 20.0 and got.full_target_busy <= 0.10
        assert {r["class"] for r in got.full_target_runs} == {"mix"}
        ratios.append(got.effective / true)
        # Exponential service times of two classes (a CV of 1.6, far above a real
        # page's) over some hundreds of requests a side: its own sigma says how far a
        # seed may land (three of them: one seed in 370 beyond).
        assert 0.05 < got.sigma < 0.3, got.sigma
        assert abs(math.log(got.effective / true)) < 3 * got.sigma, (seed, got)
    assert abs(statistics.median(ratios) - 1) < 0.1, ratios


class _DearWhenLight(FakeTarget):
    """A time-sliced share: each request costs ``penalty`` times more while the offered
    work is under ``knee`` of its capacity (it pays the quota's gaps), its plain cost
    above (the runs in which its MATs are read)."""

    def __init__(self, demand: dict[str, float], penalty: float, knee: float = 0.3) -> None:
        super().__init__(servers=1, demand=demand)
        self.busy, self.penalty, self.knee = dict(demand), penalty, knee

    def run(self, trace: Trace, *, rate_factor: float, warmup: float, duration: float,
            seed: int) -> RunResult:  # fmt: skip
        span = float(trace.column("t").max() - trace.column("t").min()) or 1.0
        cls = trace.column("cls").astype(str)
        work = sum(self.busy[c] for c in cls) * rate_factor / span
        f = self.penalty if work < self.knee else 1.0
        self.demand = {k: v * f for k, v in self.busy.items()}
        return super().run(
            trace, rate_factor=rate_factor, warmup=warmup, duration=duration, seed=seed
        )


def test_the_share_is_read_near_its_knee():
    """A share that costs 1.6x more per request while lightly loaded: the speed is its
    busy one (where MATs are read), over many seeds; its busy runs are recorded."""
    trace = _trace()
    true = _mix_speed(trace, SHARE)
    ratios = []
    for seed in range(8):
        got = calibrate(
            _DearWhenLight(SHARE, penalty=1.6), FakeTarget(demand=FULL), trace,
            nominal=0.25, seed=seed,
        )  # fmt: skip
        ratios.append(got.effective / true)
        assert len(got.share_runs) == 4
        assert got.share_runs[0]["utilization"] < 0.3 < got.share_runs[-1]["utilization"]
        assert abs(math.log(got.effective / true)) < 3 * got.sigma, (seed, got)
    # read light it would be 1/1.6 = 0.62 of the truth
    assert abs(statistics.median(ratios) - 1) < 0.12, ratios


def test_latency_is_the_fallback_without_utilization():
    near = {c: FULL[c] / (0.25 * 0.9) for c in FULL}  # both classes at 0.225
    got = calibrate(
        _NoUtilization(FakeTarget(demand=near)),
        _NoUtilization(FakeTarget(demand=FULL)),
        _trace(),
        nominal=0.25,
    )
    # the share's light run's latency carries little queueing; loose
    assert 0.6 * 0.225 < got.effective < 1.4 * 0.225, got


def test_the_simulator_share_runs_at_its_fraction():
    m = Machine(name="one", sockets=1, cores_per_socket=2, llc_mib=8.0, ghz=2.0)
    full = SimTarget(m, "1-replica", Share.whole((1,)))
    share = SimTarget(m, "1-replica", Share.cpu_time((1,), 0.25))
    got = calibrate(share, full, _trace(), nominal=0.25, seconds=60.0)
    assert got.effective == pytest.approx(0.25, rel=0.3), got
    # its stated error covers how far it is off (2.6 sd: 1% two-sided), and it is no
    # looser than the 30% the check above allows
    assert 0 < got.sigma < 0.3
    assert abs(math.log(got.effective / 0.25)) < 2.6 * got.sigma + 0.02, got


def test_a_simulated_probe_is_reproducible():
    """Same seed, same speed: the probe's plan must not follow the host's wall time."""
    m = Machine(name="one", sockets=1, cores_per_socket=2, llc_mib=8.0, ghz=2.0)
    full = SimTarget(m, "1-replica", Share.whole((1,)))
    share = SimTarget(m, "1-replica", Share.cpu_time((1,), 0.25))
    a = calibrate(share, full, _trace(), nominal=0.25, seconds=10.0, seed=3)
    b = calibrate(share, full, _trace(), nominal=0.25, seconds=10.0, seed=3)
    assert a == b


def test_bad_input_is_refused_with_the_field():
    with pytest.raises(ParameterError, match="nominal"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=1.5)
    with pytest.raises(ParameterError, match="seconds"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=0.5, seconds=0)
    with pytest.raises(MeasurementError, match="no requests"):
        calibrate(FakeTarget(), FakeTarget(), Trace.empty(), nominal=0.5)
    with pytest.raises(MeasurementError, match="pilot"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=0.5, seconds=1.0)


def test_untrustworthy_runs_are_assumed_nominal_and_noted():
    # The full target's generator cannot send the planned rate: by utilization the
    # speed still holds (noted); by latency it does not (nominal).
    full = FakeTarget(demand=FULL, generator_capacity=10.0)
    got = calibrate(FakeTarget(demand=SHARE), full, _trace(), nominal=0.25)
    assert 0.6 < got.effective / _mix_speed(_trace(), SHARE) < 1.6
    assert any("behind" in n for n in got.notes), got.notes
    assert ShareSpeed.from_dict(got.to_dict()) == got
    blind = calibrate(
        _NoUtilization(FakeTarget(demand=SHARE)), _NoUtilization(full), _trace(), nominal=0.25
    )
    assert blind.effective == 0.25
    assert any(n.startswith("assumed nominal") for n in blind.notes), blind.notes


def test_the_probe_load_is_a_choice():
    light = calibrate(
        FakeTarget(demand=SHARE), FakeTarget(demand=FULL), _trace(), nominal=0.25, busy=0.2
    )
    assert light.notes == () and light.full_target_busy <= 0.2
    with pytest.raises(ParameterError, match="busy"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=0.25, busy=0)


class _Silent(Altered):
    """A target whose server answers nothing (every request an error)."""

    def alter(self, res: RunResult, kw: dict[str, Any]) -> None:
        t = res.runlog.table
        res.runlog = type(res.runlog)(
            t.set_column(
                t.schema.get_field_index("error"), "error", pa.array(["refused"] * len(t))
            ),
            res.runlog.meta,
        )


def test_a_silent_share_is_noted_and_a_silent_server_is_an_error():
    got = calibrate(
        _Silent(FakeTarget(demand=SHARE)), FakeTarget(demand=FULL), _trace(), nominal=0.25
    )
    assert got.effective == 0.25
    assert any("0 requests measured" in n for n in got.notes), got.notes
    with pytest.raises(MeasurementError, match="is the server answering"):
        calibrate(_Silent(FakeTarget()), _Silent(FakeTarget()), _trace(), nominal=0.25)


@pytest.mark.compute
def test_the_speeds_sigma_is_honest_on_a_heavy_tailed_mix():
    """The simulator's Support mix (page costs heavy-tailed): over seeds, each speed lies
    within three of its own sigmas of the exact 0.5, and their spread is about one
    sigma (a sigma of the capped CV read 5% against a spread of 15%)."""
    import samplers
    from shrink.providers import SimProvider
    from shrink.sim import support_trace

    prov = SimProvider(Machine(name="one", sockets=1, cores_per_socket=1))
    z = []
    for seed in range(8):
        sample = samplers.sample(support_trace(40, 30.0, seed=seed, think_s=0.3), 0.5, seed=seed)
        with (
            prov.open(Share.cpu_time((0,), 0.5), "1-replica") as share,
            prov.open(Share.whole((0,)), "1-replica") as full,
        ):
            got = calibrate(share, full, sample, nominal=0.5, seed=seed)
        z.append(math.log(got.effective / 0.5) / got.sigma)
    assert max(abs(x) for x in z) < 3, z
    assert 0.4 < statistics.pstdev(z) < 1.6, z


def test_the_share_side_is_read_again_on_the_sweeps_runs_near_its_knee():
    from types import SimpleNamespace as NS

    from shrink.scaling import knee_speed

    cal = ShareSpeed(nominal=0.25, effective=0.2, method="calibrated", full_capacity=1000.0)

    def curve(*reps: tuple[float, float, bool]) -> Any:
        rows = [
            NS(throughput=x, utilization=u, generator_behind=b, capacity=x / u) for x, u, b in reps
        ]
        return [NS(reps=rows)]

    # (throughput, utilization, generator behind): light, saturated and behind runs
    # are left out; the rest pool as all their requests over all their CPU.
    got = knee_speed(
        cal,
        curve((30, 0.1, False), (150, 0.6, False), (240, 0.8, False), (300, 1.0, False),
              (260, 0.7, True)),
    )  # fmt: skip
    assert got is not None and got.effective == pytest.approx((150 + 240) / 1.4 / 1000)
    assert got.share_knee == {
        "capacity": pytest.approx(390 / 1.4),
        "repetitions": 2,
        "utilization_band": [0.5, 0.95],
        "calibration_capacity": pytest.approx(200.0),
    }
    assert ShareSpeed.from_dict(got.to_dict()) == got
    # Too few runs near the knee, a speed over 1, or no calibration: unchanged.
    assert knee_speed(cal, curve((150, 0.6, False), (300, 1.0, False))) is cal
    assert knee_speed(cal, curve((900, 0.6, False), (950, 0.7, False))) is cal
    nominal = ShareSpeed.assumed(0.25)
    assert knee_speed(nominal, curve((150, 0.6, False), (240, 0.8, False))) is nominal
    # A calibration that could read the share only light (a cheap page at the
    # generator's rate cap): one repetition near the knee is read; none, and it says
    # the speed likely errs low.
    light = replace(cal, share_runs=({"utilization": 0.12}, {"utilization": 0.11}))
    one = knee_speed(light, curve((150, 0.6, False), (300, 1.0, False)))
    assert one is not None and one.effective == pytest.approx(0.25)
    assert one.share_knee is not None and one.share_knee["repetitions"] == 1
    none = knee_speed(light, curve((30, 0.1, False), (300, 1.0, False)))
    assert none is not None and none.effective == light.effective
    assert any("read under its knee" in n for n in none.notes)
    assert knee_speed(None, curve()) is None


def test_a_bias_fitted_on_another_calibration_is_not_applied(monkeypatch):
    import shrink.scaling.transform as transform

    # A dynamic share of a quarter: the content term is not 0, nor is the bias.
    at = {"calibrated": True, "alpha": 0.25, "dynamic": 0.9}
    shipped = transform.model_error("testbed", "cpu_time", **at).provenance["calibration"]
    monkeypatch.setattr(transform, "CALIBRATION", shipped)
    fitted = transform.model_error("testbed", "cpu_time", **at)
    assert fitted.bias != 0.0 and "bias_not_applied" not in fitted.provenance
    monkeypatch.setattr(transform, "CALIBRATION", "another calibration")
    other = transform.model_error("testbed", "cpu_time", **at)
    assert other.bias == 0.0 and other.correction == 1.0 and other.sigma == fitted.sigma
    assert "fitted on another calibration" in other.provenance["bias_not_applied"]


def test_a_share_at_its_nominal_speed_takes_the_nominal_fit_or_no_bias(monkeypatch):
    """A CPU-time share not calibrated (its nominal fraction) errs otherwise than a
    calibrated one: the calibrated fit's bias is never applied to it; the corpus's
    nominal entry is, when there is one."""
    import json as json_

    import shrink.scaling.transform as transform

    shipped = json_.loads(
        transform.resources.files("shrink").joinpath("data/model_error.json").read_text()
    )
    calibrated = shipped["share_kinds"]["cpu_time"]
    kinds = {"cpu_time": calibrated, "cores": shipped["share_kinds"]["cores"]}

    def with_kinds(k: dict) -> None:
        text = json_.dumps({**shipped, "share_kinds": k})

        class _Files:
            def joinpath(self, _name: str) -> _Files:
                return self

            def read_text(self, encoding: str = "utf-8") -> str:
                return text

        monkeypatch.setattr(transform.resources, "files", lambda _pkg: _Files())

    monkeypatch.setattr(transform, "CALIBRATION", calibrated["provenance"]["calibration"])
    with_kinds(kinds)
    at = {"alpha": 0.25, "dynamic": 0.9}
    x = 0.9 * math.log(4)
    want = calibrated["bias"] - calibrated["slope"] * x
    got_cal = transform.model_error("testbed", "cpu_time", calibrated=True, **at)
    assert got_cal.bias == pytest.approx(want) and want != 0
    bare = transform.model_error("testbed", "cpu_time", calibrated=False, **at)
    assert bare.bias == 0.0 and bare.sigma == calibrated["sigma"]
    assert "fitted on another calibration" in bare.provenance["bias_not_applied"]
    nominal = {"bias": -0.3, "sigma": 0.2, "provenance": {"calibration": transform.NOMINAL}}
    with_kinds({**kinds, transform.NOMINAL_ENTRY: nominal})
    got = transform.model_error("testbed", "cpu_time", calibrated=False, **at)
    assert (got.bias, got.sigma) == (-0.3, 0.2) and "bias_not_applied" not in got.provenance
    # With a slope, the bias follows the content term: none for static pages or alpha 1.
    with_kinds({**kinds, transform.NOMINAL_ENTRY: {**nominal, "bias": 0.0, "slope": 0.3}})
    got = transform.model_error("testbed", "cpu_time", calibrated=False, **at)
    assert got.bias == pytest.approx(-0.3 * x) and got.provenance["dynamic_share"] == 0.9
    for alpha, dynamic in ((0.25, 0.0), (1.0, 0.9), (0.25, None)):
        flat = transform.model_error("testbed", "cpu_time", alpha=alpha, dynamic=dynamic)
        assert flat.bias == 0.0 and flat.correction == 1.0
    assert transform.model_error("testbed", "cpu_time").bias == calibrated["bias"]
    # A core subset has no speed to read: its own entry either way.
    assert (
        transform.model_error("testbed", "cores", calibrated=False).sigma == kinds["cores"]["sigma"]
    )


def test_capacity_is_the_utilization_law_and_pools_as_requests_over_cpu():
    from shrink.loadcurve import ClassStats, LevelStats, pooled_capacity

    cs = ClassStats(1, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1)

    def rep(x: float, u: float | None, behind: bool = False) -> LevelStats:
        return LevelStats(x, cs, utilization=u, generator_behind=behind)

    assert rep(300.0, 0.6).capacity == pytest.approx(500.0)
    assert rep(300.0, None).capacity is None and rep(300.0, 0.0).capacity is None
    assert rep(float("nan"), 0.5).capacity is None
    reps = [rep(100.0, 0.2), rep(300.0, 0.6), rep(400.0, 0.9), rep(500.0, 1.0), rep(1.0, 0.7, True)]
    assert pooled_capacity(reps) == (pytest.approx(1300 / 2.7), 4)
    assert pooled_capacity(reps, (0.5, 0.95)) == (pytest.approx(700 / 1.5), 2)
    assert pooled_capacity(reps, (0.95, 0.99)) is None


class _CountingServer(socketserver.ThreadingTCPServer):
    """HTTP/1.1 keep-alive on loopback that counts the connections it accepts."""

    daemon_threads = True
    allow_reuse_address = True
    accepted = 0


class _KeepAlive(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.server.accepted += 1  # type: ignore[attr-defined]
        while True:
            line = self.rfile.readline()
            if not line:
                return
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.mark.parametrize("engine", ["python", "auto"])
def test_the_probe_reuses_keep_alive_connections_from_burst_to_burst(engine):
    """The sweep's sessions reuse their connections; so must the calibration's probe,
    or a cheap page reads dear by a connection's set-up and tear-down."""
    from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native

    server = _CountingServer(("127.0.0.1", 0), _KeepAlive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        burst, rate = 4, 40.0  # 10 bursts of 4, 100 ms apart
        tr = probe_trace(_trace(n=200), rate, 1.0, 3, burst=burst)
        sched = build_schedule(tr, 1.0, 1.0)
        writer = RunLogWriter(None)
        cfg = EngineConfig(targets=[("127.0.0.1", server.server_address[1])])
        native.select_engine(engine)(sched, cfg, writer, handle_signals=False)
        log = writer.runlog()
    finally:
        server.shutdown()
        server.server_close()
    assert len(log) >= 40 and log.ok_mask().all(), set(log.column("error"))
    # A burst's requests go at once on a burst's connections, reused by the next ones
    # (a connection still busy when the next burst is due adds one: a loaded machine).
    # A connection a request would have opened as many as there were requests.
    assert server.accepted <= len(log) // 4, (server.accepted, len(log))


class _Swinging(FakeTarget):
    """A full core on a host whose speed swings from run to run: each run's demands
    (a quarter of FULL's: the Support mix's capacity here) times the next of
    ``factors`` (the last one repeated)."""

    def __init__(self, factors: list[float]) -> None:
        super().__init__(demand=FULL)
        self.factors, self.runs = factors, 0

    def run(self, trace: Trace, **kw: Any) -> RunResult:
        f = self.factors[min(self.runs, len(self.factors) - 1)]
        self.runs += 1
        self.demand = {c: d * f / 4 for c, d in FULL.items()}
        return super().run(trace, **kw)


def test_beside_the_sweep_the_rate_grows_slowly_so_a_fast_spell_does_not_break_the_bound():
    """The host's speed swings from run to run: on the project's VM a period beside the
    sweep read the full core 3.2x cheaper than the ramp, the next run's rate grew 2.6x,
    and its period cost 4.4x the one before (13.5% busy against a 10% bound). Beside
    the sweep a run's rate grows at most BESIDE_GROWTH times the last one's."""
    from types import SimpleNamespace as NS

    from shrink.scaling import CALIBRATION_BUSY, calibrate_beside
    from shrink.scaling.calibration import BESIDE_GROWTH

    # the pilot and the ramp, a fast spell beside the sweep, then the host as it was
    full = _Swinging([1.0, 1.0, 1.0, 0.3, 1.0])
    share = FakeTarget(demand={c: d / 4 for c, d in SHARE.items()})
    beside = calibrate_beside(share, full, _trace(n=2000), nominal=0.25)
    knee = NS(reps=[NS(throughput=200.0, utilization=0.8, generator_behind=False, capacity=250.0)])
    for _ in range(6):
        beside.slice(knee)
    runs = [r for r in beside.finish().full_target_runs if r["phase"] == "beside"]
    assert len(runs) >= 2
    # (a window holds whole periods: the planned rate rounds to them, by a few percent)
    assert all(b["offered_rate"] <= BESIDE_GROWTH * a["offered_rate"] * 1.05
               for a, b in itertools.pairwise(runs))  # fmt: skip
    assert max(r["utilization"] for r in runs) <= CALIBRATION_BUSY


class _DearInShortPeriods(FakeTarget):
    """A full core whose requests cost ``penalty`` times more in a run whose periods are
    shorter than PERIOD_S (the ramp's), their plain cost in whole ones."""

    def __init__(self, penalty: float) -> None:
        super().__init__(demand=FULL)
        self.penalty = penalty

    def run(self, trace: Trace, **kw: Any) -> RunResult:
        from shrink.scaling.calibration import PERIOD_S

        k, t = int(trace.meta.get("burst", 1)), trace.column("t")
        span = float(t[k - 1] - t[0]) if 1 < k <= len(t) else 0.0
        f = self.penalty if span < 0.9 * PERIOD_S else 1.0
        self.demand = {c: d * f for c, d in FULL.items()}
        return super().run(trace, **kw)


def test_the_sweep_starts_no_faster_than_the_shares_fraction():
    """The ramp's short periods read the full core dear, and the speed they read errs
    high (on the project's VM up to twice the one read beside the sweep): the sweep
    starts from the share's nominal fraction at most; the runs beside it read it."""
    trace = _trace(n=2000)
    true = _mix_speed(trace, SHARE)
    beside = calibrate_beside(FakeTarget(demand=SHARE), _DearInShortPeriods(2.0), trace,
                              nominal=0.25)  # fmt: skip
    assert beside.speed.effective == 0.25 > true
    got = beside.finish()
    assert abs(math.log(got.effective / true)) < 3 * got.sigma, (got, true)


class _StoppedAt(Altered):
    """A target whose engine is stopped by a signal in its ``at``-th run (from 0): the
    run ends early and returns what it measured, marked interrupted."""

    def __init__(self, inner: Any, at: int) -> None:
        super().__init__(inner)
        self.at, self.runs = at, 0

    def alter(self, res: RunResult, kw: dict[str, Any]) -> None:
        if self.runs == self.at:
            res.describe = {**(res.describe or {}), "engine": {"interrupted": True}}
        self.runs += 1


@pytest.mark.parametrize("at", [0, 2, 4])
def test_a_stop_signal_in_a_calibration_run_stops_the_calibration(at):
    """SIGINT, SIGTERM or SIGHUP during one of the full target's runs (before the sweep,
    or beside it) stops the calibration as it stops a level: a short run is not taken
    for a whole one and the signal lost (a SIGTERM was, and the prediction went on)."""
    from types import SimpleNamespace as NS

    knee = NS(reps=[NS(throughput=200.0, utilization=0.8, generator_behind=False, capacity=250.0)])
    full = _StoppedAt(FakeTarget(demand=FULL), at)
    with pytest.raises(KeyboardInterrupt):
        beside = calibrate_beside(FakeTarget(demand=SHARE), full, _trace(n=2000), nominal=0.25)
        for _ in range(6):
            beside.slice(knee)
        beside.finish()
    assert full.runs == at + 1  # nothing ran after it
