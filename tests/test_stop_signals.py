"""SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGXCPU and SIGALRM stop a sweep as SIGINT does: the
finished levels are kept, one line says so, the exit status is 128 + the signal, and
no temporary file is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shrink.loadcurve import LoadCurve
from shrink.replay.writer import RunLogWriter
from shrink.trace import Trace

ROOT = Path(__file__).resolve().parents[1]


def _open_trace(path: Path, n: int) -> Path:
    """``n`` open-loop requests 10 ms apart, each for a 10-byte page of the fake server."""
    t = np.arange(n) / 100.0
    Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/x?bytes=10"] * t.size},
        meta={"mode": "open"},
    ).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def server():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline().split()[2])}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("sig", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM"),
     (signal.SIGHUP, 129, "stopped by SIGHUP"),
     # their default ended the sweep at once: no line, every finished level lost
     (signal.SIGQUIT, 131, "stopped by SIGQUIT"), (signal.SIGUSR1, 138, "stopped by SIGUSR1"),
     (signal.SIGUSR2, 140, "stopped by SIGUSR2"),
     # ulimit -t's SIGXCPU and SIGALRM ended it at once too, the run log's .tmp left
     (signal.SIGXCPU, 152, "stopped by SIGXCPU"), (signal.SIGALRM, 142, "stopped by SIGALRM")],
)  # fmt: skip
def test_a_signal_after_the_first_level_keeps_it(tmp_path, server, sig, status, said):
    trace = _open_trace(tmp_path / "t.parquet", 2000)
    logs = tmp_path / "logs"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "shrink", "sweep", str(trace), "--target", server,
         "--levels", "1,2,3,4", "--reps", "1", "--warmup", "0.2s", "--duration", "1.5s",
         "-o", str(tmp_path / "curve.json"), "--runlogs", str(logs)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        # as from a terminal: a shell's background job (a CI step) ignores SIGQUIT
        preexec_fn=lambda: signal.signal(signal.SIGQUIT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    # the second level's run log is begun once the first level is finished
    while not list(logs.glob(".run001*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    sweep.send_signal(sig)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == status, err
    lines = [ln for ln in err.splitlines() if said in ln]
    assert len(lines) == 1 and "curve.partial.json (1 finished level)" in lines[0], err
    assert [lv.level for lv in LoadCurve.read_json(tmp_path / "curve.partial.json").levels] == [1]
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*.reserve"))


def test_a_writer_given_up_leaves_no_temporary_file(tmp_path):
    w = RunLogWriter(tmp_path / "r.parquet")
    assert list(tmp_path.glob(".r.parquet.*.tmp"))
    w.discard()
    assert list(tmp_path.iterdir()) == []


def test_a_signal_ignored_at_start_stays_ignored():
    """``nohup shrink sweep ...`` must survive the terminal's SIGHUP."""
    code = (
        "import signal, os\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "from shrink import interrupts\n"
        "interrupts.install()\n"
        "assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN\n"
        "assert signal.SIGHUP not in interrupts.handled()\n"
        "assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL\n"
        "os.kill(os.getpid(), signal.SIGHUP)\n"
        "print('alive')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "alive", out.stderr


# The signal sent from inside the CLI at a chosen point: while typer reads the
# arguments (before any command's work), or once the command has returned.
_AT_POINT = """
import os, signal, sys
from typer.core import TyperGroup
from shrink.cli import main
point, sig = sys.argv[1], signal.Signals[sys.argv[2]]
if point == "parsing":
    make_context = TyperGroup.make_context
    def parse(self, *args, **kw):
        os.kill(os.getpid(), sig)
        return make_context(self, *args, **kw)
    TyperGroup.make_context = parse
else:
    invoke = TyperGroup.invoke
    def invoke_then_signal(self, ctx):
        try:
            return invoke(self, ctx)
        finally:
            os.kill(os.getpid(), sig)
            print("signalled", file=sys.stderr)
    TyperGroup.invoke = invoke_then_signal
main(["trace", "info", sys.argv[3]])
"""


def _shown(err: str) -> list[str]:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return err.splitlines()


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                             (signal.SIGINT, 130)])  # fmt: skip
def test_a_signal_before_the_command_starts_says_so(tmp_path, sig, status):
    """typer turned it into a silent exit 130, whatever the signal."""
    r = subprocess.run(
        [sys.executable, "-c", _AT_POINT, "parsing", sig.name, str(tmp_path / "none.parquet")],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == status, r.stderr
    (line,) = _shown(r.stderr)
    assert line.endswith("before the command started: nothing was written"), line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_after_the_command_finished_is_ignored(tmp_path, sig):
    """Its work done and said, the command exits with its own status, not 130."""
    missing = tmp_path / "none.parquet"
    r = subprocess.run(
        [sys.executable, "-c", _AT_POINT, "finished", sig.name, str(missing)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    first, *then = _shown(r.stderr)
    assert first == f"error: {missing}: no such file" and then and set(then) == {"signalled"}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_at_any_moment_of_the_start_is_one_documented_exit(tmp_path, sig):
    """``python -m shrink`` signalled at once and a little later: killed by the signal
    before shrink's code runs (no line), stopped with one line, or (finished) ignored."""
    missing = tmp_path / "none.parquet"
    for delay in (0.0, 0.05, 0.1, 0.15, 0.2, 0.3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "shrink", "trace", "info", str(missing)], cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        lines = _shown(err)
        if proc.returncode == -sig:
            assert lines == [], err
        elif proc.returncode == 1:
            assert lines == [f"error: {missing}: no such file"], err
        else:
            assert proc.returncode == 128 + sig, (delay, proc.returncode, err)
            assert len(lines) == 1 and lines[0].startswith(f"stopped by {sig.name}"), err


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_python_engine_gives_back_the_handlers_it_replaced(monkeypatch, loop):
    """Without this, a SIGTERM between two levels of a sweep was lost (uvloop left its
    closed loop's handler) or killed shrink without a word (asyncio left SIG_DFL). The
    run is against a loopback port that refuses connections (each request an error
    row), so no server is needed."""
    import asyncio
    import socket

    from helpers.session_traces import session_trace

    from shrink.replay import EngineConfig, build_schedule, engine, run_schedule

    if loop == "asyncio":
        monkeypatch.setattr(engine, "new_event_loop", asyncio.new_event_loop)

    def handler(signum, frame):  # shrink.interrupts' stands here
        raise AssertionError("no signal is sent")

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {s: signal.signal(s, handler) for s in sigs}
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        try:
            sched = build_schedule(session_trace(3, gap=0.01, think=0.0), 1.0, 0.1, loop=False)
            w = RunLogWriter(None)
            run_schedule(sched, EngineConfig(targets=[closed.getsockname()]), w)
            assert len(w.runlog()) == 6
            assert {s: signal.getsignal(s) for s in sigs} == dict.fromkeys(sigs, handler)
        finally:
            for s, h in before.items():
                signal.signal(s, h)


_DEMO_SLEEPS = """
import sys, time
from shrink import demo, interrupts

def run_demo(out, **kw):
    print("working", flush=True)
    time.sleep(60)

demo.run_demo = run_demo
interrupts.run_main(lambda: demo.main(["--out", sys.argv[1]]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_the_demo_stopped_by_sigterm_or_sighup_says_so_as_for_ctrl_c(tmp_path, sig):
    """``make demo`` (and bench_fidelity, the same way) took no handler: a SIGTERM outside
    a replay killed it without a word, and one inside a run was "interrupted", exit 130."""
    (tmp_path / "runs").mkdir()  # what the runs so far wrote
    proc = subprocess.Popen(
        [sys.executable, "-c", _DEMO_SLEEPS, str(tmp_path)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout.readline() == "working\n"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert _shown(err) == [f"stopped by {sig.name}: the runs so far are in {tmp_path}"]


def test_a_generator_stopped_past_its_horizon_flags_the_level(tmp_path, server):
    """SIGSTOP (or Ctrl-Z) spanning a run's end, then SIGCONT: the engine found its horizon
    passed and ended, the sessions' requests due meanwhile neither sent nor late; the
    level kept a third of its load (39.7 req/s for 120) with a send lag of 0.2 ms,
    unflagged."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    trace, logs, curve = tmp_path / "t.parquet", tmp_path / "logs", tmp_path / "curve.json"
    subprocess.run(
        [sys.executable, "-m", "shrink", "synth", "support", "--users", "200", "--duration",
         "60s", "--seed", "1", "-o", str(trace)], env=env, check=True, capture_output=True,
    )  # fmt: skip
    sweep = subprocess.Popen(
        [sys.executable, "-m", "shrink", "sweep", str(trace), "--target", server,
         "--levels", "0.3,0.4", "--reps", "1", "--warmup", "0.2s", "--duration", "1.5s",
         "--lag-limit", "50ms", "-o", str(curve), "--runlogs", str(logs)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(logs.glob(".run001*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)  # into the second level's window, then stopped past its end
    sweep.send_signal(signal.SIGSTOP)
    time.sleep(2.0)
    sweep.send_signal(signal.SIGCONT)
    out, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 0, err
    levels = LoadCurve.read_json(curve).levels
    assert [lv.generator_behind for lv in levels] == [False, True], out
    # (stopped by a signal, which its SIGCONT tells: not said as 'stopped or lost')
    assert "GENERATOR BEHIND (shrink itself was stopped for " in out
    assert "other work on its CPU delays it" not in err


def test_a_whole_curve_replaces_what_a_stopped_run_kept_beside_it(tmp_path):
    """``make demo`` stopped, then run again to the end: its ``measured-curve.partial.json``
    and ``full-curve.partial.json`` stayed beside the new whole curves and report."""
    curve = LoadCurve([], knob="rate_factor")
    for name in ("c.partial.json", "c.summary.json", "d.partial.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "link.partial.json").symlink_to(tmp_path / "d.partial.json")
    curve.write_json(tmp_path / "c.json")
    curve.write_json(tmp_path / "link.json")
    curve.write_json(tmp_path / "e.partial.json")  # a partial curve replaces nothing
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["c.json", "d.partial.json", "e.partial.json", "link.json", "link.partial.json"]


def test_a_sweep_removes_what_a_killed_one_left_in_its_runlogs(tmp_path, server):
    """A kill -9 during a RunLog write left a 0-byte ``.runNNN-rfX.parquet.HEX.tmp`` in
    ``--runlogs`` (4 after 8 kills), and the next sweep kept it: the folder was not held,
    so no sweep could tell a dead run's file from a live one's. Now a sweep holds the
    folder, and removes those; a second sweep to the folder is refused."""
    trace = _open_trace(tmp_path / "t.parquet", 200)
    logs = tmp_path / "logs"
    logs.mkdir()
    left = logs / ".run001-rf2.parquet.0123456789ab.tmp"
    left.write_bytes(b"")
    mine = logs / ".notes.0123456789ab.tmp"  # not a RunLog's: the user's
    mine.write_bytes(b"x")
    cmd = [sys.executable, "-m", "shrink", "sweep", str(trace), "--target", server,
           "--levels", "1", "--reps", "1", "--warmup", "0s", "--duration", "1s",
           "-o", str(tmp_path / "curve.json"), "--runlogs", str(logs)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"from shrink.folder_locks import claimed\nimport time\nwith claimed({str(logs)!r}):\n"
         "    print('held', flush=True)\n    time.sleep(30)\n"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert busy.returncode != 0 and "another shrink run is writing" in busy.stderr
        assert left.exists()
    finally:
        holder.kill()
        holder.wait()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not left.exists() and mine.exists()
    assert [p.name for p in logs.glob("run*.parquet")] == ["run000-rf1.parquet"]


def test_a_stopped_replay_says_so_on_stderr_with_json_too(tmp_path, server):
    """A replay stopped part-way printed its one line on stdout, after the summary,
    and with --json (stdout the summary) none at all; the exit statuses say stderr."""
    trace = _open_trace(tmp_path / "t.parquet", 2000)
    out = tmp_path / "r.parquet"
    replay = subprocess.Popen(
        [sys.executable, "-m", "shrink", "replay", str(trace), "--target", server,
         "--duration", "20s", "-o", str(out), "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".r.parquet.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    replay.send_signal(signal.SIGTERM)
    so, se = replay.communicate(timeout=60)
    assert replay.returncode == 143, se
    assert json.loads(so)["interrupted"] is True
    said = [ln for ln in se.splitlines() if "stopped by SIGTERM" in ln]
    assert said == [f"stopped by SIGTERM: the requests sent so far are kept in {out}"], se
    assert out.is_file() and not list(tmp_path.glob("*.tmp"))


_LATE_STOP = """
import os, signal, sys
import numpy as np
from shrink import interrupts
from shrink.measure import SweepInterrupted, fixed_sweep, sweep
from shrink.measure.stats import level_stats
from shrink.target import FakeTarget
from shrink.trace import Trace

t = np.arange(400) / 40.0
trace = Trace.from_columns({"session": np.arange(t.size), "t": t, "path": ["/x"] * t.size},
                           meta={"mode": "open"})
calls = []

def late_stats(res):
    calls.append(1)
    if len(calls) == 2:  # the first level's last repetition is over: Ctrl-C now
        os.kill(os.getpid(), signal.SIGINT)
    return level_stats(res)

fixed_sweep.level_stats = late_stats
interrupts.install()
try:
    with interrupts.working():
        sweep(FakeTarget(servers=1, demand={"static": 0.001, "dynamic": 0.001}), trace,
              [1, 2], reps=2, warmup=0.5, duration=2.0)
except SweepInterrupted as stop:
    print("kept", [lv.level for lv in stop.curve.levels], "calls", len(calls))
    sys.exit(0)
print("not stopped")
"""


def test_a_stop_just_after_a_levels_last_run_keeps_that_level():
    """A SIGINT within ~50 ms of a level's last run ending (its RunLog written, its
    statistics being made) lost the level: no curve.partial.json, only the RunLog
    (4 of 4 tries). The stop now waits until the level is kept, then stops the sweep."""
    done = subprocess.run(
        [sys.executable, "-c", _LATE_STOP], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.stdout.strip() == "kept [1.0] calls 2", done.stdout + done.stderr
