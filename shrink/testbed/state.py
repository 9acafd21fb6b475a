"""The testbed state file (``shrink.testbed/1``): what ``up`` started, for ``status``/``down``.

Layout (see the project brief)::

    {"schema": "shrink.testbed/1",
     "server": {"name", "source", "stop_signal"},
     "replicas": [{"name", "address", "port", "pids", "cpus", "processes",
                   "masters", "master_pid", "config", "cgroup", "starttimes",
                   "pinned", "nic_socket", "errorlog", "logs", "run_dir",
                   "enforce"}],
     "share": Share.to_dict() | {"enforce": ...}, "mapping": Mapping.to_dict(),
     "machine": Machine.to_dict(),
     "docroot": path, "versions": {program: version}, "started": iso-time, "notes": [...],
     "php_post_max_mib": PHP's post_max_size in MiB (built-in recipes),
     "pid_ns": the PID namespace up ran in (its PIDs name its processes only there)}

``processes`` lists the replica's PIDs by role (``lighttpd`` and ``php-cgi``,
``nginx`` and ``php-fpm``, or ``server`` for a recipe file), ``pids`` all of
them, ``masters`` the ones signalled first on stop, ``starttimes`` their kernel
start times (so a reused PID is never signalled), and ``pinned`` the core each
worker and pool child was pinned to. ``server`` names the recipe that started
them. Files written before recipes (``lighttpd_pids``, ``php_pids``) still read.
``share`` is read back as a :class:`shrink.share.Share`; its ``enforce`` (how the
share is held: :mod:`shrink.enforce`'s description, or None) as ``share_enforce``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    model_serializer,
    model_validator,
    with_config,
)

# pydantic reads typing.TypedDict only from Python 3.12 on
from typing_extensions import TypedDict

from shrink import files
from shrink.atomic import write_text
from shrink.enforce import enforcer_from_dict
from shrink.enforce.cfs import Cgroup, foreign_cgroup
from shrink.errors import StateError, TestbedError, TopologyError, TraceFormatError
from shrink.jsonout import dumps
from shrink.schemas import MAX_CPUS, MAX_LIST, Count, Cpu, Name, Pid, Port, Socket, Text
from shrink.share import Share

__all__ = ["SCHEMA", "ReplicaState", "TestbedState", "elsewhere", "salvage_pids"]

SCHEMA = "shrink.testbed/1"


@with_config(ConfigDict(extra="allow"))
class ServerRecord(TypedDict, total=False):
    """The recipe that started the testbed (``shrink.testbed.lifecycle.server_record``)."""

    name: Name
    source: Text
    stop_signal: Annotated[int, Field(ge=1, le=64)]  # sent to its masters on ``down``


def _legacy(d: Mapping[str, Any]) -> dict[str, Any]:
    """A replica as written before recipes (``lighttpd_pids``, ``php_pids``, ``master_pid``)
    in today's form; a key written as null is absent (the older fields stand in)."""
    out = dict(d)
    if d.get("processes") is None:
        if d.get("lighttpd_pids") is None or d.get("php_pids") is None:
            raise ValueError("needs processes (or lighttpd_pids and php_pids)")
        out["processes"] = {"lighttpd": d["lighttpd_pids"], "php-cgi": d["php_pids"]}
    if d.get("masters") is None:
        if d.get("master_pid") is None:
            raise ValueError("needs masters (or master_pid)")
        out["masters"] = [d["master_pid"]]
    return out


def _ours(d: Mapping[str, Any]) -> None:
    """A :class:`StateError` if the replica names a cgroup outside shrink's own hierarchy
    (``down`` would kill its members and remove it)."""
    enf = d.get("enforce")
    enforce_cg = enf.get("cgroup") if isinstance(enf, Mapping) else None
    for where, cg in (("cgroup", d.get("cgroup")), ("enforce.cgroup", enforce_cg)):
        if cg:
            why = foreign_cgroup(cg) if isinstance(cg, dict) else "not a table"
            if why is not None:
                raise StateError(f"replica {d.get('name')!r}: field {where!r}: {why}")


def _read_as(read: Callable[[dict[str, Any]], Any]) -> AfterValidator:
    """A record checked as ``read`` will read it when the state is used (an error names
    its field), and kept as written."""

    def check(d: dict[str, Any] | None) -> dict[str, Any] | None:
        if d is not None:
            try:
                read(d)
            except (TraceFormatError, TopologyError) as exc:
                raise ValueError(str(exc)) from None
        return d

    return AfterValidator(check)


# A co-runner's spinner that is gone leaves the share's CPUs to the server whole: what
# is measured is no longer the share.
SPINNER = "co-runner (the CPU-time share is not enforced without it)"


@dataclass
class ReplicaState(files.FileFormat):
    """One running replica. Written beside the fields: ``pids`` and ``master_pid``."""

    name: Name
    address: Name
    port: Port
    cpus: Annotated[list[Cpu], Field(max_length=MAX_CPUS)]
    masters: Annotated[list[Pid], Field(min_length=1, max_length=MAX_CPUS)]
    processes: Annotated[
        dict[Name, Annotated[list[Pid], Field(max_length=MAX_LIST)]], Field(max_length=64)
    ]
    # kernel start times, so that a reused PID is never signalled
    starttimes: Annotated[dict[Pid, Count], Field(max_length=MAX_LIST)]
    pinned: Annotated[
        dict[Pid, Annotated[list[Cpu], Field(max_length=MAX_CPUS)]], Field(max_length=MAX_LIST)
    ]
    config: Text
    errorlog: Text = ""
    run_dir: Text = ""
    nic_socket: Socket | None = None
    cgroup: Annotated[dict[str, Any] | None, _read_as(Cgroup.from_dict)] = None
    # shrink.enforce: mechanism, its PIDs and groups
    enforce: Annotated[dict[str, Any] | None, _read_as(enforcer_from_dict)] = None
    # the program each PID ran at start, checked before a signal
    exes: Annotated[dict[Pid, Text], Field(max_length=MAX_LIST)] = field(default_factory=dict)
    # its other error logs (nginx-php-fpm: php-fpm's php-fpm.log): capped, quoted as errorlog
    logs: Annotated[list[Text], Field(max_length=8)] = field(default_factory=list)

    WHAT = "replica"

    @property
    def error_logs(self) -> list[str]:
        """Every error log the replica's servers write: ``errorlog``, then ``logs``."""
        return [log for log in (self.errorlog, *self.logs) if log]

    @property
    def pids(self) -> list[int]:
        """Every recorded PID, role by role."""
        return [p for pids in self.processes.values() for p in pids]

    @property
    def master_pid(self) -> int:
        """The front server's master (lighttpd, nginx, the recipe's first command)."""
        return self.masters[0]

    @property
    def spinners(self) -> dict[int, int]:
        """The co-runner's spinners (PID: kernel start time) when the share is enforced
        by co-running: without them the share's CPUs run the server whole."""
        enf = self.enforce or {}
        if enf.get("mechanism") != "corunner":
            return {}
        return {int(p): int(t) for p, t in (enf.get("spinners") or {}).items()}

    def role(self, pid: int) -> str:
        """The role of a recorded PID (``lighttpd``, ``php-fpm``, ...); ``server`` if none."""
        return next((k for k, v in self.processes.items() if pid in v), "server")

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        if not isinstance(d, Mapping):
            return d
        _ours(d)
        return {"starttimes": {}, "pinned": {}, **_legacy(d)}

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        # pids and master_pid stand where they always have (the file is written unsorted)
        d: dict[str, Any] = handler(self)
        head = {k: d.pop(k) for k in ("name", "address", "port")}
        cpus = d.pop("cpus")
        return {**head, "pids": self.pids, "cpus": cpus, "master_pid": self.master_pid, **d}


def _default_server() -> dict[str, Any]:
    return {"name": "lighttpd-php-cgi", "source": "built-in"}


@dataclass
class TestbedState(files.VersionedFile):
    """Everything ``up`` started, as written to STATE.json (see the module docstring)."""

    __test__ = False  # not a pytest test class

    replicas: Annotated[list[ReplicaState], Field(min_length=1, max_length=1_024)]
    share: Share
    mapping: dict[str, Any]  # Mapping.to_dict()
    machine: dict[str, Any]  # Machine.to_dict()
    docroot: Text
    versions: dict[Name, Text]
    started: Name
    notes: Annotated[list[Text], Field(max_length=10_000)] = field(default_factory=list)
    stopped: Annotated[Name | None, Field(exclude_if=files.is_none)] = None
    server: ServerRecord = field(default_factory=_default_server)  # type: ignore[assignment]
    # PHP's post_max_size (MiB) on a built-in recipe: a sweep of a trace with larger
    # bodies is refused, as PHP would drop each body and run a cheaper request.
    php_post_max_mib: Annotated[int | None, Field(ge=1, exclude_if=files.is_none)] = None
    # The NIC queue IRQs' CPU lists before `up --apply-irq` changed them (IRQ -> list),
    # put back by `down`.
    irq: Annotated[dict[Name, Name] | None, Field(exclude_if=files.is_none)] = None
    # The PID namespace `up` ran in (processes.pid_namespace): its PIDs name its
    # processes only there (see TestbedState.elsewhere).
    pid_ns: Annotated[int | None, Field(ge=1, exclude_if=files.is_none)] = None
    # How the share is held (shrink.enforce): written as the share's "enforce".
    share_enforce: Annotated[dict[str, Any] | None, Field(exclude=True)] = None

    SCHEMA = SCHEMA
    WHAT = "testbed state"

    def __post_init__(self) -> None:
        # The file's form (Share.to_dict() plus "enforce") is read as a Share.
        if not isinstance(self.share, Share):
            d = dict(self.share)
            self.share_enforce = d.pop("enforce", self.share_enforce)
            self.share = Share.from_dict(d)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, d: Any) -> Any:
        if not isinstance(d, Mapping) or not isinstance(d.get("share"), Mapping):
            return d
        share = dict(d["share"])
        enforce = share.pop("enforce", None)
        server = d.get("server") or _default_server()
        return {**d, "share": share, "share_enforce": enforce, "server": server}

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        d["share"] = {**d["share"], "enforce": self.share_enforce}
        return {"schema": d.pop("schema"), "server": d.pop("server"), **d}

    @classmethod
    def from_dict(cls, d: Any, *, source: str | Path | None = None) -> Self:
        """The state a file holds: a :class:`TestbedError` naming the file and field if it
        is not one, a :class:`StateError` if it names what shrink did not make."""
        try:
            return super().from_dict(d, source=source or "state")
        except TraceFormatError as exc:
            raise TestbedError(str(exc)) from None
        except StateError as exc:
            raise StateError(f"{source or 'state'}: {exc}; nothing it names was touched") from None

    def elsewhere(self) -> str | None:
        """:func:`elsewhere` of this state's ``pid_ns``."""
        return elsewhere(self.pid_ns, self.started, self.replicas)

    def write(self, path: str | Path) -> Path:
        """Write atomically (a reader never sees half a file)."""
        return write_text(path, dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> TestbedState:
        """The state, checked against its type."""
        path = Path(path)
        if not path.exists():
            raise TestbedError(f"{path}: no such testbed state file (was `testbed up` run?)")
        try:
            d = files.read_json(path, what=cls.WHAT)
        except TraceFormatError as exc:
            raise TestbedError(str(exc)) from None
        return cls.from_dict(d, source=str(path))


def elsewhere(pid_ns: object, started: object = None, replicas: object = None) -> str | None:
    """Why a testbed's PIDs cannot be looked at from here: ``up`` ran in PID namespace
    ``pid_ns``, not this process's (``unshare --pid``, a container sharing this file
    system), so its PIDs name other processes here, or none; None if the same or unknown.
    Looked at anyway, status said its running servers "crashed or killed", and down
    stopped nothing, said "nothing was running" and removed their run folder."""
    from shrink.processes import pid_namespace, pid_namespace_gone

    here = pid_namespace()
    if not isinstance(pid_ns, int) or here is None or here == pid_ns:
        return None
    if pid_namespace_gone(pid_ns, _began_by(started, replicas)):
        return None  # its processes ended with it: looked at here, found gone
    return (
        f"the testbed was brought up in another PID namespace (pid:[{pid_ns}]; this shrink "
        f"runs in pid:[{here}]), whose process IDs name other processes here, or none: "
        "run shrink where `testbed up` ran (the same container or `unshare --pid`)"
    )


def _began_by(started: object, replicas: object = None) -> float | None:
    """The wall-clock time a testbed's namespace was there by: its ``started`` (an ISO
    time, written once its servers ran), a minute later (both are to the second); None
    if unknown. Or, if later, when its servers began (their recorded start times since
    boot) on the clock as it is now: a wall clock stepped forward over a minute since
    ``up`` (NTP's first sync) put a living namespace's processes after ``started`` and
    it was taken for another that took its number (status: crashed; down cleared it)."""
    from datetime import datetime

    from shrink.processes import _boot_time

    try:
        by = datetime.fromisoformat(str(started)).timestamp() + 60.0
    except (TypeError, ValueError, OverflowError):
        return None
    hz, up = os.sysconf("SC_CLK_TCK"), _uptime()
    # (a start time past this boot's uptime is an earlier boot's: read on this boot's
    # clock, an ended namespace was there by a time after the new one that took its
    # number began, and a testbed a reboot ended was taken for one living elsewhere)
    ticks = [
        t
        for r in _list(replicas)
        for t in _starts(r)
        if isinstance(t, int) and t >= 0 and (up is None or t / hz <= up)
    ]
    boot = _boot_time() if ticks else None
    return by if boot is None else max(by, boot + max(ticks) / hz + 1)


def _uptime() -> float | None:
    """Seconds since boot (``/proc/uptime``, not moved by a step of the wall clock)."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _list(replicas: object) -> list[Any]:
    return replicas if isinstance(replicas, list) else []


def _starts(replica: object) -> list[Any]:
    """A replica's recorded start times, of a state or of its JSON (any shape: [])."""
    got = replica.get("starttimes") if isinstance(replica, dict) else None
    got = getattr(replica, "starttimes", got)
    return list(got.values()) if isinstance(got, dict) else []


def salvage_pids(path: str | Path) -> dict[int, int | None]:
    """The PIDs (with their start times, where recorded) a damaged state file still names.

    ``testbed down`` falls back on this when the file no longer validates, so a
    testbed whose state was damaged can still be stopped through the tool. The
    file is read leniently (bad bytes replaced, JSON if it parses, else every
    ``"...pid...": N`` / ``[N, ...]`` the text holds); a caller signals only the
    PIDs that still run as lighttpd or php-cgi, or whose start time matches.
    """
    try:
        with Path(path).open("rb") as f:
            text = f.read(4 << 20).decode("utf-8", errors="replace")  # a state is a few KB
    except OSError:
        return {}
    starts: dict[int, int] = {}
    pids: set[int] = set()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("replicas"), list):
        for r in doc["replicas"]:
            if isinstance(r, dict):
                _salvage_replica(r, pids, starts)
    else:
        for m in _PID_LIST.finditer(text):
            pids.update(int(x) for x in re.findall(r"\d{1,7}", m.group(1)))
        for m in _PID_MORE.finditer(text):
            pids.update(int(x) for x in re.findall(r"\d{1,7}", m.group(1)))
        for m in _PID_ONE.finditer(text):
            pids.add(int(m.group(1)))
        for m in _STARTS.finditer(text):
            for pid, start in re.findall(r'"(\d{1,7})"\s*:\s*(\d{1,20})', m.group(1)):
                starts[int(pid)] = int(start)
    ok = {p for p in pids if 0 < p <= 2**22}
    return {p: starts.get(p) for p in sorted(ok)}


_PID_LIST = re.compile(r'"(?:pids|lighttpd_pids|php_pids)"\s*:\s*\[([^\]]{0,20000})\]')
_PID_ONE = re.compile(r'"master_pid"\s*:\s*(\d{1,7})')
# "processes": {"lighttpd": [...], ...} and "masters": [...]: any list of numbers under them
_PID_MORE = re.compile(r'"(?:masters|lighttpd|php-cgi|php-fpm|nginx)"\s*:\s*\[([^\]]{0,20000})\]')
_STARTS = re.compile(r'"starttimes"\s*:\s*\{([^}]{0,20000})\}')


def _salvage_replica(r: dict[str, Any], pids: set[int], starts: dict[int, int]) -> None:
    lists = [r.get(k) for k in ("pids", "lighttpd_pids", "php_pids", "master_pid", "masters")]
    procs = r.get("processes")
    if isinstance(procs, dict):
        lists += list(procs.values())
    for v in lists:
        for p in v if isinstance(v, list) else [v]:
            if isinstance(p, int) and not isinstance(p, bool):
                pids.add(p)
    st = r.get("starttimes")
    if isinstance(st, dict):
        for k, v in st.items():
            if isinstance(k, str) and k.isdigit() and len(k) < 8 and isinstance(v, int):
                starts[int(k)] = v
