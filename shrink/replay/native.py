"""The native replay core (Rust, ``shrink_core``) behind the engine interface; the engine choice.

The core (``native/``, built by ``make setup`` with maturin) runs the engine's hot
loop: epoll, non-blocking sockets, a timerfd for sub-millisecond wake-ups, the
response parser, the session rules of httperf ``--wsesslog`` and the open-mode
pools, all as :mod:`shrink.replay.engine` does them. It does not build its own
plan: this adapter hands it the :class:`~shrink.schedule.Schedule`'s arrays,
the routing computed here as the Python engine computes it, and the request
bytes from :func:`~shrink.replay._http.build_request`, so both engines follow
the same schedule by construction.

The loop runs on a thread of its own (same CPU and scheduling policy). Every
100 ms this thread takes its finished rows into the same
:class:`~shrink.replay.writer.RunLogWriter` (so Ctrl-C keeps what was measured)
and runs Python's signal handlers; a Parquet flush here never delays a send.
Where the core differs from the Python engine, it is in time stamps and
wake-ups, not in what is sent: a response is timed by the kernel's receive
stamp (``SO_TIMESTAMPNS``), in open mode a short wait sleeps on the timer alone
(responses are read at the next due time, their stamps unchanged), and at high
rates wake-ups are at least 60 us apart, up to 400 us while the loop is busy
(above 85% of its core; a request is then up to that late, and its send lag
says so). Under load session mode reads the responses that arrive within
120 us of a wake-up together, and a request that follows a response is intended
at the response's arrival, so a late read shows as send lag. Open mode opens
the connections its first millisecond needs before the start and at most 16 at
a time after it (a request waits for one in order, as for a full pool).

:func:`select_engine` maps ``auto | native | python`` to an engine callable;
``auto`` is the native core when it is importable, else the Python engine. Both
record their name in the RunLog metadata (``engine``) and in
:attr:`EngineStats.extra`, from where run summaries report it.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, Unpack

import numpy as np

from shrink import interrupts
from shrink.enforce.cfs import in_root_cpu_group
from shrink.enforce.idle_group import IdleGroup, idle_group_place, make_idle_group
from shrink.errors import ParameterError, ReplayError
from shrink.replay._http import build_request
from shrink.replay.contract import (
    EngineStats,
    RunOptions,
    run_stats,
    stopped_at,
    wants_signals,
    zero_time,
)
from shrink.replay.engine import EngineConfig, run_schedule
from shrink.replay.writer import RunLogRow, RunLogWriter
from shrink.schedule import Schedule, session_hash
from shrink.wire import host_header

try:  # the core is optional: the Python engine is the fallback
    import shrink_core as _core
except ImportError:  # pragma: no cover - depends on the build
    _core = None

__all__ = ["ENGINES", "available", "engine_name", "run_native", "run_python", "select_engine"]

ENGINES = ("auto", "native", "python")
# The core's loop counts and error indices, in its order (native/src/engine.rs).
_COUNTS = (
    "turns",
    "sleeps",
    "events",
    "timer_arms",
    "connects",
    "sends",
    "window_us_max",
    # the loop thread's wait on a run queue (us) and its involuntary switches
    "runq_wait_us",
    "preempted",
    # the time the loop polled for a due time rather than sleep, under pressure (us)
    "polled_us",
    # when a stop signal's byte stopped the loop (us from the zero; not a count: taken out)
    "signal_stop_us",
)  # (a count added to the core goes last: an older core's counts are a prefix)
_ERRORS = (
    "refused", "connect", "reset", "closed", "timeout", "bad-response", "cut", "unsent", "files"
)  # fmt: skip
_UNKNOWN = 2**64 - 1  # the core's count for what /proc did not say


def loop_counts(counts: list[int]) -> dict[str, int]:
    """The core's loop counts by name; a count an older core does not report, or one
    /proc did not give, is left out."""
    return {k: v for k, v in zip(_COUNTS, counts, strict=False) if v != _UNKNOWN}


def available() -> bool:
    """Whether the native core is built and importable."""
    return _core is not None


# The most CPUs the core keeps awake (MAX_CPUS in native/src/awake.rs): on more it
# starts no spinner, and the run goes on asleep.
AWAKE_MAX_CPUS = 64


def _can_keep_awake() -> bool:
    """Whether the built core keeps CPUs awake (one built before it could does not: its
    runs go on asleep, and the RunLog says so), on the CPUs this thread may use."""
    takes = hasattr(_core, "keep_awake")
    return takes and len(os.sched_getaffinity(0)) <= AWAKE_MAX_CPUS


def _route(ids: np.ndarray, cfg: EngineConfig) -> np.ndarray:
    """The target index of each session (or open-mode request), as the Python engine picks it."""
    n = len(cfg.targets)
    if cfg.routing == "hash":
        return (session_hash(ids, 1) % np.uint64(n)).astype(np.int64)
    return np.arange(ids.size, dtype=np.int64) % n


def _core_args(schedule: Schedule, cfg: EngineConfig, writer: RunLogWriter) -> dict[str, Any]:
    """The core's arguments: the schedule's arrays as bytes, request bytes, codes."""
    req_bytes = []
    for addr, port in cfg.targets:
        host = host_header(addr, port)
        req_bytes.append([build_request(m, p, host, b, ct) for m, p, b, ct in schedule.keys])
    empty_i, empty_f = np.empty(0, np.int64), np.empty(0, np.float64)
    # The core takes the whole plan as arrays (its interface): made here from the
    # schedule's compact form, never a Python object per session or burst, and not
    # kept once they are bytes.
    whole = schedule.whole()
    ids, times = whole.ids, whole.t
    if schedule.mode == "open":
        rows = schedule.base_rows[whole.unit]
        off, first, end, think = empty_i, empty_i, empty_i, empty_f
    else:
        rows = empty_i
        off, first, end, think = schedule.flat_bursts(whole)
    return dict(
        open=schedule.mode == "open",
        targets=[(a, int(p)) for a, p in cfg.targets],
        req_bytes=req_bytes,
        key_of_row=np.asarray(schedule.key_of_row, np.int64).tobytes(),
        cls_of_row=np.asarray(schedule.cls_of_row, np.int8).tobytes(),
        head_only_of_key=[k[0] == "HEAD" for k in schedule.keys],
        times=times.tobytes(),
        route=_route(ids, cfg).tobytes(),
        rows=rows.tobytes(),
        sessions=ids.tobytes(),
        burst_off=off.tobytes(),
        burst_first=first.tobytes(),
        burst_end=end.tobytes(),
        burst_think=think.tobytes(),
        # The core stops bursts at its horizon: the schedule's end, so that one pass
        # (end infinite) runs its sessions out as the Python engine does; the schedule
        # already holds only the sessions that start before its horizon.
        horizon=float(min(schedule.end, schedule.horizon + _NO_END)),
        timeout=float(cfg.timeout),
        drain=float(cfg.drain),
        max_pool=int(cfg.max_pool),
        conns_per_session=int(cfg.conns_per_session),
        conn_per_request=bool(cfg.conn_per_request),
        batch=int(cfg.batch),
        tcodes=[writer.targets.code(f"{a}:{p}") for a, p in cfg.targets],
        ecodes=[writer.errors.code(e) for e in _ERRORS],
    )


# The writer's column types (shrink/replay/writer.py), in the core's column order.
# A finite stand-in for "no end" (sessions run out): ten years of seconds.
_NO_END = 3.2e8

_DTYPES = ("f8", "f8", "f8", "f8", "i4", "i8", "i1", "i8", "i4", "i4", "f8")


def _appender(
    writer: RunLogWriter,
    stop: list[bool],
    event: threading.Event | None = None,
    when: tuple[float, list[float]] = (0.0, []),
) -> Callable[[list[bytes]], bool]:
    """The core's callback: finished rows into the writer; True once told to stop.
    ``when``: the run's zero, and a list that gets the instant ``event`` was seen set.

    The fast path extends the writer's typed column arrays with the core's bytes;
    a writer without them gets the rows one by one through :meth:`RunLogWriter.add`.
    """
    cols = getattr(writer, "cols_", None)
    fast = cols is not None and [getattr(c, "typecode", "") for c in cols] == list("ddddiqbqiid")

    def on_rows(columns: list[bytes]) -> bool:
        if fast:
            for col, data in zip(cols, columns, strict=True):  # type: ignore[arg-type]
                col.frombytes(data)
        else:
            pairs = zip(columns, _DTYPES, strict=True)
            arrays = [np.frombuffer(b, dtype=t).tolist() for b, t in pairs]
            for row in zip(*arrays, strict=True):
                writer.add(RunLogRow(*row))
        writer.maybe_flush()
        if event is not None and event.is_set():
            if not when[1]:
                when[1].append(monotonic() - when[0])
            stop[0] = True
        return stop[0]

    return on_rows


def run_native(
    schedule: Schedule, config: EngineConfig, writer: RunLogWriter, **options: Unpack[RunOptions]
) -> EngineStats:
    """The engine contract (:mod:`shrink.replay.contract`), run by the native core."""
    if _core is None:
        raise ReplayError(
            "the native replay core is not built (run make setup, or pip install ./native); "
            "use --engine python"
        )
    args = _core_args(schedule, config, writer)
    # Forked before the run's zero is chosen (see _keep_awake), and ended however it ends.
    spinners, group, why_not = _keep_awake(options)
    # asked of the core (the file's metadata is written before the run ends; how many
    # spinners did run is the stats' loop count awake_spinners), and the idle cgroup
    # they ran in (outside the root cpu cgroup; shrink.enforce.idle_group)
    writer.meta["awake"] = spinners is not None
    writer.meta["awake_group"] = None if group is None else group.path.name
    try:
        stats = _drive(args, writer, options)
    finally:
        try:
            spun = tuple(spinners.stop()) if spinners is not None else (0, 0.0)
        finally:
            if group is not None:
                group.remove()
    # the spinners that kept the CPUs awake, and their CPU time together (us)
    stats.extra["loop"].update(awake_spinners=int(spun[0]), awake_cpu_us=int(spun[1] * 1e6))
    if group is not None:
        stats.extra["awake_group"] = group.path.name
    if why_not is not None:  # (asked for, and no idle group could be had for them)
        stats.extra["awake_why_not"] = why_not
    # (the spinners are processes of their own: their time is not in this one's)
    if len(spun) > 2:  # the time they saw this process stopped, and slept (a newer core)
        stats.extra["loop"]["stopped_us"] = int(spun[2] * 1e6)
    return stats


def _keep_awake(options: RunOptions) -> tuple[Any, IdleGroup | None, str | None]:
    """The spinners keeping this thread's CPUs awake for the run, when asked and the core
    can (None else), and the idle cgroup they run in outside the root cpu cgroup (none
    made: no spinners there, which would compete with the group's neighbours; then why). They are
    forked before the run's zero is chosen: a fork copies this process's page tables and
    holds malloc's locks meanwhile (8-13 ms per spinner for a GB of small Python
    objects); forked inside the run, with its loop thread started and 50 ms before its
    zero, they made the first sends 70-90 ms late on a heap of 3 GB."""
    if not (options.get("awake") and _can_keep_awake()):
        return None, None, None
    if in_root_cpu_group():
        return _core.keep_awake(), None, None
    group, why = idle_group()
    if group is None:
        return None, None, f"no idle cpu cgroup for the spinners: {why}"
    try:
        return _core.keep_awake(str(group.procs)), group, None
    except BaseException:
        group.remove()
        raise


def idle_group_unavailable() -> str | None:
    """Why the spinners cannot run idle for this process (None: they can): in the root
    cpu cgroup they can (each in an autogroup at nice 19); in another, only in an idle
    cgroup made at the top of the hierarchy, by a core that moves them into it."""
    if in_root_cpu_group():
        return None
    if not getattr(_core, "AWAKE_IN_GROUP", False):
        return "the native core was built before it could put them in an idle cgroup"
    return idle_group_place()[1]


def idle_group() -> tuple[IdleGroup | None, str | None]:
    """This run's idle cgroup for the spinners (:mod:`shrink.enforce.idle_group`), or why not."""
    if not getattr(_core, "AWAKE_IN_GROUP", False):
        return None, "the native core was built before it could put them in an idle cgroup"
    root, why = idle_group_place()
    return (None, why) if root is None else make_idle_group(root)


def _drive(args: dict[str, Any], writer: RunLogWriter, options: RunOptions) -> EngineStats:
    """Run the core on ``args`` from the run's zero, rows into ``writer``."""
    # (nothing blocked before the zero: a stop signal while it is awaited, such as another
    # engine process's readiness, stops the command at once; the threads started there
    # block the stop signals themselves, see interrupts.leave_to_loop)
    pipe = _SignalPipe(interrupts.handled() if wants_signals(options) else [])
    try:
        t0 = zero_time(writer, options)
    except BaseException:
        pipe.close()
        raise
    writer.meta["engine"] = "native"
    stop = [False]
    when: list[float] = []  # the instant the run was told to stop (seconds from t0)
    installed: list[tuple[int, Any]] = []
    if wants_signals(options):

        def on_signal(signum: int, frame: Any) -> None:
            interrupts.note(signum)
            if not when:
                when.append(monotonic() - t0)
            stop[0] = True

        for sig in interrupts.handled():
            installed.append((sig, signal.signal(sig, on_signal)))
    if getattr(_core, "SIGNAL_FD", False):  # (an older core takes neither)
        args["may_poll"] = options.get("may_poll", True)
    cpu0 = os.times()
    wall0 = monotonic()
    # As in the Python engine: no collector pass over a big heap inside the run.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        recorded, pool_waits, interrupted, counts = _core.run(
            **args,
            **pipe.open(),
            t0=t0,
            on_rows=_appender(writer, stop, options.get("stop"), (t0, when)),
        )
    finally:
        pipe.close()
        for sig, old in installed:
            signal.signal(sig, old)
        writer.close()
        if gc_was_enabled:
            gc.enable()
    loop = loop_counts(counts)
    if (seen := loop.pop("signal_stop_us", None)) is not None:
        # the loop's own stop, before the Python thread's handler ran (when it was held up)
        when[:] = [min([seen / 1e6, *when])]
    stats = run_stats(
        t0,
        wall0,
        cpu0,
        int(recorded),
        interrupted=bool(interrupted or stop[0]),
        extra={
            "pool_waits": int(pool_waits),
            "engine": "native",
            # how often the loop slept: on a virtual CPU each wake-up costs tens of us
            # (a core built before the last counts were added reports fewer, and a
            # count /proc did not give is left out)
            "loop": loop,
            **stopped_at(when[0] if when else None),
        },
    )
    return stats


class _SignalPipe:
    """The pipe Python's C-level signal handler writes each signal's number to for a
    run (``signal.set_wakeup_fd``), whose read end the core's loop thread watches: a stop
    signal ends the sends at once, not when this thread, below a real-time loop on its
    CPU, next gets to run (up to 1.65 s at 150,000/s). The stop signals are blocked on
    this thread from its opening, just before the core runs, until closed (not before the
    zero: blocked while the zero was awaited, a stop signal came only once the loop ran, and
    a --processes run's engine process, its SIGTERM held while waiting for the others,
    kept its parent 5 s per process in its clean-up; the threads started at the zero block
    them themselves: interrupts.leave_to_loop):
    the loop thread alone takes them, so its handler writes the pipe at once (another
    thread of this process on its CPU, below it, took 0.1 s). Python's handlers still run
    here as before. The wake-up descriptor it replaces (an event loop's) is given back
    after, and gets every byte meanwhile (the core passes them on)."""

    def __init__(self, stops: list[signal.Signals]) -> None:
        ok = (
            getattr(_core, "SIGNAL_FD", False)
            and threading.current_thread() is threading.main_thread()
        )
        self.stops = [int(s) for s in stops] if ok else []
        self.fds: tuple[int, int] | None = None
        self.old = -1
        self.mask: set[int] | None = None

    def open(self) -> dict[str, Any]:
        """The core's arguments for the pipe (none: no stop signal handled here, or an
        older core, or not on the main thread)."""
        if not self.stops:
            return {}
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.stops)
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # (not the main thread)
            os.close(r)
            os.close(w)
            self.close()
            return {}
        self.fds = (r, w)
        return {"signal_fd": r, "stop_signals": self.stops, "forward_fd": self.old}

    def close(self) -> None:
        if self.fds is not None:
            r, w = self.fds
            self.fds = None
            signal.set_wakeup_fd(self.old)
            try:  # what came after the loop's last read goes on too
                while data := os.read(r, 512):
                    if self.old >= 0:
                        os.write(self.old, data)
            except OSError:
                pass
            finally:
                os.close(r)
                os.close(w)
        if self.mask is not None:  # (a stop signal held meanwhile comes now)
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
            self.mask = None


def run_python(
    schedule: Schedule, config: EngineConfig, writer: RunLogWriter, **options: Unpack[RunOptions]
) -> EngineStats:
    """The Python (asyncio) reference engine, with its name recorded."""
    writer.meta["engine"] = "python"
    writer.meta["awake"] = False  # (asked or not: this engine has no spinners)
    stats = run_schedule(schedule, config, writer, **options)
    stats.extra["engine"] = "python"
    return stats


def select_engine(name: str = "auto") -> Callable[..., EngineStats]:
    """The engine for ``auto | native | python`` (auto: native when built)."""
    if name not in ENGINES:
        raise ParameterError(f"engine == {name!r}, must be one of {', '.join(ENGINES)}.")
    if name == "python" or (name == "auto" and _core is None):
        return run_python
    if _core is None:
        raise ReplayError(
            "--engine native: the native replay core is not built (run make setup, or "
            "pip install ./native)"
        )
    return run_native


def engine_name(engine: Any) -> str:
    """``native``, ``python`` or the class name of a stand-in (a FakeEngine)."""
    if engine is run_native:
        return "native"
    if engine is run_python or engine is run_schedule:
        return "python"
    return str(getattr(engine, "__name__", type(engine).__name__))
