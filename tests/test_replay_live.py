"""The engine against real servers: a plain lighttpd, the testbed, and tcpdump as a judge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import require_root, require_tool
from helpers.realtime import RT
from helpers.servers import LIGHTTPD_SHORT_MAX, static_lighttpd, wait_listening
from typer.testing import CliRunner

from shrink.cli import app
from shrink.loadcurve import LoadCurve
from shrink.procfs import steal_times, utilization
from shrink.runlog import RunLog

pytestmark = pytest.mark.live

LIGHTTPD = "/usr/sbin/lighttpd"
# steal during this test's 3 s replays here: 0.3% quiet, 4-12% in runs that still passed
STOLEN = 0.03


@pytest.fixture(scope="module")
def lighttpd(tmp_path_factory) -> int:
    """A plain lighttpd serving a 1 KiB static file, on CPU 1 where there is one."""
    if not Path(LIGHTTPD).exists():
        pytest.skip("lighttpd is not installed (make setup installs it as root)")
    d = tmp_path_factory.mktemp("lighttpd")
    conf, port = static_lighttpd(
        d, max_keep_alive_requests=LIGHTTPD_SHORT_MAX, max_keep_alive_idle=30
    )
    proc = subprocess.Popen([LIGHTTPD, "-D", "-f", str(conf)], stderr=subprocess.DEVNULL)
    try:
        if 1 in os.sched_getaffinity(0):
            os.sched_setaffinity(proc.pid, {1})
        wait_listening(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_replay_cli_against_lighttpd_reports_the_contract(lighttpd, tmp_path):
    out = tmp_path / "run.parquet"
    r = CliRunner().invoke(
        app,
        ["replay", "--rate", "300", "--duration", "1.5s", "--path", "/static/file1k.bin",
         "--target", f"http://127.0.0.1:{lighttpd}", "-o", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for key in ("intended_rate", "achieved_rate", "generator_behind", "latency"):
        assert key in d
    assert set(d["latency"]) >= {"mean", "p50", "p90", "p99", "p999"}
    assert d["intended_rate"] == pytest.approx(300, rel=0.02)
    log = RunLog.read_parquet(out)
    assert list(log.table.column_names[:10]) == [
        "intended", "sent", "first_byte", "done", "status", "bytes", "cls", "session",
        "target", "error",
    ]  # fmt: skip
    assert len(log) == 450 and log.ok_mask().all()
    assert set(log.column("status")) == {200} and set(log.column("bytes")) == {1024}
    assert np.all(log.column("first_byte") <= log.column("done"))
    assert np.all(log.column("sent") >= log.column("intended"))


def test_server_killed_mid_run_gives_error_rows(tmp_path):
    """A crashed server is a measurement (errors), not an exception."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    port = int(proc.stdout.readline().split()[2])
    from shrink.replay import LiveTarget, open_loop_trace

    tr = open_loop_trace("/x?bytes=10", 100.0, 3.0)
    target = LiveTarget([("127.0.0.1", port)], config={"timeout": 0.5, "drain": 0.5})
    import threading

    # The kill lands after the run's start-up, whose length varies with the machine's
    # load: what is checked is the order (answers before the kill, errors after), not
    # how many requests the start-up left time for.
    threading.Timer(1.2, proc.kill).start()
    res = target.run(tr, rate_factor=1.0, warmup=0.0, duration=3.0)
    proc.wait()
    err = res.runlog.column("error")
    assert len(res.runlog) == 300
    ok = err == ""
    assert int(np.sum(ok)) > 0 and int(np.sum(~ok)) >= 100
    intended = res.runlog.column("intended")
    # Requests in flight at the kill fail with it; none sent after it is answered.
    assert intended[ok].max() <= intended[~ok].min() + 0.1
    assert set(err[err != ""]) <= {"refused", "reset", "closed", "cut", "timeout"}


def _testbed(tmp_path: Path) -> tuple[Path, Path]:
    """A light Support-like trace and its docroot served by a 1-core testbed (CPU 1)."""
    require_tool("php-cgi")
    if len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0):
        pytest.skip("needs CPU 1 for the server and another CPU for the generator")
    runner = CliRunner()
    trace, doc, state = tmp_path / "support.parquet", tmp_path / "doc", tmp_path / "tb.json"
    r = runner.invoke(
        app,
        ["synth", "support", "--users", "100", "--duration", "60s", "-o", str(trace),
         "--docroot", str(doc), "--dynamic-work-us", "400", "--dynamic-mem-kib", "128",
         "--max-download-bytes", "100000", "--think-mean", "2", "--seed", "3"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["testbed", "up", "--machine", "this", "--share", "1", "--docroot", str(doc),
         "--state", str(state), "--port", "0"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    return trace, state


def _sweep(
    runner: CliRunner, trace: Path, state: Path, levels: list[int], out: Path, reps: int = 2
) -> None:
    r = runner.invoke(
        app,
        ["sweep", str(trace), "--target", str(state), "--knob", "users",
         "--levels", ",".join(map(str, levels)), "--warmup", "1s", "--duration", "3s",
         "--reps", str(reps), "--lag-limit", "50ms", "-o", str(out), "--json",
         "--realtime", str(RT)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output


def _busy_users(runner: CliRunner, trace: Path, state: Path, out: Path) -> int:
    """Users that keep the 1-core share about 85% busy on this machine.

    A fixed level is not busy everywhere: 1,400 users kept an earlier machine 73% busy
    and this kind of machine 44% busy, where the light levels' order is noise. So the
    share's busy fraction at 400 users sets the level (busy fraction is linear in users
    until the core saturates; a saturated calibration only lowers the level, which
    still queues). One repetition: only the first's busy fraction is read."""
    _sweep(runner, trace, state, [400], out, reps=1)
    busy = LoadCurve.read_json(out).levels[0].reps[0].utilization
    assert busy is not None and busy > 0
    return round(400 * 0.85 / busy)


def test_sweep_of_support_on_the_1_core_testbed_gives_a_curve_and_mats(tmp_path):
    """The CI sweep: a synthetic Support trace, three load levels, MAT for mean and p99.9."""
    trace, state = _testbed(tmp_path)
    runner = CliRunner()
    curve = tmp_path / "curve.json"
    try:
        busy = _busy_users(runner, trace, state, tmp_path / "calibration.json")
        for _ in range(2):
            # the light levels keep the old ratios to the busy one (100 : 400 : 1400)
            levels = [round(busy / 14), round(busy / 3.5), busy]
            _sweep(runner, trace, state, levels, curve)
            top = LoadCurve.read_json(curve).levels[-1].reps[0].utilization or 0.0
            if top >= 0.7:
                break
            # The host sped up after the calibration (a VM's drifts by tens of percent
            # in minutes): the busy level did not queue, so it is set again, once.
            busy = round(busy * 0.85 / max(top, 0.05))
    finally:
        runner.invoke(app, ["testbed", "down", "--state", str(state)])
    lc = LoadCurve.read_json(curve)
    assert [lv.level for lv in lc.levels] == levels
    thr = [lv.throughput for lv in lc.levels]
    assert thr[0] < thr[1] < thr[2]
    rep = lc.levels[0].reps[0]
    assert rep.utilization is not None and 0 <= rep.utilization <= 1
    # steal on the share's CPU and on the generator's (the rest of the machine)
    assert rep.steal is not None and rep.generator_steal is not None
    assert 0 <= rep.generator_steal <= 1
    assert set(rep.per_class) == {"static", "dynamic"}
    assert lc.sweep.target["share"]["cpus"] == [1]
    for stat in ("mean", "p999"):
        values = [lv.stat(stat)[0] for lv in lc.usable()]
        # at 85% busy the last level queues, the light ones do not; their order among
        # themselves is noise (a cold first level once read above the geometric mean of
        # the range), so the threshold sits between the light levels and the busy one
        assert values[-1] > max(values[:-1]), values
        threshold = float(np.sqrt(max(values[:-1]) * values[-1]))
        r = runner.invoke(
            app, ["mat", str(curve), "--stat", stat, "--threshold", f"{threshold}s", "--json"]
        )
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        assert d["ci"][0] <= d["mat"] <= d["ci"][1]
        assert min(thr) <= d["mat"] <= max(thr)


@pytest.mark.root
def _wire_and_engine_medians(port: int, tmp: Path) -> tuple[float, float, float, float]:
    """One replay of 300 requests under tcpdump.

    Returns the medians of wire rt, done-sent and reported, and the largest share of
    any CPU the hypervisor stole during the replay.
    """
    tcpdump = require_tool("tcpdump")
    tmp.mkdir(parents=True, exist_ok=True)
    pcap = tmp / "lo.pcap"
    # 512 bytes a packet: 66 of Ethernet, IP and TCP with timestamps, then a response's
    # whole header block (lighttpd 1.4.79's is 231 bytes: cut at 256, no response was
    # framed and every wire latency was NaN); the 1 KiB body need not be kept
    cap = subprocess.Popen(
        [tcpdump, "-i", "lo", "-w", str(pcap), "-U", "-s", "512", "tcp", "port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        line = cap.stderr.readline()  # "listening on lo, ..." once the capture is open
        assert b"listening" in line, line
        time.sleep(0.5)  # it says so just before it is
        out = tmp / "run.parquet"
        before = steal_times()
        r = CliRunner().invoke(
            app,
            ["replay", "--rate", "100", "--duration", "3s", "--path", "/static/file1k.bin",
             "--target", f"http://127.0.0.1:{port}", "-o", str(out), "--json",
             "--realtime", str(RT)],
        )  # fmt: skip
        stolen = max(utilization(before, steal_times(), list(before)).values())
        assert r.exit_code == 0, r.output
        # tcpdump drops what it has not yet read when told to stop: wait until the
        # file stops growing (on a loaded machine it can trail by a second)
        size, still = -1, 0
        deadline = time.monotonic() + 15
        while still < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
            now = pcap.stat().st_size
            still = still + 1 if now == size else 0
            size = now
    finally:
        cap.send_signal(signal.SIGINT)
        _, err = cap.communicate(timeout=10)
    print(err.decode(errors="replace").strip())
    from shrink.ingest.capture import read_capture

    wire = read_capture(pcap)
    rt = wire.column("rt")
    rt = rt[np.isfinite(rt)]
    log = RunLog.read_parquet(out)
    # the capture may lose a few packets on a loaded machine (tcpdump says how many)
    assert len(log) == 300 and rt.size >= 285
    # The wire sees a request from its first packet, i.e. from ``sent``; the
    # latency shrink reports counts from the intended time (coordinated
    # omission), so it also holds the send lag, which at 100/s under SCHED_FIFO
    # is tens of microseconds.
    ours = log.column("done") - log.column("sent")
    reported = log.column("done") - log.column("intended")
    medians = (float(np.median(rt)), float(np.median(ours)), float(np.median(reported)))
    print("median: wire {:.4f} ms, done-sent {:.4f} ms, reported {:.4f} ms".format(
        *(1e3 * m for m in medians)), f"steal {100 * stolen:.1f}%")  # fmt: skip
    return (*medians, stolen)


def test_latency_agrees_with_a_tcpdump_capture(lighttpd, tmp_path):
    """Request-to-last-byte times seen on the wire vs what shrink reports (median, 0.25 ms)."""
    require_root()
    # The engine stamps ``done`` when its event loop reads the response; a stamp taken
    # after parsing, batching or a flush would be off by milliseconds. When this VM's
    # host steals its CPU (minutes of steal time some hours), the loop's wake-up can
    # trail the wire by a millisecond for a whole run: such a run is measured again.
    # The judge of "the host stole" is /proc/stat's steal, not the engine's own lag
    # (a send-lag bug must fail here, not skip): when every attempt missed and every
    # one ran while the host took at least STOLEN of a CPU, nothing was shown either
    # way and the test skips saying so. One quiet attempt that misses fails it.
    seen = []
    for attempt in range(4):
        wire, ours, reported, stolen = _wire_and_engine_medians(lighttpd, tmp_path / str(attempt))
        seen.append((wire, ours, reported, round(stolen, 3)))
        if abs(ours - wire) < 0.25e-3 and abs(reported - wire) < 0.35e-3:
            return
    if all(s[3] >= STOLEN for s in seen):
        pytest.skip(f"the host stole >= {STOLEN:.0%} of a CPU in every attempt: {seen}")
    raise AssertionError(f"medians (wire, done-sent, reported) in s, steal: {seen}")
