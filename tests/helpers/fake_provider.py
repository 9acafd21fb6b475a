"""A fake TargetProvider (one processor-sharing 'core') and a session trace for it."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from shrink.machine import Machine
from shrink.target import FakeTarget
from shrink.trace import Trace

DEMAND = {"static": 0.0005, "dynamic": 0.004}


class FakeProvider:
    """One 'core' whose CPU-time share slows every demand by 1/speed: by default its
    nominal fraction (an ideal slower server); ``speed`` makes it slower than that."""

    name = "fake"

    def __init__(self, demand=None, speed=None):
        self.demand = demand or dict(DEMAND)
        self.speed = speed

    def machine(self):
        return Machine(name="fake-1s", sockets=1, cores_per_socket=2)

    def server_cpus(self):
        return (1,)

    @contextmanager
    def open(self, share, mapping):
        f = share.cpu_fraction if self.speed is None or share.kind != "cpu_time" else self.speed
        target = FakeTarget(servers=1, demand={k: v / f for k, v in self.demand.items()})
        desc = target.describe
        target.describe = lambda: {**desc(), "share": share.to_dict(), "mapping": {"name": mapping}}
        yield target


def sessions(n_sessions: int, seed: int = 0, span: float = 2000.0) -> Trace:
    """Sessions starting uniformly over ``span`` s: three bursts 2 s apart, 10% dynamic."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.uniform(0, span, n_sessions))
    return three_bursts(start, rng, gap=2.0, static="/static/a.gif", meta={"source": "test"})


def three_bursts(
    start: np.ndarray, rng: np.random.Generator, *, gap: float, static: str, meta: dict
) -> Trace:
    """A session starting at each of ``start`` (sorted): three one-request bursts ``gap`` s
    apart, each a PHP page with chance 0.1 (drawn from ``rng``), else ``static``."""
    rows: dict[str, list] = {"session": [], "burst": [], "t": [], "path": [], "cls": []}
    for s, t0 in enumerate(start):
        for b in range(3):
            dyn = rng.random() < 0.1
            rows["session"].append(s)
            rows["burst"].append(b)
            rows["t"].append(t0 + gap * b)
            rows["path"].append("/app/x.php" if dyn else static)
            rows["cls"].append("dynamic" if dyn else "static")
    return Trace.from_columns(rows, meta=meta)
