"""The testbed state file (``shrink.testbed/1``): what ``up`` started, for ``status``/``down``.

Layout (see the project brief)::

    {"schema": "shrink.testbed/1",
     "server": {"name", "source", "stop_signal"},
     "replicas": [{"name", "address", "port", "pids", "cpus", "processes",
                   "masters", "master_pid", "config", "cgroup", "starttimes",
                   "pinned", "nic_socket", "errorlog", "run_dir", "enforce"}],
     "share": Share.to_dict() | {"enforce": ...}, "mapping": Mapping.to_dict(),
     "machine": Machine.to_dict(),
     "docroot": path, "versions": {program: version}, "started": iso-time, "notes": [...]}

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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink import files
from shrink.atomic import write_text
from shrink.enforce.cfs import foreign_cgroup
from shrink.errors import StateError, TestbedError, TraceFormatError
from shrink.jsonout import dumps
from shrink.schemas import TestbedStateFile
from shrink.share import SHARE_FORMAT, Share

__all__ = ["SCHEMA", "ReplicaState", "TestbedState", "salvage_pids"]

SCHEMA = "shrink.testbed/1"


@dataclass
class ReplicaState:
    """One running replica."""

    name: str
    address: str
    port: int
    cpus: list[int]
    masters: list[int]
    processes: dict[str, list[int]]
    starttimes: dict[int, int]
    pinned: dict[int, list[int]]
    config: str
    errorlog: str
    run_dir: str
    nic_socket: int | None = None
    cgroup: dict[str, Any] | None = None
    enforce: dict[str, Any] | None = None  # shrink.enforce: mechanism, its PIDs and groups
    exes: dict[int, str] = field(default_factory=dict)  # the program each PID ran at start

    @property
    def pids(self) -> list[int]:
        """Every recorded PID, role by role."""
        return [p for pids in self.processes.values() for p in pids]

    @property
    def master_pid(self) -> int:
        """The front server's master (lighttpd, nginx, the recipe's first command)."""
        return self.masters[0]

    def role(self, pid: int) -> str:
        """The role of a recorded PID (``lighttpd``, ``php-fpm``, ...); ``server`` if none."""
        return next((k for k, v in self.processes.items() if pid in v), "server")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "pids": self.pids,
            "cpus": self.cpus,
            "master_pid": self.master_pid,
            "masters": self.masters,
            "processes": self.processes,
            "starttimes": {str(k): v for k, v in self.starttimes.items()},
            "pinned": {str(k): v for k, v in self.pinned.items()},
            "config": self.config,
            "errorlog": self.errorlog,
            "run_dir": self.run_dir,
            "nic_socket": self.nic_socket,
            "cgroup": self.cgroup,
            "enforce": self.enforce,
            "exes": {str(k): v for k, v in self.exes.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplicaState:
        """The replica a state file records; a :class:`StateError` if it names a cgroup
        outside shrink's own hierarchy (``down`` would kill its members and remove it)."""
        for where, cg in (("cgroup", d.get("cgroup")), ("enforce.cgroup", _enforce_cg(d))):
            if cg:
                why = foreign_cgroup(cg) if isinstance(cg, dict) else "not a table"
                if why is not None:
                    raise StateError(f"replica {d.get('name')!r}: field {where!r}: {why}")
        # (a key written as null is absent: the schema lets the older fields stand in)
        if d.get("processes") is not None:
            processes = {str(k): [int(p) for p in v] for k, v in d["processes"].items()}
        else:  # written before recipes: lighttpd + php-cgi
            processes = {
                "lighttpd": [int(p) for p in d["lighttpd_pids"]],
                "php-cgi": [int(p) for p in d["php_pids"]],
            }
        return cls(
            name=d["name"],
            address=d["address"],
            port=int(d["port"]),
            cpus=[int(c) for c in d["cpus"]],
            # (not d.get("masters", [d["master_pid"]]): that default is evaluated always)
            masters=[int(p) for p in (d["masters"] if d.get("masters") else [d["master_pid"]])],
            processes=processes,
            starttimes={int(k): int(v) for k, v in d.get("starttimes", {}).items()},
            pinned={int(k): [int(c) for c in v] for k, v in d.get("pinned", {}).items()},
            config=d["config"],
            errorlog=d.get("errorlog", ""),
            run_dir=d.get("run_dir", ""),
            nic_socket=d.get("nic_socket"),
            cgroup=d.get("cgroup"),
            enforce=d.get("enforce"),
            exes={int(k): str(v) for k, v in (d.get("exes") or {}).items()},
        )


def _enforce_cg(d: dict[str, Any]) -> Any:
    enf = d.get("enforce")
    return enf.get("cgroup") if isinstance(enf, dict) else None


@dataclass
class TestbedState:
    """Everything ``up`` started, as written to STATE.json."""

    __test__ = False  # not a pytest test class

    replicas: list[ReplicaState]
    share: Share
    mapping: dict[str, Any]
    machine: dict[str, Any]
    docroot: str
    versions: dict[str, str]
    started: str
    notes: list[str] = field(default_factory=list)
    stopped: str | None = None
    server: dict[str, Any] = field(
        default_factory=lambda: {"name": "lighttpd-php-cgi", "source": "built-in"}
    )
    share_enforce: dict[str, Any] | None = None  # how the share is held (shrink.enforce)

    def __post_init__(self) -> None:
        # The file's form (Share.to_dict() plus "enforce") is read as a Share.
        if not isinstance(self.share, Share):
            d = dict(self.share)
            self.share_enforce = d.pop("enforce", self.share_enforce)
            self.share = Share.from_dict(d)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "server": self.server,
            "replicas": [r.to_dict() for r in self.replicas],
            "share": self.share.to_dict() | {"enforce": self.share_enforce},
            "mapping": self.mapping,
            "machine": self.machine,
            "docroot": self.docroot,
            "versions": self.versions,
            "started": self.started,
            "notes": self.notes,
        }
        if self.stopped is not None:
            d["stopped"] = self.stopped
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> TestbedState:
        if d.get("schema") != SCHEMA:
            raise TestbedError(f"{source or 'state'}: schema {d.get('schema')!r}, want {SCHEMA!r}")
        share = dict(d["share"])
        try:
            enforce = share.pop("enforce", None)
            typed = files.adapt(SHARE_FORMAT, share, what="testbed state", at="share")
        except TraceFormatError as exc:
            raise TestbedError(f"{source or 'state'}: {exc.reason}") from None
        try:
            replicas = [ReplicaState.from_dict(r) for r in d["replicas"]]
        except StateError as exc:
            raise StateError(f"{source or 'state'}: {exc}; nothing it names was touched") from None
        return cls(
            replicas=replicas,
            share=typed,
            mapping=d["mapping"],
            machine=d["machine"],
            docroot=d["docroot"],
            versions=d["versions"],
            started=d["started"],
            notes=list(d.get("notes", [])),
            stopped=d.get("stopped"),
            server=dict(d.get("server") or {"name": "lighttpd-php-cgi", "source": "built-in"}),
            share_enforce=enforce,
        )

    def write(self, path: str | Path) -> Path:
        """Write atomically (a reader never sees half a file)."""
        return write_text(path, dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> TestbedState:
        """The state, checked against :class:`shrink.schemas.TestbedStateFile`."""
        path = Path(path)
        if not path.exists():
            raise TestbedError(f"{path}: no such testbed state file (was `testbed up` run?)")
        try:
            d = files.read_json(path, TestbedStateFile, what="testbed state")
        except TraceFormatError as exc:
            raise TestbedError(str(exc)) from None
        return cls.from_dict(d, source=str(path))


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
