"""Replay on a real local Ray cluster: a head and two worker nodes on this machine.

The cluster is Ray's own test cluster (``ray.cluster_utils.Cluster``): separate
raylets, so removing a node kills its actors the way a lost host would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers.session_traces import session_trace

from shrink.errors import ParameterError
from shrink.loadcurve import latency_stats
from shrink.replay import EngineConfig, FakeEngine, run_engines
from shrink.replay.cluster import ClusterSpec, parse_cluster, ray_available, run_on_cluster
from shrink.replay.scaleout import split_sessions
from shrink.replay.writer import RunLogWriter
from shrink.runlog import RunLog
from shrink.schedule import ScheduleOptions, build_schedule, trace_extent
from shrink.target import GeneratorPlacement

pytestmark = pytest.mark.skipif(
    not ray_available(), reason="ray is not installed (shrink-capacity[ray])"
)


def _rows(log: RunLog) -> list[tuple[int, float, str]]:
    return sorted(
        zip(log.column("session"), log.column("intended"), log.column("target"), strict=True)
    )


# --- no cluster needed ------------------------------------------------------------------
def test_cluster_option_grammar():
    assert parse_cluster(None) is None
    assert parse_cluster("ray:auto", 3) == ClusterSpec("auto", 3)
    assert parse_cluster("ray:127.0.0.1:6379").address == "127.0.0.1:6379"
    for bad in ("auto", "ray:", "k8s:auto"):
        with pytest.raises(ParameterError, match="ray:ADDRESS"):
            parse_cluster(bad)
    with pytest.raises(ParameterError, match="generators"):
        parse_cluster("ray:auto", 0)
    # refused at once, naming the option: it was "parts == 100000" once Ray was reached
    with pytest.raises(ParameterError, match=r"^--generators == 100000, must be in \[1, 1000\]"):
        parse_cluster("ray:auto", 100_000)


def test_an_unreachable_cluster_is_a_one_line_error():
    # in a child process: ray.init's connection state must not leak into the cluster tests
    code = (
        "import sys\n"
        "from shrink.errors import ReplayError\n"
        "from shrink.replay.cluster import run_on_cluster, ClusterSpec\n"
        "try:\n"
        "    run_on_cluster(ClusterSpec('127.0.0.1:1', 1), [], None, {}, {})\n"
        "except ReplayError as e:\n"
        "    print('ERR', e); sys.exit(3)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "RAY_gcs_rpc_server_reconnect_timeout_s": "5"},
    )  # fmt: skip
    assert out.returncode == 3, out.stderr[-2000:]
    line = out.stdout.strip()
    assert line.startswith("ERR cannot reach Ray cluster '127.0.0.1:1'") and "\n" not in line


def test_replay_cli_with_an_unreachable_cluster_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    trace = tmp_path / "t.parquet"
    session_trace(4, gap=0.1, think=0.1, bursts=1).write_parquet(trace)
    res = CliRunner().invoke(app, [
        "replay", str(trace), "--target", "http://127.0.0.1:9", "--duration", "1s",
        "-o", str(tmp_path / "r.parquet"), "--cluster", "ray:127.0.0.1:1",
    ])  # fmt: skip
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot reach Ray cluster '127.0.0.1:1'" in lines[0], res.output


def test_the_live_comparison_flags_late_requests_and_lost_ones():
    """The rule of the live comparison below, on figures like a loaded host's (the mean
    within 2 ms, the p99.9 within 40 ms from run to run): nine repetitions a side
    agree; two generators whose requests wait 25 ms longer on average (sent late, or
    stamped in another clock) do not, nor two that lost a tenth of the requests."""
    rng = np.random.default_rng(0)

    def reps(n: int, mean: float, count: float = 1600.0) -> np.ndarray:
        return np.column_stack([
            count + rng.normal(0, 10, n),
            mean + rng.uniform(-0.002, 0.002, n),
            0.08 + rng.uniform(-0.04, 0.04, n),
        ])  # fmt: skip

    one = reps(9, 0.004)
    assert _disagreements(one, reps(9, 0.004)) == []
    assert _disagreements(one, reps(9, 0.004 + 0.025)) == ["mean"]
    assert _disagreements(one, reps(9, 0.004, count=1440.0)) == ["count"]


# --- a real local cluster ------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    """The project's loopback HTTP server (a real server process, not lighttpd)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[2])
    yield ("127.0.0.1", port)
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import ray
    from ray.cluster_utils import Cluster

    # Ray's default folder is /tmp/ray, which it makes world-writable: as root, the
    # suite left a session there each run. Ray's own folder sits in a 0700 one here.
    base = tmp_path_factory.mktemp("ray", numbered=True)
    temp = str(base / "r")
    # The test cluster writes its address to RAY_TMPDIR/ray (else /tmp/ray), which it
    # does not make: on a machine without /tmp/ray the fixture failed.
    (base / "ray").mkdir()
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(base)
    # Each node's object store maps its memory from files in /dev/shm: where this user
    # may not write there (a chroot's /dev/shm is a plain root folder), every node died
    # at start and the fixture waited out Ray's start-up timeout. Then they use a folder.
    node = {"temp_dir": temp}
    if os.path.isdir("/dev/shm") and not os.access("/dev/shm", os.W_OK):
        node["plasma_directory"] = str(base / "plasma")
        (base / "plasma").mkdir()
    try:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **node})
        workers = [c.add_node(num_cpus=1, **node) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
        yield c, workers
        ray.shutdown()
        c.shutdown()
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before


@pytest.mark.slow
def test_two_ray_generators_send_exactly_what_one_process_sends(cluster):
    c, _ = cluster
    tr = session_trace(90, gap=0.05, think=0.3, bursts=3)
    cfg = EngineConfig([("127.0.0.1", 1), ("127.0.0.1", 2)], conns_per_session=2)
    fake = FakeEngine()
    kw = dict(rate_factor=2.0, horizon=5.0)
    one, _ = run_engines(tr, cfg, generator=GeneratorPlacement(processes=1, engine=fake), **kw)
    ray = GeneratorPlacement(engine=fake, cluster=ClusterSpec(c.address, 2))
    two, eng = run_engines(tr, cfg, generator=ray, **kw)
    assert len(one) > 1000 and _rows(one) == _rows(two)
    gens = eng.extra["generators"]
    assert len(gens) == 2 and not any(g["lost"] for g in gens)
    # both slots ran a part, and the start was shared within the clock limit
    assert all(s.requests > 0 for s in eng.stats)
    assert all(abs(g["clock_rtt"]) < 0.01 for g in gens)


@pytest.mark.slow
def test_merged_percentiles_equal_those_of_the_concatenated_parts(cluster):
    c, _ = cluster
    tr = session_trace(120, gap=0.03, think=0.2, bursts=2)
    cfg = EngineConfig([("127.0.0.1", 1)])
    origin, span, stride = trace_extent(tr, "session")
    params = dict(rate_factor=1.0, horizon=4.0, mode="session", loop=True,
                  origin=origin, span=span, id_stride=stride)  # fmt: skip
    parts = split_sessions(tr, 2)
    merged, run = run_on_cluster(
        ClusterSpec(c.address, 2), parts, cfg, params, {}, engine=FakeEngine()
    )
    # the same parts replayed here, one at a time, concatenated by hand
    by_hand = []
    for part in parts:
        w = RunLogWriter(None)
        FakeEngine()(build_schedule(part, **params), cfg, w)
        by_hand.append(w.runlog())
    whole = RunLog.concat(by_hand)
    assert not run.lost and len(merged) == len(whole) > 500
    # the same multiset of latencies, so order statistics are equal, not just close
    assert np.array_equal(np.sort(merged.latencies()), np.sort(whole.latencies()))
    a, b = latency_stats(merged.latencies(), 4.0), latency_stats(whole.latencies(), 4.0)
    for q in ("p50", "p90", "p99", "p999"):
        assert getattr(a, q) == getattr(b, q), q
    assert a.mean == pytest.approx(b.mean, rel=1e-12)  # a sum in another order


WINDOW = (0.5, 2.5)


def _one_and_ray_figures(cluster, server, reps: int) -> tuple[np.ndarray, np.ndarray]:
    """(ok count, mean, p99.9) of the measurement window, ``reps`` times through one
    process and through two Ray generators, in alternating order (one-ray, ray-one, ...)
    so a load that rises or falls over the runs weighs on both sides alike."""
    c, _ = cluster
    tr = session_trace(400, gap=0.01, think=0.05, bursts=4)
    cfg = EngineConfig([server])
    # the horizon is the window's end, as in a sweep (warm-up + duration)
    kw = dict(rate_factor=1.0, horizon=WINDOW[1], schedule=ScheduleOptions(loop=False))
    sides = (
        ("one", GeneratorPlacement(processes=1)),
        ("ray", GeneratorPlacement(cluster=ClusterSpec(c.address, 2))),
    )
    figures: dict[str, list[tuple[float, float, float]]] = {"one": [], "ray": []}
    for rep in range(reps):
        for name, gen in sides if rep % 2 == 0 else sides[::-1]:
            log, _ = run_engines(tr, cfg, generator=gen, **kw)
            # the measurement window, as a sweep takes it: requests intended in it
            win = log.window(*WINDOW)
            lat = win.latencies()
            figures[name].append((float(win.ok_mask().sum()), float(np.mean(lat)),
                                  float(np.quantile(lat, 0.999))))  # fmt: skip
    return np.array(figures["one"]), np.array(figures["ray"])


def _disagreements(one: np.ndarray, ray_: np.ndarray) -> list[str]:
    """What the two ways of sending disagree on (empty if nothing)."""
    bad = []
    # about 1,600 requests in the window on both sides (800 a second): a session's next
    # burst is due a think time after its previous one completed (httperf's wsesslog),
    # so the count moves a little with latency, on either side alike
    if abs(np.median(ray_[:, 0]) - np.median(one[:, 0])) > 0.02 * np.median(one[:, 0]):
        bad.append("count")
    if not 1520 <= np.median(one[:, 0]) <= 1680:
        bad.append("count of one")
    # latency: the medians agree within the larger side's spread, with a floor for
    # what a busy 2-core host does to a loopback server's tail (requests that wait 25 ms
    # longer on one side, or times in the wrong clock, still fail it)
    for col, floor, name in ((1, 2e-3, "mean"), (2, 25e-3, "p99.9")):
        spread = max(np.ptp(one[:, col]), np.ptp(ray_[:, col]), floor)
        if abs(np.median(one[:, col]) - np.median(ray_[:, col])) > 2 * spread:
            bad.append(name)
    return bad


@pytest.mark.slow
@pytest.mark.live
def test_two_generators_against_a_live_server_match_one(cluster, server):
    """Same offered load through one process and through two Ray generators: the
    throughput, mean and p99.9 agree within the repetitions' spread.

    Three repetitions a side decide on a quiet host. On a host whose load changes from
    run to run (the other work of a shared CI machine), three can disagree by chance,
    mostly in the p99.9 of 1,600 requests: then three more a side are measured and the
    check is made again on all of them, up to nine. A real disagreement (requests sent
    late or stamped in another clock, lost or doubled requests) is in every repetition,
    so more of them do not bring the medians together; the rule itself is the same as
    for three (test_the_live_comparison_flags_late_requests_and_lost_ones)."""
    one, ray_ = _one_and_ray_figures(cluster, server, 3)
    for _more in range(2):
        if not _disagreements(one, ray_):
            break
        more_one, more_ray = _one_and_ray_figures(cluster, server, 3)
        one, ray_ = np.vstack([one, more_one]), np.vstack([ray_, more_ray])
    bad = _disagreements(one, ray_)
    assert not bad, f"{bad}: (count, mean, p99.9) one {one.tolist()}, ray {ray_.tolist()}"


@pytest.mark.slow
def test_replay_cli_on_the_cluster_says_where_it_ran(cluster, server, tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    c, _ = cluster
    trace = tmp_path / "t.parquet"
    session_trace(40, gap=0.02, think=0.05, bursts=2).write_parquet(trace)
    out = tmp_path / "r.parquet"
    res = CliRunner().invoke(app, [
        "replay", str(trace), "--target", f"http://{server[0]}:{server[1]}",
        "--duration", "2s", "-o", str(out), "--cluster", f"ray:{c.address}",
        "--generators", "2", "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    log = RunLog.read_parquet(out)
    assert log.meta["cluster"]["generators"] == 2 and len(log.meta["generators"]) == 2
    assert len(log) > 100 and log.ok_mask().all()


@pytest.mark.slow
def test_a_lost_node_loses_only_its_own_rows_and_is_named(cluster, server):
    """Runs last: it removes one worker node in the middle of a run."""
    c, workers = cluster
    tr = session_trace(200, gap=0.02, think=0.5, bursts=3)
    cfg = EngineConfig([server])
    result: dict[str, object] = {}
    started, started_at = threading.Event(), {}

    def on_start(t0: float) -> None:
        started_at["t0"] = t0
        started.set()

    def replay() -> None:
        try:
            result["out"] = run_engines(
                tr, cfg, rate_factor=1.0, horizon=8.0, schedule=ScheduleOptions(loop=False),
                generator=GeneratorPlacement(cluster=ClusterSpec(c.address, 2)), on_start=on_start,
            )  # fmt: skip
        except Exception as exc:  # shown by the assertion below, not lost in the thread
            result["error"] = exc

    th = threading.Thread(target=replay)
    th.start()
    # a few seconds into the run itself: a fixed sleep from here could fall in the
    # actors' start-up on a loaded host, and lose a node before it ran anything
    assert started.wait(timeout=180), "the run never started"
    time.sleep(max(0.0, started_at["t0"] + 2.0 - time.monotonic()))
    c.remove_node(workers[1])
    th.join(timeout=120)
    assert not th.is_alive(), "the driver hung on a lost node"
    assert "error" not in result, repr(result.get("error"))
    log, eng = result["out"]  # type: ignore[misc]
    lost = eng.extra.get("lost_generators") or []
    assert len(lost) == 1 and lost[0]["reason"]
    survivor = next(g for g in eng.extra["generators"] if not g["lost"])
    # the survivor's part came back whole: every one of its sessions is there
    part = split_sessions(tr, 2)[survivor["slot"]]
    assert set(np.unique(log.column("session"))) >= set(np.unique(part.column("session")))
    assert len(log) > 0 and set(np.unique(log.column("session"))) == set(
        np.unique(part.column("session"))
    )
    # the lost actor's part folder stays on its node; the next actor there removes it
    from shrink.replay.part_dirs import ACTOR, remove_lost_part_dirs
    from shrink.testbed.registry import scratch_base

    deadline, removed = time.monotonic() + 30, []
    while not removed and time.monotonic() < deadline:
        removed = remove_lost_part_dirs(scratch_base(), ACTOR)
        time.sleep(0.2)
    assert removed, "the lost actor left no part folder, or it was not removed"


def test_the_report_names_each_generator_slot_and_what_it_lost():
    from shrink.replay.live import LiveTarget
    from shrink.report.sections.self_checks import cluster_text as _cluster_text
    from shrink.selfchecks import self_checks as _self_checks

    tgt = LiveTarget(
        [("127.0.0.1", 1)], generator=GeneratorPlacement(cluster=ClusterSpec("10.0.0.5:6379", 2))
    )
    run = [
        {"slot": 0, "node": "gen-a", "clock_offset": 2e-4, "clock_rtt": 1e-3, "lost": False},
        {"slot": 1, "node": "gen-b", "clock_offset": -5e-4, "clock_rtt": 2e-3, "lost": True},
    ]
    tgt._count_slots(run)
    tgt._count_slots([{**run[0], "clock_offset": 1e-4}, {**run[1], "lost": False}])
    cluster = tgt.describe()["cluster"]
    assert [s["runs"] for s in cluster["slots"]] == [2, 2]
    assert [s["lost"] for s in cluster["slots"]] == [0, 1]
    from shrink.loadcurve import LoadCurve

    curve = LoadCurve([], meta={"target": {"cluster": cluster}})
    checks = _self_checks(curve, {"mean": 0.01})
    text = _cluster_text(checks["generator_cluster"])
    assert "slot 0 on gen-a: 2 run(s), clock offset up to 0.20 ms" in text
    assert "slot 1 on gen-b: 2 run(s), **lost in 1**" in text and "0.50 ms" in text


def test_more_slots_than_a_local_cluster_has_cpus_are_refused_at_once(monkeypatch):
    """``ray:local --generators 3`` on 2 CPUs waited silent for 120 s for a third CPU,
    then said the cluster could not place them; refused at once, naming the option."""
    from shrink.errors import ReplayError
    from shrink.replay import cluster

    class _Ray:
        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 2.0}

    monkeypatch.setattr(cluster, "_connect", lambda spec: _Ray)
    monkeypatch.setattr(cluster, "READY_TIMEOUT", 0.01)
    parts = [session_trace(2, gap=0.1, think=0.1, bursts=1)] * 3
    monkeypatch.setattr(cluster.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    with pytest.raises(ReplayError, match=r"^--generators 3: the local Ray cluster has 2 CPUs"):
        run_on_cluster(ClusterSpec("local", 3), parts, None, {}, {})
    # ... and as many as this process may use (taskset -c 0): two slots took turns on CPU 0
    monkeypatch.setattr(cluster.os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(ReplayError, match=r"^--generators 2: .* has 1 CPUs this process may use"):
        run_on_cluster(ClusterSpec("local", 2), parts[:2], None, {}, {})
    # ... and not the server's: the default two slots beside a server on CPU 1 of two were
    # both pinned to CPU 0, each behind its schedule at 20 requests a second
    monkeypatch.setattr(cluster.os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(ReplayError, match=r"1 CPUs this process may use beside the server's \(1\)"):
        run_on_cluster(ClusterSpec("local", 2), parts[:2], None, {}, {}, avoid_cpus={1})


def test_processes_with_a_cluster_is_refused_not_dropped(tmp_path):
    """--processes 8 --cluster ...: the run went on with --generators' 2 slots, the 8
    dropped unsaid; refused before Ray is reached, naming --generators."""
    from typer.testing import CliRunner

    from shrink.cli import app

    trace = tmp_path / "t.parquet"
    session_trace(4, gap=0.1, think=0.1, bursts=1).write_parquet(trace)
    res = CliRunner().invoke(app, [
        "replay", str(trace), "--target", "http://127.0.0.1:9", "--duration", "1s",
        "-o", str(tmp_path / "r.parquet"), "--cluster", "ray:127.0.0.1:1", "--processes", "8",
    ])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "--processes" in res.output and "--generators" in res.output
    assert "cannot reach" not in res.output
