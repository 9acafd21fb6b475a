"""The synthetic parent traces of the sampler tests are what they claim to be."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers.sampler_traces import make_trace, row_ids

pytestmark = pytest.mark.compute


def test_make_trace_is_consistent_and_grouped():
    tr = make_trace(np.random.default_rng(1), 50)
    s, b, t = tr.column("session"), tr.column("burst"), tr.column("t")
    think, rt = tr.column("think"), tr.column("rt")
    # Next burst of the same session starts when the previous one ended plus its think.
    starts = np.flatnonzero(np.r_[True, (s[1:] != s[:-1]) | (b[1:] != b[:-1])])
    for i, j in itertools.pairwise(starts):
        if s[i] == s[j]:
            d = np.nanmax(np.r_[rt[i:j], 0.0])
            assert abs(t[j] - (t[i] + d + think[i])) < 1e-9
    assert tr.n_sessions == 50
    assert (row_ids(tr) == np.arange(len(tr))).all()
