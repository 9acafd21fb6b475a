"""Other work on the share's CPUs while a sweep measures (a CPU hog there, another load
on the same server): the level measured a server sharing its CPUs, and says so."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from helpers.fake_targets import live_target, steady_trace
from helpers.resolver import localhost_resolves
from test_testbed_watch import _answering, _state
from typer.testing import CliRunner

from shrink.cli import app
from shrink.cli.sweep_cmd import _print_sweep
from shrink.measure import sweep
from shrink.procfs import proc_info
from shrink.replay import window_sampler


def _snapshots(values):
    it = iter(values)
    return lambda *a, **k: next(it)


def test_a_hog_on_the_share_cpus_is_other_work_in_the_curve(monkeypatch, capsys, tmp_path):
    """`taskset -c 1 sh -c 'while :; do :; done'` beside `shrink sweep` on a testbed on
    CPU 1: the levels read util 100% (the hog's time counted as the server's), throughput
    down by a third, nothing flagged, exit 0; the curve held no other work at all."""
    share = sorted(os.sched_getaffinity(0))[-1]
    # The window's edges, per level: the share CPU 95% busy, the server's own 0.2 CPUs.
    monkeypatch.setattr(
        window_sampler, "cpu_times", _snapshots([{share: (0, 100)}, {share: (95, 200)}])
    )
    monkeypatch.setattr(
        window_sampler, "steal_times", _snapshots([{share: (0, 100)}, {share: (0, 200)}])
    )
    monkeypatch.setattr(window_sampler, "cpu_seconds", _snapshots([10.0, 10.4]))
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = live_target(_state(srv.pid), _answering(200))
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


def _client(port: int, idle: bool = False) -> int:
    """Another process, not this one's child, holding a connection to 127.0.0.1:``port``
    and sending on it every 20 ms (a second sweep), or (``idle``) only holding it open
    (a browser's kept alive); its PID."""
    code = (
        "import os, socket, sys, time\n"
        "if os.fork(): os._exit(0)\n"
        f"s = socket.create_connection(('127.0.0.1', {port}))\n"
        "print(os.getpid(), flush=True)\n"
        "os.close(1)\n"
        + ("time.sleep(60)\n" if idle else
           "for _ in range(3000):\n    s.send(b'GET / HTTP/1.1\\r\\n\\r\\n'); time.sleep(0.02)\n")
    )  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    return int(out)


def test_another_load_on_the_server_stops_the_level():
    """Two `shrink sweep`s (or a sweep and a `replay`) on one testbed at once: each level
    measured a mix of both loads (throughput halved, mean 200 ms against 4 ms), each curve
    filed as its own, exit 0."""
    import socket

    from shrink.errors import TestbedError
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement

    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    own = socket.create_connection(("127.0.0.1", port))  # this run's own: not another's
    other = _client(port)  # not a child of this process, as a second sweep is not
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cpus = sorted(os.sched_getaffinity(0))
        target = LiveTarget(
            [("127.0.0.1", port)], state=_state(srv.pid), share_cpus=cpus[-1:],
            generator=GeneratorPlacement(tuple(cpus[:1]), True, engine=_answering(200)),
            idle_bound=0.1,
        )  # fmt: skip
        want = (
            f"the server under test was loaded by another client too: connections to "
            f"127.0.0.1:{port} that this run does not hold, 1 of PID {other} "
        )
        try:
            target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0)
        except TestbedError as exc:
            assert want in str(exc) and "measure with one load at a time" in str(exc)
        else:
            raise AssertionError("a level beside another load was kept")
        os.kill(other, 9)
        while os.path.exists(f"/proc/{other}"):
            time.sleep(0.01)
        # alone again: the level is kept
        assert len(target.run(steady_trace(), rate_factor=1.0, warmup=0.0, duration=2.0).runlog)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(other, 9)
        srv.kill()
        srv.wait()
        own.close()
        lsock.close()


def test_foreign_clients_are_told_from_this_runs_own():
    """This process's connections (and its children's) are the run's; the server's own
    processes (``skip``: a PHP page that calls the server back) are not another load."""
    import socket

    from shrink.replay.clients import foreign_clients

    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    own = socket.create_connection(("127.0.0.1", port))
    other = _client(port)
    try:
        assert foreign_clients([("127.0.0.1", port)]) == {other: 1}
        if localhost_resolves():  # a chroot may have no /etc/hosts
            assert foreign_clients([("localhost", port)], skip=[other]) == {}
        assert foreign_clients([("127.0.0.1", port)], skip=[other]) == {}
    finally:
        os.kill(other, 9)
        own.close()
        lsock.close()


def test_a_corunner_shares_spinner_is_not_other_work(monkeypatch, capsys):
    """`testbed up --share 1@50% --enforce corunner`, then `sweep`: every level said
    "OTHER WORK 100% of a share CPU" and the sweep warned to stop what else ran there,
    of the share's own SCHED_FIFO spinner, which takes half of the CPU by design."""
    share = sorted(os.sched_getaffinity(0))[-1]
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    spin = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = _state(srv.pid, pids=[srv.pid])
        start = proc_info(spin.pid).starttime
        state["replicas"][0]["enforce"] = {
            "mechanism": "corunner", "cpu_fraction": 0.5, "cpus": [share], "period_us": 1000,
            "spin_us": 500, "helper": "c",
            "spinners": {str(spin.pid): start},
        }  # fmt: skip
        # Over the 2 s window: the share CPU 95% busy, the server 0.45 CPUs, the spinner 0.5.
        seconds = {srv.pid: [10.0, 10.9], spin.pid: [20.0, 21.0]}
        monkeypatch.setattr(
            window_sampler, "cpu_times", _snapshots([{share: (0, 100)}, {share: (95, 200)}])
        )
        monkeypatch.setattr(
            window_sampler, "steal_times", _snapshots([{share: (0, 100)}, {share: (0, 200)}])
        )
        monkeypatch.setattr(
            window_sampler,
            "cpu_seconds",
            lambda pids: sum(seconds[p].pop(0) for p in pids if p in seconds),
        )
        monkeypatch.setattr("shrink.testbed.watch._spinner_problems", lambda *a: [])
        target = live_target(state, _answering(200))
        curve = sweep(target, steady_trace(), [1.0], reps=1, warmup=0.0, duration=2.0)
    finally:
        for p in (srv, spin):
            p.kill()
            p.wait()
    rep = curve.levels[0].reps[0]
    assert rep.other_cpu is not None and abs(rep.other_cpu) < 1e-9  # before: 0.5
    _print_sweep(curve, "rate_factor", Path("c.json"), [], False)
    out, err = capsys.readouterr()
    assert "OTHER WORK" not in out and "other work" not in err


def test_a_connection_kept_alive_and_idle_is_no_other_load():
    """A browser's connection to the testbed's page, kept alive and idle, stopped every
    level as "loaded by another client"; a connection that moves bytes between the
    looks is one."""
    import socket

    from shrink.replay.clients import ClientSampler

    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    idle = _client(port, idle=True)
    try:
        sampler = ClientSampler([("127.0.0.1", port)])
        for _ in range(3):
            sampler.look()
            time.sleep(0.1)
        assert sampler.problem() is None, sampler.looks
        busy = _client(port)
        try:
            for _ in range(3):
                sampler.look()
                time.sleep(0.1)
            problem = sampler.problem() or ""
            assert f"1 of PID {busy} " in problem and f"PID {idle} " not in problem
        finally:
            os.kill(busy, 9)
    finally:
        os.kill(idle, 9)
        lsock.close()
