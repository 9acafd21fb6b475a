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
from shrink.docroot_print import KEEP, MAX_ENTRIES, MAX_SECONDS, differences, docroot_record
from shrink.errors import OptionError, ParameterError
from shrink.loadcurve import LoadCurve
from shrink.prediction import Prediction
from shrink.providers import TargetSettings
from shrink.replay.cluster import ClusterSpec
from shrink.target import GeneratorPlacement
from shrink.testbed.recipe import BUILTIN_RECIPES

__all__ = [
    "RunInputs",
    "check_recorded_files",
    "docroot_at_start",
    "record_inputs",
    "target_settings",
]


@dataclass(frozen=True)
class RunInputs:
    """What the caller of a prediction knows and the prediction records: the trace
    file, the target settings, and the what-if to report beside it."""

    trace: str | Path
    target: TargetSettings = field(default_factory=TargetSettings)
    whatif: dict[str, Any] | None = None
    # the document root's walk before the first run (docroot_at_start): one edited during
    # the runs is recorded at its end, content the runs were not all measured on
    docroot_start: dict[str, Any] | None = None


def docroot_at_start(target: TargetSettings) -> dict[str, Any] | None:
    """The walk of ``target``'s document root, taken before predict's first run."""
    root = target.docroot
    return docroot_record(str(root)) if root is not None and os.path.isdir(root) else None


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
    if changed := _changed_during(inputs.docroot_start, pred.inputs["fingerprints"]):
        pred.inputs["docroot_changed"] = changed
    _record_server(pred, provider, measured)
    pred.whatif = inputs.whatif


def _changed_during(start: Mapping[str, Any] | None, prints: Mapping[str, Any]) -> dict | None:
    """The document root's walks at predict's start and end, when they differ: its
    fingerprint is the end's, and the runs before the change measured other content."""
    end = prints.get("docroot_walk")
    if start is not None and end is None and "docroot" not in prints:
        # gone (or no folder) at the end: the record named no fingerprint, and no change
        return {"at_start": start["digest"], "at_end": None, "differ": []}
    if start is None or not isinstance(end, Mapping) or start["digest"] == prints.get("docroot"):
        return None
    cut = [str(w.get("bounded") or "").startswith("time") for w in (start, end)]
    if any(cut) and start.get("entries") != end.get("entries"):
        return None  # a walk cut short by time saw fewer entries: not a change
    return {
        "at_start": start["digest"],
        "at_end": prints.get("docroot"),
        "differ": differences(dict(start), dict(end)),
    }


def _absolute(path: str | Path) -> str:
    """A file the prediction names, absolute: ``validate`` reads it back from whatever
    folder it runs in (a prediction of ``tcp.parquet`` validated from another folder said
    "tcp.parquet: no such file", or measured another folder's file of that name)."""
    return os.path.abspath(path)


# The files besides the trace a prediction names, as validate reads them back: what each
# is, and validate's option that gives it at another path (a copy or a move of it).
_FILES = {
    "target": ("simulator spec", "--target sim:"),
    "machine": ("machine file", "--machine"),
    "docroot": ("document root", "--docroot"),
    "server": ("server recipe", "--server"),
}
_GIVE_SAME = "give the one predict read (a copy or a move of it is the same)"
_CHANGED = "it changed since predict, or the prediction was copied from another folder or machine"


def _again(key: str) -> str:
    """What to do when the file at a recorded path is not the one predict read."""
    option = _FILES[key][1]
    if key == "server":
        return "give the recipe with --server"
    return f"put back the one predict read, give it with {option}, or predict again"


def _recorded_path(inputs: Mapping[str, Any], key: str) -> str | None:
    """The file ``inputs[key]`` names, or None: the testbed, this machine, a built-in recipe."""
    value = inputs.get(key)
    if not isinstance(value, str) or value in ("this", "testbed", *BUILTIN_RECIPES):
        return None
    if key == "target":
        return value[4:] if value.startswith("sim:") else None
    return value


def file_fingerprint(path: str | Path) -> str | None:
    """A file's bytes hashed (a folder's: :func:`shrink.docroot_print.docroot_record`'s
    digest), as a trace's rows are; None if nothing is there."""
    p = Path(path)
    if p.is_dir():
        return docroot_record(str(p))["digest"]
    if p.is_file():
        return hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return None


def _fingerprints(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Each file (or folder) besides the trace that ``inputs`` names, fingerprinted."""
    out = {}
    for key in _FILES:
        path = _recorded_path(inputs, key)
        if key == "docroot" and path is not None and os.path.isdir(path):
            walk = docroot_record(path)  # with what it saw, so a refusal names what changed
            out[key] = walk.pop("digest")
            out["docroot_walk"] = walk
            continue
        fp = None if path is None else file_fingerprint(path)
        if fp is not None:
            out[key] = fp
    return out


def check_recorded_files(
    inputs: Mapping[str, Any], *, server: str | None = None, given: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Refuse, before anything runs, a file ``inputs`` names (the simulator's spec, the
    machine, the document root, the server recipe unless ``server`` replaces it) that is
    gone or not the one predict read: a copied prediction folder names them by the paths
    predict saw, and validate read whatever was there now. ``given``: a path validate's
    command line gives in place of a recorded one (key: target, machine or docroot),
    checked against the same fingerprint. The inputs to run with are returned."""
    given = {k: v for k, v in (given or {}).items() if v is not None}
    recorded = inputs.get("fingerprints")
    out = dict(inputs)
    for key, path in given.items():
        _given_recorded(inputs, recorded, key, path)
        out[key] = f"sim:{_absolute(path)}" if key == "target" else _absolute(path)
    if not isinstance(recorded, Mapping):
        return out  # an older prediction: nothing to check against
    for key in _FILES:
        path = _recorded_path(out, key)
        if path is None or key not in recorded or (key == "server" and server):
            continue
        _check_one(path, key, recorded, given=key in given)
    return out


def _given_recorded(inputs: Mapping[str, Any], recorded: Any, key: str, path: str) -> None:
    """Refuse a path given for a file the prediction did not read, or read unrecorded."""
    what, option = _FILES[key]
    if _recorded_path(inputs, key) is None:
        raise OptionError(
            option,
            f"{path}: this prediction read no {what} (it recorded "
            f"{key} {inputs.get(key) or 'none'}), so there is none to give in its place",
        )
    if not isinstance(recorded, Mapping) or key not in recorded:
        raise OptionError(
            option,
            f"{path}: this prediction records no fingerprint of its {what} (made by an older "
            "shrink), so a file in its place cannot be checked to be the one predict read: "
            "predict again",
        )


def _check_one(path: str, key: str, recorded: Mapping[str, Any], *, given: bool) -> None:
    """Refuse ``path`` (recorded, or ``given`` in its place) unless it is what predict read."""
    what, option = _FILES[key]
    named = f"the {what} ({option})"
    # a path given in place of the recorded one: no claim that anything changed
    why = "" if given else f"{_CHANGED}; "
    give = _GIVE_SAME if given else _again(key)
    walk = recorded.get("docroot_walk") if key == "docroot" else None
    if isinstance(walk, Mapping) and os.path.isdir(path):
        _check_docroot(path, recorded[key], walk, f"not {named} this prediction read", why + give)
        return
    if key == "docroot" and os.path.isdir(path):
        return  # an older prediction's folder digest, taken another way: no comparison
    where = "given" if given else "prediction.json names"
    if kind := _wrong_kind(path, folder=isinstance(walk, Mapping)):
        raise ParameterError(f"{path}: {kind} ({named} {where}): {give}")
    now = file_fingerprint(path)
    if now is None:
        raise ParameterError(f"{path}: no such file ({named} {where}): {give}")
    if now != recorded[key]:
        raise ParameterError(
            f"{path}: not {named} this prediction read (its fingerprint is {now}, "
            f"the prediction's {recorded[key]}): {why}{give}"
        )


def _wrong_kind(path: str, *, folder: bool) -> str | None:
    """What is at ``path`` when it is there but not what the prediction read (``folder``:
    a document root): a FIFO given for the machine file was said to be "no such file",
    and a folder was walked (up to 60 s) to be told apart from it by its fingerprint."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # (nothing there: no such file)
    if stat.S_ISDIR(st.st_mode):
        return None if folder else "a folder, not a file"
    if stat.S_ISREG(st.st_mode):
        return "a file, not a folder" if folder else None
    odd = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket or a device"
    return f"{odd}, not a {'folder' if folder else 'file'}"


def _check_docroot(path: str, digest: str, walk: Mapping[str, Any], what: str, then: str) -> None:
    """Refuse a document root whose walk differs from predict's, naming why: files this
    user cannot read, a walk cut short by time, or the first names that differ."""
    entries = walk.get("entries")
    bounded = str(walk.get("bounded") or "")
    limit = int(entries) if bounded.startswith(("entries", "time")) and entries else MAX_ENTRIES
    now = docroot_record(path, max_entries=limit)
    if now["digest"] == digest:
        return
    fails = _docroot_failures(path, now, walk)
    if fails:
        raise ParameterError(fails)
    names = differences(dict(walk), now)
    said = (
        f"{', '.join(names)} differ"
        if names
        else f"what differs is past the first {KEEP:,} names the prediction keeps"
    )
    raise ParameterError(f"{path}: {what} ({said}): {then}")


def _docroot_failures(path: str, now: Mapping[str, Any], walk: Mapping[str, Any]) -> str | None:
    """Why a walk could not be compared with predict's, not that the folder changed."""
    before = set(walk.get("unreadable") or ())
    new = [n for n in now["unreadable"] if n not in before]
    if new:
        names = ", ".join(new[:5]) + (", ..." if now["unreadable_count"] > 5 else "")
        return (
            f"{path}: validate cannot read {now['unreadable_count']} of the document root's "
            f"entries as this user ({names}), which predict read, so it cannot tell whether "
            "they changed: run validate as the user predict ran as, or make them readable"
        )
    if str(now["bounded"] or "").startswith("time") and now["entries"] < int(
        walk.get("entries") or 0
    ):
        return (
            f"{path}: the document root's walk stopped at {now['entries']:,} entries after "
            f"{MAX_SECONDS:g} s, short of the {walk.get('entries'):,} predict walked, so it "
            "cannot tell whether it changed (a slow or busy filesystem): run validate again"
        )
    return None


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
