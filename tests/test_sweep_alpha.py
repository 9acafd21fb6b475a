"""A sweep of a sample whose fraction is not the testbed's share (the tour did it:
a 25% sample on a 50% share): the curve cannot be scaled, and the sweep says so first."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shrink.cli._replay_opts import alpha_mismatch
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _sample(alpha: float | None) -> Trace:
    tr = Trace.from_columns({"session": [0, 1], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    if alpha is not None:
        tr.meta["alpha"] = alpha
    return tr


def _testbed(kind: str, fraction: float) -> SimpleNamespace:
    return SimpleNamespace(state={"share": {"kind": kind, "fraction": fraction}})


def test_a_sweep_warns_of_a_sample_that_is_not_the_testbeds_share():
    line = alpha_mismatch(_testbed("cores", 0.5), _sample(0.25), "support-25.parquet")
    assert line is not None and line.startswith("warning: support-25.parquet holds alpha 0.25")
    assert "a 0.5 share" in line and "extrapolate refuses" in line and "--alpha 0.5" in line
    # The fraction the share takes, a whole target, a URL target: nothing to say.
    assert alpha_mismatch(_testbed("cpu_time", 0.25), _sample(0.25), "t") is None
    assert alpha_mismatch(_testbed("all", 1.0), _sample(0.25), "t") is None
    assert alpha_mismatch(SimpleNamespace(state=None), _sample(0.25), "t") is None
    # An unsampled trace is alpha 1: on a half share it is twice the share's load.
    assert "alpha 1 " in (alpha_mismatch(_testbed("cores", 0.5), _sample(None), "t") or "")


def test_the_warning_names_the_trace_printably():
    line = alpha_mismatch(_testbed("cores", 0.5), _sample(0.25), "a\x1bb.parquet") or ""
    assert "\x1b" not in line
