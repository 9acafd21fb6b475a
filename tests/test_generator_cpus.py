"""Generator CPUs this process may not use (``--generator-cpus 5`` on a 2-CPU machine) are
refused before anything starts, naming the option: a replay said it would run SCHED_FIFO
"on CPU 5" and then failed with "Invalid argument", and predict started a testbed first."""

from __future__ import annotations

import os

import pytest

from shrink.errors import ReplayError, TopologyError
from shrink.providers import TestbedProvider
from shrink.replay.live import LiveTarget
from shrink.target import GeneratorPlacement

pytestmark = pytest.mark.compute

ABSENT = max(os.sched_getaffinity(0)) + 1  # a CPU this process may not use


def test_a_replay_on_generator_cpus_not_allowed_is_refused_naming_them():
    with pytest.raises(ReplayError, match=rf"generator CPUs \[{ABSENT}\] \(--generator-cpus\)"):
        LiveTarget([("127.0.0.1", 8080)], generator=GeneratorPlacement((ABSENT,)))


def test_a_testbed_with_generator_cpus_not_allowed_is_refused_before_it_starts(tmp_path):
    with pytest.raises(TopologyError, match=rf"generator CPUs \[{ABSENT}\] \(--generator-cpus\)"):
        TestbedProvider(tmp_path, generator=GeneratorPlacement((ABSENT,)), run_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
