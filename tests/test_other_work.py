"""Other work on the share's CPUs while a sweep measures (a CPU hog there, another load
on the same server): the level measured a server sharing its CPUs, and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.fake_targets import steady_trace
from test_testbed_watch import _answering, _live, _state
from typer.testing import CliRunner

from shrink.cli import app
from shrink.cli.sweep_cmd import _print_sweep
from shrink.measure import sweep
from shrink.replay import live


def _snapshots(values):
    it = iter(values)
    return lambda *a, **k: next(it)


def test_a_hog_on_the_share_cpus_is_other_work_in_the_curve(monkeypatch, capsys, tmp_path):
    """`taskset -c 1 sh -c 'while :; do :; done'` beside `shrink sweep` on a testbed on
    CPU 1: the levels read util 100% (the hog's time counted as the server's), throughput
    down by a third, nothing flagged, exit 0; the curve held no other work at all."""
    share = sorted(os.sched_getaffinity(0))[-1]
    # The window's edges, per level: the share CPU 95% busy, the server's own 0.2 CPUs.
    monkeypatch.setattr(live, "cpu_times", _snapshots([{share: (0, 100)}, {share: (95, 200)}]))
    monkeypatch.setattr(live, "steal_times", _snapshots([{share: (0, 100)}, {share: (0, 200)}]))
    monkeypatch.setattr(live, "cpu_seconds", _snapshots([10.0, 10.4]))
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = _live(_state(srv.pid), _answering(200))
        curve = sweep(target, steady_trace(), [1.0], reps=1, warmup=0.0, duration=2.0)
    finally:
        srv.kill()
        srv.wait()
    rep = curve.levels[0].reps[0]
    assert abs(rep.other_cpu - 0.75) < 1e-9
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    out, err = capsys.readouterr()
    assert "OTHER WORK 75% of a share CPU" in out
    assert "other work (not the server's processes) took up to 75% of a CPU" in err
    assert "at 1 level (1)" in err
    # and `mat` of the curve says what its MAT was read from
    curve.write_json(tmp_path / "c.json")
    mat = ["mat", str(tmp_path / "c.json"), "--stat", "mean", "--threshold", "1s"]
    r = CliRunner().invoke(app, mat)
    assert "other work (not the server's processes) took up to 75%" in " ".join(r.output.split())
