"""How a CPU-time share is enforced: one small protocol, several mechanisms (issue #15).

A CPU-time share of ``f`` (``1@25%``) must make the share's CPUs a server at ``f``
of the speed. Mechanisms (``--enforce``):

* ``cfs`` (:mod:`shrink.enforce.cfs`): a CFS bandwidth quota on the server's
  cgroup, ``f * period`` of every period (4 ms / 16 ms at 25% on this VM, HZ=250).
  Coarse: a light request runs at full speed inside the quota and waits up to
  ``period - quota`` outside it, so light-load latency is bimodal, and loopback
  work done in softirq context escapes the quota.
* ``corunner`` (:mod:`shrink.enforce.corunner`): a SCHED_FIFO process pinned to
  each of the share's CPUs spins ``(1 - f)`` of every 1 ms period. The server
  runs in the gaps, so the CPU is slower at a 1 ms grain for everything on it,
  softirqs included, and the vCPU never halts in the gaps.

SCHED_DEADLINE (what was found on kernel 6.18, a 2-vCPU VM): it cannot hold a
shared budget for a group. Its budgets are per task (each php-cgi child would get
its own ``f``), and a deadline task may not be pinned (``sched_setattr`` with a
one-CPU affinity: EPERM; pinning a deadline task: EBUSY) unless cpusets split the
machine into root domains, which reschedules every other process on it. A
deadline *co-runner* (runtime ``(1-f) * period``) is therefore not pinnable
either. The kernel's per-CPU fair server (a deadline server for all normal
tasks, 6.12+) would be the exact mechanism with a FIFO spinner at 100%, but its
knobs live in debugfs, which this VM refuses (EPERM) even to root.

Why memory-heavy requests cost more on a time-sliced core (measured on a busy
2-vCPU VM, ``bench/bench_share_mechanisms.py``; RESULTS.md "share
mechanisms"). The demo's page of 2 ms of CPU over an 8 MiB working set:

* It faults in a fresh 8 MiB every request: 2,085 minor faults a request (8 MiB of
  4 KiB pages). PHP's allocator serves a block above its 2 MiB chunk as a "huge
  block", mmap'ed at allocation and unmapped at free, and the kernel zeroes each
  fresh page. That is about half the page's CPU on the whole core (16.8 ms a
  request; 8.5 ms with ``USE_ZEND_ALLOC=0``, glibc's malloc, which after the first
  free raises its mmap threshold and keeps the memory: no faults). Transparent
  huge pages are ``madvise`` here and PHP asks for them only with
  ``USE_ZEND_ALLOC_HUGE_PAGES=1`` (5 faults a request, 11.1 ms).
* Without the faults the share's excess does not go away: CPU per request on
  the share over the whole core's was 1.27 (quota) and 1.73 (co-runner) with
  ``USE_ZEND_ALLOC=0``, against 1.27 and 2.33 with PHP's own allocator. What
  stays is the working set: a random walk over 8 MiB waits on memory, and a
  time-sliced core loses its caches and TLB in the gaps (to whatever else runs on
  the CPU, and on a VM to the host, which may halt and move an idle vCPU).
  (A 1.5 MiB working set, inside the chunk and the L2, cost 1.06 and 1.76 under
  the quota in two runs: on this host the noise is as large as the effect.)
* So no server setting makes the share faithful for every class, and the share's
  speed is calibrated per class (:mod:`shrink.scaling`). php-cgi inherits
  ``USE_ZEND_ALLOC`` and ``USE_ZEND_ALLOC_HUGE_PAGES`` from ``testbed up``'s
  environment, so the allocator is a choice of the server under test. Every
  figure here was taken while other processes took 60-80% of the server's CPU:
  re-measure on a quiet machine.

The protocol, in the order the testbed calls it: ``start(cpus)`` before the
server starts; ``join(pid)`` between fork and exec of the server's first process
(must not fork); ``add(pids)`` with every server PID once they run (a server
recipe reports them); ``usage_s()``; ``stop()``; ``describe()`` (recorded in the
testbed state's share and so in every result file); ``to_dict()`` for the state
file, read back by :func:`enforcer_from_dict` to stop it from another process.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from shrink.enforce.cfs import CfsQuota, CgroupLayout
from shrink.errors import TopologyError

__all__ = [
    "DEFAULT",
    "MECHANISMS",
    "Enforcer",
    "check_mechanism",
    "enforcer_from_dict",
    "make_enforcer",
]

MECHANISMS = ("cfs", "corunner")
DEFAULT = "cfs"


@runtime_checkable
class Enforcer(Protocol):
    """Makes a replica's CPUs a share: limits, membership, accounting."""

    mechanism: str

    def start(self, cpus: tuple[int, ...]) -> None: ...

    def join(self, pid: int) -> None: ...

    def add(self, pids: list[int]) -> None: ...

    def pids(self) -> list[int]: ...

    def usage_s(self) -> float | None: ...

    def stop(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...

    def to_dict(self) -> dict[str, Any]: ...


def check_mechanism(mechanism: str) -> str:
    """``mechanism`` if it is one of MECHANISMS, else a one-line error saying which are."""
    if mechanism not in MECHANISMS:
        raise TopologyError(
            f"enforce == {mechanism!r}, must be one of {', '.join(MECHANISMS)} "
            "(SCHED_DEADLINE cannot hold a group's budget: see shrink.enforce)."
        )
    return mechanism


def make_enforcer(
    mechanism: str,
    *,
    name: str,
    cpu_fraction: float,
    period_us: int | None,
    layout: CgroupLayout | None,
) -> Enforcer:
    """The enforcer ``mechanism`` for one replica; ``layout`` None: no cgroups may be used.

    ``period_us`` is the CFS period (the co-runner keeps its own 1 ms period). A
    core share (``cpu_fraction`` 1.0) gets a cgroup without a quota whatever the
    mechanism, as before the mechanisms existed.
    """
    check_mechanism(mechanism)
    if mechanism == "corunner" and cpu_fraction < 1.0:
        from shrink.enforce.corunner import CoRunner

        return CoRunner(name, layout, cpu_fraction=cpu_fraction)
    if layout is None:
        raise TopologyError(
            "a CFS quota needs cgroups (root or a delegated cgroup); "
            "--enforce corunner needs only root"
        )
    return CfsQuota(name, layout, cpu_fraction=cpu_fraction, period_us=period_us)


def enforcer_from_dict(d: dict[str, Any]) -> Enforcer:
    """The enforcer a state file recorded (``to_dict``), to account or stop it."""
    if d.get("mechanism") == "corunner":
        from shrink.enforce.corunner import CoRunner

        return CoRunner.from_dict(d)
    if d.get("mechanism") == "fake":
        from shrink.enforce.fake import FakeEnforcer

        return FakeEnforcer.from_dict(d)
    return CfsQuota.from_dict(d)
