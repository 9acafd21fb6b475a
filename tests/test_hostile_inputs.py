"""Hostile and odd inputs to the offline commands: pipes and devices, inflating captures,
impossible dates, traces past what a reader accepts, names that would drive a terminal.

Each is one line naming the file (and the line), never a hang, a traceback or exit 70.
"""

from __future__ import annotations

import gzip
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest import read_trace


@pytest.mark.parametrize("fmt", ["auto", "clf", "pcap", "parquet"])
def test_a_device_is_refused_by_name(fmt: str) -> None:
    # /dev/null read as a log was an empty trace; /dev/zero as a capture filled memory.
    with pytest.raises(TraceFormatError, match=r"^/dev/null: not a regular file"):
        read_trace("/dev/null", format=fmt)


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    # It blocked in open() until a writer came, then lost its head to the format check.
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    r = subprocess.run(
        [sys.executable, "-m", "shrink", "ingest", str(fifo), "-o", str(tmp_path / "t.parquet")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {fifo}: not a regular file (a pipe, socket or device): a trace is read "
        "more than once, so save it to a file first"
    ]


def test_a_gzip_capture_that_inflates_too_far_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pcap header and zeros: 4 MB of this gzip inflated to 4 GB before any record was read.
    from shrink.ingest.capture import pcap_files

    monkeypatch.setattr(pcap_files, "MAX_INFLATED", 1 << 20, raising=False)
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    bomb = tmp_path / "bomb.pcap.gz"
    bomb.write_bytes(gzip.compress(header + bytes(2 << 20)))
    for strict in (False, True):
        with pytest.raises(
            TraceFormatError, match=r"bomb\.pcap\.gz: gzip data inflates past 1 MiB"
        ):
            read_trace(bomb, strict=strict)
    small = tmp_path / "small.pcap.gz"
    small.write_bytes(gzip.compress(header) * 2)  # two members, both read
    assert len(read_trace(small)) == 0


_CLF = '1.2.3.4 - - [{}] "GET /a HTTP/1.0" 200 10\n'


@pytest.mark.parametrize(
    "stamp",
    [
        "31/Feb/2000:13:55:36 -0700",  # was read as 2 March
        "29/Feb/2001:13:55:36 +0000",
        "00/Jan/2000:13:55:36 +0000",
        "10/Oct/2000:25:00:00 +0000",  # was read as the next day
        "10/Oct/2000:13:61:00 +0000",
        "10/Oct/2000:13:55:99 +0000",
        "10/Oct/2000:13:55:36 +9999",
        "10/Oct/0000:13:55:36 +0000",
    ],
)
def test_an_impossible_clf_time_is_a_bad_line(tmp_path: Path, stamp: str) -> None:
    log = tmp_path / "access.log"
    log.write_text(_CLF.format("10/Oct/2000:13:55:36 -0700") + _CLF.format(stamp))
    with pytest.raises(TraceFormatError, match=r"access\.log, line 2: bad time"):
        read_trace(log, format="clf", strict=True)
    tr = read_trace(log, format="clf")
    assert len(tr) == 1 and tr.meta["skipped_lines"] == [2]


def test_the_last_day_of_february_and_a_leap_second_are_times(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text(_CLF.format("29/Feb/2000:23:59:60 +1400") + _CLF.format("1/Mar/2000:10:00:00"))
    assert len(read_trace(log, format="clf", strict=True)) == 2


@pytest.mark.parametrize(
    ("text", "fmt", "refused"),
    [
        ("0\tu1\t/a\n1e300\tu1\t/b\n", "specweb", r"row 1: t == 1e\+300"),
        ("/a think=1e200\n\n/b\n", "wsesslog", r"row 0: think == 1e\+200"),
    ],
)
def test_a_log_is_not_written_as_a_trace_no_command_reads(
    tmp_path: Path, text: str, fmt: str, refused: str
) -> None:
    # The Parquet reader refuses times past a century; ingest wrote them all the same.
    log = tmp_path / "log.txt"
    log.write_text(text)
    with pytest.raises(TraceFormatError, match=rf"log\.txt: read as a trace, {refused}"):
        read_trace(log, format=fmt)


_EVIL = "ev\x1b[2Jil\nFORGED"  # clears the screen, then starts a line of its own


def test_names_on_the_success_lines_are_escaped(tmp_path: Path) -> None:
    # The error line escaped names; the lines a command prints when it succeeds did not.
    from typer.testing import CliRunner

    from shrink.cli import app

    root = Path(__file__).resolve().parent.parent
    evil = tmp_path / _EVIL
    evil.mkdir()
    spec = tmp_path / "m.toml"
    spec.write_text('name = "a\\nFORGED\\u001b[2J"\nsockets = 2\ncores_per_socket = 4\n')
    trace = evil / "t.parquet"
    runs = [
        ["ingest", str(root / "examples/traces/support-access.log"), "-o", str(trace)],
        ["export", str(trace), "-o", str(evil / "t.ws")],
        ["sample", str(trace), "--alpha", "0.5", "-o", str(evil / "s.parquet")],
        ["split", str(trace), "--parts", "2", "-o", str(evil / "parts")],
        ["trace", "info", str(trace)],
        ["machine", "show", "--machine", str(spec)],
        ["machine", "write", str(evil / "m.toml"), "--machine", str(spec)],
        ["synth", "tcp", "--rate", "10", "--duration", "2s", "-o", str(evil / "tcp.parquet")],
        ["whatif", "--machine", str(spec), "--workload", str(trace), "--no-sweep"],
        ["sim", "run", str(trace), "--machine", str(spec), "-o", str(evil / "r.parquet"),
         "--duration", "1s", "--warmup", "0s"],
    ]  # fmt: skip
    for args in runs:
        r = CliRunner().invoke(app, args, color=True)  # color: click strips no escape
        assert r.exit_code == 0, (args, r.output)
        assert "\x1b" not in r.output and "\nFORGED" not in r.output, (args, r.output)


def test_split_refuses_more_parts_than_it_can_name(tmp_path: Path) -> None:
    # --parts 1000000000 ran a pass over the trace per part, for hours, writing nothing.
    import samplers
    from samplers.split import MAX_PARTS
    from shrink.errors import ParameterError
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    assert len(samplers.split(trace, MAX_PARTS)) == MAX_PARTS == 1000
    with pytest.raises(ParameterError, match=r"parts == 1001, must be in \[1, 1000\]"):
        samplers.split(trace, 1001)


def test_a_synthetic_trace_too_large_to_hold_is_refused_before_drawing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --rate 1e12 asked numpy for 7 PiB (exit 70); --duration 1e12s walked sessions for days.
    from shrink.errors import ParameterError
    from shrink.synth import _table, build_site, synth_support, synth_tcp
    from shrink.synth.support_params import SupportParams

    with pytest.raises(ParameterError, match=r"about 1e\+15 requests, more than the 50,000,000"):
        synth_tcp(1e12, 1000.0)
    with pytest.raises(ParameterError, match="must be at most 3155760000 s"):
        synth_tcp(1e-9, 1e12)
    for seeded in (lambda: synth_tcp(10, 1.0, seed=-1), lambda: synth_support(5, 5.0, seed=-1)):
        with pytest.raises(ParameterError, match=r"seed == -1"):  # was numpy's ValueError
            seeded()
    with pytest.raises(ParameterError, match=r"users == 2e\+06, must be in \[1, 1e\+06\]"):
        build_site(SupportParams(), 2_000_000)
    monkeypatch.setattr(_table, "MAX_REQUESTS", 1000, raising=False)
    with pytest.raises(ParameterError, match=r"200 users for 120 s make about"):
        synth_support(200, 120.0)


def test_a_run_that_repeats_its_trace_past_memory_is_refused() -> None:
    # sim run --duration 1e9s (or --rate-factor 1e12) planned terabytes: a MemoryError, exit 70.
    from shrink.errors import ParameterError
    from shrink.schedule import build_schedule
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    with pytest.raises(ParameterError, match=r"requests 1,000,000,000 times, more than the 50,"):
        build_schedule(trace, 1.0, 1e9)
    assert build_schedule(trace, 1.0, 1e9, loop=False).copies == 1  # one pass: any size


@pytest.mark.parametrize("command", [["sim", "run"], ["sim", "sweep", "--levels", "1"]])
def test_a_negative_seed_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    root = Path(__file__).resolve().parent.parent
    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    trace.write_parquet(tmp_path / "t.parquet")
    args = [*command, str(tmp_path / "t.parquet"), "--seed", "-1", "--duration", "1s",
            "--machine", str(root / "examples/machines/nehalem-2s.toml"),
            "-o", str(tmp_path / "out")]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--seed" in r.output, r.output  # was numpy's ValueError, 70


def test_sim_mappings_prints_the_statistics_it_was_given() -> None:
    # Thresholds without p99.9 (or without mean) were a KeyError after the whole search: 70.
    from typer.testing import CliRunner

    from shrink.cli import app

    root = Path(__file__).resolve().parent.parent
    args = ["sim", "mappings", "--machine", str(root / "examples/machines/nehalem-2s.toml"),
            "--mappings", "1-replica", "--thresholds", "p99=5ms", "--requests", "2000"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code in (0, 99), r.output
    assert "1-replica            p99 MAT" in r.output


@pytest.mark.parametrize("command", [["sim", "mappings"], ["sim", "scaling", "--cores", "1"]])
def test_requests_per_level_must_be_positive(command: list[str]) -> None:
    # --requests 0 was "duration == 0, must be in (0, inf)": no option named.
    from typer.testing import CliRunner

    from shrink.cli import app

    root = Path(__file__).resolve().parent.parent
    machine = str(root / "examples/machines/nehalem-2s.toml")
    r = CliRunner().invoke(app, [*command, "--machine", machine, "--requests", "0"])
    assert r.exit_code == 2 and "'--requests'" in r.output, r.output


@pytest.mark.parametrize("value", ["nan", "-1", "inf"])
def test_export_refuses_a_think_default_httperf_cannot_take(tmp_path: Path, value: str) -> None:
    # NaN equals no think time, so the file was written with every think time in it.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    trace.write_parquet(tmp_path / "t.parquet")
    out = tmp_path / "t.ws"
    args = ["export", str(tmp_path / "t.parquet"), "-o", str(out), f"--think-default={value}"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--think-default: think_default ==" in r.output, r.output
    assert not out.exists()


def test_extrapolate_keeps_a_repetition_whose_throughput_was_not_measured(tmp_path: Path) -> None:
    # null is the file's "not measured"; the tail's root search got NaN: exit 70.
    from helpers.curves import half_share_curve
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.machine import Machine

    spec = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    curve = half_share_curve(Machine.read_toml(spec), levels=8, reps=2, seed=3)
    curve.levels[0].reps[0].throughput = float("nan")
    src = curve.write_json(tmp_path / "share.json")
    assert '"throughput": null' in src.read_text()
    args = ["extrapolate", str(src), "--machine", spec, "--mapping", "1-replica"]
    r = CliRunner().invoke(app, [*args, "--thresholds", "mean=1.5ms"])
    assert r.exit_code in (0, 99), r.output


def test_an_output_that_is_a_device_pipe_or_descriptor_is_left_as_it_is(tmp_path: Path) -> None:
    # The rename put a regular file in its place: as root, -o /dev/null replaced /dev/null.
    import stat

    from typer.testing import CliRunner

    from shrink.atomic import write_text
    from shrink.cli import app
    from shrink.errors import WriteError

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    targets = [fifo, stdout]
    if os.geteuid() == 0:
        os.mknod(tmp_path / "null", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append(tmp_path / "null")
    log = Path(__file__).resolve().parent.parent / "examples/traces/support-access.log"
    for target in targets:
        before = os.lstat(target)
        with pytest.raises(WriteError, match="a device, pipe, socket or descriptor"):
            write_text(target, "x")
        r = CliRunner().invoke(app, ["ingest", str(log), "-o", str(target)])
        assert r.exit_code == 2 and "device, pipe, socket or descriptor" in r.output, r.output
        after = os.lstat(target)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(t.name for t in targets)


def test_trace_info_escapes_the_metadata_it_shows(tmp_path: Path) -> None:
    # A trace's metadata is the file's: an ESC or a newline in it reached the terminal.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    meta = {"reader": "\x1b[2Jx\nFORGED", "source": "[red]markup[/red]"}
    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    Trace.from_table(trace.table, meta).write_parquet(tmp_path / "t.parquet")
    r = CliRunner().invoke(app, ["trace", "info", str(tmp_path / "t.parquet")])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "FORGED" not in r.output.replace("\\nFORGED", "")
    assert "\\x1b[2Jx\\nFORGED" in r.output and "[red]markup[/red]" in r.output


def test_a_machine_spec_listing_a_cpu_twice_is_refused(tmp_path: Path) -> None:
    # whatif counted CPU 1 in both sockets; only a mapping later noticed it twice.
    from shrink.machine import Machine

    spec = tmp_path / "m.toml"
    spec.write_text('name = "x"\nsockets = 2\ncores_per_socket = 2\ncpus = [[0, 1], [1, 2]]\n')
    with pytest.raises(TraceFormatError, match=r"m\.toml: machine 'x': cpus lists CPU 1 twice"):
        Machine.read_toml(spec)


def test_an_error_quoting_a_long_field_stays_a_short_line(tmp_path: Path) -> None:
    # The field was quoted whole: a 500 KB argument made a 500 KB error line.
    log = tmp_path / "sessions.log"
    log.write_text("/a " + "z" * 500_000 + "\n")
    with pytest.raises(TraceFormatError) as e:
        read_trace(log, format="wsesslog")
    text = str(e.value)
    assert len(text) < 2100 and "\n" not in text
    assert text.startswith(f"{log}, line 1: unknown argument 'zzz")
    assert "characters cut" in text and text.endswith("(httperf knows think=, method=, contents=)")


def test_a_port_past_65535_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # build_mapping took 70000 and the testbed's bind() raised OverflowError: exit 70.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.errors import ParameterError
    from shrink.machine import Machine
    from shrink.mapping import build_mapping
    from shrink.testbed import lifecycle

    spec = Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml"
    for port in (70_000, -1):
        with pytest.raises(ParameterError, match=rf"port == {port}, must be in \[0, 65535\]"):
            build_mapping("2-replica-direct", Machine.read_toml(spec), base_port=port)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("testbed up ran with a port past 65535")

    monkeypatch.setattr(lifecycle, "up", never)  # nothing may start, even before the fix
    r = CliRunner().invoke(
        app, ["testbed", "up", "--port", "70000", "--state", str(tmp_path / "tb.json")]
    )
    assert r.exit_code == 2 and "'--port'" in r.output, r.output


@pytest.mark.parametrize("name", ["demand_static", "demand_dynamic", "llc_ref_mib"])
def test_a_calibration_with_a_zero_divisor_is_refused_by_name(tmp_path: Path, name: str) -> None:
    # 0 passed the file's bounds and was a ZeroDivisionError or an overflow later: exit 70.
    import json

    from typer.testing import CliRunner

    from shrink.cli import app

    spec = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    cal = tmp_path / "cal.json"
    assert CliRunner().invoke(app, ["calibrate", "-o", str(cal)]).exit_code == 0
    doc = json.loads(cal.read_text())
    doc["physics"][name] = 0
    cal.write_text(json.dumps(doc))
    args = ["whatif", "--machine", spec, "--workload", "support", "--no-sweep"]
    r = CliRunner().invoke(app, [*args, "--calibration", str(cal)])
    assert r.exit_code == 1, r.output
    assert f"cal.json: physics.{name}: Input should be greater than 0" in r.output


@pytest.mark.parametrize("command", [["sim", "sweep", "--levels", "1"], ["sweep", "--levels", "1"]])
def test_repetitions_past_the_seeds_room_are_a_usage_error(
    tmp_path: Path, command: list[str]
) -> None:
    # sim sweep --reps 1000000000 ran unbounded; past 1000 two levels share seeds.
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.trace import Trace

    root = Path(__file__).resolve().parent.parent
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        tmp_path / "t.parquet"
    )
    where = ["--machine", str(root / "examples/machines/nehalem-2s.toml")]
    if command[0] == "sweep":
        where = ["--target", "http://127.0.0.1:9/"]
    args = [*command, str(tmp_path / "t.parquet"), *where, "--reps", "1000000000",
            "-o", str(tmp_path / "out.json")]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--reps" in r.output and "1000" in r.output, r.output
    assert not (tmp_path / "out.json").exists()


def test_the_sweep_api_bounds_its_repetitions() -> None:
    from shrink.errors import ParameterError
    from shrink.measure import sweep
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]})
    with pytest.raises(ParameterError, match=r"reps == 1001, must be in \[1, 1000\]"):
        sweep(object(), trace, [1.0], reps=1001)  # type: ignore[arg-type]


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
    for value in ("1e-320", "1e-300"):
        code, text = _synth_support(tmp_path, "--dynamic-fraction", value)
        assert code == 1 and "dynamic_fraction ==" in text and "too small" in text, text
    code, text = _synth_support(tmp_path, "--dynamic-fraction", "1e-5")
    assert code == 1 and "n_images == 64, must be at least 99999" in text, text


def test_download_directories_past_what_a_site_may_hold_are_refused(tmp_path: Path) -> None:
    # --dirscaling 1e308 was an OverflowError (exit 70); 1e6 held 80 million paths in memory.
    for value in ("1e308", "1e6"):
        code, text = _synth_support(tmp_path, "--dirscaling", value)
        assert code == 1 and f"dirscaling == {float(value):g} for 5 users" in text, text
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
    assert code == 1 and shown in text, text


def test_a_download_cap_past_int64_is_refused(tmp_path: Path) -> None:
    # 99999999999999999999 reached np.minimum: OverflowError, exit 70.
    code, text = _synth_support(tmp_path, "--max-download-bytes", "99999999999999999999")
    assert code == 1 and "max_download_bytes == 1e+20, must be in [1, 1e+18]" in text, text


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
        ("cross_socket=ture", "--param cross_socket == 'ture', must be true or false"),
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
    assert r.exit_code == 1 and shown in " ".join(r.output.split()), r.output
    assert not out.exists()


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
