"""A cross-socket model that holds a synthetic truth's physics, as a perfect calibration
would (tests of the extrapolation that must not depend on a fit)."""

from __future__ import annotations

import math

import numpy as np

from extrapolate._synthetic import Truth
from extrapolate.calibration import CrossSocketModel
from extrapolate.crosssocket import Physics
from shrink.machine import Machine


def perfect_model(t: Truth, machine: Machine) -> CrossSocketModel:
    """A model holding the truth's physics, as a perfect calibration would."""
    ph = Physics(
        demand_static=t.demand_static,
        demand_dynamic=t.demand_dynamic,
        usl_sigma=t.sigma,
        usl_kappa=t.kappa,
        nic_remote_penalty=t.nic_penalty,
        share_penalty=t.share_penalty,
        llc_miss_fraction=t.miss_fraction,
        fixed_latency=t.fixed_latency,
    )
    m = CrossSocketModel(machine=machine)
    m.physics_, m.free_, m.x_ = ph, ["demand_static"], np.array([math.log(ph.demand_static)])
    m.cov_, m.model_error_, m.observations_, m.predicted_, m.workloads_ = (
        np.zeros((1, 1)), 0.0, [], {}, {},
    )  # fmt: skip
    return m
