"""The share model and the SHRiNK transform: from a curve measured on a share to the full target.

A prediction is a function of the scaled-down runs. This module holds everything
that turns them into the full target's curve, and the one measurement a CPU-time
share may add on the full target.

**The transform.** A curve measured with a sample fraction alpha of the sessions on
a share of fraction alpha of the full target (:class:`shrink.share.Share`; SHRiNK
needs the two equal, and :func:`share_fraction` checks it) predicts the full target:

* a share of the **cores** (fewer servers, SHRiNK's scaling by servers): the same
  response times at normalized throughput, R_full(X) = R_share(alpha X), so
  MAT_full(T) = MAT_share(T) / alpha. Nothing is measured on the full target.
* a share of the **CPU time** (a slower server): a processor-sharing server at speed
  s, loaded in proportion, has the same utilization and response times 1/s longer,
  so R_full(X) = s R_share(s X) and MAT_full(T) = MAT_share(T / s) / s. Per-class
  latencies are scaled by their class's speed.

**The share's speed s.** Nominally s is the quota, alpha. A time-sliced core costs
more CPU per request than a whole one (in every gap of the quota the server loses its
caches, and on a VM the idle vCPU halts and gives its host CPU away), so s is below
alpha, and a prediction scaled by alpha is too low by alpha / s. The speed is the
ratio of what a request of the trace's mix costs on each side,

    s = alpha * cost_full / cost_share,

each cost being a run's utilization over its throughput (the utilization law), read
where it holds for the prediction:

* on the full target, light (:func:`calibrate`: at most :data:`CALIBRATION_BUSY` busy,
  at most :data:`CALIBRATION_S` seconds in all). The calibration takes a whole core's
  cost per request of a mix not to depend on its load: the corpus's validation curves
  (bench/RESULTS.md) read the demo's mix at about 0.45-0.55 ms a request from 5% busy
  to saturation, and their light over busy capacity at 0.77-1.04; the report's
  self-checks compare light and busy on every validated run, and what the assumption
  misses is in the model error. (A single class run alone at a few requests a second does not hold
  this: each request then wakes a halted vCPU, which is why the calibration runs the
  mix.)
* on the share, near its knee (:data:`SHARE_LOAD` of the capacity its previous run
  showed), where its MATs are read: a share's cost does depend on its load (lightly
  loaded it pays the quota's gaps on nearly every request), and the share's time is
  not the full target's to spare.

Both sides run the same requests: the sample's, drawn by class at a constant rate,
one a session, so that the mix's composition adds no noise (its own sessions, looped,
cannot be slowed to a few requests a second, and at the light rates they reach they
arrive in bursts a light run's bound cannot hold). Every class is scaled by the mix's
speed. What the calibration ran on each side (seconds, offered rate, utilization) is
recorded with the speed and in prediction.json.

What the calibration cannot see, and whatever else separates a share from the server
it stands for, is the model error: measured on a corpus of configurations with known
outcomes (``bench/bench_fidelity.py``), as a mean log error (a bias the prediction's
throughputs are corrected by) and the spread left around it, each configuration
judged with the fit of the others (leave one out), and stored with its provenance in
``shrink/data/model_error.json`` (:func:`model_error`). Both are properties of the
machine kind and the share mechanism; on another machine, refit them. No constant of
this module was set from a demo run.

Without a full target to calibrate on (``calibrate=False``) the share is taken at
its nominal speed, and the report says so.
"""

from shrink.scaling.calibration import (
    CALIBRATION,
    CALIBRATION_BUSY,
    CALIBRATION_S,
    calibrate,
    constants,
    probe_trace,
)
from shrink.scaling.transform import (
    ModelError,
    latency_scale,
    model_error,
    share_fraction,
    shrink_scaled_curve,
    throughput_scale,
)

__all__ = [
    "CALIBRATION",
    "CALIBRATION_BUSY",
    "CALIBRATION_S",
    "ModelError",
    "calibrate",
    "constants",
    "latency_scale",
    "model_error",
    "probe_trace",
    "share_fraction",
    "shrink_scaled_curve",
    "throughput_scale",
]
