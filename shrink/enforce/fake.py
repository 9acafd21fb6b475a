"""An Enforcer that only records what it was asked, for unit tests of the testbed."""

from __future__ import annotations

from typing import Any

__all__ = ["FakeEnforcer"]


class FakeEnforcer:
    """Records calls; ``usage_s`` is whatever the test sets."""

    mechanism = "fake"

    def __init__(self, cpu_fraction: float = 1.0) -> None:
        self.cpu_fraction = cpu_fraction
        self.cpus: tuple[int, ...] = ()
        self.members: list[int] = []
        self.calls: list[str] = []
        self.usage: float | None = None
        self.stopped = False

    def start(self, cpus: tuple[int, ...]) -> None:
        self.calls.append("start")
        self.cpus = tuple(cpus)

    def join(self, pid: int) -> None:
        self.calls.append("join")
        self.members.append(pid)

    def add(self, pids: list[int]) -> None:
        self.calls.append("add")
        self.members.extend(p for p in pids if p not in self.members)

    def pids(self) -> list[int]:
        return sorted(self.members)

    def usage_s(self) -> float | None:
        return self.usage

    def stop(self) -> None:
        self.calls.append("stop")
        self.stopped = True

    def describe(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "cpu_fraction": self.cpu_fraction}

    def to_dict(self) -> dict[str, Any]:
        return {**self.describe(), "cpus": list(self.cpus), "members": list(self.members)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FakeEnforcer:
        out = cls(float(d.get("cpu_fraction", 1.0)))
        out.cpus = tuple(d.get("cpus", []))
        out.members = [int(p) for p in d.get("members", [])]
        return out
