"""More hostile option values: each is refused before anything runs, in one line naming
the option (exit 2), never an internal error (exit 70) or a value taken silently."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import shrink
from shrink.cli import app
from shrink.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"


def _run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, " ".join(r.output.split())


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    out = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        out
    )
    return out


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("127.0.0.1:65536", "Port out of range"),
        ("127.0.0.1:http", "could not be cast to integer"),
        ("127.0.0.1:-1", "could not be cast to integer"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("127.0.0.1:0", "port 0 is no server's"),
        (f"sim:{SPEC}", "the simulator is not a running server"),
        # a path, query or user part was dropped without a word (/x went to /x, not /app/x)
        ("http://127.0.0.1:1/app/", "its path, query or user part would not be used"),
        ("http://127.0.0.1:1/?k=1", "its path, query or user part would not be used"),
        ("http://u:p@127.0.0.1:1/", "its path, query or user part would not be used"),
    ],
)
@pytest.mark.parametrize("command", ["replay", "sweep", "mat"])
def test_a_target_url_no_server_has_is_refused_by_the_option(
    tmp_path: Path, trace_file: Path, command: str, url: str, shown: str
) -> None:
    # urllib's ValueError on a bad port reached the user as exit 70; port 0 ran a whole
    # replay of connection failures; predict's sim:SPEC.toml read as host "sim".
    out = str(tmp_path / "out")
    args = {
        "replay": ["replay", str(trace_file), "-o", out + ".parquet", "--duration", "1s"],
        "sweep": ["sweep", str(trace_file), "--levels", "1", "-o", out + ".json"],
        "mat": ["mat", str(tmp_path / "c.json"), "--threshold", "5ms", "--adaptive"],
    }[command]
    if command == "mat":
        from helpers.curves import half_share_curve

        from shrink.machine import Machine

        half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1).write_json(
            tmp_path / "c.json"
        )
        args += ["--trace", str(trace_file)]
    code, text = _run(*args, "--target", url)
    assert code == 2 and "--target: url ==" in text and shown in text, text
    assert not Path(out + ".parquet").exists() and not Path(out + ".json").exists()


@pytest.mark.parametrize("value", ["0", "-1", "1001"])
@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_engine_processes_out_of_range_are_refused_by_the_option(
    tmp_path: Path, trace_file: Path, command: str, value: str
) -> None:
    # -1 was refused as "parts == -1" once the sweep had started its first level; 0 ran.
    args = {
        "replay": ["replay", str(trace_file), "-o", str(tmp_path / "r.parquet")],
        "sweep": ["sweep", str(trace_file), "--levels", "1", "-o", str(tmp_path / "s.json")],
    }[command]
    code, text = _run(*args, "--target", "127.0.0.1:1", "--processes", value)
    assert code == 2 and "invalid value for '--processes'" in text, text


@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [
        ("--generator-cpus", "0-", "must look like 0-3,8,10-11"),
        ("--server-cpus", "1-0", "range 1-0 runs backwards"),
    ],
)
def test_predict_names_a_malformed_cpu_list_option(
    tmp_path: Path, trace_file: Path, option: str, value: str, shown: str
) -> None:
    # The as_option guard took only ParameterError: the TopologyError was exit 1, unnamed.
    # On the testbed (on the simulator --server-cpus is refused as the testbed's): the
    # list is refused before anything starts.
    args = ["predict", str(trace_file), "-o", str(tmp_path / "p"), "--machine", str(SPEC)]
    code, text = _run(*args, "--target", "testbed", option, value)
    assert code == 2 and f"error: {option}: CPU list == '{value}'" in text and shown in text, text
    assert not (tmp_path / "p" / "prediction.json").exists()


def test_replay_names_a_malformed_generator_cpu_list(tmp_path: Path, trace_file: Path) -> None:
    args = ["replay", str(trace_file), "-o", str(tmp_path / "r.parquet"), "--target", "127.0.0.1:1"]
    code, text = _run(*args, "--generator-cpus", "0-")
    assert code == 2 and "error: --generator-cpus: CPU list == '0-'" in text, text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("llc_mb = 12.0\n", "['llc_mb']"),
        ("threads_per_cores = 2\n", "['threads_per_cores']"),
        ("[nic]\nports = 1\nqueues = 4\n", "['nic.queues']"),
    ],
)
def test_a_machine_spec_key_it_does_not_know_is_named(
    tmp_path: Path, text: str, shown: str
) -> None:
    # A misspelt key was dropped: llc_mb = 12 left the cache unknown (0), and the spec
    # was read and used as if it said nothing.
    spec = tmp_path / "m.toml"
    spec.write_text('name = "m"\nsockets = 1\ncores_per_socket = 2\n' + text)
    code, out = _run("machine", "show", "--machine", str(spec))
    assert code == 1 and f"error: {spec}: unknown key(s) {shown} in a machine spec" in out, out
    spec.write_text('name = "m"\nsockets = 1\ncores_per_socket = 2\n[extra]\nnote = "x"\n')
    assert _run("machine", "show", "--machine", str(spec))[0] == 0


def test_an_ingest_that_reads_no_request_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    # A pcap read as clf skipped every line and wrote an empty trace with exit 0; the
    # error came only at the sweep ("the trace spans 0.0 s").
    log = tmp_path / "blank.log"
    log.write_text("not a log line\n\n")
    out = tmp_path / "t.parquet"
    code, text = _run("ingest", str(log), "-o", str(out), "-f", "clf")
    assert code == 1 and f"error: {log}: no request read" in text and "2 lines" in text, text
    assert not out.exists()
    pcap = ROOT / "examples" / "traces" / "support.pcap"
    code, text = _run("ingest", str(pcap), "-o", str(out), "-f", "clf")
    assert code == 1 and f"error: {pcap}: no request read" in text and not out.exists(), text


@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [
        ("--cgroups", "maybe", "error: --cgroups: 'maybe'; accepted: auto, yes, no"),
        ("--php-children-per-core", "0", "invalid value for '--php-children-per-core'"),
        ("--php-children-per-core", "100000000", "invalid value for '--php-children-per-core'"),
    ],
)
def test_testbed_up_refuses_a_pool_or_cgroups_value_before_starting(
    tmp_path: Path, option: str, value: str, shown: str
) -> None:
    # --cgroups maybe ran as "no"; 100,000,000 PHP children per core went into the
    # server's config (0 and -1 too), where the recipe file's workers stop at 1024.
    state = tmp_path / "state.json"
    args = ["testbed", "up", "--docroot", str(tmp_path), "--state", str(state), option, value]
    code, text = _run(*args)
    assert code == 2 and shown in text, text
    assert not state.exists()


@pytest.fixture(scope="module")
def sim_prediction(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A prediction made on the simulator, and a full-scale curve for it."""
    d = tmp_path_factory.mktemp("pred")
    trace = d / "t.parquet"
    r = CliRunner().invoke(
        app, ["synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", str(trace)]
    )
    assert r.exit_code == 0, r.output
    args = ["predict", str(trace), "-o", str(d / "p"), "--machine", str(SPEC)]
    args += ["--target", f"sim:{SPEC}", "--duration", "1s", "--warmup", "0s", "--reps", "1"]
    r = CliRunner().invoke(app, [*args, "--max-levels", "3", "--mappings", "1-replica"])
    assert r.exit_code in (0, 99), r.output
    full = d / "full.json"
    args = ["sim", "sweep", str(trace), "--machine", str(SPEC), "-o", str(full)]
    r = CliRunner().invoke(
        app, [*args, "--levels", "1,2", "--reps", "1", "--warmup", "0s", "--duration", "1s"]
    )
    assert r.exit_code == 0, r.output
    return d / "p" / "prediction.json", full


@pytest.mark.parametrize(
    ("option", "value"),
    [("--trace", "t.parquet"), ("--cluster", "ray:auto"), ("--generators", "3")],
)
def test_validate_refuses_a_run_option_when_it_runs_nothing(
    tmp_path: Path, sim_prediction: tuple[Path, Path], option: str, value: str
) -> None:
    # --server was refused so; --trace and --cluster were ignored without a word.
    pred, full = sim_prediction
    out = tmp_path / "v"
    code, text = _run("validate", str(pred), "--full-run", str(full), "-o", str(out), option, value)
    assert code == 2 and f"error: {option}: {value} would set up a full-scale run" in text, text
    assert not (out / "validation.json").exists()


def _edited_prediction(pred: Path, folder: Path, edit: Callable[[dict], object]) -> Path:
    """A copy of ``pred`` in ``folder``, with its curves beside it, as ``edit`` left it."""
    for name in ("predicted-curve.json", "measured-curve.json"):
        shutil.copy(pred.parent / name, folder / name)
    doc = json.loads(pred.read_text())
    edit(doc)
    out = folder / "prediction.json"
    out.write_text(json.dumps(doc))
    return out


def test_validate_refuses_a_prediction_without_thresholds(
    tmp_path: Path, sim_prediction: tuple[Path, Path]
) -> None:
    # It compared no MAT, wrote an empty validation.json and exited 0.
    pred, full = sim_prediction
    bare = _edited_prediction(pred, tmp_path, lambda doc: doc.update(thresholds={}))
    code, text = _run("validate", str(bare), "--full-run", str(full))
    assert code == 1 and f"error: {bare}: prediction has no thresholds" in text, text
    assert not (tmp_path / "validation.json").exists()


def test_validate_prints_a_prediction_whose_mat_is_nan(
    tmp_path: Path, sim_prediction: tuple[Path, Path]
) -> None:
    # A MAT may be NaN (written as NaN, read back as such): its error is null, and the
    # summary multiplied it by 100 (TypeError, exit 70).
    pred, full = sim_prediction

    def nan_mat(doc: dict) -> None:
        doc["mappings"]["1-replica"]["mean"]["mat"] = float("nan")

    edited = _edited_prediction(pred, tmp_path, nan_mat)
    code, text = _run("validate", str(edited), "--full-run", str(full))
    assert code in (0, 99) and "internal error" not in text, text
    assert "error n/a" in text, text
    # Its provenance names the shrink that wrote it, as every result file's does.
    meta = json.loads((tmp_path / "validation.json").read_text())["meta"]
    assert meta["shrink_version"] == shrink.__version__ and meta["mapping"] == "1-replica"


@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [
        ("--rel-width", "nan", "rel width == nan, must be finite"),
        ("--rel-width", "-1", "rel width == -1, must be in (0, inf)"),
        ("--max-levels", "0", "max levels == 0, must be in [1, 1000]"),
        ("--max-levels", "-1", "max levels == -1, must be in [1, 1000]"),
    ],
)
def test_mat_refuses_an_adaptive_bound_that_cannot_stop_or_add(
    tmp_path: Path, option: str, value: str, shown: str
) -> None:
    # nan never reads as narrow (every level was run); -1 levels added none, silently.
    from helpers.curves import half_share_curve

    from shrink.machine import Machine

    curve = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1)
    src = curve.write_json(tmp_path / "c.json")
    code, text = _run("mat", str(src), "--threshold", "5ms", option, value)
    assert code == 2 and f"error: {option}: {shown}" in text, text


@pytest.mark.parametrize("damage", ["no_reps", "no_throughput"])
def test_extrapolate_names_a_curve_with_nothing_to_fit(tmp_path: Path, damage: str) -> None:
    # The fit started from NaN: RuntimeWarnings, then scipy's ValueError (exit 70).
    from helpers.curves import half_share_curve

    from shrink.machine import Machine

    doc = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1).to_dict()
    for lv in doc["levels"]:
        if damage == "no_reps":
            lv["reps"] = []
        for r in lv["reps"]:
            r["throughput"] = None
    src = tmp_path / "c.json"
    src.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["extrapolate", str(src), "--machine", str(SPEC)])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, text
    shown = "error: no level of the curve has a finite throughput and mean latency: nothing to fit"
    assert text == shown, text


def test_extrapolate_names_a_curve_whose_every_throughput_is_zero(tmp_path: Path) -> None:
    # The fit's start divided by the highest throughput: ZeroDivisionError (exit 70).
    from helpers.curves import half_share_curve

    from shrink.machine import Machine

    doc = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1).to_dict()
    for lv in doc["levels"]:
        for r in lv["reps"]:
            r["throughput"] = 0.0
    src = tmp_path / "c.json"
    src.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["extrapolate", str(src), "--machine", str(SPEC)])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, text
    assert text == "error: no level of the curve has a throughput above zero: nothing to fit", text


def test_extrapolate_names_an_alpha_that_scales_past_what_a_curve_holds(tmp_path: Path) -> None:
    # The scaled curve failed its own validation: "levels[0].reps[0].throughput: must
    # be ... (got 3.5e+301)", naming neither the file nor the alpha.
    from helpers.curves import half_share_curve

    from shrink.machine import Machine

    doc = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1).to_dict()
    doc["alpha"] = 1e-300
    # On the whole machine, where the share's fraction does not check alpha.
    doc["share"] = {"kind": "all", "cpus": [], "fraction": 1.0, "text": "all"}
    src = tmp_path / "c.json"
    src.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["extrapolate", str(src), "--machine", str(SPEC)])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, text
    assert text.startswith("error: the curve's alpha 1e-300 scales its throughput to "), text
    assert "Warning" not in text, text


def test_a_control_character_in_a_mapping_name_is_escaped_in_the_figures(
    tmp_path: Path, sim_prediction: tuple[Path, Path]
) -> None:
    # matplotlib warned "Glyph 27 missing from font(s)" on the terminal, with its path.
    import warnings

    pred, full = sim_prediction
    red = {"\x1b[31mred": json.loads(pred.read_text())["mappings"]["1-replica"]}
    edited = _edited_prediction(pred, tmp_path, lambda doc: doc.update(mappings=red))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, text = _run("validate", str(edited), "--full-run", str(full))
    assert code in (0, 99) and "Glyph" not in text and "\x1b" not in text, text


def test_predict_prints_a_machine_name_and_a_folder_escaped(tmp_path: Path) -> None:
    # The summary's table title and its "report:" line printed them raw: an ANSI escape
    # recoloured the terminal, and "[b]" in a folder name was read as rich markup.
    spec = tmp_path / "m.toml"
    spec.write_text(SPEC.read_text().replace('name = "nehalem-2s"', 'name = "\\u001b[31mred"'))
    trace = tmp_path / "t.parquet"
    r = CliRunner().invoke(
        app, ["synth", "tcp", "--rate", "2000", "--duration", "12s", "-o", str(trace)]
    )
    assert r.exit_code == 0, r.output
    out = tmp_path / "o[b]\x1b[32m"
    args = [
        "predict",
        str(trace),
        "-o",
        str(out),
        "--machine",
        str(spec),
        "--target",
        f"sim:{spec}",
    ]
    args += ["--duration", "1s", "--warmup", "0s", "--reps", "1", "--max-levels", "3"]
    r = CliRunner().invoke(app, [*args, "--mappings", "1-replica"])
    assert r.exit_code in (0, 99), r.output
    assert "\x1b" not in r.output, r.output
    # rich folds a line at 80 columns: a longer tmp_path (a user's) splits the folder
    unfolded = "".join(r.output.splitlines())
    assert "of \\x1b[31mred)" in unfolded and "o[b]\\x1b[32m/report." in unfolded, r.output


def test_digits_of_other_scripts_are_not_a_mapping_or_a_cpu() -> None:
    # \d matched "١" (Arabic-Indic one): --mapping ١-replica ran and was reported under
    # that name, and a CPU list "١" was CPU 1.
    from shrink.errors import TopologyError
    from shrink.topology import parse_cpulist

    curve = ROOT / "tests" / "no-such-curve.json"  # refused before it is read
    code, text = _run("extrapolate", str(curve), "--machine", str(SPEC), "--mapping", "١-replica")
    assert code == 2 and "--mapping: unknown mapping '١-replica'" in text, text
    with pytest.raises(TopologyError, match="must look like"):
        parse_cpulist("١")
    assert parse_cpulist("0-1,3") == (0, 1, 3)


@pytest.mark.parametrize(
    ("cores", "shown"),
    [("0", "a core count must be at least 1"), ("-1", "at least 1"), ("1,2,1", "names 1 twice")],
)
def test_sim_scaling_names_a_core_count_that_cannot_run(cores: str, shown: str) -> None:
    # 0 and -1 were blamed on --mapping ("needs at least 1 cores"); 1,1 was taken silently.
    code, text = _run("sim", "scaling", "--machine", str(SPEC), "--cores", cores)
    assert code == 2 and f"error: --cores: '{cores}'" in text and shown in text, text


@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [
        ("--machine", "OTHER", "is not the simulated machine"),
        ("--server-cpus", "0-3", "is the testbed's"),
        ("--docroot", ".", "is the testbed's"),
    ],
)
def test_predict_on_the_simulator_refuses_a_testbed_option(
    tmp_path: Path, trace_file: Path, option: str, value: str, shown: str
) -> None:
    # Each was ignored: --machine other.toml predicted the sim spec's machine, and
    # --server-cpus 99 (a CPU the machine lacks) passed without a word.
    if value == "OTHER":
        value = str(ROOT / "examples" / "machines" / "xeon-2s-8c.toml")
    out = tmp_path / "p"
    args = ["predict", str(trace_file), "-o", str(out), "--target", f"sim:{SPEC}"]
    code, text = _run(*args, option, value)
    assert code == 2 and f"error: {option}: " in text and shown in text, text
    assert not out.exists()
    code, text = _run("predict", str(trace_file), "-o", str(out), "--target", "sim:")
    assert code == 2 and "'sim:' names no spec" in text, text


def test_predict_on_the_simulator_takes_its_own_spec_as_the_machine(
    tmp_path: Path, trace_file: Path
) -> None:
    args = ["predict", str(trace_file), "-o", str(tmp_path / "p"), "--target", f"sim:{SPEC}"]
    code, text = _run(*args, "--machine", str(SPEC), "--reps", "0")
    assert code == 2 and "--reps" in text, text  # past the machine check, refused by --reps


@pytest.mark.parametrize("share", ["0-3@", "@", "all@ "])
def test_a_share_with_an_empty_cpu_time_fraction_is_refused(share: str) -> None:
    # Nothing after the '@' ran at full speed, as if no fraction had been asked for.
    from shrink.errors import TopologyError
    from shrink.machine import Machine
    from shrink.share import Share

    m = Machine.read_toml(SPEC)
    with pytest.raises(TopologyError, match=r"quota '' must be a percentage"):
        Share.parse(share, m)
    assert Share.parse("0-3@50%", m).cpu_fraction == 0.5


def test_an_output_that_is_the_input_is_refused_before_it_is_read(
    tmp_path: Path, trace_file: Path
) -> None:
    # sample t.parquet -o t.parquet replaced the trace with its sample; ingest LOG -o LOG
    # replaced the log with Parquet; extrapolate CURVE -o CURVE lost the measured curve.
    before = trace_file.read_bytes()
    link = tmp_path / "link.parquet"
    link.symlink_to(trace_file)
    for args in (
        ["sample", str(trace_file), "--alpha", "0.5", "-o", str(trace_file)],
        ["export", str(trace_file), "-o", str(link)],
        ["sim", "run", str(trace_file), "--machine", str(SPEC), "-o", str(trace_file)],
    ):
        code, text = _run(*args)
        assert code == 2 and "--out: output" in text and "which writing it would destroy" in text
    assert trace_file.read_bytes() == before
    log = tmp_path / "a.log"
    log.write_text('1.2.3.4 - - [01/Aug/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 5\n')
    code, text = _run("ingest", str(log), "-o", str(log))
    assert code == 2 and f"is the input {log}" in text, text
    assert log.read_text().startswith("1.2.3.4")


@pytest.mark.parametrize("value", ["1_0", "\u0661", "0x10", "1e"])
def test_levels_and_params_take_numbers_as_people_write_them(
    tmp_path: Path, trace_file: Path, value: str
) -> None:
    # float() read "1_0" as 10 and "\u0661" (an Arabic-Indic one) as 1: a level or a
    # simulator parameter ran at a value no one wrote.
    out = str(tmp_path / "c.json")
    code, text = _run(
        "sim", "sweep", str(trace_file), "--machine", str(SPEC), "--levels", f"0.5,{value}",
        "-o", out,
    )  # fmt: skip
    assert code == 2 and "--levels" in text and "must be numbers" in text, text
    code, text = _run(
        "sim", "sweep", str(trace_file), "--machine", str(SPEC), "--levels", "1",
        "--param", f"static_base_us={value}", "-o", out,
    )  # fmt: skip
    assert code == 2 and "--param: static_base_us" in text and "must be a number" in text, text
    assert not Path(out).exists()


@pytest.mark.parametrize("command", ["sim", "sweep"])
def test_levels_in_users_are_whole_numbers(tmp_path: Path, trace_file: Path, command: str) -> None:
    # 10.5 users ran as rate factor 10.5 / users and was written as a level of 10.5 users.
    out = tmp_path / "c.json"
    where = {"sim": ["sim", "sweep", "--machine", str(SPEC)],
             "sweep": ["sweep", "--target", "http://127.0.0.1:9"]}[command]  # fmt: skip
    args = [*where, str(trace_file), "--knob", "users", "-o", str(out), "--levels"]
    code, text = _run(*args, "10,10.5")
    assert code == 2, text
    assert "--levels: '10,10.5': with --knob users a level is a number of users" in text
    assert "(10.5 is not)" in text and not out.exists()
    if command == "sim":  # whole, however written, they run
        n = 40
        columns = {"session": list(range(n)), "t": [i / 2 for i in range(n)], "path": ["/a"] * n}
        Trace.from_columns(columns, {"users": 2}).write_parquet(trace_file)
        code, text = _run(*args, "1e0,2", "--reps", "1", "--warmup", "0s", "--duration", "1s")
        assert code == 0, text
        assert [lv["level"] for lv in json.loads(out.read_text())["levels"]] == [1.0, 2.0]


@pytest.mark.parametrize("command", ["sim", "sweep"])
def test_an_unknown_knob_is_refused_by_its_option(
    tmp_path: Path, trace_file: Path, command: str
) -> None:
    # It was "knob == 'user', must be one of ...", exit 1, once the trace was read.
    out = tmp_path / "c.json"
    where = {"sim": ["sim", "sweep", "--machine", str(SPEC)],
             "sweep": ["sweep", "--target", "http://127.0.0.1:9"]}[command]  # fmt: skip
    code, text = _run(*where, str(trace_file), "--knob", "user", "--levels", "1", "-o", str(out))
    assert code == 2 and "--knob: 'user'; accepted: rate_factor, users, rate" in text, text
    assert not out.exists()


_LOG = ROOT / "examples" / "traces" / "support-access.log"
_SESSIONS = ROOT / "tests" / "data" / "wsesslog_all_features.txt"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["ingest", str(_LOG), "--idle-gap", "0"], "--idle-gap: idle_gap == 0, must be"),
        (["ingest", str(_LOG), "--burst-gap", "1h5"], "--burst-gap: burst_gap == '1h5', must"),
        (["ingest", str(_SESSIONS), "--session-rate", "0"], "--session-rate: session_rate == 0,"),
        (["sample", "TRACE", "--alpha", "2"], "--alpha: alpha == 2, must be in (0, 1]"),
        (["sample", "TRACE", "--alpha", ".5", "--level", "stratified", "--column", "x"],
         "--column: column == 'x', must be one of"),
        (["split", "TRACE", "--parts", "0"], "--parts: parts == 0, must be in [1, 1000]"),
        (["sim", "run", "TRACE", "--machine", str(SPEC), "--rate-factor", "0"],
         "--rate-factor: rate factor == 0, must be"),
        (["replay", "TRACE", "--target", "127.0.0.1:1", "--rate-factor", "-1"],
         "--rate-factor: rate factor == -1, must be"),
        (["synth", "support", "--users", "0", "--duration", "9s"], "--users: users == 0, must"),
        (["synth", "support", "--users", "5", "--duration", "9s", "--think-mean", "-1"],
         "--think-mean: think_mean_s == -1, must"),
        (["synth", "support", "--users", "5", "--duration", "9s", "--stagger", "-1"],
         "--stagger: stagger_s == -1, must"),
        (["synth", "tcp", "--rate", "0", "--duration", "9s"], "--rate: rate == 0, must be"),
        (["synth", "tcp", "--rate", "9", "--duration", "9s", "--arrival", "x"],
         "--arrival: arrival == 'x', must be one of constant, poisson"),
    ],
)  # fmt: skip
def test_a_value_checked_under_another_name_is_refused_by_its_option(
    tmp_path: Path, trace_file: Path, args: list[str], shown: str
) -> None:
    # Each said "idle_gap == 0", "think_mean_s == -1" ... (exit 1): a name the user never
    # wrote, for an option the user did.
    out = tmp_path / "out.parquet"
    code, text = _run(*(str(trace_file) if a == "TRACE" else a for a in args), "-o", str(out))
    assert code == 2 and text.startswith(f"error: {shown}"), text
    assert not out.exists()


def test_a_percentile_takes_ascii_digits_only() -> None:
    # \d matched other scripts' digits: "p\u0669\u0669" was p99.
    from shrink.checks import parse_stat
    from shrink.errors import ParameterError

    assert parse_stat("p99") == "p99"
    with pytest.raises(ParameterError, match="must be mean, or a percentile"):
        parse_stat("p\u0669\u0669")


def test_mat_on_a_curve_without_levels_says_so(tmp_path: Path) -> None:
    # It said "the generator fell behind at every level" of a curve that had none.
    from helpers.curves import half_share_curve

    from shrink.machine import Machine

    doc = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1).to_dict()
    doc["levels"] = []
    src = tmp_path / "c.json"
    src.write_text(json.dumps(doc))
    code, text = _run("mat", str(src), "--threshold", "5ms")
    assert code == 1 and "error: load curve has no usable level: it has no level" in text, text


@pytest.mark.parametrize(("key", "value"), [("share_penalty", 1e14), ("llc_exponent", 1e6)])
def test_a_calibration_whose_physics_its_fit_does_not_give_is_refused(
    tmp_path: Path, key: str, value: float
) -> None:
    # The point came from physics, the interval from x: the half-width overflowed
    # math.exp (OverflowError, exit 70).
    from helpers.curves import half_share_curve

    from extrapolate.calibration import fit_published
    from shrink.machine import Machine

    doc = fit_published().to_dict()
    doc["physics"][key] = value
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    curve = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1)
    src = curve.write_json(tmp_path / "c.json")
    code, text = _run("extrapolate", str(src), "--machine", str(SPEC), "--calibration", str(cal))
    assert code == 1 and f"error: {cal}: " in text and f"physics.{key} == {value:g}" in text, text


@pytest.mark.parametrize("where", ["same", "runlog-name", "through-a-symlink"])
def test_sweep_refuses_runlogs_where_its_curve_goes(
    tmp_path: Path, trace_file: Path, where: str
) -> None:
    # `-o c.json --runlogs c.json` and `-o logs/run000-rf1.parquet --runlogs logs` ran
    # every level, then said "another run wrote it while this one ran" of the sweep's own
    # RunLog, and wrote the curve beside it (c.1.json, run000-rf1.1.parquet).
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "alias").symlink_to(logs)  # (the same folder by another name)
    out, runlogs = {
        "same": (tmp_path / "c.json", tmp_path / "c.json"),
        "runlog-name": (logs / "run000-rf1.parquet", logs),
        "through-a-symlink": (tmp_path / "alias" / "run000-rf1.parquet", logs),
    }[where]
    code, text = _run("sweep", str(trace_file), "--levels", "1", "-o", str(out),
                      "--runlogs", str(runlogs), "--target", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2 and text.startswith("error: --runlogs:"), text
    assert not out.exists()


def test_extrapolate_names_the_curve_whose_sample_is_not_its_share(tmp_path: Path) -> None:
    # The tour's sweep (a 25% sample on a 50% share) made such a curve; the refusal
    # said 'error: sample alpha == 0.25 but ...' without the file it was about.
    from helpers.curves import half_share_curve

    from shrink.machine import Machine

    doc = half_share_curve(Machine.read_toml(SPEC), levels=3, reps=1, seed=1).to_dict()
    doc["alpha"] = 0.5 * doc["share"]["fraction"]
    src = tmp_path / "c.json"
    src.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["extrapolate", str(src), "--machine", str(SPEC)])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, text
    assert text.startswith(f"error: {src}: sample alpha == 0.25 but the share's fraction"), text
