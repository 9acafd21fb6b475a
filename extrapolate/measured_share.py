"""The share a LoadCurve was measured on, read back from the curve (raw or SHRiNK-scaled)."""

from __future__ import annotations

from typing import Any

from shrink.errors import ExtrapolationError
from shrink.loadcurve import LoadCurve
from shrink.machine import Machine

__all__ = ["share_of"]


def share_of(curve: LoadCurve, machine: Machine) -> tuple[dict[str, Any], tuple[int, ...], float]:
    """The share a curve was measured on, its CPUs and the sample alpha.

    Accepts a raw share curve, or one already SHRiNK-scaled by
    :func:`shrink.scaling.shrink_scaled_curve` (its share says ``predicted_from``).
    """
    share = dict(curve.share or {})
    alpha = curve.alpha
    scaled = curve.meta.get("shrink_scaled") if isinstance(curve.meta, dict) else None
    if "predicted_from" in share:
        share = dict(share["predicted_from"] or {})
        alpha = float((scaled or {}).get("alpha", share.get("fraction", 1.0)))
    cpus = tuple(int(c) for c in share.get("cpus") or ())
    if not cpus:
        n = max(1, round(alpha * machine.n_cores)) if share.get("kind") == "cores" else 0
        cpus = machine.all_cpus[:n] if n else machine.all_cpus
    bad = [c for c in cpus if c not in machine.all_cpus]
    if bad:
        raise ExtrapolationError(
            f"the share's CPUs {bad} are not on machine {machine.name!r} (CPUs {machine.all_cpus})"
        )
    return share, cpus, alpha
