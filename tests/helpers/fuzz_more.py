"""More seeds and use steps for the fuzzed readers (:mod:`helpers.fuzzing`): the state's
share scale as replay reads it, a curve's newer fields and ``mat``'s own lines, the
demo's ``work-location`` / ``.made-for`` files, and a part's RunLog as the parent merges
and measures it (a stopped run's ``cut`` and ``unsent`` rows)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shrink.errors import ShrinkError


class Refused(ShrinkError):
    """A command's documented exit for a bad input (1, 2), or its bound (99)."""


@contextlib.contextmanager
def _command() -> Iterator[None]:
    """Run a CLI command's function in-process: its output is dropped, an internal error
    is raised as it was met (SHRINK_TRACEBACK), and a documented exit is no crash."""
    import click
    import typer

    old = os.environ.get("SHRINK_TRACEBACK")
    os.environ["SHRINK_TRACEBACK"] = "1"
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    except (click.exceptions.Exit, typer.Exit) as exc:  # (typer's is not click's)
        if exc.exit_code not in (0, 1, 2, 99):
            raise
        if exc.exit_code in (1, 2):
            raise Refused(sink.getvalue()[-200:]) from None
    finally:
        if old is None:
            os.environ.pop("SHRINK_TRACEBACK", None)
        else:
            os.environ["SHRINK_TRACEBACK"] = old


# --------------------------------------------------------------------------- state
def state_variants(seed: bytes) -> list[bytes]:
    """The seed state as older files hold it: a null cpu_fraction, and a cores share
    without one (the share's scale is read from these)."""
    d = json.loads(seed)
    null = json.loads(seed)
    null["share"]["cpu_fraction"] = None
    cores = json.loads(seed)
    cores["share"] = {"kind": "cores", "cpus": [1], "fraction": 0.5, "enforce": None}
    return [json.dumps(x).encode() for x in (d, null, cores)]


def use_state_scale(p: Path) -> None:
    """replay and sweep's reading of the state's share: its scale, applied to a run's
    utilization as the live target does."""
    from shrink.cli._replay_opts import share_scale
    from shrink.replay.live import LiveTarget
    from shrink.replay.window_cpu import of_share
    from shrink.target import GeneratorCheck, GeneratorPlacement, RunResult

    target = LiveTarget.from_state(p, generator=GeneratorPlacement(allow_overlap=True))
    scale = share_scale(target)
    if scale is not None:
        res = RunResult(
            None,  # type: ignore[arg-type]
            (0.0, 1.0),
            GeneratorCheck(1.0, 1.0, 0.0, 0.0, 0.0),
            utilization=0.2,
            per_cpu_utilization={c: 0.2 for c in target.share_cpus},
            describe={"server_cpu": 0.1, "share_steal": 0.0, "share_spinner_cpu": 0.0},
        )
        of_share(res, *scale)


# --------------------------------------------------------------------------- curve
def curve_variant(curve: Any) -> bytes:
    """A curve with the newer fields: each repetition's generator_stopped and other_cpu,
    the target's awake and awake_spinners (0: none ran) and share_cpus, the trace's
    fingerprint; its levels of 200 requests hold a thin p99.9."""
    from dataclasses import replace

    for lv in curve.levels:
        lv.reps[:] = [replace(r, generator_stopped=0.3, other_cpu=0.4) for r in lv.reps]
    d = json.loads(json.dumps(curve.to_dict()))
    d["meta"]["target"] = {"awake": True, "awake_spinners": 0, "share_cpus": [1, 2]}
    d["meta"]["trace"] = {"source": "t.log", "fingerprint": "ab" * 16}
    return json.dumps(d).encode()


def warm_curve_commands(tmp: Path, seed: bytes) -> None:
    """Read a seed once the commands' way: their imports (close to a second of CPU) are
    then no input's time."""
    (p := tmp / "warm.json").write_bytes(seed)
    with contextlib.suppress(ShrinkError):
        use_curve_commands(p)


def use_curve_commands(p: Path) -> None:
    """``mat`` on the file (its MAT, thin-tail and other-work lines), and a sweep's
    per-level lines of it, as text and JSON."""
    from shrink.cli.mat_cmd import mat_cmd
    from shrink.cli.sweep_cmd import _print_sweep
    from shrink.loadcurve import LoadCurve

    for stat, thr in (("mean", "2ms"), ("p999", "20ms")):
        with _command():
            mat_cmd(curve=p, stat=stat, threshold=thr)
    lc = LoadCurve.read_json(p)
    for as_json in (False, True):
        with _command():
            _print_sweep(lc, lc.knob, p, [], as_json)


# --------------------------------------------------------------------------- demo
def demo_seeds(tmp: Path) -> list[bytes]:
    base = tmp / "base"
    (base / "shrink-demo-x").mkdir(parents=True, exist_ok=True)
    return [f"{base / 'shrink-demo-x'}\n".encode(), f"{tmp / 'out'}\n".encode(), b"/x \n"]


def demo_path(tmp: Path) -> Path:
    (tmp / "out").mkdir(exist_ok=True)
    return tmp / "out" / "work-location"


def use_demo_files(p: Path) -> None:
    """The demo's reading of ``out/work-location`` (a rerun's earlier folder) and of a
    work folder's ``.made-for`` (the clean-up), under a private base folder."""
    from shrink import demo_work

    tmp = p.parent.parent
    base = tmp / "base"
    where = base / "shrink-demo-x"
    where.mkdir(mode=0o755, parents=True, exist_ok=True)
    made_for = where / ".made-for"
    made_for.unlink(missing_ok=True)  # a new file, not one rewritten in place: see fuzzing.put
    made_for.write_bytes(p.read_bytes())
    old = demo_work.WORK_BASE
    demo_work.WORK_BASE = str(base)
    try:
        demo_work._earlier_work(p.parent)
        demo_work.remove_orphans()
    finally:
        demo_work.WORK_BASE = old


# --------------------------------------------------------------------------- run log
def runlog_seeds(tmp: Path) -> list[bytes]:
    """Two RunLogs as an engine process writes them (its part file, merged by the parent):
    one stopped by a signal, whose last requests are ``cut`` (in flight) and ``unsent``,
    and one with each failure class and a dynamic request."""
    import numpy as np

    from shrink.runlog import RunLog

    n = 20
    t = np.arange(n) * 0.05
    sent = t.copy()
    done = t + 1e-3
    error = [""] * n
    done[-2:] = np.nan
    error[-2:] = ["cut", "unsent"]
    sent[-1] = np.nan
    status = np.where(np.isfinite(done), 200, 0)
    stopped = {"intended": t, "sent": sent, "done": done, "status": status, "error": error}
    mixed = {
        "intended": t[:6],
        "sent": t[:6],
        "first_byte": t[:6] + 5e-4,
        "done": np.r_[t[:5] + 1e-3, np.nan],
        "status": [200, 404, 503, 200, 304, 0],
        "cls": ["static", "static", "dynamic", "dynamic", "static", "static"],
        "error": ["", "", "", "", "", "timeout"],
    }
    meta = {"engine": "python", "processes": 1, "t0": 0.0}
    out = []
    for i, cols in enumerate((stopped, mixed)):
        path = RunLog.from_columns(cols, meta=meta).write_parquet(tmp / f"seed{i}.parquet")
        out.append(path.read_bytes())
    return out


def mutate_runlog(data: bytes, rnd: Any) -> bytes:
    """The generic Parquet mutations, or an ``error`` column of the stop's marks (and odd
    values beside them), with or without the times that go with them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from helpers.fuzzing import mutate_parquet

    if rnd.random() < 0.6:
        return mutate_parquet(data, rnd)
    table = pq.read_table(io.BytesIO(data))
    n = table.num_rows
    marks = ["cut", "unsent", "", "timeout", "CUT", "cut ", "\x00"]
    error = [rnd.choice(marks) for _ in range(n)]
    table = table.set_column(table.column_names.index("error"), "error", pa.array(error))
    if rnd.random() < 0.5:
        name = rnd.choice(["sent", "done", "intended", "first_byte"])
        col = table.column(name).to_pylist()
        for k in range(n):
            if rnd.random() < 0.3:
                col[k] = rnd.choice([float("nan"), float("inf"), -1.0, 0.0, 1e300])
        table = table.set_column(table.column_names.index(name), name, pa.array(col))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def use_runlog(p: Path) -> None:
    """A part's RunLog as the parent reads it back and merges it, measured as a run
    stopped by a signal and as one not stopped, and its window ended at the stop."""
    import numpy as np

    from shrink.measure import level_stats
    from shrink.replay.answers import stopped_window
    from shrink.runlog import RunLog
    from shrink.target import GeneratorCheck, RunResult

    log = RunLog.concat([RunLog.read_parquet(p)] * 2)
    intended = log.column("intended")
    finite = intended[np.isfinite(intended)]
    end = float(finite.max()) + 0.01 if finite.size else 1.0
    check = GeneratorCheck(0.0, 0.0, 0.0, 0.0, 0.0)
    for stopped in (True, False):
        window = stopped_window((0.0, max(end, 1e-3)), None if stopped else 0.5, log)
        desc = {"engine": {"interrupted": stopped}}
        with contextlib.suppress(ShrinkError):
            level_stats(RunResult(log, window, check, describe=desc))
    log.failures()
    log.send_lag()
    log.latencies("static")
