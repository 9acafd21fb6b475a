"""An Enforcer that only records what it was asked, for unit tests of the testbed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from shrink.enforce.cfs import Recorded
from shrink.schemas import Fraction

__all__ = ["FakeEnforcer"]


@dataclass(eq=False)
class FakeEnforcer(Recorded):
    """Records calls; ``usage_s`` is whatever the test sets."""

    cpu_fraction: Fraction = 1.0
    cpus: tuple[int, ...] = ()
    members: list[int] = field(default_factory=list)
    # what a test reads from the fake itself, no part of its record
    calls: Annotated[list[str], Field(exclude=True)] = field(default_factory=list)
    usage: Annotated[float | None, Field(exclude=True)] = None
    stopped: Annotated[bool, Field(exclude=True)] = False

    mechanism = "fake"
    WHAT = "fake enforcer"

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
