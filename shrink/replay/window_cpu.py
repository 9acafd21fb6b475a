"""What a level's window took of the CPUs, from the /proc snapshots at its edges
(:class:`shrink.replay.window_sampler._WindowSampler`): the server's own processes, a co-runner
share's spinners, steal, and the other work on the share's CPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from shrink.procfs import utilization

if TYPE_CHECKING:
    from shrink.target import RunResult

__all__ = ["Snapshots", "of_share", "window_cpu"]


class Snapshots(Protocol):
    """A window's readings at its two edges."""

    server_cpu: list[float]  # the server's processes' CPU seconds
    spinner_cpu: list[float]  # the co-runner's spinners' CPU seconds (none: not co-run)
    steal: list[dict[int, tuple[int, int]]]  # /proc/stat steal and total, per CPU

    def span(self, planned: float) -> float:
        """The seconds between the edges: ``planned``, or up to a stop inside it."""


def window_cpu(
    snaps: Snapshots | None,
    duration: float,
    per_cpu: dict[int, float],
    share_cpus: list[int],
    generator_cpus: list[int],
) -> dict[str, float]:
    """Server CPU, steal on share and generator, and the other work on the share's CPUs,
    each in CPUs over the window; ``per_cpu`` is each share CPU's busy fraction. A run
    stopped inside its window has its closing snapshot at the stop: over that span."""
    out: dict[str, float] = {}
    if snaps is not None:
        duration = snaps.span(duration)
    if snaps is not None and len(snaps.server_cpu) == 2 and duration > 0:
        # The server's own processes' CPU over the window, in cores: on a shared
        # machine /proc/stat also counts other work that ran on the share's CPUs.
        out["server_cpu"] = (snaps.server_cpu[1] - snaps.server_cpu[0]) / duration
        # A co-runner share's spinners take the CPU time the share leaves out: the
        # share's own enforcement, not other work beside it.
        spun = snaps.spinner_cpu
        out["share_spinner_cpu"] = (spun[1] - spun[0]) / duration if len(spun) == 2 else 0.0
    if snaps is not None and len(snaps.steal) == 2:
        # Steal on the share's CPUs, in CPUs (already inside the busy fractions).
        out["share_steal"] = sum(utilization(snaps.steal[0], snaps.steal[1], share_cpus).values())
        if generator_cpus:
            # And on the generator's: a stall there (the host taking its vCPU) is
            # what flags a level behind while the generator's own CPU is idle.
            out["generator_steal"] = max(
                utilization(snaps.steal[0], snaps.steal[1], generator_cpus).values(),
                default=0.0,
            )
    if "server_cpu" in out and per_cpu:
        # What else ran there (another process, a hog, a second load's softirqs): a
        # sweep's level was the server's alone only if this stayed small.
        busy = sum(per_cpu.values()) - out.get("share_steal", 0.0) - out["share_spinner_cpu"]
        out["share_other_cpu"] = max(0.0, busy - out["server_cpu"])
    return out


def of_share(res: RunResult, cpu_fraction: float, n_cpus: int) -> RunResult:
    """``res`` with its utilization as the server's CPU over what the share may use.

    /proc/stat's busy fraction counts whatever else ran on the share's CPUs, so the
    server's own processes' CPU is taken where it was read. Under a CPU-time quota of f
    a saturated CPU is busy f of the time, so it is divided by f: 1.0 means the share
    is used up. Also sets ``share_other_cpu``: what else ran there, in CPUs.
    """
    desc = res.describe if res.describe is not None else {}
    server_cpu = desc.get("server_cpu")
    if server_cpu is not None and res.per_cpu_utilization:
        # Whatever else ran on the share's CPUs (kernel threads, softirqs outside the
        # server's context, other processes): a CPU-time share is exposed to it, since
        # what runs in the quota's gaps evicts the server's caches.
        busy = sum(res.per_cpu_utilization.values())
        steal = float(desc.get("share_steal") or 0.0)
        spun = float(desc.get("share_spinner_cpu") or 0.0)  # a co-runner's own
        desc["share_other_cpu"] = max(0.0, busy - steal - spun - float(server_cpu))
    if server_cpu is not None:
        desc["cpu_utilization_raw"] = res.utilization
        res.utilization = float(server_cpu) / n_cpus
    if res.utilization is not None:
        res.utilization = min(1.0, res.utilization / cpu_fraction)
        res.per_cpu_utilization = {
            c: min(1.0, u / cpu_fraction) for c, u in res.per_cpu_utilization.items()
        }
    return res
