"""A curve's target record is free-form (``meta.target``): the CPUs it names are read
only where they are a list of CPU numbers."""

from __future__ import annotations

import json

import pytest
from helpers import fuzz_more
from helpers.fuzzing import _curve
from typer.testing import CliRunner

from shrink.cli import app
from shrink.loadcurve import LoadCurve
from shrink.validate import _other_cpu

ODD = [5, "ab", True, [None, 1], ["a", 1], [1.5], [-1], {"k": 1}]


@pytest.mark.compute
@pytest.mark.parametrize("cpus", ODD, ids=repr)
def test_mat_on_a_curve_naming_odd_share_cpus_warns_without_naming_them(tmp_path, cpus):
    """``mat`` on a curve with other work on its levels: a ``share_cpus`` that is not a
    list of CPUs (an edited or damaged file) was a TypeError traceback after the MAT."""
    d = json.loads(fuzz_more.curve_variant(_curve()))
    d["meta"]["target"]["share_cpus"] = cpus
    (path := tmp_path / "c.json").write_text(json.dumps(d))
    r = CliRunner().invoke(app, ["mat", str(path), "--threshold", "2ms"])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "internal error" not in r.output
    assert "warning: other work (not the server's processes) took up to 40% of a CPU on " \
        "the share's CPUs at 3 levels" in r.output  # fmt: skip


@pytest.mark.compute
def test_the_share_cpus_a_curve_records_are_still_named(tmp_path):
    (path := tmp_path / "c.json").write_bytes(fuzz_more.curve_variant(_curve()))
    r = CliRunner().invoke(app, ["mat", str(path), "--threshold", "2ms"])
    assert r.exit_code == 0, r.output
    assert "on the share's CPUs (1-2) at 3 levels" in r.output


@pytest.mark.compute
@pytest.mark.parametrize("cpus", [*ODD, [{"a": 1}]], ids=repr)
def test_validate_reads_odd_generator_cpus_as_none(cpus):
    """validate's other work on the full side: a ``generator_cpus`` that is not a list
    of CPUs was a TypeError (an int, a bool) or unhashable (a list of objects)."""
    d = json.loads(fuzz_more.curve_variant(_curve()))
    d["meta"]["target"]["generator_cpus"] = cpus
    assert _other_cpu(LoadCurve.from_dict(d)) == pytest.approx(0.4)


@pytest.mark.compute
def test_recorded_cpus():
    from shrink.topology import recorded_cpus

    assert recorded_cpus([0, 3, 2]) == (0, 3, 2)
    assert recorded_cpus((1,)) == (1,)
    assert all(recorded_cpus(x) == () for x in [*ODD, None, [], [8192]])
