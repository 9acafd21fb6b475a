"""The CPUs a live target's generator runs on: those asked for, or this process's CPUs
off the testbed's share."""

from __future__ import annotations

import os
from collections.abc import Sequence

from shrink.errors import OverlapError, ReplayError

__all__ = ["generator_cpus"]


def generator_cpus(
    share_cpus: Sequence[int], wanted: tuple[int, ...] | None, allow_overlap: bool
) -> list[int] | None:
    """``wanted`` (refused where it overlaps the share, unless ``allow_overlap``); else
    the CPUs this process may use that are not the share's (all of them, with
    ``allow_overlap``, when the share has them all); None for plain URLs (no share
    known: the engine runs where it is)."""
    share = set(share_cpus)
    if wanted is not None:
        overlap = share & set(wanted)
        if overlap and not allow_overlap:
            raise OverlapError(
                "--generator-cpus",
                f"generator CPUs {sorted(wanted)} overlap the share's CPUs {sorted(overlap)}; "
                "pass --allow-overlap to measure anyway",
            )
        return sorted(wanted)
    if not share:
        return None
    free = sorted(set(os.sched_getaffinity(0)) - share)
    if free:
        return free
    if allow_overlap:
        return sorted(os.sched_getaffinity(0))
    raise ReplayError(
        f"every CPU this process may use belongs to the share ({sorted(share)}): the "
        "generator would compete with the server; pass --allow-overlap to measure anyway"
    )
