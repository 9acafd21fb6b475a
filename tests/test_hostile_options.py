"""Hostile and odd option values to the offline commands: numbers past what a field
holds (nan, inf, 1e-320, 1e308, twenty digits), lists naming a value twice, FIFOs and
dangling symlinks where a file or directory goes.

Each is refused in one line naming the option (exit 2) or the file (exit 1), never a
hang, a traceback, exit 70, or a value accepted silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest import read_trace


def _synth_support(tmp_path: Path, *options: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from shrink.cli import app

    out = tmp_path / "s.parquet"
    args = ["synth", "support", "--users", "5", "--duration", "10s", "-o", str(out), *options]
    r = CliRunner().invoke(app, args)
    assert r.exit_code != 0 or out.exists(), r.output
    return r.exit_code, " ".join(r.output.split())


def test_a_vanishing_dynamic_fraction_is_refused_by_name(tmp_path: Path) -> None:
    # 1e-320 asked for inf images a page: OverflowError in the message itself, exit 70.
    # 1e-5 was refused as "n_images == 64, must be at least 99999", exit 1: a name no
    # option has, and a value no option sets.
    for value in ("1e-320", "1e-300", "1e-5", "0.0153"):
        code, text = _synth_support(tmp_path, "--dynamic-fraction", value)
        assert code == 2, text
        assert text == (
            f"error: --dynamic-fraction: dynamic_fraction == {float(value):g}, must be at "
            "least 0.0154 with these transitions: a page embeds at most 64 images."
        )
    code, text = _synth_support(tmp_path, "--dynamic-fraction", "0.0154")  # the least works
    assert code == 0, text


def test_download_directories_past_what_a_site_may_hold_are_refused(tmp_path: Path) -> None:
    # --dirscaling 1e308 was an OverflowError (exit 70); 1e6 held 80 million paths in memory.
    for value in ("1e308", "1e6"):
        code, text = _synth_support(tmp_path, "--dirscaling", value)
        assert code == 2 and f"--dirscaling: dirscaling == {float(value):g} for 5" in text, text
        assert "more than the 250,000 a site may hold" in text, text
    assert _synth_support(tmp_path, "--dirscaling", "1")[0] == 0


@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [
        ("--dynamic-work-us", "1e308", "dynamic work_us == 1e+308, must be in [0, 1e+07]"),
        ("--dynamic-mem-kib", "1e308", "dynamic mem_kib == 1e+308, must be in [1, 65536]"),
        ("--dynamic-mem-kib", "65537", "dynamic mem_kib == 65537, must be in [1, 65536]"),
    ],
)
def test_dynamic_work_past_what_the_page_script_does_is_refused(
    tmp_path: Path, option: str, value: str, shown: str
) -> None:
    # The trace said work=6e307 and mem=7e307; the PHP page caps both, or reads 0 past 18 digits.
    code, text = _synth_support(tmp_path, option, value)
    assert code == 2 and f"{option}: {shown}" in text, text


def test_a_download_cap_past_int64_is_refused(tmp_path: Path) -> None:
    # 99999999999999999999 reached np.minimum: OverflowError, exit 70.
    code, text = _synth_support(tmp_path, "--max-download-bytes", "99999999999999999999")
    shown = "--max-download-bytes: max_download_bytes == 1e+20, must be in [1, 1e+18]"
    assert code == 2 and shown in text, text


def test_a_session_rate_that_starts_sessions_past_a_century_names_the_option(
    tmp_path: Path,
) -> None:
    # The error blamed the file: "read as a trace, row 8: t == inf".
    log = tmp_path / "sessions.log"
    log.write_text("/a\n\n/b\n")
    shown = r"^session_rate == 1e-300 starts session 1 at 1e\+300 s"
    with pytest.raises(ParameterError, match=shown):
        read_trace(log, format="wsesslog", session_rate=1e-300)
    assert len(read_trace(log, format="wsesslog", session_rate=1e-6)) == 2


def _shrink(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shrink", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.compute
def test_a_fifo_without_a_writer_as_a_json_or_toml_input_is_read_at_once(tmp_path: Path) -> None:
    # open() blocked until a writer came: mat, calibrate, machine show hung for ever.
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    for args, shown in (
        (["mat", str(fifo), "--threshold", "5ms"], "line 1: not JSON"),
        (["calibrate", str(fifo)], "line 1: not JSON"),
        (["machine", "show", "--machine", str(fifo)], "machine spec lacks sockets"),
    ):
        r = _shrink(*args)
        assert r.returncode == 1 and f"error: {fifo}" in r.stderr and shown in r.stderr, r.stderr


@pytest.mark.compute
def test_a_pipe_with_a_writer_is_still_read_as_json() -> None:
    # bash's <(...) hands over a pipe whose writer is slow: it is read to its end.
    shrink = f"{sys.executable} -m shrink calibrate <(sleep 0.5; printf '{{}}')"
    r = subprocess.run(["bash", "-c", shrink], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "schema == None, expected 'shrink.loadcurve/1'" in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_pipe_or_device_as_a_parquet_input_is_named_as_such(tmp_path: Path, kind: str) -> None:
    # It was "no such file" (pyarrow's FileNotFoundError) for a file that is there.
    from shrink.runlog import RunLog
    from shrink.trace import Trace

    path = Path("/dev/null")
    if kind == "fifo":
        path = tmp_path / "t.fifo"
        os.mkfifo(path)
    for read in (Trace.read_parquet, RunLog.read_parquet):
        with pytest.raises(TraceFormatError, match=r"not a regular file \(a pipe, socket"):
            read(path)


def test_an_output_directory_that_is_a_dangling_symlink_is_refused_first(tmp_path: Path) -> None:
    # It passed the check; the trace was written, then the docroot failed with ENOENT.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    dangling = tmp_path / "root"
    dangling.symlink_to(tmp_path / "missing")
    out = tmp_path / "t.parquet"
    args = ["synth", "tcp", "--rate", "10", "--duration", "2s", "-o", str(out)]
    r = CliRunner().invoke(app, [*args, "--docroot", str(dangling)])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "--docroot" in text and "which does not exist" in text, text
    assert not out.exists()
    Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]}).write_parquet(out)
    r = CliRunner().invoke(app, ["split", str(out), "--parts", "2", "-o", str(dangling)])
    assert r.exit_code == 2 and "is a symlink to" in r.output, r.output


def test_mat_names_a_request_class_the_curve_did_not_measure(tmp_path: Path) -> None:
    # --cls STATIC (or a typo) was "no level has a finite throughput and statistic".
    from helpers.curves import half_share_curve
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.machine import Machine

    spec = Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml"
    curve = half_share_curve(Machine.read_toml(spec), levels=4, reps=1, seed=3)
    src = curve.write_json(tmp_path / "share.json")
    classes = sorted({c for lv in curve.levels for r in lv.reps for c in r.per_class})
    for cls in ("STATIC", "\x1b[31m"):
        r = CliRunner().invoke(app, ["mat", str(src), "--threshold", "5ms", "--cls", cls])
        assert r.exit_code == 2, r.output
        assert f"must be a class the curve measured: {', '.join(classes) or 'it'}" in r.output
        assert "--cls: cls ==" in r.output and "\x1b" not in r.output


def test_sim_scaling_refuses_a_mapping_no_core_count_can_run() -> None:
    # Every count ran 1-replica while the output said "mapping": "99999999999999999999-replica".
    from typer.testing import CliRunner

    from shrink.cli import app

    machine = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    for mapping in ("99999999999999999999-replica", "4-replica"):
        args = ["sim", "scaling", "--machine", machine, "--cores", "1,2", "--mapping", mapping]
        r = CliRunner().invoke(app, [*args, "--requests", "500"])
        text = " ".join(r.output.split())
        assert r.exit_code == 2 and "--mapping" in text and "at none of them" in text, text


@pytest.mark.parametrize(
    ("param", "shown"),
    [
        ("reference_ghz=inf", "reference_ghz == inf, must be in [0, 1000]"),
        ("static_cv=1e308", "static_cv == 1e+308, must be in [0, 100]"),
        ("llc_local_ns=inf", "llc_local_ns == inf, must be in [0, 1e+09]"),
        ("contention_static=inf", "contention_static == inf, must be in [0, 100]"),
        ("llc_local_ns=1e9", "llc_local_ns == 1e+09, must be at most llc_remote_ns"),
        ("cross_socket=ture", "--param: cross_socket == 'ture', must be true or false"),
    ],
)
def test_a_simulator_parameter_the_engine_cannot_compute_with_is_refused(
    tmp_path: Path, param: str, shown: str
) -> None:
    # inf passed "v >= 0": ZeroDivisionError or IndexError in the engine (exit 70), or
    # NaN latencies written; llc_local_ns above memory's gave negative latencies.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        tmp_path / "t.parquet"
    )
    machine = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    out = tmp_path / "run.parquet"
    args = ["sim", "run", str(tmp_path / "t.parquet"), "--machine", machine, "-o", str(out)]
    r = CliRunner().invoke(app, [*args, "--duration", "1s", "--param", param])
    # A value out of range is the option's, as an unknown name is: exit 2, naming --param
    # (it exited 1 without naming the option).
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and shown in text and text.startswith("error: --param: "), r.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("param", "shown"),
    [
        ("statc_cv=1", "--param: unknown simulator parameter 'statc_cv'; known: accept_policy,"),
        ("static_cv", "--param: 'static_cv', must be NAME=VALUE."),
    ],
)
def test_a_simulator_parameter_of_no_such_name_is_refused_naming_the_option(
    tmp_path: Path, param: str, shown: str
) -> None:
    # It said "unknown simulator parameter(s) ['statc_cv']", exit 1, naming no option.
    code, text = _sim_run(tmp_path, "--param", param)
    assert code == 2 and text.startswith(f"error: {shown}") and text.count("error") == 1, text


def _sim_run(tmp_path: Path, *options: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        tmp_path / "t.parquet"
    )
    machine = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    args = ["sim", "run", str(tmp_path / "t.parquet"), "--machine", machine, "--duration", "1s"]
    r = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "run.parquet"), *options])
    assert r.exit_code != 0 or (tmp_path / "run.parquet").exists()
    return r.exit_code, " ".join(r.output.split())


def test_a_cpu_range_past_the_most_cpus_is_refused_before_it_is_built(tmp_path: Path) -> None:
    # --share 0-99999999999999999999 built a set of 1e20 CPUs: MemoryError, exit 70.
    from shrink.errors import TopologyError
    from shrink.topology import parse_cpulist

    with pytest.raises(TopologyError, match=r"CPU 8192 is past the most a machine may have"):
        parse_cpulist("0-8192")
    assert parse_cpulist("8190-8191") == (8190, 8191)
    code, text = _sim_run(tmp_path, "--share", "0-99999999999999999999")
    assert code == 1 and "CPU 99999999999999999999 is past the most" in text, text


def test_a_vanishing_cpu_time_share_is_refused_by_the_period_rule(tmp_path: Path) -> None:
    # all@1e-320 needed an inf period and math.ceil raised OverflowError: exit 70.
    from shrink.enforce.cfs import choose_period_us
    from shrink.errors import TopologyError

    with pytest.raises(TopologyError, match=r"needs a period over 1000000 us"):
        choose_period_us(1e-320, 8, tick_us=4000)
    assert choose_period_us(0.5, 1, tick_us=4000) == 8000
    code, text = _sim_run(tmp_path, "--share", "all@1e-320")
    assert code == 1 and "a CPU-time share of 9.99989e-321 on 8 CPU(s) needs a period" in text


def test_a_rate_factor_that_stretches_the_trace_past_a_century_is_refused(tmp_path: Path) -> None:
    # 1e-320 made every time inf, then NaN: a ValueError in the schedule, exit 70.
    code, text = _sim_run(tmp_path, "--rate-factor", "1e-320")
    assert code == 1 and "stretches the trace's 1 s to inf s, past the" in text, text
    # 1e308 made the copies' count inf: OverflowError in int(), exit 70.
    code, text = _sim_run(tmp_path, "--rate-factor", "1e308")
    assert code == 1 and "repeats the trace's 2 requests inf times, more than the" in text, text


def test_a_level_named_twice_is_a_usage_error(tmp_path: Path) -> None:
    # --levels 1,1 wrote a curve with two levels of value 1, each with its own repetitions.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        tmp_path / "t.parquet"
    )
    machine = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    out = tmp_path / "curve.json"
    args = ["sim", "sweep", str(tmp_path / "t.parquet"), "--machine", machine, "-o", str(out)]
    r = CliRunner().invoke(app, [*args, "--levels", "2,1,1.0"])
    assert r.exit_code == 2 and "--levels: '2,1,1.0' names level 1 twice" in r.output, r.output
    assert not out.exists()
    # Two that print alike: --export hdr wrote level-1.hlog twice, the first level's lost
    # (and "4 export files" said of 2).
    r = CliRunner().invoke(app, [*args, "--levels", "1,1.0000000001", "--export", "hdr"])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "'1,1.0000000001' names level 1 twice" in text, r.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--mappings", ""], "--mappings: name at least one mapping"),  # was an IndexError
        (["--mappings", " , "], "--mappings: name at least one mapping"),
        (["--requests", "100000000"], "'--requests'"),  # a MemoryError in the pilot run
    ],
)
def test_sim_mappings_refuses_no_mapping_and_runs_past_memory(args: list[str], shown: str) -> None:
    from typer.testing import CliRunner

    from shrink.cli import app

    machine = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    r = CliRunner().invoke(app, ["sim", "mappings", "--machine", machine, *args])
    assert r.exit_code == 2 and shown in r.output, r.output


def test_a_simulated_run_past_what_the_engine_holds_is_refused_before_planning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --duration 1e6s planned 49 million requests (about 50 GB of engine objects): the
    # schedule's 50 million limit is the live engine's; it was a MemoryError, exit 70.
    from shrink.sim import target

    monkeypatch.setattr(target, "MAX_SIM_REQUESTS", 100, raising=False)
    code, text = _sim_run(tmp_path, "--duration", "100s", "--warmup", "0s")
    assert code == 1 and "more than the 100 requests a simulated run may hold" in text, text
    code, text = _sim_run(tmp_path, "--duration", "10s", "--warmup", "0s")
    assert code == 0, text


@pytest.mark.parametrize("curves", [[], ["curve.json"]])
def test_calibrate_refuses_bad_thresholds_by_the_option(tmp_path: Path, curves: list[str]) -> None:
    # Without curves mean=5min went unnoticed (exit 0); with them the option was unnamed.
    from typer.testing import CliRunner

    from shrink.cli import app

    args = ["calibrate", *(str(tmp_path / c) for c in curves), "--thresholds", "mean=5min"]
    r = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "cal.json")])
    assert r.exit_code == 2 and "--thresholds: threshold mean == '5min'" in r.output, r.output
    assert not (tmp_path / "cal.json").exists()


@pytest.mark.parametrize("value", ["-1", "100", "99999999999999999999"])
def test_a_realtime_priority_sched_fifo_has_not_is_a_usage_error(
    tmp_path: Path, value: str
) -> None:
    # 100 was EINVAL in each engine process, -1 normal scheduling without a word.
    from typer.testing import CliRunner

    from shrink.cli import app

    spec = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    args = ["predict", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "p"), "--machine", spec]
    r = CliRunner().invoke(app, [*args, "--target", f"sim:{spec}", "--realtime", value])
    assert r.exit_code == 2 and "'--realtime'" in r.output, r.output
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("llc_mib = 1e-320", "llc_mib == 9.99989e-321, must be 0 (not known) or at least"),
        ("ghz = 1e-320", "ghz: Input should be greater than or equal to 0.01"),
    ],
)
def test_a_machine_spec_with_a_vanishing_cache_or_clock_is_refused(
    tmp_path: Path, line: str, shown: str
) -> None:
    # llc_mib 1e-320 overflowed the what-if's miss rates (exit 70); a 1e-320 GHz clock
    # made every simulated demand inf.
    from shrink.machine import Machine

    spec = tmp_path / "m.toml"
    spec.write_text(f'name = "x"\nsockets = 1\ncores_per_socket = 2\n{line}\n')
    with pytest.raises(TraceFormatError, match=r"m\.toml: .*" + re.escape(shown)):
        Machine.read_toml(spec)
    spec.write_text('name = "x"\nsockets = 1\ncores_per_socket = 2\nllc_mib = 0.0\nghz = 0.8\n')
    assert Machine.read_toml(spec).llc_mib == 0.0


def test_predict_bounds_its_levels() -> None:
    # --max-levels 99999999999999999999 was accepted.
    from typer.testing import CliRunner

    from shrink.cli import app

    r = CliRunner().invoke(app, ["predict", "t.parquet", "-o", "out", "--max-levels", "1001"])
    assert r.exit_code == 2 and "--max-levels" in r.output and "1000" in r.output, r.output


@pytest.mark.parametrize("command", ["predict", "sweep"])
def test_a_lag_limit_is_a_latency(tmp_path: Path, command: str) -> None:
    # --lag-limit 5min was accepted: a send lag takes a latency's units, us, ms or s.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        trace
    )
    args = [command, str(trace), "-o", str(tmp_path / "out"), "--lag-limit", "5min"]
    if command == "sweep":  # refused before anything is sent (port 9: discard)
        args += ["--target", "http://127.0.0.1:9/", "--levels", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--lag-limit" in r.output and "us, ms, s" in r.output, r.output


@pytest.mark.parametrize("text", ["1e308s", "1e308", "6e7m", "3155760001s"])
def test_a_duration_past_a_century_is_refused_by_the_option(tmp_path: Path, text: str) -> None:
    # sim sweep --duration 1e308 was accepted and written into the curve as its window.
    from shrink.checks import MAX_SECONDS, parse_duration

    with pytest.raises(ParameterError, match=r"must be at most 3155760000 s \(a century\)"):
        parse_duration(text)
    assert parse_duration(f"{MAX_SECONDS:.0f}s") == MAX_SECONDS
    code, text = _sim_run(tmp_path, "--duration", text)
    assert code == 2 and "--duration" in text and "must be at most 3155760000 s" in text, text


def test_an_empty_argument_is_named_not_read_as_the_working_directory() -> None:
    # "" became the path ".": the error said "`.`: is a directory".
    r = _shrink("trace", "stats", "")
    assert r.returncode == 2, r.stderr
    assert "argument 3 (after stats) is empty: a path or a value was left blank" in r.stderr
    assert "`.`" not in r.stderr and "Traceback" not in r.stderr
    r = _shrink("sim", "sweep", "--machine", "", "t.parquet")
    assert r.returncode == 2 and "argument 4 (after --machine) is empty" in r.stderr, r.stderr


@pytest.mark.parametrize("text", ["1e-320", "0.5ms", "999us"])
def test_a_window_shorter_than_a_millisecond_is_refused_by_the_option(
    tmp_path: Path, text: str
) -> None:
    # sim run --duration 1e-320 left the window [2 s, 2 s): ZeroDivisionError, exit 70.
    from shrink.checks import MIN_WINDOW_S, parse_duration

    with pytest.raises(ParameterError, match=r"must be at least 1 ms \(a measurement window\)"):
        parse_duration(text, least=MIN_WINDOW_S)
    assert parse_duration("1ms", least=MIN_WINDOW_S) == MIN_WINDOW_S
    assert parse_duration("0s", zero_ok=True, least=MIN_WINDOW_S) == 0.0
    code, out = _sim_run(tmp_path, "--duration", text)
    assert code == 2 and "must be at least 1 ms" in out, out


def test_an_empty_measurement_window_is_an_error_not_a_division_by_zero() -> None:
    from types import SimpleNamespace

    from shrink.measure.stats import level_stats

    with pytest.raises(ParameterError, match=r"the measurement window \[2 s, 2 s\) is empty"):
        level_stats(SimpleNamespace(runlog=None, window=(2.0, 2.0 + 1e-320)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [("--duration", "1e-320"), ("--think-mean", "99999999999999999999"), ("--stagger", "1e308")],
)
def test_a_support_trace_that_draws_no_session_is_refused(
    tmp_path: Path, options: tuple[str, str]
) -> None:
    # An empty trace was written and the command exited 0.
    code, text = _synth_support(tmp_path, *options)
    assert code == 1 and "the parameters drew no request" in text and "seed 0)" in text, text
    assert "lengthen the duration" in text and not (tmp_path / "s.parquet").exists()


def test_a_tcp_trace_that_draws_no_request_is_refused(tmp_path: Path) -> None:
    # synth tcp --rate 1e-320 wrote an empty trace, exit 0.
    out = tmp_path / "never.parquet"
    r = _shrink("synth", "tcp", "--rate", "1e-320", "--duration", "1s", "-o", str(out))
    assert r.returncode == 1 and "drew no request (1 s, seed 0); raise the rate" in r.stderr
    assert not out.exists()


def test_a_sample_that_keeps_nothing_is_refused_and_not_written(tmp_path: Path) -> None:
    # sample --alpha 1e-320 wrote an empty trace, exit 0: every later step refused it.
    from typer.testing import CliRunner

    from shrink.cli import app

    code, _ = _synth_support(tmp_path)
    assert code == 0
    out = tmp_path / "k.parquet"
    r = CliRunner().invoke(
        app, ["sample", str(tmp_path / "s.parquet"), "--alpha", "1e-9", "-o", str(out)]
    )
    text = " ".join(r.output.split())
    assert r.exit_code == 1 and "alpha 1e-09 kept none of its" in text and "raise alpha" in text, (
        text
    )
    assert not out.exists()


def test_a_stratified_sample_by_a_column_of_distinct_values_says_why_it_kept_nothing(
    tmp_path: Path,
) -> None:
    """``--level stratified --column t``: a stratum a session, each keeping none below
    alpha 0.5; the error said "raise alpha", which cannot help below 0.5."""
    import numpy as np
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    trace, out = tmp_path / "t.parquet", tmp_path / "k.parquet"
    n = 200
    Trace.from_columns({"session": np.arange(n), "t": np.arange(n) / 10.0,
                        "path": ["/a"] * n}).write_parquet(trace)  # fmt: skip
    for column in ("t", "session"):
        args = ["--level", "stratified", "--column", column, "--force", "-o", str(out)]
        r = CliRunner().invoke(app, ["sample", str(trace), "--alpha", "0.3", *args])
        text = " ".join(r.output.split())
        assert r.exit_code == 1, text
        assert f"--column {column} holds 200 distinct values over 200 requests" in text, text
        assert "stratify by a column whose values repeat" in text
        assert not out.exists()


def test_an_empty_trace_is_not_sampled_and_empty_parts_are_said(tmp_path: Path) -> None:
    """``sample`` of a trace with no request wrote an empty sample, exit 0; ``split``
    into more parts than sessions wrote empty parts without a word."""
    import numpy as np
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    empty, full = tmp_path / "e.parquet", tmp_path / "f.parquet"
    Trace.from_columns({"session": np.zeros(0, np.int64), "t": np.zeros(0),
                        "path": np.array([], dtype=object)}).write_parquet(empty)  # fmt: skip
    r = CliRunner().invoke(app, ["sample", str(empty), "--alpha", "0.5", "-o", str(tmp_path / "s")])
    text = " ".join(r.output.split())
    assert r.exit_code == 1 and "the trace holds no request: nothing to sample" in text, text
    assert not (tmp_path / "s").exists()
    Trace.from_columns({"session": [1, 2, 3], "t": [0.0, 1.0, 2.0],
                        "path": ["/a"] * 3}).write_parquet(full)  # fmt: skip
    r = CliRunner().invoke(app, ["split", str(full), "--parts", "8", "-o", str(tmp_path / "p")])
    text = " ".join(r.output.split())
    assert r.exit_code == 0, text
    assert "of the 8 parts hold no session" in text and "has 3 sessions" in text, text
    assert len(list((tmp_path / "p").glob("part-*.parquet"))) == 8


def test_a_simulator_with_no_php_work_runs(tmp_path: Path) -> None:
    # dynamic_php_us=0 is in its range ([0, 1e9]: pages that do no PHP work) but the
    # lognormal of a zero mean took log(0): exit 70.
    code, text = _sim_run(tmp_path, "--param", "dynamic_php_us=0", "--param", "dynamic_cv=1")
    assert code == 0, text


@pytest.mark.parametrize("param", ["static_cv=1e-300", "static_cv=1e-160", "dynamic_cv=1e-300"])
def test_a_simulator_spread_too_small_to_compute_is_none(tmp_path: Path, param: str) -> None:
    # In range ([0, 100]), but the gamma's shape 1/cv^2 divided by zero: exit 70.
    code, text = _sim_run(tmp_path, "--param", param)
    assert code == 0, text


def test_sim_scaling_with_no_mat_at_its_smallest_core_count_says_so() -> None:
    # mem_local_ns=1e9 is in range: every load is over the threshold, the MAT 0, and
    # the scaling factor divided by it (exit 70).
    from typer.testing import CliRunner

    from shrink.cli import app

    machine = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    r = CliRunner().invoke(app, ["sim", "scaling", "--machine", machine, "--workload", "support",
                                 "--requests", "100", "--cores", "1",
                                 "--param", "mem_local_ns=1e9"])  # fmt: skip
    text = " ".join(r.output.split())
    assert r.exit_code == 99 and "scaling n/a" in text, r.output


def test_a_stratified_sample_by_a_column_whose_values_repeat_says_the_alpha_that_keeps_one(
    tmp_path: Path,
) -> None:
    """``--column cls --alpha 0.001`` on a trace of two classes: the error told to
    stratify by a column whose values repeat, "such as cls", the column given; it says
    the alpha that keeps one unit of the largest stratum."""
    import numpy as np
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    trace, out = tmp_path / "t.parquet", tmp_path / "k.parquet"
    n = 200
    cls = ["static"] * 150 + ["dynamic"] * 50
    Trace.from_columns({"session": np.arange(n), "t": np.arange(n) / 10.0, "path": ["/a"] * n,
                        "cls": cls}).write_parquet(trace)  # fmt: skip
    args = ["--level", "stratified", "--column", "cls", "--force", "-o", str(out)]
    r = CliRunner().invoke(app, ["sample", str(trace), "--alpha", "0.001", *args])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, text
    assert "--column cls's largest stratum holds 150" in text, text
    assert "alpha 0.00334 or more keeps one" in text and "such as cls" not in text
    assert not out.exists()


@pytest.mark.compute
def test_a_one_request_trace_sampled_to_nothing_says_one_request(tmp_path: Path) -> None:
    # "kept none of its 1 requests": the noun was plural whatever the count.
    from typer.testing import CliRunner

    from shrink.cli import app

    one = tmp_path / "one.parquet"
    r = CliRunner().invoke(app, ["synth", "tcp", "--rate", "1", "--duration", "1", "-o", str(one)])
    assert r.exit_code == 0, r.output
    args = ["sample", str(one), "--alpha", "0.5", "-o", str(tmp_path / "k.parquet")]
    text = " ".join(CliRunner().invoke(app, args).output.split())
    assert "kept none of its 1 request (session sampling" in text, text
