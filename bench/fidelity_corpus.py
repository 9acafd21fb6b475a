"""The corpus kept: one small record per validated run, in the repository.

A run directory of ``bench/bench_fidelity.py`` holds megabytes of curves and RunLogs
and lives wherever the run was made; the model error fitted on it
(``shrink/data/model_error.json``) must be refittable by the next reader, on the same
runs, from a clone. So each run the fit uses is kept as a record of what the fit and
the tables read of it (``bench_fidelity.row``: per statistic the predicted and
measured MAT, their status, the applied bias and the error budget; what the
prediction read of the full target; the host's drift) and of where its error came
from (``fidelity_speed.decompose``), with the commit and the configuration that made
it. A record names its run by a key (``<pass>/<configuration>/<run>``), never by a
path of the machine it ran on.

    python bench/bench_fidelity.py --summarize DIR... --record bench/corpus/PASS
    python bench/bench_fidelity.py --summarize bench/corpus --fit

``--summarize`` reads records and run directories alike.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

SCHEMA = "shrink.fidelity_run/1"
# A pass's name: letters, digits, dot, dash, underscore (it becomes a file's folder).
PASS_NAME = re.compile(r"[A-Za-z0-9._-]{1,80}")


class RecordError(ValueError):
    """A record that cannot be read or written, with the file it concerns."""


def commit(root: Path) -> str | None:
    """The commit the tree at ``root`` is at (a record says which code made it), None
    outside git."""
    import subprocess

    try:
        got = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return got.stdout.strip() or None


def key(pass_name: str, row: dict[str, Any]) -> str:
    """The run's name in the corpus: its pass, configuration and run folder."""
    return f"{pass_name}/{row['config']}/{Path(row['dir']).name}"


def record(row: dict[str, Any], pass_name: str) -> dict[str, Any]:
    """What the corpus keeps of one row: the row with its path replaced by its key."""
    if not PASS_NAME.fullmatch(pass_name):
        raise RecordError(f"pass name {pass_name!r}: use letters, digits, '.', '-' or '_'")
    out = {k: v for k, v in row.items() if k not in ("dir", "label")}
    return {"schema": SCHEMA, "run": key(pass_name, row), **out}


def write(rows: list[dict[str, Any]], dest: Path) -> list[Path]:
    """One record per row into ``dest`` (a folder named for the pass), each written
    whole or not at all; an existing record is not overwritten. A run that failed is
    kept too, with its error: the corpus counts it."""
    from shrink import atomic

    written = []
    for r in rows:
        rec = record(r, dest.name)
        path = dest / f"{r['config']}--{Path(r['dir']).name}.json"
        if path.exists():
            raise RecordError(f"{path}: a record of this run is already kept")
        atomic.make_dirs(dest)
        atomic.write_text(path, json.dumps(rec, indent=1, sort_keys=True, allow_nan=False) + "\n")
        written.append(path)
    return written


def is_record(path: Path) -> bool:
    return path.suffix == ".json" and path.is_file() and not path.is_symlink()


def records(paths: list[Path]) -> list[Path]:
    """The record files in ``paths`` (files, or folders searched below)."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(q for q in sorted(p.rglob("*.json")) if _looks_like_record(q))
        elif is_record(p):
            found.append(p)
    return found


def _looks_like_record(path: Path) -> bool:
    if not is_record(path):
        return False
    with path.open("rb") as f:
        return SCHEMA.encode() in f.read(4096)


def read(path: Path) -> dict[str, Any]:
    """A record as a row of ``bench_fidelity`` (its key standing for the run's path)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a corpus record ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise RecordError(f"{path}: not a corpus record (schema is not {SCHEMA!r})")
    failed = "error" in data
    for field in ("run", "config", "error") if failed else ("run", "config", "share_kind"):
        if not isinstance(data.get(field), str):
            raise RecordError(f"{path}: field {field!r} is missing or not a string")
    for stat in ("mean", "p999"):
        cell = data.get(stat)
        if cell is None:
            continue
        if not isinstance(cell, dict) or not isinstance(cell.get("budget"), dict):
            raise RecordError(f"{path}: field {stat!r} is not a statistic's cell")
        for field in ("predicted", "measured"):
            v = cell.get(field)
            if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise RecordError(f"{path}: field {stat}.{field} is not a throughput: {v!r}")
        if not isinstance(cell.get("status"), str):
            raise RecordError(f"{path}: field {stat}.status is missing or not a string")
        v = cell.get("log_error")
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v)):
            raise RecordError(f"{path}: field {stat}.log_error is not a number: {v!r}")
    if failed:
        return {"config": data["config"], "dir": data["run"], "error": data["error"]}
    row = {k: v for k, v in data.items() if k not in ("schema", "run")}
    # In a table the run is its pass and folder (its configuration has a column).
    parts = data["run"].split("/")
    return {**row, "dir": data["run"], "label": f"{parts[0]}/{parts[-1]}"}
