"""The two replay engines' response parsers on the same fuzzed bytes (a quick run of
bench/bench_parser_fuzz.py): the Python engine's connection and the native core's
parser record the same thing for each request, and read a first answer alike
whether its bytes come in one read or in many.

Needs the native core built with its test hook (``shrink_core.parse_stream``) and its
RFC 9112 framing (``shrink_core.FRAMING``); skipped without them (a core built before
them, or none).
"""

from __future__ import annotations

import random

import pytest
from helpers.http_fuzz import (
    SEEDS,
    Case,
    kind,
    make_case,
    native_core,
    native_stream,
    python_stream,
)

pytestmark = pytest.mark.compute

CORE = native_core()
needs_hook = pytest.mark.skipif(
    CORE is None,
    reason="the native core lacks its parse_stream hook or RFC 9112 framing (make setup)",
)


@needs_hook
@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_the_seeds_are_read_alike_and_whole(seed):
    parts, head_only, end = SEEDS[seed]
    case = Case([[p] for p in parts], head_only, end)
    py = python_stream(case)
    assert py == native_stream(CORE, case)
    assert all(row[0] in ("ok", "retry") for row in py[0])


@needs_hook
def test_fuzzed_answers_are_read_alike_by_both_engines():
    rnd = random.Random(17)
    differ = []
    for i in range(400):
        case = make_case(rnd)
        py, nat = python_stream(case), native_stream(CORE, case)
        if py != nat:
            differ.append((i, kind(py, nat), case))
        whole = case.whole()
        assert python_stream(whole)[0][:1] == py[0][:1], (i, case)
        assert native_stream(CORE, whole)[0][:1] == nat[0][:1], (i, case)
    assert not differ, differ[:3]
