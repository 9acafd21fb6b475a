"""What a prediction records of its inputs, and the target settings read back from it.

prediction.json's ``inputs``: the trace file, the target as the user named it
(target, machine, document root, server recipe, generator placement), the full
target's CPUs, the user's sweep plan and what the sweep derived from it (its
time scale, skip and loop window). Its ``server``: the testbed's recipe with its
versions. ``shrink validate`` reads them back to run the full target as the
prediction's runs ran.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink.autolevels import AutoPlan, SweepScaling
from shrink.loadcurve import LoadCurve
from shrink.prediction import Prediction
from shrink.providers import TargetSettings
from shrink.replay.cluster import ClusterSpec
from shrink.target import GeneratorPlacement
from shrink.testbed.recipe import BUILTIN_RECIPES

__all__ = ["RunInputs", "record_inputs", "target_settings"]


@dataclass(frozen=True)
class RunInputs:
    """What the caller of a prediction knows and the prediction records: the trace
    file, the target settings, and the what-if to report beside it."""

    trace: str | Path
    target: TargetSettings = field(default_factory=TargetSettings)
    whatif: dict[str, Any] | None = None


def record_inputs(
    pred: Prediction,
    inputs: RunInputs | None,
    provider: Any,
    measured: LoadCurve,
    plan: AutoPlan,
    scaling: SweepScaling = SweepScaling(),
) -> None:
    """Record ``inputs`` in ``pred``, with the full target's CPUs, the user's ``plan`` and
    what the sweep of ``measured`` derived from it, and the server recipe. Without
    ``inputs`` (a caller with no trace file, such as an example in Python) nothing is.
    The levels the time budget left out are noted in ``pred.extra`` either way."""
    skipped = measured.meta.get("levels_skipped_time_budget") or []  # --budget had no room
    pred.extra["out_of_time"] = (len(measured.levels), sorted(set(skipped)))
    if inputs is None:
        return
    ts = inputs.target
    gen = ts.generator
    pred.inputs = {
        "trace": _absolute(inputs.trace),
        "target": "sim:" + _absolute(ts.target[4:]) if ts.target.startswith("sim:") else ts.target,
        "machine": ts.machine if ts.machine == "this" else _absolute(ts.machine),
        "docroot": None if ts.docroot is None else _absolute(ts.docroot),
        "server_cpus": list(provider.server_cpus()),
        "generator_cpus": None if gen.cpus is None else list(gen.cpus),
        "allow_overlap": gen.allow_overlap,
        "realtime": gen.realtime,
        "awake": gen.awake,
        "plan": plan.__dict__,
        # how many times longer the share's runs were than the plan's (SHRiNK time scaling)
        "scaled_time": scaling.scaled_time,
        "skip": measured.sweep.skip,
        "server": ts.server if ts.server in (None, *BUILTIN_RECIPES) else _absolute(ts.server),
        # the trace seconds every level looped (a controlled load), for the full run
        "loop_window": measured.meta.get("loop_window"),
    }
    _record_server(pred, provider, measured)
    pred.whatif = inputs.whatif


def _absolute(path: str | Path) -> str:
    """A file the prediction names, absolute: ``validate`` reads it back from whatever
    folder it runs in (a prediction of ``tcp.parquet`` validated from another folder said
    "tcp.parquet: no such file", or measured another folder's file of that name)."""
    return os.path.abspath(path)


def _record_server(pred: Prediction, provider: Any, measured: LoadCurve) -> None:
    """Name the server recipe and its versions in the prediction and its report."""
    record = getattr(provider, "server_record", None)
    if record is None:
        return  # the simulator: no server recipe
    versions = dict(measured.sweep.target.get("versions", {}))
    server = {**record(), "versions": versions}
    pred.server = server
    pred.target_description = f"{pred.target_description or ''}, server {server['name']}"
    pred.provenance = {
        **(pred.provenance or {}),
        "server": f"{server['name']} ({server['source']}): "
        + ", ".join(v for k, v in versions.items() if k != "recipe"),
    }


def target_settings(
    inputs: Mapping[str, Any], *, server: str | None = None, cluster: ClusterSpec | None = None
) -> TargetSettings:
    """The target settings a prediction's ``inputs`` record (``server``: another recipe)."""
    return TargetSettings(
        target=inputs.get("target", "testbed"),
        machine=inputs.get("machine", "this"),
        docroot=inputs.get("docroot"),
        server_cpus=tuple(inputs.get("server_cpus") or ()) or None,
        server=server or inputs.get("server"),
        generator=GeneratorPlacement(
            tuple(inputs.get("generator_cpus") or ()) or None,
            bool(inputs.get("allow_overlap", False)),
            _priority(inputs.get("realtime")),
            cluster=cluster,
            awake=None if inputs.get("awake") is None else bool(inputs["awake"]),
        ),
    )


def _priority(value: Any) -> int | None:
    """A recorded ``realtime``: None (the default's choice) stays None."""
    return None if value is None else int(value)
