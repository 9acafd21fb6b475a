"""The speed a CPU-time share really delivers, per request class (issue #15).

Interface (stable; the predict pipeline calls it, the share work fills it in):

    measure_speed(share_target, full_target, trace, *, nominal, seed=0, budget_s=20.0)
        -> ShareSpeed

``share_target`` runs on the share, ``full_target`` on the whole target (None when
the user has no full target: then the speed is assumed, ``method="nominal"``, and
the report says so). ``trace`` is the (sampled) trace whose request classes are
probed. ``nominal`` is the share's fraction (alpha). ``budget_s`` bounds the
seconds the probe may spend on runs. The result's ``effective`` is what the SHRiNK
transform scales a CPU-time share by in place of alpha.
"""

from __future__ import annotations

from shrink.share import ShareSpeed
from shrink.target import Target
from shrink.trace import Trace

__all__ = ["measure_speed"]


def measure_speed(
    share_target: Target,
    full_target: Target | None,
    trace: Trace,
    *,
    nominal: float,
    seed: int = 0,
    budget_s: float = 20.0,
) -> ShareSpeed:
    """The share's measured speed per class; the nominal speed until a probe exists."""
    del share_target, full_target, trace, seed, budget_s  # filled in by the probe work
    return ShareSpeed.assumed(nominal)
