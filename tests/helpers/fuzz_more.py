"""More seeds and use steps for the fuzzed readers (:mod:`helpers.fuzzing`): the state's
share scale as replay reads it, a curve's newer fields and ``mat``'s own lines, and the
demo's ``work-location`` / ``.made-for`` files."""

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
    (where / ".made-for").write_bytes(p.read_bytes())
    old = demo_work.WORK_BASE
    demo_work.WORK_BASE = str(base)
    try:
        demo_work._earlier_work(p.parent)
        demo_work.remove_orphans()
    finally:
        demo_work.WORK_BASE = old
