"""``nice -n 19 shrink sweep``: a generator found behind names the nice value.

Unpinned, the send thread runs at normal scheduling, and at nice 19 it yields to every
other task on its CPU; the hint named other work, SCHED_FIFO and --lag-limit, never the
nice value the user gave shrink. (Pinned, SCHED_FIFO is still the default at any nice.)
"""

from __future__ import annotations

import os

import pytest

from shrink.cli._replay_opts import GENERATOR_HINT, generator_hint

pytestmark = pytest.mark.compute


def test_the_hint_names_a_nice_value_above_zero(monkeypatch):
    monkeypatch.setattr(os, "getpriority", lambda which, who: 19)
    hint = generator_hint("2 levels")
    assert hint.startswith(GENERATOR_HINT.format(levels="2 levels"))
    assert "shrink runs at nice 19 (nice, renice)" in hint, hint


def test_the_hint_is_as_before_at_nice_zero(monkeypatch):
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)
    assert generator_hint("this run") == GENERATOR_HINT.format(levels="this run")
