"""SHRiNK sampling strategies behind one protocol: ``sample(trace, alpha, *, seed) -> Trace``.

Levels (``get_sampler(name)``; the CLI's ``shrink sample --level``):

* ``session`` — each session (user equivalent) kept with probability alpha;
* ``object`` — each page with its embedded requests; skipped pages become
  think time in closed-loop sessions (SHRiNK footnote 5);
* ``request`` — each request; warns that it breaks the traffic's structure;
* ``stratified`` — a column's mix (default ``cls``) kept exact up to rounding.

Every decision is a keyed hash of (seed, unit) compared with alpha, so samples
nest in alpha, and the same seed gives the same rows. ``split`` partitions a
trace into k disjoint session sets; ``check_consistency`` refuses sampling at a
level other than the load-balancing one under HTTP/1.1 keep-alive.
``FirstSessionsSampler`` is a predictable fake for tests (not registered).

    >>> from shrink import Trace
    >>> import samplers
    >>> tr = Trace.from_columns({"session": [1, 1, 2, 3], "t": [0, 0, 1, 2],
    ...                          "path": ["/", "/a.gif", "/", "/"]})
    >>> s = samplers.sample(tr, 0.5, seed=7)
    >>> s.meta["sampler"], s.meta["alpha"], s.meta["seed"]
    ('session', 0.5, 7)
"""

from __future__ import annotations

from samplers._protocol import (
    ConsistencyWarning,
    Sampler,
    SamplerWarning,
    StructureWarning,
    available,
    get_sampler,
    register_sampler,
    sample,
)
from samplers._structure import is_open_loop
from samplers.consistency import BALANCE_LEVELS, SAMPLE_LEVELS, check_consistency
from samplers.fake import FirstSessionsSampler
from samplers.object import ObjectSampler
from samplers.request import RequestSampler
from samplers.session import SessionSampler
from samplers.split import split, split_index
from samplers.stratified import StratifiedSampler

__all__ = [
    "BALANCE_LEVELS",
    "SAMPLE_LEVELS",
    "ConsistencyWarning",
    "FirstSessionsSampler",
    "ObjectSampler",
    "RequestSampler",
    "Sampler",
    "SamplerWarning",
    "SessionSampler",
    "StratifiedSampler",
    "StructureWarning",
    "available",
    "check_consistency",
    "get_sampler",
    "is_open_loop",
    "register_sampler",
    "sample",
    "split",
    "split_index",
]
