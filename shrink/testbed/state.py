"""The testbed state file (``shrink.testbed/1``): what ``up`` started, for ``status``/``down``.

Layout (see the project brief)::

    {"schema": "shrink.testbed/1",
     "replicas": [{"name", "address", "port", "pids", "cpus", "lighttpd_pids",
                   "php_pids", "config", "cgroup", "master_pid", "starttimes",
                   "pinned", "nic_socket", "errorlog", "run_dir"}],
     "share": Share.to_dict(), "mapping": Mapping.to_dict(), "machine": Machine.to_dict(),
     "docroot": path, "versions": {"lighttpd", "php"}, "started": iso-time, "notes": [...]}

``pids`` lists every lighttpd and php-cgi process of the replica, ``starttimes``
their kernel start times (so a reused PID is never signalled), and ``pinned``
the core each worker and php-cgi child was pinned to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink.atomic import write_text
from shrink.errors import TestbedError

__all__ = ["SCHEMA", "ReplicaState", "TestbedState"]

SCHEMA = "shrink.testbed/1"


@dataclass
class ReplicaState:
    """One running replica."""

    name: str
    address: str
    port: int
    cpus: list[int]
    master_pid: int
    lighttpd_pids: list[int]
    php_pids: list[int]
    starttimes: dict[int, int]
    pinned: dict[int, list[int]]
    config: str
    errorlog: str
    run_dir: str
    nic_socket: int | None = None
    cgroup: dict[str, Any] | None = None

    @property
    def pids(self) -> list[int]:
        return [*self.lighttpd_pids, *self.php_pids]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "pids": self.pids,
            "cpus": self.cpus,
            "master_pid": self.master_pid,
            "lighttpd_pids": self.lighttpd_pids,
            "php_pids": self.php_pids,
            "starttimes": {str(k): v for k, v in self.starttimes.items()},
            "pinned": {str(k): v for k, v in self.pinned.items()},
            "config": self.config,
            "errorlog": self.errorlog,
            "run_dir": self.run_dir,
            "nic_socket": self.nic_socket,
            "cgroup": self.cgroup,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplicaState:
        return cls(
            name=d["name"],
            address=d["address"],
            port=int(d["port"]),
            cpus=[int(c) for c in d["cpus"]],
            master_pid=int(d["master_pid"]),
            lighttpd_pids=[int(p) for p in d["lighttpd_pids"]],
            php_pids=[int(p) for p in d["php_pids"]],
            starttimes={int(k): int(v) for k, v in d.get("starttimes", {}).items()},
            pinned={int(k): [int(c) for c in v] for k, v in d.get("pinned", {}).items()},
            config=d["config"],
            errorlog=d.get("errorlog", ""),
            run_dir=d.get("run_dir", ""),
            nic_socket=d.get("nic_socket"),
            cgroup=d.get("cgroup"),
        )


@dataclass
class TestbedState:
    """Everything ``up`` started, as written to STATE.json."""

    __test__ = False  # not a pytest test class

    replicas: list[ReplicaState]
    share: dict[str, Any]
    mapping: dict[str, Any]
    machine: dict[str, Any]
    docroot: str
    versions: dict[str, str]
    started: str
    notes: list[str] = field(default_factory=list)
    stopped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "replicas": [r.to_dict() for r in self.replicas],
            "share": self.share,
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
        return cls(
            replicas=[ReplicaState.from_dict(r) for r in d["replicas"]],
            share=d["share"],
            mapping=d["mapping"],
            machine=d["machine"],
            docroot=d["docroot"],
            versions=d["versions"],
            started=d["started"],
            notes=list(d.get("notes", [])),
            stopped=d.get("stopped"),
        )

    def write(self, path: str | Path) -> Path:
        """Write atomically (a reader never sees half a file)."""
        return write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> TestbedState:
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise TestbedError(
                f"{path}: no such testbed state file (was `testbed up` run?)"
            ) from None
        except json.JSONDecodeError as exc:
            raise TestbedError(f"{path}: not JSON (line {exc.lineno}): {exc.msg}") from None
        return cls.from_dict(d, source=str(path))
