"""A trace's request keys are checked once, however many schedules are built of it.

A search builds a schedule of the same trace at level after level; checking every
row's method and path each time was most of a simulated run.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.session_traces import session_trace

from shrink import request_keys
from shrink.errors import TraceFormatError
from shrink.schedule import build_schedule
from shrink.trace import Trace


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    """Counts the row-by-row checks of request keys."""
    calls: list[int] = []
    real = request_keys._check_request_keys

    def counted(trace: Trace):
        calls.append(len(trace))
        return real(trace)

    monkeypatch.setattr(request_keys, "_check_request_keys", counted)
    monkeypatch.setattr(request_keys, "_recent_keys", [])
    return calls


def test_schedules_of_one_trace_share_one_check(checks):
    tr = session_trace(30, paths=("/a", "/b?x=1", "/a"), gap=0.1, think=0.2, bursts=2)
    first = build_schedule(tr, 1.0, 5.0)
    again = [build_schedule(tr, rate, 5.0) for rate in (0.5, 2.0, 4.0)]
    assert checks == [len(tr)]
    for s in again:
        assert s.keys == first.keys and np.array_equal(s.key_of_row, first.key_of_row)
    # shared, so no schedule may change it for the others
    assert not first.key_of_row.flags.writeable
    # a trace with other rows is checked on its own
    other = session_trace(30, paths=("/c",), gap=0.1, think=0.2)
    assert build_schedule(other, 1.0, 5.0).keys == [("GET", "/c", "")]
    assert checks == [len(tr), len(other)]


def test_a_trace_whose_path_cannot_be_sent_fails_every_time(checks):
    bad = session_trace(3, paths=("/a\r\nHost: x",), gap=0.1, think=0.2)
    for _ in range(2):
        with pytest.raises(TraceFormatError, match="cannot be sent"):
            build_schedule(bad, 1.0, 5.0)
    assert len(checks) == 2
