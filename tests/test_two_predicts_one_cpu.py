"""Two ``predict --target testbed`` at once: each brought up its own testbed on the
same server CPUs (``up`` only warned, into the state's notes, which predict does not
print), and each measured about half a server without a word. A predict now refuses to
start a testbed on CPUs another running testbed holds (its own paired full run's
excepted)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from shrink import processes
from shrink.errors import TestbedError
from shrink.providers import refuse_crowded
from shrink.testbed import registry
from shrink.testbed.state import TestbedState


def _running_on_cpu_1(tmp_path, monkeypatch, state, pid=None):
    """A testbed recorded running (this process its server, or ``pid``) on CPU 1, at
    ``state``."""
    from tests.helpers.testbed import lighttpd_replica

    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "private"))
    pid = os.getpid() if pid is None else pid
    live = replace(lighttpd_replica(), cpus=[1], masters=[pid], processes={"lighttpd": [pid]},
                   starttimes={pid: processes.proc_info(pid).starttime}, pinned={})  # fmt: skip
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{}\n")
    registry.record(state, TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t0"),
                    owned=False)  # fmt: skip


@pytest.mark.compute
def test_a_predicts_testbed_on_cpus_another_testbed_holds_is_refused(tmp_path, monkeypatch):
    other = tmp_path / "first" / "testbed-0.json"  # (another predict's)
    _running_on_cpu_1(tmp_path, monkeypatch, other)
    run = tmp_path / "second"
    run.mkdir()
    with pytest.raises(TestbedError) as err:
        refuse_crowded((1,), run / "testbed-0.json", run)
    assert str(err.value) == (
        f"CPU(s) [1] also run the testbed of {other.resolve()} (started t0); the two disturb "
        "each other's measurements: the testbed this run would start there is not started "
        "(two servers on one CPU each measure part of it); wait for the other to end, bring "
        "it down, or give --server-cpus apart from its CPUs"
    )
    refuse_crowded((0,), run / "testbed-0.json", run)  # (other CPUs: fine)
    registry.forget(other)


@pytest.mark.compute
def test_a_predicts_own_paired_testbed_is_not_another(tmp_path, monkeypatch):
    run = tmp_path / "pred"
    _running_on_cpu_1(tmp_path, monkeypatch, run / "testbed-0.json")  # its scaled-down one
    refuse_crowded((0, 1), run / "testbed-1.json", run)  # its full one, opened beside it
    registry.forget(run / "testbed-0.json")


@pytest.mark.compute
def test_a_testbed_whose_servers_are_all_gone_holds_no_cpu(tmp_path, monkeypatch):
    # A testbed brought up, then its servers killed (the OOM killer, a kill -9): recorded
    # until brought down, it was said to run on CPU 1, and a predict there was refused
    # ("wait for the other to end") for as long as nobody brought it down.
    server = subprocess.Popen(["sleep", "60"])
    other = tmp_path / "first" / "testbed-0.json"
    _running_on_cpu_1(tmp_path, monkeypatch, other, server.pid)
    run = tmp_path / "second"
    run.mkdir()
    with pytest.raises(TestbedError):
        refuse_crowded((1,), run / "testbed-0.json", run)  # (while it runs)
    server.kill()
    server.wait()
    refuse_crowded((1,), run / "testbed-0.json", run)
    registry.forget(other)
