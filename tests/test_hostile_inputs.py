"""Hostile and odd inputs to the offline commands: pipes and devices, inflating captures,
impossible dates, traces past what a reader accepts, names that would drive a terminal.

Each is one line naming the file (and the line), never a hang, a traceback or exit 70.
"""

from __future__ import annotations

import gzip
import os
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
        # Each reader refuses it itself, by its line.
        (
            "0\tu1\t/a\n1e300\tu1\t/b\n",
            "specweb",
            r", line 2: time 1e300 is 3\.2e\+292 years after",
        ),
        ("/a think=1e200\n\n/b\n", "wsesslog", r", line 1: think=1e200 is past a century"),
    ],
)
def test_a_log_is_not_written_as_a_trace_no_command_reads(
    tmp_path: Path, text: str, fmt: str, refused: str
) -> None:
    # The Parquet reader refuses times past a century; ingest wrote them all the same.
    log = tmp_path / "log.txt"
    log.write_text(text)
    with pytest.raises(TraceFormatError, match=rf"log\.txt{refused}"):
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
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    assert len(samplers.split(trace, MAX_PARTS)) == MAX_PARTS == 1000
    with pytest.raises(ParameterError, match=r"parts == 1001, must be in \[1, 1000\]"):
        samplers.split(trace, 1001)


def test_a_synthetic_trace_too_large_to_hold_is_refused_before_drawing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --rate 1e12 asked numpy for 7 PiB (exit 70); --duration 1e12s walked sessions for days.
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


@pytest.mark.parametrize("value", [0, 1e-320])
@pytest.mark.parametrize("name", ["demand_static", "demand_dynamic", "llc_ref_mib"])
def test_a_calibration_with_a_zero_divisor_is_refused_by_name(
    tmp_path: Path, name: str, value: float
) -> None:
    # 0 passed the file's bounds and was a ZeroDivisionError or an overflow later: exit 70;
    # 1e-320 passed "positive" and overflowed the interval's exp.
    import json

    from typer.testing import CliRunner

    from shrink.cli import app

    spec = str(Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml")
    cal = tmp_path / "cal.json"
    assert CliRunner().invoke(app, ["calibrate", "-o", str(cal)]).exit_code == 0
    doc = json.loads(cal.read_text())
    doc["physics"][name] = value
    cal.write_text(json.dumps(doc))
    args = ["whatif", "--machine", spec, "--workload", "support", "--no-sweep"]
    r = CliRunner().invoke(app, [*args, "--calibration", str(cal)])
    assert r.exit_code == 1, r.output
    assert f"cal.json: physics.{name}: Input should be greater than or equal to" in r.output


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
    from shrink.measure import sweep
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]})
    with pytest.raises(ParameterError, match=r"reps == 1001, must be in \[1, 1000\]"):
        sweep(object(), trace, [1.0], reps=1001)  # type: ignore[arg-type]


def test_an_open_loop_rate_too_large_to_hold_is_refused_before_drawing() -> None:
    # replay --rate 1e12 --duration 1s asked numpy for 7 TiB of times: a MemoryError, exit 70.
    from shrink.schedule import open_loop_trace

    # replay --rate 1e-30 --duration 10s sent one request at t = 0 as if that were the rate.
    for rate, duration in ((1e12, 1.0), (1e300, 1e10), (1e-30, 10.0), (0.05, 10.0)):
        for arrival in ("constant", "poisson"):
            with pytest.raises(ParameterError, match=r"requests; a run needs one at least and "
                               r"holds 50,000,000 at most"):  # fmt: skip
                open_loop_trace("/x", rate, duration, arrival=arrival)
    assert len(open_loop_trace("/x", 1000.0, 2.0)) == 2000
    assert len(open_loop_trace("/x", 0.1, 10.0)) == 1
