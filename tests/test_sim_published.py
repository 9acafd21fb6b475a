"""The simulator with its default (published-calibrated) parameters reproduces the papers.

Hashemian et al. (ICPE 2013), shrink/data/published_calibration.json: 1->8-core
MAT scaling tcp 6.3 (mean) / 7.2 (p99.9), support 7.8 / 7.9; one replica per
socket fed by its own socket's NIC port beats one replica for tcp. Searches here
are coarser than ``shrink sim scaling``'s defaults to stay fast, so the
tolerances are wider than the calibration's own agreement (bench/RESULTS.md).
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import numpy as np
import pytest
from helpers.machines import NEHALEM

from shrink.machine import Machine
from shrink.mapping import build_mapping
from shrink.sim import SimParams, compare_mappings, scaling, support_trace, tcp_trace
from shrink.sim.model import build_layout
from shrink.sim.scaling import MatSearch
from shrink.trace import Trace

pytestmark = pytest.mark.compute

FAST = MatSearch(requests_per_level=20_000, coarse=(0.5, 0.75, 0.85, 0.92, 0.97), refine=2)
PUB = json.loads(resources.files("shrink").joinpath("data/published_calibration.json").read_text())


def test_example_spec_is_the_published_machine():
    from pathlib import Path

    spec = Machine.read_toml(Path(__file__).parent.parent / "examples/machines/nehalem-2s.toml")
    assert (spec.sockets, spec.cores_per_socket, spec.llc_mib) == (2, 4, 12.0)
    assert spec.llc_mib == PUB["machine"]["llc_mib_per_socket"]


def test_tcp_scaling_1_to_8_cores_near_published():
    res = scaling(NEHALEM, tcp_trace(10_000, 20.0), (1, 8), seed=3, search=FAST)
    want = PUB["core_scaling_1_to_8"]["tcp"]
    assert res["scaling"]["mean"]["8"] == pytest.approx(want["mean"], abs=0.4)
    assert res["scaling"]["p999"]["8"] == pytest.approx(want["p999"], abs=0.6)
    # p99.9 scales better than the mean, as published
    assert res["scaling"]["p999"]["8"] > res["scaling"]["mean"]["8"]
    mat8 = res["mat"]["mean"]["8"]["mat"]
    assert mat8 == pytest.approx(PUB["workloads"]["tcp"]["mat_8_cores_rps"], rel=0.08)


def test_support_scaling_1_to_8_cores_near_published():
    trace = support_trace(300, 40.0, seed=1, think_s=0.3)
    res = scaling(NEHALEM, trace, (1, 8), seed=4, search=FAST)
    want = PUB["core_scaling_1_to_8"]["support"]
    assert res["scaling"]["mean"]["8"] == pytest.approx(want["mean"], abs=0.45)
    assert res["scaling"]["p999"]["8"] == pytest.approx(want["p999"], abs=0.6)
    mat8 = res["mat"]["mean"]["8"]["mat"]
    assert mat8 == pytest.approx(PUB["workloads"]["support"]["mat_8_cores_rps"], rel=0.1)


def test_two_replicas_direct_beat_one_replica_for_tcp():
    res = compare_mappings(
        NEHALEM,
        tcp_trace(10_000, 20.0),
        thresholds={"mean": 0.0005},
        seed=2,
        search=FAST,
    )["mappings"]
    gain = PUB["replica_mappings"]["tcp_mean_mat_change"]
    assert res["2-replica-direct"]["mean_change"] == pytest.approx(gain["direct"], abs=0.04)
    assert res["2-replica-indirect"]["mean_change"] == pytest.approx(gain["indirect"], abs=0.04)
    assert res["2-replica-direct"]["mean_change"] > res["2-replica-indirect"]["mean_change"] > 0


@functools.cache
def _support() -> Trace:
    return support_trace(300, 20.0, seed=2, think_s=0.3)


def _mean_demand_us(cpus: tuple[int, ...], mapping: str = "1-replica") -> float:
    p = SimParams()
    trace = _support()
    layout = build_layout(NEHALEM, build_mapping(mapping, NEHALEM, cpus), p)
    kib = np.maximum(trace.table.column("bytes").to_numpy(), 0) / 1024
    dyn = float(np.mean(trace.column("cls") == "dynamic"))
    static = float(np.mean(p.static_base_us + p.static_per_kib_us * kib))
    return float(
        np.mean(
            [
                static * c.static_factor + dyn * (p.dynamic_php_us + c.dyn_stall_us)
                for c in layout.cores
            ]
        )
    )


def test_support_on_two_and_four_cores_of_a_socket_costs_more_than_on_one_or_eight():
    """Published: 2 and 4 cores of one socket show a higher mean response time at a given
    utilization than 1 or 8 cores, which the papers put down to the L3. Checked here on
    the model's per-request cost (with random accept, PS response time at utilization rho
    is E[demand] / (1 - rho)); in the full simulation the pooling of workers offsets the
    1-core comparison (bench/RESULTS.md, ## sim)."""
    d = {n: _mean_demand_us(NEHALEM.all_cpus[:n]) for n in (1, 2, 4, 8)}
    assert min(d[2], d[4]) > max(d[1], d[8])
    # and one replica per socket (each sees one L3) costs Support more than one replica
    assert _mean_demand_us(NEHALEM.all_cpus, "2-replica-direct") > d[8]
