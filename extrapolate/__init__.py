"""Models from scaled-down measurements to the full machine.

SHRiNK scaling (:mod:`~extrapolate.shrink_scaling`), core-count scaling inside a
socket (:mod:`~extrapolate.usl`), the cross-socket correction
(:mod:`~extrapolate.crosssocket`) through a processor-sharing queueing relation
(:mod:`~extrapolate.queueing`), calibration with uncertainty
(:mod:`~extrapolate.calibration`), the what-if for a mapping decision
(:mod:`~extrapolate.whatif`) and the data-shaped re-mapping of a measured curve
(:mod:`~extrapolate.remap`). Models follow the scikit-learn estimator contract.
"""

from extrapolate.calibration import (
    CrossSocketModel,
    fit_curves,
    fit_published,
    load_calibration,
    observations_from_curves,
)
from extrapolate.crosssocket import SUPPORT, TCP, Physics, Workload, build_network
from extrapolate.mappings import extrapolate_mappings
from extrapolate.observations import Config, Observation, published_observations
from extrapolate.queueing import Network, Station
from extrapolate.remap import extrapolate_curve
from extrapolate.shrink_scaling import CfsCorrection, mat_full, scale_to_full
from extrapolate.usl import USLModel
from extrapolate.whatif import dynamic_sweep, machine_mappings, whatif, workload_from_trace
from shrink.prediction import MappingPrediction, Prediction, StatPrediction

__all__ = [
    "SUPPORT",
    "TCP",
    "CfsCorrection",
    "Config",
    "CrossSocketModel",
    "MappingPrediction",
    "Network",
    "Observation",
    "Physics",
    "Prediction",
    "StatPrediction",
    "Station",
    "USLModel",
    "Workload",
    "build_network",
    "dynamic_sweep",
    "extrapolate_curve",
    "extrapolate_mappings",
    "fit_curves",
    "fit_published",
    "load_calibration",
    "machine_mappings",
    "mat_full",
    "observations_from_curves",
    "published_observations",
    "scale_to_full",
    "whatif",
    "workload_from_trace",
]
