"""At default scheduling the thread that moves the core's rows and flushes the RunLog
runs SCHED_IDLE during a run, so the loop it shares the CPU with preempts it at once."""

from __future__ import annotations

import os
import threading

import pytest

from shrink.replay.native import IdleWhileRunning


def _in_thread(fn):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="returning from SCHED_IDLE needs root here")
def test_the_row_thread_is_idle_during_the_run_and_back_after():
    def run():
        idle = IdleWhileRunning()
        idle()  # the core's first callback, after its loop thread started
        during = os.sched_getscheduler(0)
        idle()  # later callbacks change nothing
        idle.restore()
        return during, os.sched_getscheduler(0)

    assert _in_thread(run) == (os.SCHED_IDLE, os.SCHED_OTHER)


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root")
def test_under_sched_fifo_the_core_keeps_its_own_arrangement():
    def run():
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        idle = IdleWhileRunning()
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # as the core lowers it
        idle()
        during = os.sched_getscheduler(0)
        idle.restore()
        return during

    assert _in_thread(run) == os.SCHED_OTHER
