"""The share a LoadCurve was measured on, read back from the curve (raw or SHRiNK-scaled)."""

from __future__ import annotations

from shrink.errors import ExtrapolationError
from shrink.loadcurve import LoadCurve
from shrink.machine import Machine
from shrink.share import Share

__all__ = ["share_of"]


def share_of(curve: LoadCurve, machine: Machine) -> tuple[Share, tuple[int, ...], float]:
    """The share a curve was measured on, its CPUs and the sample alpha.

    Accepts a raw share curve, or one already SHRiNK-scaled by
    :func:`shrink.scaling.shrink_scaled_curve` (its share says ``predicted_from``).
    """
    share = curve.share
    alpha = curve.alpha
    scaled = curve.meta.get("shrink_scaled") if isinstance(curve.meta, dict) else None
    if share.predicted_from is not None:
        share = share.predicted_from
        alpha = float((scaled or {}).get("alpha", share.fraction))
    cpus = share.cpus
    if not cpus:
        n = max(1, round(alpha * machine.n_cores)) if share.kind == "cores" else 0
        cpus = machine.all_cpus[:n] if n else machine.all_cpus
    bad = [c for c in cpus if c not in machine.all_cpus]
    if bad:
        raise ExtrapolationError(
            f"the share's CPUs {bad} are not on machine {machine.name!r} (CPUs {machine.all_cpus})"
        )
    return share, cpus, alpha
