"""Inputs that crashed with exit 70 (a bug): now one line, exit 1 for bad input or 2
for a bad option."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import RecipeError
from shrink.testbed.command import CommandRecipe

RUN = CliRunner().invoke


def test_a_deeply_nested_recipe_is_one_line_naming_the_file(tmp_path):
    f = tmp_path / "deep.toml"
    f.write_text('commands = [["srv"]]\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(RecipeError) as err:
        CommandRecipe.read(f)
    assert str(err.value).startswith(f"recipe {f}: ") and "\n" not in str(err.value)


def test_a_deeply_nested_recipe_through_the_cli_exits_1(tmp_path):
    f = tmp_path / "deep.toml"
    f.write_text("x = " + "{a = " * 50_000 + "1" + "}" * 50_000 + "\n")
    r = RUN(app, ["testbed", "up", "--docroot", str(tmp_path), "--server", str(f), "--state",
                  str(tmp_path / "s.json")])  # fmt: skip
    assert r.exit_code == 1, r.output
    assert str(f) in r.output and "internal error" not in r.output


@pytest.mark.parametrize(
    "line",
    ["start_timeout = " + "9" * 400, "start_timeout = inf", "workers_per_core = " + "9" * 400],
)
def test_a_recipe_number_past_its_bound_is_one_line(tmp_path, line):
    f = tmp_path / "big.toml"
    f.write_text('commands = [["srv"]]\n' + line + "\n")
    with pytest.raises(RecipeError, match="must be") as err:
        CommandRecipe.read(f)
    assert len(str(err.value)) < 200


def test_whatif_on_a_machine_with_thousands_of_cores(tmp_path):
    n = 256  # every mapping's MAT is 0 there: the comparison divided by it
    cpus = f"[{list(range(n))}, {list(range(n, 2 * n))}]"
    spec = tmp_path / "big.toml"
    spec.write_text(
        f'name = "big"\nsockets = 2\ncores_per_socket = {n}\nthreads_per_core = 1\n'
        f"llc_mib = 12.0\nghz = 2.8\ncpus = {cpus}\n"
    )
    r = RUN(app, ["whatif", "--machine", str(spec), "--workload", "tcp",
                  "--calibration", "published"])  # fmt: skip
    assert r.exit_code == 0, r.output
    # MAT 0 everywhere is the USL's retrograde region: no mapping is recommended, and
    # the output says the machine is past the calibration's scalability peak.
    assert "reason: no recommendation: no mapping meets the mean threshold" in r.output
    assert "256 cores a socket is past the calibration's scalability peak" in r.output
    assert "<- recommended" not in r.output


def test_whatif_past_the_peak_tells_cores_from_hardware_threads(tmp_path):
    # 32 cores x 2 threads read "64 cores a socket": the law counts threads, not cores.
    cpus = f"[{list(range(64))}, {list(range(64, 128))}]"
    spec = tmp_path / "smt.toml"
    spec.write_text(
        'name = "smt"\nsockets = 2\ncores_per_socket = 32\nthreads_per_core = 2\n'
        f"llc_mib = 12.0\nghz = 2.8\ncpus = {cpus}\n"
    )
    args = ["whatif", "--machine", str(spec), "--workload", "tcp", "--no-sweep"]
    r = RUN(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "64 cores" not in text, text
    assert "64 hardware threads a socket (32 cores x 2 threads;" in text, text
    usl = json.loads(RUN(app, [*args, "--json"]).stdout)["usl"]
    assert (usl["cores_per_socket"], usl["threads_per_core"], usl["cpus_per_socket"]) == (32, 2, 64)


def test_whatif_within_the_scalability_peak_says_nothing_of_it():
    from pathlib import Path

    spec = Path(__file__).resolve().parent.parent / "examples/machines/nehalem-2s.toml"
    r = RUN(app, ["whatif", "--machine", str(spec), "--workload", "tcp", "--no-sweep", "--json"])
    assert r.exit_code == 0, r.output
    import json

    usl = json.loads(r.stdout)["usl"]
    assert usl["cores_per_socket"] == 4 and usl["past_peak"] is False
    assert usl["cpus_per_socket"] == 4 and usl["threads_per_core"] == 1
    assert 5 < usl["peak_cpus_per_socket"]["static"] < 20  # sqrt((1 - sigma) / kappa)
    plain = RUN(app, ["whatif", "--machine", str(spec), "--workload", "tcp", "--no-sweep"])
    assert "scalability peak" not in plain.output and "<- recommended" in plain.output


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_metrics_port_out_of_range_is_a_usage_error(tmp_path, port):
    out = str(tmp_path / "c.json")
    r = RUN(app, ["sweep", str(tmp_path / "t.parquet"), "--target", "http://127.0.0.1:9",
                  "--levels", "1", "-o", out, "--metrics-port", port])  # fmt: skip
    assert r.exit_code == 2 and "--metrics-port" in r.output, r.output


def test_a_metrics_port_in_use_is_named():
    from shrink.errors import ParameterError
    from shrink.export.metrics import MetricsServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ParameterError, match=f"127.0.0.1:{port} .*Address already in use"):
            MetricsServer([], port)


def test_sweep_refuses_a_metrics_port_in_use_as_a_usage_error(tmp_path):
    """A --metrics-port another program listens on (a second sweep's) exited 1, where an
    option's value refused before anything runs exits 2 naming it (semantics.md)."""
    from shrink.trace import Trace

    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        trace
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        r = RUN(app, ["sweep", str(trace), "--target", "http://127.0.0.1:9", "--levels", "1",
                      "-o", str(tmp_path / "c.json"), "--metrics-port", port])  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "--metrics-port" in r.output and "Address already in use" in r.output, r.output
    assert not (tmp_path / "c.json").exists()
