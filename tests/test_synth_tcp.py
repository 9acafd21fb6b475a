"""The tcp workload: one 1 KB file, open loop, constant or Poisson arrivals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from shrink import ParameterError
from shrink.synth import TCP_BYTES, TCP_PATH, synth_tcp

pytestmark = pytest.mark.compute


def test_poisson_count_and_gaps_over_seeds():
    rate, duration = 5_000.0, 20.0
    mean = rate * duration
    for seed in range(8):
        trace = synth_tcp(rate, duration, seed=seed, arrival="poisson")
        n = len(trace)
        # Poisson(mean) count: a 4.5-sigma interval (false alarm ~1e-5 per seed)
        assert abs(n - mean) < 4.5 * np.sqrt(mean)
        t = trace.column("t")
        assert t.min() >= 0 and t.max() < duration and np.all(np.diff(t) > 0)
        # exponential gaps with mean 1/rate (KS at the 0.1% level)
        assert stats.kstest(np.diff(t), "expon", args=(0, 1 / rate)).pvalue > 1e-3


def test_constant_spacing_is_exact():
    trace = synth_tcp(1000, 2.5, arrival="constant")
    t = trace.column("t")
    assert len(trace) == 2500
    np.testing.assert_allclose(np.diff(t), 1e-3)
    assert t[0] == 0.0


def test_every_request_is_its_own_session_for_the_1k_file():
    trace = synth_tcp(300, 3, seed=4)
    assert set(trace.column("path")) == {TCP_PATH}
    assert (trace.column("bytes") == TCP_BYTES).all()
    assert (trace.column("session") == np.arange(len(trace))).all()
    assert (trace.column("burst") == 0).all() and (trace.column("think") == 0).all()
    assert set(trace.column("cls")) == {"static"}
    m = trace.meta
    assert (m["workload"], m["mode"], m["rate"], m["arrival"], m["seed"]) == (
        "tcp",
        "open",
        300.0,
        "poisson",
        4,
    )


def test_same_seed_same_trace_other_seed_other_trace():
    a, b, c = synth_tcp(100, 5, seed=1), synth_tcp(100, 5, seed=1), synth_tcp(100, 5, seed=2)
    assert a == b
    assert not a.same_rows(c)


def test_millions_of_requests_are_cheap():
    trace = synth_tcp(200_000, 10, seed=0)
    assert abs(len(trace) - 2_000_000) < 4.5 * np.sqrt(2_000_000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0, "duration": 1}, "rate == 0"),
        ({"rate": 10, "duration": -1}, "duration == -1"),
        ({"rate": 10, "duration": 1, "arrival": "bursty"}, "arrival == 'bursty'"),
    ],
)
def test_bad_parameters(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        synth_tcp(**kwargs)
