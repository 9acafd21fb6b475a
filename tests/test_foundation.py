"""The value types every stage shares: Trace, RunLog, LoadCurve, MAT, Machine, Mapping."""

from __future__ import annotations

import math

import pytest
from helpers.curves import mm1_curve

from shrink import ParameterError, Trace
from shrink.checks import check_alpha, parse_duration, parse_thresholds
from shrink.errors import TraceFormatError
from shrink.loadcurve import Level, LoadCurve
from shrink.machine import Machine
from shrink.mapping import build_mapping, remote_nic_probability
from shrink.mat import mat

pytestmark = pytest.mark.compute


def test_trace_parquet_roundtrip_keeps_rows_and_provenance(tmp_path):
    tr = Trace.from_columns(
        {
            "session": [0, 0, 1],
            "t": [0.0, 0.0, 1.5],
            "path": ["/a", "/b.php", "/c"],
            "cls": ["static", "dynamic", "static"],
            "bytes": [10, 20, -1],
        },
        meta={"reader": "test", "source": "x"},
    )
    p = tr.write_parquet(tmp_path / "t.parquet")
    back = Trace.read_parquet(p)
    assert back.same_rows(tr)
    assert back.meta["reader"] == "test"
    assert back.meta["shrink_version"]
    info = back.info()
    assert (info.sessions, info.requests, info.bursts) == (2, 3, 2)
    assert info.dynamic_fraction == pytest.approx(1 / 3)
    assert info.unknown_bytes == 1


def test_trace_same_input_same_bytes(tmp_path):
    tr = Trace.from_columns({"session": [1, 2], "t": [0.0, 1.0], "path": ["/", "/x"]}, {"seed": 3})
    a = tr.write_parquet(tmp_path / "a.parquet").read_bytes()
    b = tr.write_parquet(tmp_path / "b.parquet").read_bytes()
    assert a == b


def test_trace_read_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(TraceFormatError, match=r"bad\.parquet"):
        Trace.read_parquet(bad)


@pytest.mark.parametrize(
    ("value", "message"), [(1.7, r"alpha == 1.7, must be in \(0, 1\]."), (0.0, "alpha == 0")]
)
def test_alpha_validation_message(value, message):
    with pytest.raises(ParameterError, match=message):
        check_alpha(value)


def test_durations_and_thresholds():
    assert parse_duration("5ms") == pytest.approx(0.005)
    assert parse_duration("500us") == pytest.approx(0.0005)
    assert parse_duration("2m") == 120
    assert parse_thresholds("mean=5ms,p999=500ms") == pytest.approx({"mean": 0.005, "p999": 0.5})
    with pytest.raises(ParameterError):
        parse_duration("fast")


def _mm1_curve(rates, mu):
    return mm1_curve(rates, mu, reps=3, n=20000)


def test_mat_interpolates_mm1_mean_crossing(tmp_path):
    mu = 1000.0
    curve = _mm1_curve([500, 700, 850, 950], mu)
    back = LoadCurve.read_json(curve.write_json(tmp_path / "c.json"))
    # M/M/1 mean = 1/(mu - lam): 10 ms at lam = 900.
    res = mat(back, "mean", 0.010)
    assert res.status == "ok"
    assert res.mat == pytest.approx(900, rel=0.03)
    assert res.ci[0] <= res.mat <= res.ci[1]
    # p99.9 of an exponential: ln(1000)/(mu - lam) = 50 ms at lam ~ 862.
    p = mat(back, "p999", 0.050)
    assert p.mat == pytest.approx(mu - math.log(1000) / 0.050, rel=0.03)


def test_mat_follows_a_queue_across_a_wide_bracket_at_the_knee():
    # Levels at 80% busy and nearly saturated (5 ms and 100 ms): the 10 ms crossing
    # is at 900. A straight line in log latency bends up too early and put it at 844.
    curve = _mm1_curve([500, 800, 990], 1000.0)
    res = mat(curve, "mean", 0.010)
    assert res.status == "ok" and res.bracket == (800.0, 990.0)
    assert res.mat == pytest.approx(900, rel=0.01)
    # the p99.9's crossing (50 ms) in the same bracket
    assert mat(curve, "p999", 0.050).mat == pytest.approx(1000 - math.log(1000) / 0.050, rel=0.02)


def test_an_overloaded_level_that_served_less_leaves_the_mat_at_the_level_under_it():
    """One demo run's whole core served 5,415 req/s at 1.7 ms mean, then 4,292 req/s at
    28 ms one level up. The MAT is the highest throughput served under the threshold:
    5,415, not a point interpolated down towards 4,292 (it read 4,704)."""
    curve = _mm1_curve([500, 700, 850], 1000.0)
    over = _mm1_curve([990], 1000.0).levels[0]  # 100 ms mean, over a 10 ms threshold
    for r in over.reps:
        r.throughput = 600.0  # an overloaded server serves less than the level under it
    curve.levels.append(Level(900.0, over.reps))
    res = mat(curve, "mean", 0.010)
    assert res.status == "ok" and res.bracket == (850.0, 900.0)
    assert res.mat == pytest.approx(850.0)
    assert res.ci[0] <= res.mat <= res.ci[1]


def test_mat_skips_levels_where_generator_fell_behind():
    curve = _mm1_curve([500, 700, 850, 950], 1000.0)
    for r in curve.levels[-1].reps:
        r.generator_behind = True
    assert mat(curve, "mean", 0.010).status == "not_reached"


def test_machine_toml_roundtrip_and_mappings(tmp_path):
    m = Machine(name="two", sockets=2, cores_per_socket=4, llc_mib=12, nic_ports=2)
    back = Machine.read_toml(m.write_toml(tmp_path / "m.toml"))
    assert back == m
    one = build_mapping("1-replica", m)
    direct = build_mapping("2-replica-direct", m)
    indirect = build_mapping("2-replica-indirect", m)
    assert remote_nic_probability(one.replicas[0]) == 0.5
    assert [remote_nic_probability(r) for r in direct.replicas] == [0.0, 0.0]
    assert [remote_nic_probability(r) for r in indirect.replicas] == [1.0, 1.0]
    assert sorted(direct.cpus) == list(range(8))


def test_shrink_public_surface_is_all_of_its_names():
    from helpers.surface import exported, public_names

    import shrink

    assert public_names(shrink) == exported(shrink)
    assert "__version__" in shrink.__all__
