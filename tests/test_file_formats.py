"""Each file format is its type: the dataclass's fields are what is written and read back.

A field added to the type appears in the written file with no other edit; an older
file lacking a field reads (the type's default fills it); a bad field gives one line
naming the file and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.curves import mm1_curve
from helpers.testbed import lighttpd_replica

from shrink.enforce import enforcer_from_dict
from shrink.enforce.cfs import CfsQuota, Cgroup, CgroupLayout
from shrink.enforce.corunner import CoRunner
from shrink.enforce.fake import FakeEnforcer
from shrink.errors import TestbedError, TraceFormatError
from shrink.jsonout import dumps
from shrink.machine import Machine
from shrink.mapping import Mapping, Replica, build_mapping
from shrink.mat import MATResult, mat
from shrink.synth.docroot import Manifest, StaticFile, read_manifest, tcp_docroot
from shrink.testbed.state import ReplicaState, TestbedState
from shrink.validate import Validation, validate

# Validation (validation.json) -------------------------------------------------------


def _validation() -> Validation:
    full = mm1_curve([400, 600, 750, 850, 920], 1000.0, reps=2, n=4000, seed=3)
    low = mm1_curve([400, 600, 700], 1000.0, reps=2, n=4000, seed=4)
    return validate(low, full, {"mean": 0.005})


def test_a_prediction_of_one_repetition_a_level_is_neither_covered_nor_missed():
    # Its interval is [x, x] (no spread measured): "covered" was False, the report
    # listed the MAT as missed, for a prediction 0.2 % from the measured one.
    full = mm1_curve([400, 600, 750, 850, 920], 1000.0, reps=2, n=4000, seed=3)
    low = mm1_curve([400, 600, 750, 850, 920], 1000.0, reps=1, n=4000, seed=4)
    v = validate(low, full, {"mean": 0.003})
    ci = v.mats["mean"]["predicted_ci"]
    assert ci[0] == ci[1] and v.mats["mean"]["predicted_status"] == "ok"
    assert v.covered == {"mean": None}
    low2 = mm1_curve([400, 600, 750, 850, 920], 1000.0, reps=2, n=4000, seed=4)
    assert validate(low2, full, {"mean": 0.003}).covered["mean"] is not None


def test_a_field_added_to_validation_is_written():
    @dataclass
    class Wider(Validation):
        note: str = "new"

    assert Wider(mats={}).to_dict()["note"] == "new"


def test_validation_reads_back_what_it_wrote(tmp_path):
    v = _validation()
    v.meta = {"mapping": "1-replica"}
    back = Validation.read_json(v.write_json(tmp_path / "validation.json"))
    assert back.to_dict() == v.to_dict()
    assert back.mats["mean"]["predicted_status"] == "not_reached"
    assert back.to_dict()["mat_error_mean"] == v.mat_error["mean"]
    assert "cost_ratio" not in back.to_dict()


def test_validation_writes_a_nan_error_as_null(tmp_path):
    v = _validation()
    v.mats["mean"]["error"] = math.nan
    doc = json.loads(v.write_json(tmp_path / "v.json").read_text())
    assert doc["mats"]["mean"]["error"] is None and doc["mat_error_mean"] is None


def test_an_older_validation_reads_with_defaults(tmp_path):
    doc = _validation().to_dict()
    for key in ("wasserstein", "meta", "wasserstein_median", "conclusive"):
        del doc[key]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    back = Validation.read_json(tmp_path / "old.json")
    assert back.wasserstein == [] and back.meta == {} and back.conclusive == {"mean": False}


def test_a_bad_validation_names_the_file_and_field(tmp_path):
    doc = _validation().to_dict()
    doc["mats"]["mean"]["threshold"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError) as err:
        Validation.read_json(tmp_path / "bad.json")
    assert "bad.json" in str(err.value) and "mats.mean.threshold" in str(err.value)
    assert "\n" not in str(err.value)


# MATResult (shrink.mat/1) -----------------------------------------------------------


def test_a_field_added_to_a_mat_is_written():
    @dataclass(frozen=True)
    class Wider(MATResult):
        note: str = "new"

    assert Wider(1.0, (0.5, 2.0), "mean", 0.1).to_dict()["note"] == "new"


def test_a_mat_reads_back_what_it_wrote():
    curve = mm1_curve([400, 600, 750, 850, 920], 1000.0, reps=2, n=4000, seed=3)
    for threshold in (0.005, 1e-9, 100.0):  # a crossing, below range, not reached
        res = mat(curve, "mean", threshold)
        back = MATResult.from_dict(json.loads(json.dumps(res.to_dict())))
        assert back.to_dict() == res.to_dict() and back.status == res.status
    assert res.to_dict()["ci"] is None and math.isnan(back.ci[0])


def test_a_bad_mat_names_the_field():
    doc = {**MATResult(1.0, (0.5, 2.0), "mean", 0.1).to_dict(), "status": "fine"}
    with pytest.raises(TraceFormatError, match=r"^m\.json: status: ") as err:
        MATResult.from_dict(doc, source="m.json")
    assert "\n" not in str(err.value)
    with pytest.raises(TraceFormatError, match=r"lacks threshold"):
        MATResult.from_dict({"schema": "shrink.mat/1", "mat": 1.0, "ci": None, "stat": "mean"})


# Machine (a machine spec: TOML, and the ``machine`` of curves, states, calibrations) --

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "machines"


def test_a_field_added_to_a_machine_is_written():
    @dataclass(frozen=True)
    class Wider(Machine):
        note: str = "new"

    assert Wider("m", 1, 2).to_dict()["note"] == "new"


@pytest.mark.parametrize("spec", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_a_machine_spec_reads_back_what_it_wrote(spec, tmp_path):
    m = Machine.read_toml(spec)
    back = Machine.read_toml(m.write_toml(tmp_path / "m.toml"))
    assert back == m and Machine.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    assert m.to_dict()["nic"] == {
        "ports": 2,
        "queues_per_port": m.nic_queues_per_port,
        "port_socket": [0, 1],
    }


def test_a_machine_is_written_in_its_files_key_order():
    # A testbed state file holds the machine unsorted: its bytes must not move.
    d = Machine("m", 1, 2, ghz=2.0, extra={"numa_nodes": 1}).to_dict()
    assert list(d) == [
        "name", "sockets", "cores_per_socket", "threads_per_core", "llc_mib", "cpus", "nic",
        "ghz", "extra",
    ]  # fmt: skip


def test_a_short_machine_spec_reads_with_defaults(tmp_path):
    (tmp_path / "m.toml").write_text("sockets = 2\ncores_per_socket = 2\n")
    m = Machine.read_toml(tmp_path / "m.toml")
    assert (m.name, m.cpus, m.nic_port_socket) == ("unnamed", ((0, 1), (2, 3)), (0,))
    assert "ghz" not in m.to_dict() and "extra" not in m.to_dict()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("sockets = 2\ncores_per_socket = 2\n[nic]\nports = 100\n", r"nic\.ports: "),
        ("sockets = 2\ncores_per_socket = 2\nnic = 3\n", r"nic must be a table"),
        ("sockets = 2\ncores_per_socket = 2\ncpus = [[0, -1]]\n", r"cpus\[0\]\[1\]: "),
        ("cores_per_socket = 2\n", r"machine spec lacks sockets"),
    ],
)
def test_a_bad_machine_spec_names_the_file_and_field(text, field, tmp_path):
    (tmp_path / "m.toml").write_text(text)
    with pytest.raises(TraceFormatError, match=r"m\.toml: .*" + field) as err:
        Machine.read_toml(tmp_path / "m.toml")
    assert "\n" not in str(err.value)


def test_a_calibration_names_its_machine_field(tmp_path):
    from extrapolate.calibration import load_calibration

    load_calibration("published").write_json(tmp_path / "c.json")
    doc = json.loads((tmp_path / "c.json").read_text())
    doc["machine"]["nic"]["queues_per_port"] = 0
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"c\.json: machine\.nic\.queues_per_port: "):
        load_calibration(tmp_path / "c.json")


# Calibration (shrink.calibration/1: physics, workloads, observations, machine) -------


def _calibration(tmp_path: Path) -> tuple[Path, dict]:
    from extrapolate.calibration import load_calibration

    path = load_calibration("published").write_json(tmp_path / "cal.json")
    return path, json.loads(path.read_text())


def test_a_field_added_to_a_calibration_is_written():
    from extrapolate.calibration import CalibrationFile, load_calibration

    @dataclass
    class Wider(CalibrationFile):
        note: str = "new"

    f = load_calibration("published").to_file()
    assert Wider(**vars(f)).to_dict()["note"] == "new"


def test_a_calibration_reads_back_and_writes_the_same_bytes(tmp_path):
    from extrapolate.calibration import load_calibration

    path, doc = _calibration(tmp_path)
    doc["usl"] = {"tcp": {"stat": "mean", "sigma": 0.01, "core_counts": [1, 2, 4]}}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    back = load_calibration(path).write_json(tmp_path / "back.json")
    assert back.read_text() == path.read_text()  # the papers' MATs stay ints, usl is kept
    assert '"value": 146000,' in back.read_text()


def test_an_older_calibration_reads_with_defaults(tmp_path):
    from extrapolate.calibration import load_calibration

    _, doc = _calibration(tmp_path)
    for key in ("name", "observations", "fitted", "checks", "usl", "parameters", "model_error"):
        del doc[key]
    doc["fixed"] = None
    (tmp_path / "old-cal.json").write_text(json.dumps(doc))
    back = load_calibration(tmp_path / "old-cal.json")
    assert back.name_ == "old-cal" and back.observations_ == [] and back.fixed is None
    assert back.to_dict()["fixed"] == {} and back.model_error_ == 0.0


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        (("physics", "speed"), 1.0, r"physics\.speed: "),
        (("physics", "llc_miss_fraction"), 2.0, r"physics\.llc_miss_fraction: "),
        (("physics", "demand_static"), -1.0, r"physics\.demand_static: "),
        (("workloads", "tcp", "dynamic_fraction"), 3.0, r"workloads\.tcp\.dynamic_fraction: "),
        (("workloads", "tcp", "thresholds", "p100"), 1.0, r"workloads\.tcp\.thresholds\.p100"),
        (("observations", 2, "value"), "x", r"observations\[2\]\.value: "),
        (("observations", 0, "config", "n_cores"), 0, r"observations\[0\]\.config\.n_cores"),
        (("observations", 2, "kind"), "guess", r"observation kind == 'guess'"),
    ],
)
def test_a_bad_calibration_names_the_file_and_field(where, value, field, tmp_path):
    from extrapolate.calibration import load_calibration

    path, doc = _calibration(tmp_path)
    part = doc
    for key in where[:-1]:
        part = part[key]
    part[where[-1]] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"^\S*cal\.json: " + field) as err:
        load_calibration(path)
    assert "\n" not in str(err.value)


# Mapping and Replica (the ``mapping`` of a curve's target and of a testbed state) ----


def test_a_field_added_to_a_replica_is_written():
    @dataclass(frozen=True)
    class Wider(Replica):
        note: str = "new"

    assert Wider("r0", (0, 1), "127.0.0.1", 8080, (0, 0)).to_dict()["note"] == "new"


def test_a_mapping_reads_back_what_it_wrote():
    m = Machine.read_toml(EXAMPLES / "nehalem-2s.toml")
    for name in ("1-replica", "2-replica-direct", "4-replica"):
        mp = build_mapping(name, m, m.all_cpus)
        assert Mapping.from_dict(json.loads(json.dumps(mp.to_dict()))) == mp
    r = mp.to_dict()["replicas"][0]
    assert list(r) == ["name", "cpus", "address", "port", "sockets", "nic_socket"]
    del r["nic_socket"]  # an older file's: the default fills it
    assert Replica.from_dict(r).nic_socket is None


def test_a_bad_mapping_names_the_field():
    m = Machine.read_toml(EXAMPLES / "nehalem-2s.toml")
    doc = build_mapping("2-replica-direct", m, m.all_cpus).to_dict()
    doc["replicas"][1]["port"] = 70_000
    with pytest.raises(TraceFormatError, match=r"^s\.json: replicas\[1\]\.port: ") as err:
        Mapping.from_dict(doc, source="s.json")
    assert "\n" not in str(err.value)


# The testbed state (shrink.testbed/1): ReplicaState and TestbedState -----------------


def _state() -> TestbedState:
    return TestbedState(
        [lighttpd_replica(8080)], {"kind": "all"}, {"name": "1-replica"}, {}, "doc",
        {"php": "8"}, "t", server={"name": "nginx-php-fpm", "source": "built-in", "stop_signal": 3},
    )  # fmt: skip


def test_a_field_added_to_a_replica_state_is_written():
    @dataclass
    class Wider(ReplicaState):
        note: str = "new"

    r = lighttpd_replica(8080)
    d = Wider(**{f: getattr(r, f) for f in r.__dataclass_fields__}).to_dict()
    assert d["note"] == "new" and d["pids"] == [10, 11, 12] and d["master_pid"] == 10


def test_a_field_added_to_a_testbed_state_is_written():
    @dataclass
    class Wider(TestbedState):
        note: str = "new"

    st = _state()
    assert Wider(**{f: getattr(st, f) for f in st.__dataclass_fields__}).to_dict()["note"] == "new"


def test_a_state_reads_back_and_writes_the_same_bytes(tmp_path):
    path = _state().write(tmp_path / "s.json")
    d = json.loads(path.read_text())
    assert list(d) == [
        "schema", "server", "replicas", "share", "mapping", "machine", "docroot", "versions",
        "started", "notes",
    ]  # fmt: skip
    assert list(d["replicas"][0])[:6] == ["name", "address", "port", "pids", "cpus", "master_pid"]
    # a state read back writes what it read: the server's keys keep their order too
    before = path.read_bytes()
    assert TestbedState.read(path).write(tmp_path / "again.json").read_bytes() == before


def test_an_older_state_reads_with_defaults(tmp_path):
    d = _state().to_dict()
    del d["server"], d["notes"], d["replicas"][0]["pinned"], d["replicas"][0]["exes"]
    (tmp_path / "s.json").write_text(json.dumps(d))
    st = TestbedState.read(tmp_path / "s.json")
    assert st.server == {"name": "lighttpd-php-cgi", "source": "built-in"} and st.notes == []
    assert st.replicas[0].pinned == {} and st.replicas[0].exes == {}


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        ("server", {"stop_signal": 99}, r"server\.stop_signal: "),
        ("replica", {"starttimes": {"10": -1}}, r"replicas\[0\]\.starttimes\.10: "),
        ("replica", {"masters": [0]}, r"replicas\[0\]\.masters\[0\]: "),
        ("replica", {"exes": {"x": "/bin/sh"}}, r"replicas\[0\]\.exes\.x\.\[key\]: "),
    ],
)
def test_a_bad_state_names_the_file_and_field(where, value, field, tmp_path):
    d = _state().to_dict()
    (d["server"] if where == "server" else d["replicas"][0]).update(value)
    (tmp_path / "s.json").write_text(json.dumps(d))
    with pytest.raises(TestbedError, match=r"s\.json: " + field) as err:
        TestbedState.read(tmp_path / "s.json")
    assert "\n" not in str(err.value)


# The enforcers (a testbed state's replica ``enforce`` and ``cgroup``) ---------------
# Only their records: nothing here makes a cgroup or starts a co-runner.

V1 = CgroupLayout(1, None, None, None)


def _enforcers() -> list:
    cfs = CfsQuota("r0", V1, cpu_fraction=0.25, period_us=16000)
    cfs.quota_us = 4000
    cfs.cgroup.dirs = {"cpu": "/sys/fs/cgroup/cpu/shrink/r0"}
    co = CoRunner("r1", V1, cpu_fraction=0.3)
    co.cpus, co.spinners, co.helper = (0, 1), {1234: 99887766}, "c"
    fake = FakeEnforcer(0.5)
    fake.start((2,))
    fake.add([10, 11])
    return [cfs, co, CoRunner("r2", None, cpu_fraction=0.5, period_us=2000), fake]


def test_a_field_added_to_an_enforcer_is_written():
    @dataclass(init=False, eq=False)
    class WiderCfs(CfsQuota):
        note: str = "new"

    @dataclass(eq=False)
    class WiderFake(FakeEnforcer):
        note: str = "new"

    @dataclass
    class WiderCgroup(Cgroup):
        note: str = "new"

    cfs = WiderCfs("r0", V1, cpu_fraction=0.5, period_us=8000).to_dict()
    assert cfs["note"] == "new" and next(iter(cfs)) == "mechanism" and cfs["cgroup"]["version"] == 1
    assert WiderFake(0.5).to_dict()["note"] == "new"
    assert WiderCgroup("g", V1).to_dict() == {"name": "g", "version": 1, "dirs": {}, "note": "new"}


def test_an_enforcer_reads_back_what_it_wrote():
    for enf in _enforcers():
        doc = json.loads(json.dumps(enf.to_dict()))
        back = enforcer_from_dict(doc)
        assert type(back) is type(enf) and back.to_dict() == doc
        assert back.describe() == enf.describe()
    assert list(_enforcers()[1].to_dict()) == [
        "mechanism", "cpu_fraction", "period_us", "spin_us", "helper", "cpus", "spinners", "cgroup",
    ]  # fmt: skip


def test_an_older_enforcer_record_reads_with_defaults():
    cg = Cgroup.from_dict({"name": "g"})
    assert cg.layout.version == 1 and cg.dirs == {}
    cfs = enforcer_from_dict({"cgroup": {"name": "g", "version": 2}})
    assert isinstance(cfs, CfsQuota) and (cfs.cpu_fraction, cfs.quota_us, cfs.period_us) == (
        1.0, None, None,
    )  # fmt: skip
    co = enforcer_from_dict({"mechanism": "corunner", "cpu_fraction": 0.25, "period_us": 1000})
    assert (co.spin_us, co.helper, co.spinners, co.cgroup) == (750, "", {}, None)


def _enforced_state() -> dict:
    d = _state().to_dict()
    d["replicas"] = [dict(d["replicas"][0], enforce=e.to_dict()) for e in _enforcers()]
    for i, r in enumerate(d["replicas"]):
        r["name"], r["port"] = f"r{i}", 8080 + i
        if r["enforce"].get("cgroup"):
            r["enforce"]["cgroup"]["dirs"] = {}  # folders under this machine's mounts: not here
    return d


@pytest.mark.parametrize(
    ("replica", "where", "value", "field"),
    [
        (0, ("cpu_fraction",), 3, r"replicas\[0\]\.enforce: cpu_fraction: "),
        (0, ("cgroup", "version"), 3, r"replicas\[0\]\.enforce: cgroup\.version: must be 1 or 2"),
        (1, ("spinners", "x"), 1, r"replicas\[1\]\.enforce: spinners\.x"),
        (1, ("cpu_fraction",), 0.01, r"replicas\[1\]\.enforce: cpu_fraction == 0\.01: "),
        (2, ("period_us",), None, r"replicas\[2\]\.enforce: co-runner lacks period_us"),
        (3, ("members",), "all", r"replicas\[3\]\.enforce: members: "),
    ],
)
def test_a_bad_enforcer_in_a_state_names_the_file_and_field(replica, where, value, field, tmp_path):
    d = _enforced_state()
    part = d["replicas"][replica]["enforce"]
    for key in where[:-1]:
        part = part[key]
    if value is None:
        del part[where[-1]]
    else:
        part[where[-1]] = value
    (tmp_path / "s.json").write_text(json.dumps(d))
    with pytest.raises(TestbedError, match=r"s\.json: " + field) as err:
        TestbedState.read(tmp_path / "s.json")
    assert "\n" not in str(err.value)


def test_a_state_with_enforcers_reads_back_and_writes_the_same_bytes(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(_enforced_state(), indent=2) + "\n")
    st = TestbedState.read(tmp_path / "s.json")
    assert st.write(tmp_path / "again.json").read_text() == (tmp_path / "s.json").read_text()
    assert isinstance(enforcer_from_dict(st.replicas[1].enforce), CoRunner)


# The docroot manifest (shrink.docroot/1) -------------------------------------------


def test_a_field_added_to_a_manifest_is_written():
    @dataclass
    class Wider(Manifest):
        note: str = "new"

    d = Wider("tcp", [StaticFile("/a", 10, 10), StaticFile("/b", 5, 9)], []).to_dict()
    assert d["note"] == "new" and d["schema"] == "shrink.docroot/1"
    # a nominal size is written only where a cap made the file smaller
    assert d["static"][0] == {"path": "/a", "bytes": 10}
    assert d["static"][1] == {"path": "/b", "bytes": 5, "nominal_bytes": 9}


def test_a_manifest_reads_back_and_writes_the_same_bytes(tmp_path):
    tcp_docroot(tmp_path)
    again = dumps(read_manifest(tmp_path).to_dict(), indent=1, sort_keys=True) + "\n"
    assert again == (tmp_path / "manifest.json").read_text()


def test_an_older_manifest_reads_with_defaults(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps({"schema": "shrink.docroot/1", "workload": "tcp", "static": [], "dynamic": []})
    )
    m = read_manifest(tmp_path)
    assert m.params == {} and m.php["work_unit_us"] == 1.0


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("static", [{"path": "/a", "bytes": -1}], r"static\[0\]\.bytes: "),
        ("dynamic", [{"path": "/a", "bytes": 1, "work": 1}], r"lacks dynamic\[0\]\.mem_kib"),
        ("schema", "shrink.docroot/9", r"schema == 'shrink\.docroot/9'"),
    ],
)
def test_a_bad_manifest_names_the_file_and_field(key, value, field, tmp_path):
    tcp_docroot(tmp_path)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    doc[key] = value
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"manifest\.json: .*" + field) as err:
        read_manifest(tmp_path)
    assert "\n" not in str(err.value)
