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


def test_a_run_already_sched_fifo_is_not_told_to_run_so(monkeypatch):
    # ray:local, two slots on CPU 0: the note said "SCHED_FIFO 10", the hint after the
    # behind levels "run it SCHED_FIFO (--realtime 10, as root)"
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)
    hint = generator_hint("2 levels", 10)
    assert "--realtime 10, as root" not in hint
    assert "its send thread already ran SCHED_FIFO 10" in hint, hint
    assert generator_hint("2 levels", 0) == GENERATOR_HINT.format(levels="2 levels")
