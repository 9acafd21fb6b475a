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

pytestmark = pytest.mark.compute


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
    assert build_schedule(other, 1.0, 5.0).keys == [("GET", "/c", b"", "")]
    assert checks == [len(tr), len(other)]


def test_a_trace_whose_path_cannot_be_sent_fails_every_time(checks):
    bad = session_trace(3, paths=("/a\r\nHost: x",), gap=0.1, think=0.2)
    for _ in range(2):
        with pytest.raises(TraceFormatError, match="cannot be sent"):
            build_schedule(bad, 1.0, 5.0)
    assert len(checks) == 2


def test_keys_are_in_order_of_first_request_and_the_first_bad_row_is_named():
    """Rows as a loop over them in order sees them: a key per distinct request as sent
    (a blank encoded meets the same path written encoded), numbered as first met; a
    missing body is an empty one; an unsendable row is named by its first occurrence."""
    tr = Trace.from_columns(
        {
            "session": [1, 1, 2, 2, 3, 3],
            "t": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
            "method": ["GET", "POST", "GET", "GET", "GET", "POST"],
            "path": ["/b", "/a b", "/a%20b", "/b", "/é", "/a b"],
            "body": [None, "x=1", "", "", None, "x=1"],
        }
    )
    keys, codes = request_keys._check_request_keys(tr)
    assert keys == [("GET", "/b", b"", ""), ("POST", "/a%20b", b"x=1", ""),
                    ("GET", "/a%20b", b"", ""), ("GET", "/%C3%A9", b"", "")]  # fmt: skip
    assert codes.tolist() == [0, 1, 2, 0, 3, 1]
    bad = Trace.from_columns(
        {"session": [1, 2, 3, 4], "t": [0.0, 0.1, 0.2, 0.3],
         "method": ["GET", "GET", "G T", "G T"], "path": ["/a", "/x\r\n", "/a", "/x\r\n"]}
    )  # fmt: skip
    with pytest.raises(TraceFormatError, match=r"trace row 1 \(session 2\).*smuggle"):
        request_keys._check_request_keys(bad)
