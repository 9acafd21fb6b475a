"""The schemas of the JSON and TOML files shrink reads, as pydantic models.

:mod:`shrink.files` validates every such file against one of these before a
stage sees it. Each model bounds every size a file can state (sockets, cores,
list lengths, string lengths, counts) so that a damaged or hostile file fails
here with a one-line error instead of allocating gigabytes later. Models allow
keys they do not know: a newer writer may add some, and readers ignore them.
Floats that a writer stores as ``null`` for NaN are ``float | None``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "CalibrationFile",
    "LoadCurveFile",
    "MachineSpec",
    "ManifestFile",
    "PredictionFile",
    "RegistryEntryFile",
    "TestbedStateFile",
    "TraceMeta",
]

# Bounds: generous for any real file, small enough that nothing derived from them
# (a CPU list per socket, a schedule per level) can exhaust memory.
MAX_LIST = 100_000
MAX_NAME = 4_096
MAX_TEXT = 1_000_000
MAX_CPUS = 8_192

Name = Annotated[str, Field(max_length=MAX_NAME)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Count = Annotated[int, Field(ge=0, le=10**12)]
Pid = Annotated[int, Field(ge=1, le=2**22)]  # the kernel's pid_max limit
Cpu = Annotated[int, Field(ge=0, lt=MAX_CPUS)]
Port = Annotated[int, Field(ge=0, le=65_535)]
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-1e15, le=1e15)]
NonNeg = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1e15)]
Positive = Annotated[float, Field(allow_inf_nan=False, gt=0.0, le=1e15)]
Fraction = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1.0)]
Alpha = Annotated[float, Field(allow_inf_nan=False, gt=0.0, le=1.0)]


def _bounded_or_nan(v: float) -> float:
    if not math.isnan(v) and abs(v) > 1e15:
        raise ValueError("must be NaN or at most 1e15 in magnitude")
    return v


# A figure a writer may store as NaN (json.dumps writes NaN), but never a huge one.
Loose = Annotated[float, AfterValidator(_bounded_or_nan)]
Stat = Literal["mean", "p50", "p90", "p99", "p999"]


class _Open(BaseModel):
    """A part of a file: known keys checked, unknown keys kept."""

    model_config = ConfigDict(extra="allow")


# Machine spec (TOML, and the ``machine`` of curves, states and calibrations) ----
class NicSpec(_Open):
    ports: Annotated[int, Field(ge=1, le=64)] = 1
    queues_per_port: Annotated[int, Field(ge=1, le=4_096)] = 1
    port_socket: Annotated[list[Annotated[int, Field(ge=0, le=63)]], Field(max_length=64)] = []


class MachineSpec(_Open):
    name: Name = "unnamed"
    sockets: Annotated[int, Field(ge=1, le=64)]
    cores_per_socket: Annotated[int, Field(ge=1, le=4_096)]
    threads_per_core: Annotated[int, Field(ge=1, le=16)] = 1
    llc_mib: Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1e6)] = 0.0
    ghz: Annotated[float, Field(allow_inf_nan=False, gt=0.0, le=1e3)] | None = None
    cpus: Annotated[
        list[Annotated[list[Cpu], Field(max_length=MAX_CPUS)]], Field(max_length=64)
    ] = []
    nic: NicSpec = NicSpec()
    extra: dict[str, Any] = {}

    @model_validator(mode="after")
    def _total(self) -> MachineSpec:
        n = self.sockets * self.cores_per_socket * self.threads_per_core
        if n > MAX_CPUS:
            raise ValueError(
                f"sockets x cores_per_socket x threads_per_core == {n}, must be <= {MAX_CPUS}"
            )
        return self


class ShareModel(_Open):
    kind: Name = "all"
    cpus: Annotated[list[Cpu], Field(max_length=MAX_CPUS)] | None = None
    fraction: Fraction | None = None
    # Read back into a Share, whose CFS quota is computed from these two (found by
    # fuzzing: a NaN or infinite fraction crashed it).
    cpu_fraction: Fraction | None = None
    period_us: Annotated[int, Field(ge=1, le=10**7)] | None = None


# LoadCurve ---------------------------------------------------------------------
OptFloat = NonNeg | None


class ClassStatsModel(_Open):
    n: Count
    throughput: OptFloat
    mean: OptFloat
    p50: OptFloat
    p90: OptFloat
    p99: OptFloat
    p999: OptFloat
    dist: Annotated[list[OptFloat], Field(max_length=10_000)] | None = None


class LevelStatsModel(_Open):
    throughput: OptFloat
    overall: ClassStatsModel
    per_class: Annotated[dict[Name, ClassStatsModel], Field(max_length=1_000)] = {}
    offered: OptFloat = None
    utilization: OptFloat = None
    errors: Count = 0
    generator_behind: bool = False
    send_lag_p99: Finite | None = None
    send_lag_max: Finite | None = None
    generator_cpu: OptFloat = None
    other_cpu: Finite | None = None
    steal: Finite | None = None
    generator_steal: Finite | None = None
    # Failures by class over the window and the requests intended in it (absent in
    # curves written before failures were counted).
    failures: Annotated[dict[Name, Count], Field(max_length=64)] | None = None
    requests: Count | None = None


class LevelModel(_Open):
    level: NonNeg
    reps: Annotated[list[LevelStatsModel], Field(max_length=10_000)]


class GeneratorMeta(_Open):
    routing: Name = "hash"
    conns_per_session: Annotated[int, Field(ge=1, le=1_000)] = 1
    engine: Name | None = None


class CurveMeta(_Open):
    """The keys of a curve's ``meta`` that later stages read."""

    generator: GeneratorMeta = GeneratorMeta()
    paired: bool = False
    scaled_time: Positive = 1.0
    share_load: Positive = 1.0
    skip: NonNeg = 0.0
    workload: Name = "measured"
    target: dict[str, Any] = {}


class LoadCurveFile(_Open):
    schema_: Literal["shrink.loadcurve/1"] = Field(alias="schema")
    knob: Name = "rate_factor"
    alpha: Alpha = 1.0
    share: ShareModel = ShareModel()
    mapping: Name = ""
    machine: dict[str, Any] = {}
    meta: CurveMeta = CurveMeta()
    levels: Annotated[list[LevelModel], Field(max_length=MAX_LIST)]


# Testbed state -------------------------------------------------------------------
class ReplicaModel(_Open):
    name: Name
    address: Name
    port: Port
    cpus: Annotated[list[Cpu], Field(max_length=MAX_CPUS)]
    # Written since the server recipes: the masters and each program's processes;
    # before them: master_pid, lighttpd_pids and php_pids. One of the two is needed.
    masters: Annotated[list[Pid], Field(min_length=1, max_length=MAX_CPUS)] | None = None
    processes: Annotated[
        dict[Name, Annotated[list[Pid], Field(max_length=MAX_LIST)]], Field(max_length=64)
    ] | None = None
    master_pid: Pid | None = None
    pids: Annotated[list[Pid], Field(max_length=MAX_LIST)] = []
    lighttpd_pids: Annotated[list[Pid], Field(max_length=MAX_CPUS)] | None = None
    php_pids: Annotated[list[Pid], Field(max_length=MAX_LIST)] | None = None
    starttimes: Annotated[dict[Pid, Count], Field(max_length=MAX_LIST)] = {}
    # The program each process ran (its executable's path), checked before a signal.
    exes: Annotated[dict[Pid, Text], Field(max_length=MAX_LIST)] = {}
    pinned: Annotated[
        dict[Pid, Annotated[list[Cpu], Field(max_length=MAX_CPUS)]], Field(max_length=MAX_LIST)
    ] = {}
    config: Text
    errorlog: Text = ""
    run_dir: Text = ""
    nic_socket: Annotated[int, Field(ge=0, le=63)] | None = None
    cgroup: dict[str, Any] | None = None
    enforce: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _pids_recorded(self) -> ReplicaModel:
        if self.processes is None and (self.lighttpd_pids is None or self.php_pids is None):
            raise ValueError("needs processes (or lighttpd_pids and php_pids)")
        if self.masters is None and self.master_pid is None:
            raise ValueError("needs masters (or master_pid)")
        return self


class ServerInfo(_Open):
    name: Name = "lighttpd-php"
    stop_signal: Annotated[int, Field(ge=1, le=64)] = 15


class TestbedStateFile(_Open):
    __test__ = False  # not a pytest test class, despite the name

    schema_: Literal["shrink.testbed/1"] = Field(alias="schema")
    replicas: Annotated[list[ReplicaModel], Field(min_length=1, max_length=1_024)]
    share: ShareModel
    mapping: dict[str, Any]
    machine: dict[str, Any]
    docroot: Text
    versions: dict[Name, Text]
    started: Name
    notes: Annotated[list[Text], Field(max_length=10_000)] = []
    stopped: Name | None = None
    server: ServerInfo = ServerInfo()


class RegistryOwner(_Open):
    pid: Pid
    starttime: Count | None = None


class RegistryEntryFile(_Open):
    """An entry of the testbed registry (:mod:`shrink.testbed.registry`)."""

    state_path: Text
    owner: RegistryOwner | None = None
    state: TestbedStateFile


# Prediction (shrink predict's prediction.json) -------------------------------------
class StatPredictionModel(_Open):
    mat: Loose | None
    ci: Annotated[list[Loose | None], Field(min_length=2, max_length=2)] | None = None
    threshold: Positive
    status: Literal["ok", "not_reached", "below_range"] | None = None
    stalled_ceiling: NonNeg | None = None


class ValidateInputs(_Open):
    """What ``shrink validate --full-run run`` reads from ``prediction.json``'s inputs."""

    trace: Text | None = None
    target: Name = "testbed"
    machine: Name = "this"
    docroot: Text | None = None
    server_cpus: Annotated[list[Cpu], Field(max_length=MAX_CPUS)] | None = None
    plan: dict[str, Any] | None = None
    skip: NonNeg = 0.0


class MappingPredictionModel(_Open):
    mean: StatPredictionModel | None = None
    p50: StatPredictionModel | None = None
    p90: StatPredictionModel | None = None
    p99: StatPredictionModel | None = None
    p999: StatPredictionModel | None = None
    curve: dict[Name, Annotated[list[Loose | None], Field(max_length=MAX_LIST)]] = {}
    detail: dict[str, Any] = {}

    @model_validator(mode="after")
    def _other_stats(self) -> MappingPredictionModel:
        # A reader takes any other key holding a dict with "mat" for a statistic too.
        for key, value in (self.model_extra or {}).items():
            if isinstance(value, dict) and "mat" in value:
                try:
                    StatPredictionModel.model_validate(value)
                except ValidationError as exc:
                    err = exc.errors(include_url=False)[0]
                    where = ".".join(str(x) for x in (key, *err.get("loc", ())))
                    raise ValueError(f"{where}: {err.get('msg', 'invalid')}") from None
        return self


class PredictionFile(_Open):
    """``shrink.prediction/1`` (:mod:`shrink.prediction`); the main job's fields are optional."""

    schema_: Literal["shrink.prediction/1"] = Field(alias="schema")
    machine: dict[str, Any] = {}
    mappings: Annotated[dict[Name, MappingPredictionModel], Field(max_length=1_000)]
    recommended: Name | None = None
    reason: Text = ""
    calibration: dict[str, Any] = {}
    assumptions: Annotated[list[Any], Field(max_length=MAX_LIST)] = []
    target: Name | None = None
    target_description: Text | None = None
    alpha: Alpha | None = None
    level: Name | None = None
    seed: Annotated[int, Field(ge=0, le=2**63)] | None = None
    share: ShareModel | None = None
    thresholds: dict[Stat, Positive] | None = None
    measured_mats: dict[Stat, StatPredictionModel] | None = None
    confidence_summary: Text | None = None
    self_checks: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    full_run: dict[str, Any] | None = None
    inputs: ValidateInputs | None = None
    whatif: dict[str, Any] | None = None


# Calibration ------------------------------------------------------------------------
class WorkloadModel(_Open):
    name: Name
    dynamic_fraction: Fraction
    static_memory_ratio: Fraction = 0.0
    thresholds: dict[Stat, Positive]
    notes: Text = ""


class ConfigModel(_Open):
    n_cores: Annotated[int, Field(ge=1, le=MAX_CPUS)]
    mapping: Name = "1-replica"
    cpus: Annotated[list[Cpu], Field(max_length=MAX_CPUS)] | None = None


class ObservationModel(_Open):
    name: Name
    kind: Name
    workload: Name
    stat: Name | None = None
    config: ConfigModel
    value: Finite
    precision: Finite | None = None
    ref: ConfigModel | None = None
    at: Finite | None = None
    source: Text = ""


class CalibrationFile(_Open):
    schema_: Name = Field(alias="schema")
    physics: dict[Name, Finite | None]
    free: Annotated[list[Name], Field(max_length=100)]
    x: Annotated[list[Finite], Field(max_length=100)]
    cov: Annotated[list[Annotated[list[Finite], Field(max_length=100)]], Field(max_length=100)]
    model_error: Finite = 0.0
    machine: MachineSpec
    workloads: Annotated[dict[Name, WorkloadModel], Field(max_length=1_000)]
    observations: Annotated[list[ObservationModel], Field(max_length=MAX_LIST)] = []
    fitted: dict[Name, Finite] = {}
    fixed: dict[Name, Finite] | None = None
    name: Name = "custom"
    checks: Annotated[list[Any], Field(max_length=MAX_LIST)] = []

    @model_validator(mode="after")
    def _shapes(self) -> CalibrationFile:
        n = len(self.free)
        if len(self.x) != n or len(self.cov) != n or any(len(r) != n for r in self.cov):
            raise ValueError(f"x and cov must have {n} entries (one per free parameter)")
        return self


# Docroot manifest and Parquet metadata ---------------------------------------------
class ManifestFile(_Open):
    schema_: Name = Field(alias="schema")


class TraceMeta(_Open):
    """The JSON a trace keeps in its Parquet metadata (provenance)."""
