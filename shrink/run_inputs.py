"""What a prediction records of its inputs, and the target settings read back from it.

prediction.json's ``inputs``: the trace file, the target as the user named it
(target, machine, document root, server recipe, generator placement), the full
target's CPUs, the user's sweep plan and what the sweep derived from it (its
time scale, skip and loop window). Its ``server``: the testbed's recipe with its
versions. ``shrink validate`` reads them back to run the full target as the
prediction's runs ran.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink.autolevels import AutoPlan, SweepScaling
from shrink.errors import ParameterError
from shrink.loadcurve import LoadCurve
from shrink.prediction import Prediction
from shrink.providers import TargetSettings
from shrink.replay.cluster import ClusterSpec
from shrink.target import GeneratorPlacement
from shrink.testbed.recipe import BUILTIN_RECIPES

__all__ = ["RunInputs", "check_recorded_files", "record_inputs", "target_settings"]


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
    pred.inputs["fingerprints"] = _fingerprints(pred.inputs)
    _record_server(pred, provider, measured)
    pred.whatif = inputs.whatif


def _absolute(path: str | Path) -> str:
    """A file the prediction names, absolute: ``validate`` reads it back from whatever
    folder it runs in (a prediction of ``tcp.parquet`` validated from another folder said
    "tcp.parquet: no such file", or measured another folder's file of that name)."""
    return os.path.abspath(path)


# The files besides the trace a prediction names, as validate reads them back: what each
# is, and what to do when the one at its path is not the one predict read.
_AGAIN = "validate has no option for it: put back the one predict read, or predict again"
_FILES = {
    "target": ("simulator spec (--target sim:)", _AGAIN),
    "machine": ("machine file (--machine)", _AGAIN),
    "docroot": ("document root (--docroot)", _AGAIN),
    "server": ("server recipe (--server)", "give the recipe with --server"),
}
_WHOLE = 1 << 20  # a document root's files hashed whole up to this size; larger, by size


def _recorded_path(inputs: Mapping[str, Any], key: str) -> str | None:
    """The file ``inputs[key]`` names, or None: the testbed, this machine, a built-in recipe."""
    value = inputs.get(key)
    if not isinstance(value, str) or value in ("this", "testbed", *BUILTIN_RECIPES):
        return None
    if key == "target":
        return value[4:] if value.startswith("sim:") else None
    return value


def file_fingerprint(path: str | Path) -> str | None:
    """A file's bytes hashed (a folder's: each file's name, size and, up to 1 MiB, bytes),
    as a trace's rows are; None if nothing is there."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_dir():
        seen = {os.path.realpath(p)}
        for here, dirs, files in os.walk(p, followlinks=True):
            # a linked folder is served as its target is: followed, each real folder once
            # (a link back up is a loop)
            dirs[:] = [d for d in sorted(dirs) if _first_visit(seen, Path(here, d))]
            for name in sorted(files):
                _hash_member(h, p, Path(here, name))
    elif p.is_file():
        h.update(p.read_bytes())
    else:
        return None
    return h.hexdigest()[:16]


def _hash_member(h: Any, folder: Path, f: Path) -> None:
    """One file of a folder into ``h``: one that cannot be read (a dangling link, no
    permission) adds its name alone."""
    h.update(f"{f.relative_to(folder)}\0".encode())
    try:
        st = f.stat()
        if not stat.S_ISREG(st.st_mode):
            h.update(b"not a file\0")  # a FIFO's read waits for a writer forever
            return
        h.update(f"{st.st_size}\0".encode())
        if st.st_size <= _WHOLE:
            h.update(f.read_bytes())
    except OSError:
        pass


def _first_visit(seen: set[str], d: Path) -> bool:
    """Whether the folder ``d`` leads to was not walked yet (and mark it walked)."""
    real = os.path.realpath(d)
    if real in seen:
        return False
    seen.add(real)
    return True


def _fingerprints(inputs: Mapping[str, Any]) -> dict[str, str]:
    """Each file (or folder) besides the trace that ``inputs`` names, fingerprinted."""
    out = {}
    for key in _FILES:
        path = _recorded_path(inputs, key)
        fp = None if path is None else file_fingerprint(path)
        if fp is not None:
            out[key] = fp
    return out


def check_recorded_files(inputs: Mapping[str, Any], *, server: str | None = None) -> None:
    """Refuse, before anything runs, a file ``inputs`` names (the simulator's spec, the
    machine, the document root, the server recipe unless ``server`` replaces it) that is
    gone or not the one predict read: a copied prediction folder names them by the paths
    predict saw, and validate read whatever was there now."""
    recorded = inputs.get("fingerprints")
    if not isinstance(recorded, Mapping):
        return  # an older prediction: nothing to check against
    for key, (what, give) in _FILES.items():
        path = _recorded_path(inputs, key)
        if path is None or key not in recorded or (key == "server" and server):
            continue
        now = file_fingerprint(path)
        if now is None:
            raise ParameterError(f"{path}: no such file (the {what} prediction.json names): {give}")
        if now != recorded[key]:
            raise ParameterError(
                f"{path}: not the {what} this prediction read (its fingerprint is {now}, "
                f"the prediction's {recorded[key]}): it changed since predict, or the "
                f"prediction was copied from another folder or machine; {give}"
            )


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
