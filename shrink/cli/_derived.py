"""The files a command names after its ``-o``, checked to fit before anything runs.

A sweep keeps its finished levels in ``X.partial.json`` beside ``X.json`` (and a
summary in ``X.summary.json`` when the curve cannot be written, its exports in
``X_stats_history.csv`` ...). With a legal ``-o`` of 255 bytes (a file name's limit),
such a twin could not be named: the sweep was refused naming a file the user never
gave ("X.partial.json: File name too long"). The ``-o`` is refused instead, by how
much shorter it must be.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shrink.cli._common import printable
from shrink.errors import OptionError

_NAME_MAX = 255  # bytes a file name may hold (Linux's file systems)
_PATH_MAX = 4095  # bytes a path may hold, its closing NUL aside


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):  # not there yet, or no answer: Linux's limit
        return _NAME_MAX


def sweep_twins(output: Path, formats: Iterable[str] = ()) -> list[Path]:
    """What a sweep (or ``sim sweep``, ``mat --adaptive``) into ``output`` may write
    beside it: its ``.partial.json`` and summaries, and the exports of both."""
    from shrink.export.write import export_paths
    from shrink.measure.keep import partial_twin

    stem = output.name.removesuffix(".json")
    twins = [partial_twin(output), *(output.with_name(f"{stem}{s}") for s in _SUMMARIES)]
    keys = {"hdr": ("hdr",), "locust": ("stats", "history"), "k6": ("requests",)}
    for curve in (output, partial_twin(output)):
        paths = export_paths(curve)
        twins += [paths[k] for f in formats for k in keys.get(f, ())]
    return twins


_SUMMARIES = (".summary.json", ".partial.summary.json")
# The longest names an output folder's command writes in it: a run log's temporary in
# predict's runs/ (validate's runs-full/), its rate factor printed as 1.23457e-05; a
# part's temporary of split's.
_RUNLOG_TMP = ".run001-rf1.23457e-05.parquet.0123456789ab.reserve"
INSIDE = {
    "predict": ("measured-curve.partial.json", f"runs/{_RUNLOG_TMP}"),
    "predict sim": ("measured-curve.partial.json",),  # (no run logs)
    "validate": ("validation.json", f"runs-full/{_RUNLOG_TMP}"),
    "split": (".part-{last:03d}.parquet.0123456789ab.tmp",),
}


def inside(folder: Path | None, command: str, last: int = 0, target: str = "") -> list[Path]:
    """The longest paths ``command`` writes in its output ``folder`` (split's ``last``
    part's; predict's on its ``target``)."""
    if folder is None:
        return []
    if command == "predict" and target.startswith("sim:"):
        command = "predict sim"
    return [folder / name.format(last=max(last, 0)) for name in INSIDE[command]]


def replay_parts(output: Path, target: Any) -> list[Path]:
    """The longest paths a replay into ``output`` on ``target`` writes beside it: its
    last engine process's part and that part's 8 MiB reserve (none with one process)."""
    from shrink.replay.part_dirs import part_stem

    cpus = target.generator_cpus
    n = target.processes or (len(cpus) if cpus else 1)
    if n <= 1 or target.cluster is not None:
        return []
    part = output.with_name(f"{part_stem(output)}.part{n - 1}.0123456789ab.parquet")
    return [part, part.with_name(f".{part.name}.0123456789ab.reserve")]


def _shown(path: Path, stem: str) -> str:
    """``path``'s name, its part from ``stem`` said as ``<its stem>``."""
    for lead in ("", "."):
        if path.name.startswith(lead + stem):
            return f"{lead}<its stem>{path.name[len(lead + stem) :]}"
    return path.name


def refuse_long_derived(
    output: Path | None, derived: Iterable[Path], option: str = "--out"
) -> None:
    """Refuse ``output`` (as ``option``) when a file named after it beside it, among
    ``derived``, or in it (an output folder's), would be a name or a path longer than
    the system takes, saying by how much shorter ``output`` must be (for the longest)."""
    if output is None:
        return
    given, mine = len(os.fsencode(output.name)), len(os.fsencode(str(output)))
    stem = output.with_suffix("").name
    beside = [p for p in derived if output not in p.parents]
    inside = [p for p in derived if output in p.parents]
    limit = _name_max(output.parent)
    if beside:
        worst = max(beside, key=lambda p: len(os.fsencode(p.name)))
        extra = len(os.fsencode(worst.name)) - given
        if given + extra > limit:
            raise OptionError(
                option,
                f"{printable(str(output))}: a name of {given} bytes, and shrink also writes "
                f"{printable(_shown(worst, stem))} beside it, {extra} bytes longer, past the "
                f"{limit} bytes a file name may have; shorten the name to at most "
                f"{limit - extra} bytes",
            )
    for near, where in ((beside, "beside"), (inside, "in")):
        if not near:
            continue
        worst = max(near, key=lambda p: len(os.fsencode(str(p))))
        whole = len(os.fsencode(str(worst)))
        shown = str(worst.relative_to(output)) if where == "in" else _shown(worst, stem)
        if whole > _PATH_MAX:
            raise OptionError(
                option,
                f"{printable(str(output))}: a path of {mine} bytes, and shrink also writes "
                f"{printable(shown)} "
                f"{where} it, a path of {whole} bytes, past the {_PATH_MAX} bytes a path may "
                f"have; shorten it by {whole - _PATH_MAX} bytes or more",
            )
