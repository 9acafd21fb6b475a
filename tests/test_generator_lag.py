"""At default scheduling the native core's loop thread runs at nice -20 with a 0.1 ms
slice, and the thread that moves its rows stays as it was (SCHED_IDLE starved it
behind any busy neighbour on its CPU)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from shrink.replay._priority import LOOP_NICE, LOOP_SLICE_NS, LoopPriority, loop_threads

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="nice -20 needs root (CAP_SYS_NICE)")


def _slice(tid: int) -> int | None:
    """The thread's slice in ns (/proc's se.slice), None where the kernel does not say."""
    for line in Path(f"/proc/self/task/{tid}/sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


class _FakeLoop:
    """A thread named as the core names its loop thread, alive until stopped."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        ready = threading.Event()
        self.tid = 0

        def run() -> None:
            self.tid = threading.get_native_id()
            Path(f"/proc/self/task/{self.tid}/comm").write_text("shrink-core")
            ready.set()
            self._stop.wait()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _in_thread(fn):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_the_loop_threads_are_found_by_name():
    loop = _FakeLoop()
    try:
        assert loop_threads() == [loop.tid]
    finally:
        loop.stop()
    assert loop_threads() == []


@root_only
def test_the_loop_gets_nice_minus_20_and_a_short_slice_and_the_caller_gets_its_own_back():
    def run():
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, 3)
        base = _slice(me)
        lp = LoopPriority()
        lp.begin()  # before the core starts its loop: the loop inherits this
        during = os.getpriority(os.PRIO_PROCESS, me), _slice(me)
        loop = _FakeLoop()
        try:
            inherited = os.getpriority(os.PRIO_PROCESS, loop.tid)
            lp()  # the core's first callback
            lp()  # later ones change nothing
            got = (
                lp.applied,
                os.getpriority(os.PRIO_PROCESS, loop.tid),
                _slice(loop.tid),
                os.getpriority(os.PRIO_PROCESS, me),
                _slice(me),
                os.sched_getscheduler(me),
            )
        finally:
            loop.stop()
        return base, during, inherited, loop.tid, got

    base, during, inherited, tid, got = _in_thread(run)
    applied, loop_nice, loop_slice, my_nice, my_slice, my_policy = got
    assert during[0] == inherited == loop_nice == LOOP_NICE
    assert (my_nice, my_policy) == (3, os.SCHED_OTHER)  # never SCHED_IDLE
    if loop_slice is None:
        pytest.skip("this kernel does not show se.slice")
    assert during[1] == loop_slice == LOOP_SLICE_NS
    assert applied == {tid: (LOOP_NICE, LOOP_SLICE_NS)}
    assert my_slice == base != LOOP_SLICE_NS


@root_only
def test_under_sched_fifo_nothing_is_changed():
    def run():
        me = threading.get_native_id()
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        lp = LoopPriority()
        lp.begin()
        loop = _FakeLoop()  # inherits SCHED_FIFO, as the core's loop does
        try:
            lp()
            got = (os.sched_getscheduler(me), os.sched_getscheduler(loop.tid), lp.applied)
        finally:
            loop.stop()
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return got, loop.tid

    (mine, loops, applied), tid = _in_thread(run)
    assert mine == loops == os.SCHED_FIFO
    assert applied == {tid: (0, 0)}
