"""calibrate: a CPU-time share's per-class speed from light runs, on fakes and the sim."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from shrink.errors import MeasurementError, ParameterError
from shrink.machine import Machine
from shrink.scaling import calibrate, probe_trace
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


class _NoUtilization:
    """A target that reports no utilization (the latency fallback is used)."""

    def __init__(self, inner: FakeTarget) -> None:
        self.inner = inner

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def run(self, trace: Trace, **kw: Any) -> RunResult:
        res = self.inner.run(trace, **kw)
        res.utilization = None
        return res


def test_probe_trace_keeps_one_class_at_the_rate():
    p = probe_trace(_trace(), "dynamic", rate=40.0, seconds=2.0, seed=3)
    assert set(p.column("cls")) == {"dynamic"}
    assert len(p) == 81 and p.n_sessions == 81
    assert np.allclose(np.diff(p.column("t")), 1 / 40.0)
    assert all(s.startswith("/app/") for s in p.column("path"))


def test_per_class_speed_is_recovered_over_seeds():
    """Each class's estimate is near its true speed; the classes are told apart."""
    trace = _trace()
    ratios: dict[str, list[float]] = {"static": [], "dynamic": []}
    for seed in range(12):
        got = calibrate(
            FakeTarget(demand=SHARE), FakeTarget(demand=FULL), trace, nominal=0.25, seed=seed
        )
        assert got.method == "calibrated" and got.nominal == 0.25
        for c, r in ratios.items():
            r.append(got.per_class[c] / TRUE[c])
        assert got.per_class["dynamic"] < got.per_class["static"]
    for c, r in ratios.items():
        # the dynamic share side measures ~46 exponentials (CV 0.15, 0.16 with the full
        # side's): 0.55 either way is 3.4 standard deviations; the median of 12 within 15%.
        assert all(0.45 < x < 1.55 for x in r), (c, r)
        assert abs(statistics.median(r) - 1) < 0.15, (c, r)


def test_effective_speed_is_the_demand_weighted_harmonic_mean():
    trace = _trace(dynamic_every=4)  # 1 dynamic in 4; dynamic demand 5x static
    got = calibrate(FakeTarget(demand=SHARE), FakeTarget(demand=FULL), trace, nominal=0.25)
    w = {"static": 300 * FULL["static"], "dynamic": 100 * FULL["dynamic"]}
    want = sum(w.values()) / sum(w[c] / got.per_class[c] for c in w)
    # the weights use the measured full costs, so they agree with the true ones loosely
    assert got.effective == pytest.approx(want, rel=0.1)
    assert min(got.per_class.values()) < got.effective < max(got.per_class.values())
    # the share's runs (three times as long) and the full target's
    assert got.cost_s > 3 * got.full_target_seconds > 0


def test_latency_is_the_fallback_without_utilization():
    near = {c: FULL[c] / (0.25 * 0.9) for c in FULL}  # both classes at 0.225
    got = calibrate(
        _NoUtilization(FakeTarget(demand=near)),
        _NoUtilization(FakeTarget(demand=FULL)),
        _trace(),
        nominal=0.25,
    )
    for c in FULL:
        # light-load latency carries some queueing (more on the slower side): loose
        assert 0.6 * 0.225 < got.per_class[c] < 1.4 * 0.225, got


def test_the_simulator_share_runs_at_its_fraction():
    m = Machine(name="one", sockets=1, cores_per_socket=2, llc_mib=8.0, ghz=2.0)
    full = SimTarget(m, "1-replica", Share.whole((1,)))
    share = SimTarget(m, "1-replica", Share.cpu_time((1,), 0.25))
    got = calibrate(share, full, _trace(), nominal=0.25, seconds=60.0)
    for c, s in got.per_class.items():
        assert s == pytest.approx(0.25, rel=0.3), (c, got)
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
    assert (a.per_class, a.effective, a.sigma) == (b.per_class, b.effective, b.sigma)


def test_bad_input_is_refused_with_the_field():
    with pytest.raises(ParameterError, match="nominal"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=1.5)
    with pytest.raises(ParameterError, match="seconds"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=0.5, seconds=0)
    with pytest.raises(MeasurementError, match="no requests"):
        calibrate(FakeTarget(), FakeTarget(), Trace.empty(), nominal=0.5)


def test_an_untrustworthy_class_is_assumed_nominal_and_noted():
    # The full target's generator cannot send the cheap class's probe rate: by
    # utilization the speed still holds (noted); by latency it does not (nominal).
    full = FakeTarget(demand=FULL, generator_capacity=30.0)
    got = calibrate(FakeTarget(demand=SHARE), full, _trace(), nominal=0.25)
    assert 0.5 < got.per_class["static"] / TRUE["static"] < 1.5
    assert any("'static'" in n and "behind" in n for n in got.notes), got.notes
    assert ShareSpeed.from_dict(got.to_dict()) == got
    blind = calibrate(
        _NoUtilization(FakeTarget(demand=SHARE)), _NoUtilization(full), _trace(), nominal=0.25
    )
    assert blind.per_class["static"] == 0.25
    assert any("'static': assumed nominal" in n for n in blind.notes), blind.notes


def test_the_probe_load_is_a_choice():
    light = calibrate(
        FakeTarget(demand=SHARE), FakeTarget(demand=FULL), _trace(), nominal=0.25, busy=0.2
    )
    assert light.notes == () and set(light.per_class) == {"static", "dynamic"}
    with pytest.raises(ParameterError, match="busy"):
        calibrate(FakeTarget(), FakeTarget(), _trace(), nominal=0.25, busy=0)


class _Silent:
    """A target whose server answers nothing (every request an error)."""

    def __init__(self, inner: FakeTarget) -> None:
        self.inner = inner

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def run(self, trace: Trace, **kw: Any) -> RunResult:
        res = self.inner.run(trace, **kw)
        t = res.runlog.table
        res.runlog = type(res.runlog)(
            t.set_column(
                t.schema.get_field_index("error"), "error", pa.array(["refused"] * len(t))
            ),
            res.runlog.meta,
        )
        return res


def test_a_silent_share_is_noted_and_a_silent_server_is_an_error():
    got = calibrate(
        _Silent(FakeTarget(demand=SHARE)), FakeTarget(demand=FULL), _trace(), nominal=0.25
    )
    assert got.per_class == {"dynamic": 0.25, "static": 0.25}
    assert all("0 requests measured" in n for n in got.notes), got.notes
    with pytest.raises(MeasurementError, match="is the server answering"):
        calibrate(_Silent(FakeTarget()), _Silent(FakeTarget()), _trace(), nominal=0.25)
