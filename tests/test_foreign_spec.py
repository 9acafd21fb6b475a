"""predict --target testbed --machine SPEC measures this machine's CPUs: a spec of other
CPUs (many more than this machine has) was reported as measured, without a word; a spec
of these same CPUs that models sockets this machine lacks is a model of it, unwarned."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import ShrinkError
from shrink.topology import format_cpulist, online_cpus
from tests.conftest import ROOT

pytestmark = pytest.mark.compute

NEHALEM = ROOT / "examples" / "machines" / "nehalem-2s.toml"


def _predict(tmp_path, monkeypatch, machine: str) -> str:
    """predict's stderr up to the point its runs would start (stopped there)."""
    from shrink.trace import Trace

    def stop(*a, **kw):
        raise ShrinkError("stopped before any run (the test)")

    monkeypatch.setattr("shrink.pipeline.run_predict", stop)
    trace = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1], "t": [0.0], "path": ["/a"]}).write_parquet(trace)
    (tmp_path / "docroot").mkdir()
    r = CliRunner().invoke(
        app,
        ["predict", str(trace), "--target", "testbed", "--machine", machine, "--docroot",
         str(tmp_path / "docroot"), "-o", str(tmp_path / "out")],
    )  # fmt: skip
    assert "stopped before any run" in r.stderr, r.output
    return " ".join(r.stderr.split())


def _two_sockets_of_these_cpus(tmp_path) -> str:
    """A spec that models this machine's online CPUs as two sockets (the demo's kind)."""
    cpus = list(online_cpus())
    if len(cpus) < 2:
        pytest.skip("one CPU: no two sockets to model")
    half = len(cpus) // 2
    spec = tmp_path / "two.toml"
    spec.write_text(
        f'name = "two"\nsockets = 2\ncores_per_socket = {half}\nthreads_per_core = 1\n'
        f"llc_mib = 8.0\nghz = 2.0\ncpus = [{cpus[:half]}, {cpus[half : 2 * half]}]\n"
    )
    return str(spec) if len(cpus) == 2 * half else pytest.skip("an odd number of CPUs")


def test_a_spec_of_other_cpus_is_warned_of(tmp_path, monkeypatch):
    err = _predict(tmp_path, monkeypatch, str(NEHALEM))
    here = format_cpulist(online_cpus())
    assert f"warning: {NEHALEM} models CPUs 0-7, but this machine's online CPUs are {here}" in err
    assert err.count("models CPUs") == 1


def test_a_spec_modelling_sockets_of_these_cpus_is_not_warned_of(tmp_path, monkeypatch):
    assert "models CPUs" not in _predict(
        tmp_path, monkeypatch, _two_sockets_of_these_cpus(tmp_path)
    )


def test_this_machine_is_not_warned_of(tmp_path, monkeypatch):
    assert "models CPUs" not in _predict(tmp_path, monkeypatch, "this")
