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
more CPU per request than a whole one, so s is below alpha, and a prediction scaled by
alpha is too low by alpha / s. Part of the excess is paid in every gap of the quota
(the server loses its caches, and on a VM the idle vCPU halts and gives its host CPU
away): with a CFS period of 128 ms to 1 s instead of the default, the demo's share cost
5-32% less a request (``bench/bench_share_period.py``, 2-vCPU VM of the polyglot kind,
alpha 0.125-0.5, 3 rounds each).

**The content term.** What a share loses depends on what it serves and on how small
it is. On the corpus (``bench/bench_fidelity.py``), a share at its nominal fraction
read static pages' MATs right (within the repetitions' noise) and the PHP pages' low,
the more the smaller the share: about 17% at alpha 0.5, 33% at 0.25, 45% at 0.125 -
the same fraction for each halving of the share. So the model error is one slope
times a content term (:func:`content_term`),

    log(predicted / true MAT) = -slope * dynamic * ln(1 / alpha),

``dynamic`` being the part of the share's light-load work that is not static pages
(:func:`dynamic_share`: the non-static classes' throughput times response time over
all the classes', at the share's lightest level). As a speed, the share runs at
``alpha ** (1 + slope * dynamic)``. The term is 0 for static pages and at alpha 1,
so the fit goes through the origin: one parameter per way of reading the speed,
fitted leaving one configuration out (:func:`model_error`, ``shrink/data/
model_error.json``). Of five forms tried on the corpus (``dynamic`` alone, ``ln(1 /
alpha)`` alone, ``dynamic`` times ``1 - alpha``, ``1 / alpha - 1`` or ``ln(1 /
alpha)``), the last erred least leaving one configuration out (bench/RESULTS.md, "The
share's content term"). The corpus's traces are either static pages or PHP-heavy
(``dynamic`` 0 or 0.83-0.98): a mix in between is interpolated, not measured.

**The default: no calibration.** A CPU-time share is taken at its nominal fraction
and its MATs corrected by the content term: nothing runs on the full target. With
the term, the nominal share erred less on the corpus than the calibrated one below.

**The calibration** (``calibrate=True``), for a user who wants the share's speed read
on the full target. The speed is the ratio of what a request of the trace's mix costs
on each side,

    s = alpha * cost_full / cost_share,

each cost being a run's utilization over its throughput (the utilization law), read
where it holds for the prediction:

* on the full target, light (:func:`calibrate`: at most :data:`CALIBRATION_BUSY` busy,
  at most :data:`CALIBRATION_S` seconds in all), its requests sent in short periods at
  its knee's load (``PERIOD_S``), one every gap: through a period the core is as busy
  as at the MATs. Against the whole trace's sessions on the busy core (what a
  validation measures), the demo's mix cost 1.42x a request evenly spaced, 1.25-1.30x
  in bursts of 16 sent at once, 1.27x in periods of 0.1 s and 1.07-1.10x in periods of
  0.25 s, each of those periods a few seconds after another; a period after the core
  sat idle for 40 s cost 1.28x and 1.08x one right after another (two runs of
  ``bench/bench_idle_cost.py``, 4 rounds each: not settled).
  After a pilot and a short ramp that set the rates within the bound, the full
  target's seconds left run beside the share's sweep (:class:`Beside`), a period after
  each of its levels at least half busy: the host's speed drifts through a prediction
  (1.03-3.3x within a run here), and the full side is read at the times the share's
  knee is (a period read just before the sweep erred by a log-sd of 0.33 over 12
  runs, one beside it by 0.22). Such a run follows the share's level: on a prediction
  alone the full target idled through it (a minute or so); on a validated one the
  validation's repetitions ran on it, and the period finds it warm. Its rates are
  slowed as far as the share's level shows the host slowed, so that it stays within
  its bound. The corpus that fits the model error is
  validated runs. What the periods still miss of the busy core is in the model error;
  the report's self-checks compare light and busy on every validated run.
* on the share, near its knee, where its MATs are read: a share's cost does depend on
  its load (lightly loaded it pays the quota's gaps on nearly every request), and the
  share's time is not the full target's to spare. The calibration reads it first in
  runs at ``KNEE_LOAD`` of the capacity its previous run showed, to set the
  sweep's time scale and levels; after the sweep, :func:`knee_speed` reads it again on
  the sweep's own repetitions near the knee (utilization in ``KNEE_BAND``): many more
  requests, taken when the MATs were, so a slow spell of the host moves the share's
  MAT and its speed alike instead of setting one against the other.

The calibration's runs on both sides are the same requests: the sample's, drawn by
class at a planned rate, so that the mix's composition adds no noise (its own
sessions, looped, cannot be slowed to a few requests a second, and at the light rates
they reach they arrive in bursts a light run's bound cannot hold). They are sent
open-loop on a pool of keep-alive connections, as the sweep's sessions reuse theirs:
a connection for every request made a cheap page dear (the calibrated full capacity
was a third of the busy core's on a 1 KiB static file, 0.59-0.95 of it on the
Support mix). Every
class is scaled by the mix's speed. What the calibration ran on each side (seconds,
offered rate, burst, utilization) is recorded with the speed and in prediction.json.

What the calibration cannot see, and whatever else separates a share from the server
it stands for, is the model error: measured on a corpus of configurations with known
outcomes (``bench/bench_fidelity.py``), as a mean log error (a bias the prediction's
throughputs are corrected by) and the spread left around it, each configuration
judged with the fit of the others (leave one out), and stored with its provenance in
``shrink/data/model_error.json`` (:func:`model_error`). Both are properties of the
machine kind and the share mechanism; on another machine, refit them. No constant of
this module was set from a demo run.

A share taken at its nominal speed (``calibrate=False``, the default) takes the model
error fitted on runs read that way, and the report says what it corrected.
"""

from shrink.scaling.calibration import (
    CALIBRATION,
    CALIBRATION_BUSY,
    CALIBRATION_S,
    Beside,
    calibrate,
    calibrate_beside,
    constants,
    probe_trace,
)
from shrink.scaling.knee_read import knee_speed
from shrink.scaling.transform import (
    CONTENT_TERM,
    ModelError,
    content_term,
    dynamic_share,
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
    "CONTENT_TERM",
    "Beside",
    "ModelError",
    "calibrate",
    "calibrate_beside",
    "constants",
    "content_term",
    "dynamic_share",
    "knee_speed",
    "latency_scale",
    "model_error",
    "probe_trace",
    "share_fraction",
    "shrink_scaled_curve",
    "throughput_scale",
]
