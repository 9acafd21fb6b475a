"""The level search's loop, one for every search: choose the next level, run its
repetitions and record them, stop.

What differs between searches is the policy: which level comes next (or none: the
search is done), and whether what a level showed ends it. The knee search
(:mod:`shrink.autolevels`), the simulator's MAT search (:mod:`shrink.sim.scaling`)
and the adaptive refinement (:mod:`shrink.replay.adaptive`) each pass theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["level_search"]

S = TypeVar("S")


def level_search(
    choose: Callable[[], S | None],
    measure: Callable[[S], bool],
    budget: int | None = None,
) -> int:
    """Run a level search; return the levels it measured (at most ``budget``).

    ``choose``: the policy's next step (a level, with whatever the measuring needs to
    know of it), or None when the policy has nothing left to learn. ``measure``: runs
    the step's repetitions and records them; False ends the search (the level could
    not be measured, or it showed what the search looked for). ``budget``: the levels
    allowed (None: as many as the policy chooses).
    """
    done = 0
    while budget is None or done < budget:
        step = choose()
        if step is None:
            break
        done += 1
        if not measure(step):
            break
    return done
