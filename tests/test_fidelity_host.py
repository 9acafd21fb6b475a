"""bench/fidelity_host.py: the errors against the host's move, over quiet runs only."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fidelity_host

pytestmark = pytest.mark.compute


def _row(config: str, predicted: float, moved: float, other: float = 0.0) -> dict:
    cell = {"status": "ok/ok", "predicted": predicted, "measured": 100.0}
    return {"config": config, "dir": config, "share_kind": "cpu_time", "mean": cell,
            "p999": {**cell, "status": "ok/not_reached"}, "host_after_over_beside": moved,
            "max_other_cpu": other}  # fmt: skip


def test_pairs_keep_quiet_conclusive_cpu_time_statistics_with_the_hosts_move():
    rows = [_row("a", 80.0, 1.25), _row("b", 110.0, 0.9), _row("c", 50.0, 2.0, other=0.3),
            {**_row("d", 90.0, 1.1), "share_kind": "cores"}]  # fmt: skip
    got = fidelity_host.pairs(rows)
    assert [(r.split()[0], s) for r, s, _, _ in got] == [("a", "mean"), ("b", "mean")]
    assert got[0][2] == pytest.approx(math.log(0.8)) and got[0][3] == pytest.approx(math.log(1.25))
    # An error the host's move made entirely: corrected by it, nothing is left.
    assert got[0][2] + got[0][3] == pytest.approx(0.0)
