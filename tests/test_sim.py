"""The simulator: Target contract, exact PS behaviour, session semantics, routing, CLI."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers.machines import NEHALEM
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import ParameterError, TopologyError
from shrink.mapping import build_mapping
from shrink.measure import level_stats, sweep
from shrink.runlog import RUNLOG_COLUMNS
from shrink.share import Share
from shrink.sim import SimParams, SimTarget, support_trace, tcp_trace
from shrink.sim.model import build_layout
from shrink.target import Target
from shrink.trace import Trace

pytestmark = pytest.mark.compute

# A plain processor-sharing server: no contention, no cross-socket effects.
PLAIN = SimParams(
    static_cv=1.0,
    contention_static=0.0,
    contention_memory=0.0,
    cross_socket=False,
    accept_policy="random",
)


def test_sim_is_a_target_and_writes_exactly_the_runlog_columns(tmp_path):
    target = SimTarget(NEHALEM, "2-replica-direct")
    assert isinstance(target, Target)
    res = target.run(tcp_trace(5_000, 2.0), rate_factor=1.0, warmup=0.2, duration=1.0, seed=3)
    assert tuple(res.runlog.table.column_names) == RUNLOG_COLUMNS
    assert set(res.runlog.column("target")) == {"sim:127.0.0.1:8080", "sim:127.0.0.2:8080"}
    assert set(res.per_cpu_utilization) == set(range(8))
    assert res.generator.behind is False
    d = target.describe()
    assert d["mapping"]["name"] == "2-replica-direct" and d["share"]["kind"] == "all"
    assert res.utilization == pytest.approx(np.mean(list(res.per_cpu_utilization.values())))
    res.runlog.write_parquet(tmp_path / "run.parquet")


def test_same_seed_same_runlog_other_seed_other_runlog(tmp_path):
    trace = support_trace(60, 6.0, seed=1, think_s=0.3)
    target = SimTarget(NEHALEM)
    a = target.run(trace, rate_factor=1.0, warmup=1.0, duration=2.0, seed=5)
    b = SimTarget(NEHALEM).run(trace, rate_factor=1.0, warmup=1.0, duration=2.0, seed=5)
    c = target.run(trace, rate_factor=1.0, warmup=1.0, duration=2.0, seed=6)
    pa_, pb = (
        a.runlog.write_parquet(tmp_path / "a.parquet"),
        b.runlog.write_parquet(tmp_path / "b.parquet"),
    )
    assert pa_.read_bytes() == pb.read_bytes()
    assert pq.read_table(pa_).equals(b.runlog.table)
    assert not np.array_equal(a.runlog.column("done"), c.runlog.column("done"))


@pytest.mark.parametrize("cv", [1.0, 2.0])
def test_one_core_is_an_exact_ps_queue(cv):
    """M/G/1-PS: mean response time D / (1 - rho) whatever the demand's variability."""
    d = 40e-6
    p = PLAIN.with_(static_base_us=40.0, static_per_kib_us=0.0, static_cv=cv)
    target = SimTarget(NEHALEM, "1-replica", Share.cores_of(NEHALEM, (0,)), p)
    rho = 0.6
    trace = tcp_trace(rho / d, 1.5, seed=11)
    means = []
    for seed in range(6):
        st = level_stats(target.run(trace, rate_factor=1.0, warmup=0.1, duration=1.2, seed=seed))
        means.append(st.overall.mean)
        assert st.utilization == pytest.approx(rho, abs=0.03)
    m, s = np.mean(means), np.std(means, ddof=1) / math.sqrt(len(means))
    expected = d / (1 - rho)
    # 4 standard errors of the mean across independent seeds, plus the trace's own rate noise
    assert abs(m - expected) < 4 * s + 0.03 * expected


def test_speed_share_is_a_slower_server_exactly():
    """Half the speed at half the rate: every time doubles (R_full(X) = a R_share(a X))."""
    trace = support_trace(40, 6.0, seed=2, think_s=0.3)
    full = SimTarget(NEHALEM, "1-replica", Share.cores_of(NEHALEM, (0, 1)), PLAIN)
    half = SimTarget(NEHALEM, "1-replica", Share.cpu_time((0, 1), 0.5), PLAIN)
    a = full.run(trace, rate_factor=1.0, warmup=1.0, duration=2.0, seed=1)
    b = half.run(trace, rate_factor=0.5, warmup=2.0, duration=4.0, seed=1)
    desc = half.describe()["share"]
    assert (desc["kind"], desc["cpus"], desc["fraction"]) == ("cpu_time", [0, 1], 0.5)
    # think times are not scaled, so compare an open-loop trace for exactness
    o = tcp_trace(20_000, 1.0, seed=4)
    x = full.run(o, rate_factor=1.0, warmup=0.1, duration=0.5, seed=2).runlog
    y = half.run(o, rate_factor=0.5, warmup=0.2, duration=1.0, seed=2).runlog
    np.testing.assert_allclose(y.latencies(), 2 * x.latencies(), rtol=1e-9, atol=1e-12)
    assert len(a.runlog) > 0 and len(b.runlog) > 0


def test_session_semantics_page_then_embedded_then_think():
    trace = Trace.from_columns(
        {
            "session": [7, 7, 7, 7],
            "burst": [0, 0, 0, 1],
            "t": [0.0, 0.0, 0.0, 5.0],
            "think": [0.25, 0.25, 0.25, 0.0],
            "path": ["/app/index.php?bytes=20000&work=1000", "/a.gif", "/b.gif", "/x.php?work=10"],
            "cls": ["dynamic", "static", "static", "dynamic"],
            "bytes": [20_000, 2_000, 2_000, 1_000],
        },
        meta={"mode": "session"},
    )
    one = Share.cores_of(NEHALEM, (0,))
    target = SimTarget(NEHALEM, "1-replica", one, PLAIN.with_(static_cv=0.0))
    log = target.run(trace, rate_factor=1.0, warmup=0.0, duration=2.0, seed=0).runlog
    intended, done = log.column("intended"), log.column("done")
    assert len(log) == 4 and intended[0] == 0.0
    # the page's PHP work (1000 us) plus its static part, alone on the core
    assert done[0] - intended[0] > 1.0e-3
    assert intended[1] == intended[2] == done[0]  # embedded requests go out with the reply
    assert intended[3] == pytest.approx(max(done[1], done[2]) + 0.25)  # then the think time
    assert set(log.column("session")) == {7}


def test_layout_models_remote_nic_sharing_and_the_llc():
    p = SimParams()
    one = build_layout(NEHALEM, build_mapping("1-replica", NEHALEM), p)
    direct = build_layout(NEHALEM, build_mapping("2-replica-direct", NEHALEM), p)
    solo = build_layout(NEHALEM, build_mapping("1-replica", NEHALEM, (0,)), p)
    four = build_layout(NEHALEM, build_mapping("1-replica", NEHALEM, (0, 1, 2, 3)), p)
    assert one.replica_queue_sockets == ((0, 0, 0, 0, 1, 1, 1, 1),)
    assert direct.replica_queue_sockets == ((0,), (1,))
    assert solo.cores[0].static_factor == 1.0
    # workers spanning sockets pay for sharing on top of the socket's contention
    assert one.cores[0].static_factor > direct.cores[0].static_factor > 1.0
    # Support's L3 story: 4 cores of one socket miss more than 1 core or 8 cores over two
    assert four.cores[0].dyn_stall_us > solo.cores[0].dyn_stall_us > one.cores[0].dyn_stall_us
    off = build_layout(NEHALEM, build_mapping("1-replica", NEHALEM), p.without_cross_socket())
    assert off.cores[0].static_factor == four.cores[0].static_factor
    assert off.cores[0].dyn_stall_us == four.cores[0].dyn_stall_us


def test_half_of_one_replica_connections_have_remote_nic_processing():
    """Remote-NIC cost shows in the demand of about half the connections (1-replica)."""
    p = PLAIN.with_(cross_socket=True, cross_socket_sharing=0.0, static_cv=0.0, remote_nic_us=10.0)
    target = SimTarget(NEHALEM, "1-replica", None, p)
    res = target.run(
        tcp_trace(2_000, 2.0, seed=1), rate_factor=1.0, warmup=0.0, duration=2.0, seed=4
    )
    lat = res.runlog.latencies()
    remote = np.mean(lat > (p.static_base_us + p.static_per_kib_us + 5.0) * 1e-6)
    n = lat.size
    assert abs(remote - 0.5) < 4 * math.sqrt(0.25 / n) + 0.02  # some queueing blurs it a little
    direct = SimTarget(NEHALEM, "2-replica-direct", None, p)
    lat_d = direct.run(
        tcp_trace(2_000, 2.0, seed=1), rate_factor=1.0, warmup=0.0, duration=2.0, seed=4
    )
    assert np.mean(lat_d.runlog.latencies() > (p.static_base_us + 5.25) * 1e-6) < 0.05


def test_parse_share_and_bad_input():
    # The one share grammar (shrink.share.Share.parse) serves the simulator too.
    assert Share.parse("all", NEHALEM) == Share.all_of(NEHALEM)
    assert Share.parse("0.5", NEHALEM).cpus == (0, 1, 2, 3)
    assert Share.parse("0-1,4", NEHALEM).cpus == (0, 1, 4)
    assert Share.parse("0@25%", NEHALEM) == Share.cpu_time((0,), 0.25)
    assert Share.parse("0.5@50%", NEHALEM).cpus == (0, 1, 2, 3)
    with pytest.raises(TopologyError):
        Share.parse("0,9", NEHALEM)
    with pytest.raises(TopologyError, match=r"cannot run faster"):
        Share.parse("all@1.5", NEHALEM)
    with pytest.raises(ParameterError, match="accept_policy"):
        SimParams(accept_policy="fastest")
    with pytest.raises(ParameterError, match="unknown simulator parameter"):
        SimParams().with_(bogus=1.0)
    with pytest.raises(ParameterError, match="rate factor"):
        SimTarget(NEHALEM).run(tcp_trace(100, 1.0), rate_factor=0, warmup=0, duration=1, seed=0)


def test_sweep_on_the_simulator_gives_a_rising_curve():
    trace = tcp_trace(10_000, 4.0)
    target = SimTarget(NEHALEM, "1-replica", Share.cores_of(NEHALEM, (0, 1)))
    curve = sweep(target, trace, [1.0, 3.0, 4.2], warmup=0.1, duration=0.5, seed=2)
    thr = [lv.throughput for lv in curve.levels]
    mean = [lv.stat("mean")[0] for lv in curve.levels]
    assert thr == sorted(thr) and mean == sorted(mean)
    assert curve.share.kind == "cores" and curve.mapping == "1-replica"


def test_cli_run_sweep_and_scaling(tmp_path):
    spec = NEHALEM.write_toml(tmp_path / "m.toml")
    trace = tcp_trace(4_000, 1.0).write_parquet(tmp_path / "t.parquet")
    runner = CliRunner()
    out = tmp_path / "run.parquet"
    r = runner.invoke(
        app,
        [
            "sim",
            "run",
            str(trace),
            "--machine",
            str(spec),
            "--mapping",
            "2-replica-direct",
            "--share",
            "all",
            "--rate-factor",
            "2",
            "--warmup",
            "0.1",
            "--duration",
            "0.3",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert out.exists() and '"per_cpu_utilization"' in r.output
    curve = tmp_path / "c.json"
    r = runner.invoke(
        app,
        [
            "sim",
            "sweep",
            str(trace),
            "--machine",
            str(spec),
            "--share",
            "0-1",
            "--levels",
            "1,2",
            "--warmup",
            "0.1",
            "--duration",
            "0.3",
            "-o",
            str(curve),
        ],
    )
    assert r.exit_code == 0, r.output and curve.exists()
    r = runner.invoke(
        app,
        [
            "sim",
            "scaling",
            "--machine",
            str(spec),
            "--workload",
            "tcp",
            "--cores",
            "1,2",
            "--requests",
            "4000",
            "--seed",
            "1",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    import json

    res = json.loads(r.stdout)  # progress goes to stderr; stdout stays JSON
    assert set(res["scaling"]) == {"mean", "p999"}
    assert res["scaling"]["mean"]["1"] == 1.0
    assert res["scaling"]["mean"]["2"] == pytest.approx(1.9, abs=0.4)  # in (1.5, 2.3)
    r = runner.invoke(
        app, ["sim", "run", str(trace), "--machine", str(spec), "--share", "0,42", "-o", str(out)]
    )
    assert r.exit_code == 1 and "CPU 42" in r.output
