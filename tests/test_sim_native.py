"""The simulator's native loop (native/src/sim.rs) against its Python reference.

Every simulated run of the suite takes the native loop where it is built; here each
run below is simulated by both, and their outputs must be the same to the bit: the
same events in the same order, computed by the same operations.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.machines import NEHALEM

import shrink.sim.target as sim_target
from shrink.errors import ParameterError
from shrink.machine import Machine
from shrink.share import Share
from shrink.sim import SimParams, SimTarget, support_trace, tcp_trace
from shrink.sim.engine import EngineOutput, native_available, simulate

pytestmark = [
    pytest.mark.compute,
    pytest.mark.skipif(not native_available(), reason="the native core is not built"),
]

ONE_CORE = Machine(name="one", sockets=1, cores_per_socket=1)
PLAIN = SimParams(static_cv=1.0, contention_static=0.0, cross_socket=False, accept_policy="random")


def _same(a: EngineOutput, b: EngineOutput) -> None:
    for name in ("sent", "done", "core", "busy"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # the same bits, NaN (never sent) too
    assert a.events == b.events


@pytest.fixture
def both(monkeypatch) -> list[EngineOutput]:
    """Every run simulated by both loops, compared; the native output goes on."""
    runs: list[EngineOutput] = []

    def twice(inp, layout):
        native = simulate(inp, layout, native=True)
        _same(native, simulate(inp, layout, native=False))
        runs.append(native)
        return native

    monkeypatch.setattr(sim_target, "simulate", twice)
    return runs


@pytest.mark.parametrize(
    ("machine", "mapping", "share", "params"),
    [
        (NEHALEM, "1-replica", None, None),
        (NEHALEM, "2-replica-direct", None, None),
        (NEHALEM, "2-replica-indirect", None, PLAIN),
        (NEHALEM, "1-replica", "0,4", None),  # a core on each socket: remote queues
        (ONE_CORE, "1-replica", "0@25%", None),  # a CPU-time share: a slower core
    ],
    ids=["1-replica", "2-direct", "2-indirect-random-accept", "cross-socket", "cpu-time"],
)
def test_the_native_loop_gives_the_pythons_output_to_the_bit(both, machine, mapping, share, params):
    sh = None if share is None else Share.parse(share, machine)
    target = SimTarget(machine, mapping, sh, params=params)
    # sessions of bursts with embedded requests and think times, and an open stream;
    # a light level and one past saturation (queues on every core)
    for trace in (support_trace(80, 10.0, seed=3, think_s=0.3), tcp_trace(4_000, 3.0)):
        for rate in (0.5, 6.0):
            target.run(trace, rate_factor=rate, warmup=0.5, duration=1.5, seed=11)
    assert len(both) == 4 and all(r.events > 0 for r in both)
    assert any(np.isnan(r.sent).any() for r in both)  # some requests fell past the horizon


def test_an_input_the_native_loop_cannot_take_runs_in_python(both, monkeypatch):
    """A non-finite demand (which the native loop's comparisons do not order as
    Python's do) is simulated by the Python loop; asking for the native one is
    refused only where it is not built."""
    target = SimTarget(ONE_CORE)
    inputs = []
    plan = target._plan

    def kept(*args, **kwargs):
        inp, rows, ids = plan(*args, **kwargs)
        inputs.append(inp)
        return inp, rows, ids

    monkeypatch.setattr(target, "_plan", kept)
    target.run(tcp_trace(500, 1.0), rate_factor=1.0, warmup=0.1, duration=0.5, seed=1)
    inp = inputs[0]
    inp.static_s = inp.static_s.copy()
    inp.static_s[3] = np.inf
    called = []
    monkeypatch.setattr(
        "shrink.sim.engine._simulate_native", lambda *a: called.append(a) or pytest.fail()
    )
    out = simulate(inp, target.layout)
    assert not called
    _same(out, simulate(inp, target.layout, native=False))
    monkeypatch.setattr("shrink.sim.engine._core", None)
    with pytest.raises(ParameterError, match="native core is not built"):
        simulate(inp, target.layout, native=True)
