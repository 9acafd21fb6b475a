"""Ctrl-C: a run stops at once, a sweep keeps its finished levels, messages say only what is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from helpers.fake_targets import FailsAt, partial_sweep_exit, steady_trace

from shrink.cli._common import cli_errors
from shrink.cli._sweep_keep import _keep_partial_sweep
from shrink.errors import ShrinkError
from shrink.measure import SweepInterrupted, sweep
from shrink.replay import native
from shrink.replay.engine import EngineStats
from shrink.replay.live import LiveTarget
from shrink.target import GeneratorPlacement


def _stops_at(n: int) -> FailsAt:
    """A fake target whose ``n``-th run is interrupted (as the engine reports a SIGINT)."""
    return FailsAt(n, KeyboardInterrupt())


def test_an_interrupted_sweep_carries_its_finished_levels():
    with pytest.raises(SweepInterrupted) as info:
        sweep(_stops_at(4), steady_trace(), [1, 2, 3, 4], reps=1, warmup=0.5, duration=2)
    curve = info.value.curve
    assert [lv.level for lv in curve.levels] == [1, 2, 3] and curve.meta["interrupted"]


def test_sweep_cli_writes_the_partial_curve_without_runlogs(tmp_path, capsys):
    with pytest.raises(SweepInterrupted) as info:
        sweep(_stops_at(3), steady_trace(), [1, 2, 3], reps=1, warmup=0.5, duration=2)
    stop = info.value
    assert partial_sweep_exit(stop, tmp_path / "curve.json") == ([1, 2], 130)
    err = capsys.readouterr().err
    assert "curve.partial.json (2 finished levels)" in err and "run logs" not in err


def test_nothing_finished_says_nothing_was_written(tmp_path, capsys):
    with pytest.raises(SweepInterrupted) as info:
        sweep(_stops_at(1), steady_trace(), [1, 2], reps=1, warmup=0.5, duration=2)
    _keep_partial_sweep(info.value, tmp_path / "curve.json", tmp_path / "logs")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(typer.Exit), cli_errors():
        raise info.value
    assert "nothing measured was written" in capsys.readouterr().err


def test_a_command_that_measures_nothing_does_not_say_nothing_measured_was_written(capsys):
    """``testbed up`` stopped by Ctrl-C said "nothing measured was written": it measures
    nothing, and the words suggested a measurement was lost."""
    with pytest.raises(typer.Exit), cli_errors(measures=False):
        raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert "nothing was written" in err and "measured" not in err


def test_an_interrupted_live_run_does_not_wait_for_the_planned_end():
    """The window's CPU sampler used to hold the run until the window's end (40 s)."""

    def engine(schedule, config, writer, *, t0=None, on_ready=None, handle_signals=True, stop=None):
        t0 = on_ready()
        writer.close()
        return EngineStats(t0=t0, t0_unix=0.0, wall=0.1, cpu=0.0, requests=0, interrupted=True)

    cpus = sorted(os.sched_getaffinity(0))
    target = LiveTarget(
        [("127.0.0.1", 9)], share_cpus=cpus[-1:],
        generator=GeneratorPlacement(tuple(cpus[:1]), True, engine=engine),
    )  # fmt: skip
    start = time.monotonic()
    res = target.run(steady_trace(), rate_factor=1.0, warmup=1.0, duration=30.0)
    assert time.monotonic() - start < 5.0 and res.describe["engine"]["interrupted"]


@pytest.mark.live
@pytest.mark.parametrize("background", [False, True])
def test_a_signal_to_a_scaled_out_replay_stops_its_engine_processes(tmp_path, background):
    """The parent passes on the signal it took. It passed on SIGINT, which a script's
    background job (``shrink replay ... &``) ignores, and its engine processes with it:
    a SIGTERM then left the run going to its planned end, said nothing and exited 0."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from shrink.runlog import RunLog

    def ignore_sigint() -> None:  # (as sh does for a job started with &)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    sig = signal.SIGTERM if background else signal.SIGINT
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    server = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        port = int(server.stdout.readline().split()[2])
        cpus = sorted(os.sched_getaffinity(0))
        out = tmp_path / "r.parquet"
        replay = subprocess.Popen(
            [sys.executable, "-m", "shrink", "replay", "--rate", "100", "--duration", "60s",
             "--path", "/x?bytes=10", "--target", f"http://127.0.0.1:{port}",
             "--processes", "2", "--generator-cpus", f"{cpus[0]},{cpus[-1]}", "-o", str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=ignore_sigint if background else None,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        replay.send_signal(sig)  # to the parent alone, not its process group
        start = time.monotonic()
        _, err = replay.communicate(timeout=30)
        assert time.monotonic() - start < 5.0, err  # not the planned end, 60 s away
        assert replay.returncode == 128 + sig, err
        assert len(RunLog.read_parquet(out)) > 50
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize(
    "stop, status",
    [(KeyboardInterrupt(), 130), (ShrinkError("the simulator failed"), 1)],
)
def test_sim_sweep_keeps_the_levels_it_finished(tmp_path, monkeypatch, stop, status):
    """``sim sweep`` lost every finished level to a signal: only ``shrink sweep`` kept them."""
    from typer.testing import CliRunner

    from shrink.cli import app, sim_cmd
    from shrink.loadcurve import LoadCurve

    trace, out = tmp_path / "t.parquet", tmp_path / "curve.json"
    steady_trace().write_parquet(trace)
    monkeypatch.setattr(sim_cmd, "_sim_target", lambda *a: FailsAt(3, stop))
    spec = Path(__file__).resolve().parents[1] / "examples" / "machines" / "nehalem-2s.toml"
    r = CliRunner().invoke(app, ["sim", "sweep", str(trace), "--machine", str(spec), "-o",
                                 str(out), "--levels", "1,2,3", "--reps", "1",
                                 "--warmup", "500ms", "--duration", "2s"])  # fmt: skip
    assert r.exit_code == status, r.output
    partial = tmp_path / "curve.partial.json"
    assert [lv.level for lv in LoadCurve.read_json(partial).levels] == [1, 2]
    assert f"kept {partial} (2 finished levels)" in " ".join(r.stderr.split())
    assert not out.exists() and not list(tmp_path.glob(".*"))


def test_a_stopped_sweep_keeps_the_exports_of_its_finished_levels(tmp_path, monkeypatch):
    """With --export, a sweep stopped late kept its finished levels' curve but wrote no
    export of them: the HdrHistogram logs and CSVs asked for were lost with the run."""
    import csv

    from typer.testing import CliRunner

    from shrink.cli import app, sim_cmd

    trace, out = tmp_path / "t.parquet", tmp_path / "curve.json"
    steady_trace().write_parquet(trace)
    monkeypatch.setattr(sim_cmd, "_sim_target", lambda *a: FailsAt(4, KeyboardInterrupt()))
    spec = Path(__file__).resolve().parents[1] / "examples" / "machines" / "nehalem-2s.toml"
    r = CliRunner().invoke(app, ["sim", "sweep", str(trace), "--machine", str(spec), "-o",
                                 str(out), "--levels", "1,2,3,4", "--reps", "1", "--warmup",
                                 "500ms", "--duration", "2s", "--export", "all"])  # fmt: skip
    assert r.exit_code == 130, r.output
    hdr = tmp_path / "curve.partial-hdr"
    assert sorted(p.name for p in hdr.iterdir()) == [
        f"level-{k}.{ext}" for k in (1, 2, 3) for ext in ("hgrm", "hlog")
    ]
    with (tmp_path / "curve.partial_stats.csv").open() as f:
        agg = [row["Level"] for row in csv.DictReader(f) if row["Name"] == "Aggregated"]
    assert agg == ["1", "2", "3"]
    assert (tmp_path / "curve.partial_requests.csv").exists()
    said = " ".join(r.stderr.split())
    assert f"{hdr}," in said and "files in" not in said  # the folder named once
    assert not out.exists() and not list(tmp_path.glob(".*"))


_WRAPPED_STOP = """
import sys, types
from shrink import interrupts

class Stopped:
    def __set_name__(self, owner, name):
        raise interrupts.NotStarted  # as the handler raises it, a signal in mid-import

def attribute(name):
    class Made:  # Python wraps it: "RuntimeError: Error calling __set_name__ ..."
        field = Stopped()

cli = types.ModuleType("shrink.cli")
cli.__getattr__ = attribute
sys.modules["shrink.cli"] = cli
from shrink.__main__ import run
run()
"""


def test_a_stop_wrapped_by_the_import_machinery_is_one_line():
    """A SIGTERM while Python made a class during the CLI's import (typer importing
    platform) came out as "RuntimeError: Error calling __set_name__" and a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    from shrink.interrupts import NotStarted, caused_by_stop

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPED_STOP], capture_output=True, text=True, timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130
    assert done.stderr.strip() == "interrupted before the command started: nothing was written"
    try:
        try:
            raise NotStarted
        except NotStarted as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert caused_by_stop(wrapped)
    assert not caused_by_stop(RuntimeError("its own"))


@pytest.mark.compute
def test_an_error_left_by_a_stop_before_the_work_is_the_stop_line(monkeypatch, capsys):
    """A SIGHUP while typer imported pydantic lazily, as it parsed the options: the
    import cut short, typing_extensions failed later in its own terms ("TypeError:
    expected a message argument"), and that error came out as a traceback."""
    import contextlib
    import signal
    import sys

    from shrink import cli, interrupts

    def app_for(argv):
        def run(args=None):
            with contextlib.suppress(interrupts.NotStarted):
                interrupts._stop(signal.SIGHUP, None)  # the handler, as the signal runs it
            raise TypeError("expected a message argument")  # what a library made of it

        return run

    def fails(argv):
        def run(args=None):
            raise TypeError("its own")

        return run

    for name, value in (("_pending", [False]), ("_last", [int(signal.SIGINT)])):
        monkeypatch.setattr(interrupts, name, value)
    monkeypatch.setattr(interrupts, "_taken", [])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    # main() takes the stop signals, and the stop line ignores them: the suite's back after
    suite = {sig: signal.getsignal(sig) for sig in interrupts.STOP_SIGNALS}
    try:
        monkeypatch.setattr(cli, "app_for", app_for)
        with pytest.raises(SystemExit) as stop:
            cli.main(["trace", "info", "x.parquet"])
        assert stop.value.code == 128 + signal.SIGHUP
        err = capsys.readouterr().err
        assert "stopped by SIGHUP before the command started: nothing was written" in err
        # without a stop, the same error is the error it is
        monkeypatch.setattr(interrupts, "_pending", [False])
        monkeypatch.setattr(cli, "app_for", fails)
        with pytest.raises(TypeError, match="its own"):
            cli.main(["trace", "info", "x.parquet"])
    finally:
        for sig, handler in suite.items():
            signal.signal(sig, handler)


_IN_A_FINALIZER = """
import os, signal, time
from shrink import interrupts

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, inside the finalizer
        time.sleep(0.01)

interrupts.install()
try:
    with interrupts.working():
        Dropped()
        end = time.monotonic() + 2
        while time.monotonic() < end:
            pass
    print("lost")
except KeyboardInterrupt:
    print("stopped", interrupts.received())
"""


def test_a_stop_whose_handler_ran_in_a_finalizer_stops_the_work_without_a_traceback():
    """`sweep --engine python --processes 2` sent SIGTERM: the handler ran inside
    ``Popen.__del__``, whose KeyboardInterrupt Python drops and prints ("Exception ignored
    in ... Traceback ... KeyboardInterrupt"), and the stop itself was lost there."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", _IN_A_FINALIZER], cwd=root, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.stdout.split() == ["stopped", str(int(signal.SIGTERM))], r.stdout + r.stderr
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr


_IN_A_WEAKREF_CALLBACK = """
import os, signal, time, weakref
from shrink import interrupts

class Held:
    pass

def gone(ref):
    os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here: no __del__ on the way
    time.sleep(0.01)

def busy(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        pass

interrupts.install()
try:
    with interrupts.working():
        held = Held()
        ref = weakref.ref(held, gone)
        del held
        busy(1)
        print("lost")
        os.kill(os.getpid(), signal.SIGINT)  # a later Ctrl-C
        busy(1)
    print("every stop lost")
except KeyboardInterrupt:
    print("stopped", interrupts.received())
"""


def test_a_stop_dropped_in_a_weakref_callback_is_re_sent_and_stops_the_work():
    """A stop whose handler ran in a finalizer that is no ``__del__`` (a weakref's
    callback, as multiprocessing's Finalize) has its KeyboardInterrupt dropped and sent
    again; the first stop was noted as under way, so the re-sent one was taken for a
    second stop and ignored, and so was every stop after it (a later Ctrl-C too): the
    command ran to its end."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", _IN_A_WEAKREF_CALLBACK], cwd=root,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.stdout.split() == ["stopped", str(int(signal.SIGTERM))], r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


_HELD_AND_NEVER_RAISED = """
import signal
from shrink import interrupts

interrupts.install()
with interrupts.working():  # a replay: its run's result made, a stop held meanwhile
    with interrupts.deferred():
        interrupts._stop(int(signal.SIGTERM), None)
    # (replay never asks for the held stop: its command ends)
try:
    with interrupts.working():  # the next command of this process, a sweep's first level
        interrupts.raise_if_held()
        print("next command ran")
except KeyboardInterrupt:
    print("next command stopped")
"""


def test_a_stop_held_and_never_raised_does_not_stop_the_next_command():
    """A stop deferred() held in a command that never raised it (a replay's run, the
    result being made) stayed held: the next command of the same process (the tour, a
    test) was stopped at its first raise_if_held(), no signal sent to it."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", _HELD_AND_NEVER_RAISED], cwd=root,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.stdout.split() == ["next", "command", "ran"], r.stdout + r.stderr


_OWED_AT_THE_END = """
import os, signal, time
from shrink import interrupts

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # handled here: the stop is re-sent
        time.sleep(0.001)

interrupts.install()
with interrupts.working():
    Dropped()  # the command's work ends at once, its stop owed
try:
    with interrupts.working():  # the next command of this process
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
    print("next command ran")
except KeyboardInterrupt:
    print("next command stopped by", interrupts.received())
"""

_DIRECT_STOP_FIRST = """
import os, signal, time
from shrink import interrupts

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.001)

def busy(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        pass

interrupts.install()
with interrupts.working():
    try:
        Dropped()
        os.kill(os.getpid(), signal.SIGINT)  # a second stop, direct, before the re-send
        busy(2)
        print("lost")
    except KeyboardInterrupt:
        try:
            busy(0.5)  # the clean-up of the stop (a partial curve written)
            print("cleaned up", interrupts.received())
        except KeyboardInterrupt:
            print("clean-up cut short", interrupts.received())
"""


@pytest.mark.parametrize(
    ("script", "expected"),
    [(_OWED_AT_THE_END, ["next", "command", "ran"]),
     (_DIRECT_STOP_FIRST, ["cleaned", "up", str(int(signal.SIGTERM))])],
    ids=["owed-at-the-command's-end", "a-direct-stop-before-the-re-send"],
)  # fmt: skip
def test_a_re_sent_stop_is_sent_once_and_only_while_its_command_runs(script, expected):
    """The stop re-sent 5 ms after a handler ran in a finalizer was sent whatever came
    meanwhile: pending at a command's end, it stopped the next command of the process;
    after a second, direct stop, it came during that stop's clean-up (a second Ctrl-C)
    and its signal gave the exit status."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.stdout.split() == expected, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


_HANDLED_PAST_THE_END = """
import signal
from shrink import interrupts

interrupts.install()
with interrupts.working():
    pass
# A stop delivered in the work's last moment (a re-sent one the thread sent while the
# depth was still 1, or a Ctrl-C) has its handler run at the first check of the eval
# loop, which comes past working()'s depth -= 1: as that late handler runs.
try:
    interrupts._stop(int(signal.SIGTERM), None)
    print("ignored")
except interrupts.NotStarted:
    print("NotStarted")
try:
    with interrupts.working():
        print("next block ran")
except interrupts.NotStarted:
    print("next block refused")
"""


def test_a_stop_handled_just_past_the_work_s_end_is_ignored_not_said_before_the_start():
    """A stop whose handler ran just past the outermost working() block's end (the depth
    already 0, the handlers not yet ignored) raised NotStarted: the command said "stopped
    by SIGTERM before the command started: nothing was written", its outputs written, and
    every later block was refused. It is ignored, as one a moment later is."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", _HANDLED_PAST_THE_END], cwd=root,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.stdout.split("\n")[:2] == ["ignored", "next block ran"], r.stdout + r.stderr


_SECOND_STOP_AS_THE_ENGINE_CLOSES = """
import os, signal, socket, sys, threading, time
from pathlib import Path
from shrink import interrupts
from shrink.replay import EngineConfig, build_schedule, run_schedule
from shrink.replay.native import run_native
from shrink.replay.writer import RunLogWriter
from shrink.schedule import open_loop_trace

class Writer(RunLogWriter):
    def close(self):  # the second stop comes while the engine closes its RunLog
        os.kill(os.getpid(), getattr(signal, sys.argv[3]))
        time.sleep(0.05)
        super().close()

interrupts.install()
out = Path(sys.argv[1]) / "r.parquet"
with socket.socket() as closed:  # bound, not listening: connections are refused
    closed.bind(("127.0.0.1", 0))
    sched = build_schedule(open_loop_trace("/x", 100.0, 5.0), 1.0, 5.0)
    first = threading.Timer(0.3, os.kill, (os.getpid(), getattr(signal, sys.argv[2])))
    try:
        with interrupts.working():
            first.start()
            engine = run_native if sys.argv[4] == "native" else run_schedule
            stats = engine(sched, EngineConfig(targets=[closed.getsockname()]), Writer(out))
            print("interrupted", stats.interrupted)
    except KeyboardInterrupt:
        print("raised")
print("status", interrupts.exit_status())
print("files", *sorted(p.name for p in out.parent.iterdir()))
"""


@pytest.mark.parametrize(
    ("first", "second"), [("SIGHUP", "SIGTERM"), ("SIGTERM", "SIGTERM"), ("SIGINT", "SIGINT")]
)
@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_second_stop_while_the_engine_closes_its_runlog_is_the_same_stop(
    tmp_path, first, second, engine
):
    """SIGHUP, then SIGTERM 10 ms later (timeout's to the group, then the parent's; two
    Ctrl-C): the second came once the engine had given the stop signals back, while it
    closed its RunLog, and raised there: the rows lost, a ``.run001-rf2.parquet.*.tmp``
    left, and the exit status the second's (143 for a SIGHUP'd sweep)."""
    if engine == "native" and not native.available():
        pytest.skip("the native replay core is not built")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [sys.executable, "-c", _SECOND_STOP_AS_THE_ENGINE_CLOSES, str(tmp_path), first, second,
         engine],
        cwd=root, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.stdout.splitlines() == [
        "interrupted True",
        f"status {128 + getattr(signal, first)}",
        "files r.parquet",
    ], r.stdout + r.stderr
