"""Scale-out: one engine process per generator core, sessions partitioned by hash.

Each process gets the sessions of one part (``samplers.split``, so a session
and all its connections stay in one process), pins itself to its core with
``os.sched_setaffinity``, builds its schedule with the whole trace's origin,
span and id stride (so the parts stay aligned and looped ids stay distinct),
reports ready, and starts at a common monotonic zero ``t0`` that the parent hands
out once every process is ready (CLOCK_MONOTONIC is system-wide). Each writes its
own part file incrementally; the parent merges them. Processes are forked (the
parent holds no event loop at that point), so no ``__main__`` guard is needed.
With one process the engine runs in the caller's thread, pinned for the run and
unpinned after.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from time import monotonic
from typing import Any

from shrink import interrupts
from shrink.enforce.cfs import in_root_cpu_group
from shrink.enforce.idle_group import remove_groups_of
from shrink.errors import OptionError, ReplayError, ShrinkError
from shrink.processes import die_with_parent
from shrink.replay.cluster import ClusterSpec, run_on_cluster
from shrink.replay.contract import StopOn
from shrink.replay.engine import EngineConfig, EngineStats, run_schedule
from shrink.replay.engine_parts import EngineRun, parts_say, say_lost, stopped_alone
from shrink.replay.spin_count import running_spinners
from shrink.replay.stopwatch import Continued, StopWatch, note_stop, zero_watch
from shrink.replay.waiting import let_go, reap
from shrink.replay.writer import RunLogWriter
from shrink.runlog import RunLog
from shrink.schedule import ScheduleOptions, build_schedule, trace_extent, trace_mode
from shrink.target import GeneratorPlacement
from shrink.testbed.registry import scratch_base
from shrink.topology import smt_siblings
from shrink.trace import Trace

__all__ = [
    "AUTO_REALTIME",
    "AwakeEngine",
    "EngineRun",
    "NoPollEngine",
    "default_awake",
    "default_realtime",
    "run_engines",
    "scheduling",
    "split_sessions",
]

# The partition's hash seed: distinct from any sampler seed a user would pick, so
# that a session-sampled trace still spreads evenly over the processes.
SPLIT_SEED = 0x5CA1E


def _zero(t0: float) -> dict[str, float]:
    """The run's monotonic zero and the wall-clock time it corresponds to (for captures)."""
    return {"t0": t0, "t0_unix": time.time() - (monotonic() - t0)}


def split_sessions(trace: Trace, parts: int) -> list[Trace]:
    """``parts`` disjoint traces, every session whole in exactly one."""
    if parts == 1:
        return [trace]
    from samplers.split import split

    return split(trace, parts, seed=SPLIT_SEED)


# The SCHED_FIFO priority the send thread gets by default (see default_realtime).
AUTO_REALTIME = 10


def may_realtime() -> bool:
    """Whether this process may put a thread under SCHED_FIFO (root, CAP_SYS_NICE)."""
    try:
        old = (os.sched_getscheduler(0), os.sched_getparam(0))
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        os.sched_setscheduler(0, *old)
    except OSError:
        return False
    return True


def default_realtime(
    requested: int | None,
    generator_cpus: Sequence[int] | None,
    server_cpus: Iterable[int] = (),
    *,
    allow_overlap: bool = False,
) -> int:
    """The SCHED_FIFO priority of the engine's send thread (0: normal scheduling).

    ``requested`` (``--realtime``) decides when given. Left to the default (None),
    the send thread runs SCHED_FIFO :data:`AUTO_REALTIME` when this process may, and
    the generator is pinned to CPUs that none of the server's (known) CPUs are
    among, without ``allow_overlap``; else normally. At normal scheduling the
    thread's wake-ups wait behind other work on its CPU for up to a scheduler tick
    and more (with the kernel's autogroup on, its nice value counts only inside its
    own session, not against other sessions), a send lag of milliseconds; under
    SCHED_FIFO it preempts them, and the kernel's RT throttling (95% of each
    second) still leaves the CPU's other work a share. On a CPU the server shares
    it would take the server's cycles, so it is never chosen there by default.
    """
    if requested is not None:
        return requested
    if generator_cpus is None or allow_overlap or set(generator_cpus) & set(server_cpus):
        return 0
    return AUTO_REALTIME if may_realtime() else 0


def default_awake(
    requested: bool | None,
    generator_cpus: Sequence[int] | None,
    server_cpus: Iterable[int] = (),
    *,
    allow_overlap: bool = False,
) -> bool:
    """Whether the native core keeps the generator's CPUs awake for a run (see
    native/src/awake.rs): ``requested`` (``--awake``/``--no-awake``) decides when given.

    Left to the default (None), yes when the generator is pinned to CPUs none of the
    server's (known) CPUs are among, nor the other hardware threads of their cores,
    without ``allow_overlap``. A CPU kept from halting wakes its sleeping thread on
    time; the spinners take only idle time, but on a CPU the server uses it would
    change the server's own wake-ups from the full target's, and on a core's other
    hardware thread they take the core's cycles from it. Outside the root cpu cgroup the
    spinners are idle only within their group, which competes as if busy: there they run
    in an idle cgroup (:mod:`shrink.enforce.idle_group`), and not at all, even asked for,
    where none can be made (:func:`~shrink.replay.native.idle_group_unavailable`).
    """
    if requested is False or (requested is None and (generator_cpus is None or allow_overlap)):
        return False
    from shrink.replay.native import idle_group_unavailable

    if not in_root_cpu_group() and idle_group_unavailable() is not None:
        return False
    return bool(requested) or not _near_servers(generator_cpus or (), server_cpus)


def _near_servers(generator_cpus: Sequence[int], server_cpus: Iterable[int]) -> list[int]:
    """The server's CPUs among the generator's or the other hardware threads of their cores."""
    near = set(generator_cpus) | {s for c in generator_cpus for s in smt_siblings(c)}
    return sorted(near & set(server_cpus))


def scheduling(
    generator: GeneratorPlacement, cpus: Sequence[int] | None, server_cpus: Iterable[int]
) -> tuple[int, bool]:
    """The ``generator``'s send-thread priority and whether its CPUs are kept awake, as
    :func:`default_realtime` and :func:`default_awake` pick them on ``cpus``."""
    gen = generator
    if gen.awake and cpus is not None and (busy := _near_servers(cpus, server_cpus)):
        # /proc/stat counts a spinner's time as busy: the share's utilization would read
        # 100% at every level (and its spare time as other work), and on a core's other
        # hardware thread it takes the server's cycles
        raise OptionError(
            "--awake",
            f"it would run spinners on the generator's CPUs {sorted(cpus)}, on or "
            f"beside the server's {busy}: its CPUs would read 100% busy at every level "
            "(or lose cycles to a core's other thread); drop --awake, or pin the generator "
            "apart (--generator-cpus)",
        )
    return (
        default_realtime(gen.realtime, cpus, server_cpus, allow_overlap=gen.allow_overlap),
        default_awake(gen.awake, cpus, server_cpus, allow_overlap=gen.allow_overlap),
    )


def set_realtime(priority: int) -> tuple[int, os.sched_param] | None:
    """Put the calling thread under SCHED_FIFO ``priority``; returns what to restore.

    On a shared machine a generator at normal priority is late whenever a
    neighbour holds its core; SCHED_FIFO makes the generator preempt them (the
    kernel's RT throttling still leaves others 5% of the core).
    """
    if priority <= 0:
        return None
    old = (os.sched_getscheduler(0), os.sched_getparam(0))
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        from shrink.enforce.cfs import own_rt_runtime_us
        from shrink.processes import realtime_refused
        from shrink.testbed.userns import realtime_refused_here

        said = realtime_refused_here(priority) or realtime_refused(priority, own_rt_runtime_us())
        raise ReplayError(said) from None
    return old


def restore_scheduler(old: tuple[int, os.sched_param] | None) -> None:
    if old is not None:
        os.sched_setscheduler(0, old[0], old[1])


@contextlib.contextmanager
def normal_priority() -> Iterator[None]:
    """The calling thread at normal scheduling inside, as it was after: a thread it
    starts there inherits normal scheduling, not its SCHED_FIFO."""
    old = (os.sched_getscheduler(0), os.sched_getparam(0))
    if old[0] not in (os.SCHED_FIFO, os.SCHED_RR):
        yield
        return
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    try:
        yield
    finally:
        restore_scheduler(old)


def _child(
    pipe: Any,
    trace: Trace,
    config: EngineConfig,
    params: dict[str, Any],
    cpu: int | None,
    path: str,
    meta: dict[str, Any],
    realtime: int = 0,
    engine: Any = run_schedule,
    parent_pid: int | None = None,
) -> None:
    # A kill -9 of the parent must not leave this process sending load: SIGTERM
    # stops the engine as Ctrl-C does (its rows so far are kept).
    die_with_parent(signal.SIGTERM, parent_pid)
    writer: RunLogWriter | None = None
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        sched = build_schedule(trace, **params)
        writer = RunLogWriter(path, meta)
        # (after the schedule is built: that CPU work need not preempt the neighbours)
        set_realtime(realtime)
        watch: list[StopWatch] = []  # this process's own: a stop of it is said as such

        def ready() -> float:
            gc.collect()
            # the spinners it has running (the parent counts them should it be killed
            # before its report) and their idle cpu cgroup
            cpus = len(os.sched_getaffinity(0))
            awake = {"spinners": running_spinners(cpus) if writer.meta.get("awake") else 0}
            pipe.send(("ready", {**awake, "group": writer.meta.get("awake_group")}))
            # The zero's wait takes the stop signals the engine blocked for its loop thread:
            # a stop before the zero (the parent's terminate) left it waiting forever, and
            # the stopped command hung at its exit joining it.
            held = signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.handled())
            try:
                t0 = float(pipe.recv())
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            watch.append(zero_watch(t0))
            with normal_priority():  # (called from the engine's send thread, maybe SCHED_FIFO)
                watch[0].start()
            return t0

        with Continued() as continued:
            stats = engine(sched, config, writer, on_ready=ready)
        stats = note_stop(stats, watch, continued.count)
        # (which signal: the parent may not have had one; none when its stop event ended it)
        if stats.interrupted and (sig := interrupts.noted()) is not None:
            stats = replace(stats, extra={**stats.extra, "stop_signal": sig})
        if writer.error is not None:
            raise writer.error
        pipe.send(("done", stats))
    except BaseException as exc:  # report, never hang the parent
        # A second stop signal (the terminal's or timeout's to the group, and the
        # parent's) raised again in here: a traceback from the engine process.
        for sig in interrupts.STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if writer is not None:
            writer.discard()  # no empty temporary file left (a closed log stays)
        # shrink's own errors are sentences for the user ("WriteError: ..." was printed)
        said = str(exc) if isinstance(exc, ShrinkError) else f"{type(exc).__name__}: {exc}"
        pipe.send(("error", said))
    finally:
        pipe.close()


def run_engines(
    trace: Trace,
    config: EngineConfig,
    *,
    rate_factor: float,
    horizon: float,
    schedule: ScheduleOptions = ScheduleOptions(),
    generator: GeneratorPlacement = GeneratorPlacement(),
    out: str | Path | None = None,
    meta: dict[str, Any] | None = None,
    on_start: Callable[[float], None] | None = None,
    avoid_cpus: set[int] | frozenset[int] = frozenset(),
) -> tuple[RunLog, EngineRun]:
    """Replay ``trace`` over the ``generator``'s engine processes (default one per CPU in
    its ``cpus``, unpinned without them), as ``schedule`` says.

    Returns the merged RunLog (also written to ``out`` when given) and the
    processes' own figures. ``on_start(t0)`` is called with the run's monotonic
    zero just before the first request is due (to time the window's CPU snapshots).
    The generator's ``realtime`` > 0 runs the engine processes SCHED_FIFO at that
    priority (the native core's send thread alone), 0 normally, and None as
    :func:`default_realtime` picks with ``avoid_cpus`` as the server's CPUs; its
    ``engine`` is :func:`run_schedule` (None), an engine's name or a stand-in such as
    :class:`shrink.replay.fake.FakeEngine`. With its ``cluster`` the parts run as Ray
    actors instead (:mod:`shrink.replay.cluster`), one per generator slot, never
    pinned to ``avoid_cpus`` on this host, at the generator's ``realtime`` when one is
    given (else normal scheduling); ``cpus`` and ``processes`` are then unused.
    """
    cpus = None if generator.cpus is None else list(generator.cpus)
    processes, cluster = generator.processes, generator.cluster
    realtime = default_realtime(
        generator.realtime, generator.cpus, avoid_cpus, allow_overlap=generator.allow_overlap
    )
    engine = generator.engine or run_schedule
    if isinstance(engine, str):
        from shrink.replay.native import select_engine

        engine = select_engine(engine)
    if generator.stop is not None and cluster is None:  # (inside AwakeEngine: see below)
        engine = StopOn(engine, generator.stop)
    if realtime and cpus and set(cpus) & set(avoid_cpus):  # (--realtime N, --allow-overlap)
        engine = NoPollEngine(engine, frozenset(avoid_cpus))
    if default_awake(
        generator.awake, generator.cpus, avoid_cpus, allow_overlap=generator.allow_overlap
    ):
        engine = AwakeEngine(engine)
    mode, loop, warm_start = schedule.mode, schedule.loop, schedule.warm_start
    mode = trace_mode(trace, mode)
    n = processes or (len(cpus) if cpus else 1)
    if cpus is not None and n > len(cpus):
        raise ReplayError(f"{n} engine processes need {n} generator CPUs, got {cpus}")
    origin, span, stride = trace_extent(trace, mode)
    params = dict(
        rate_factor=rate_factor,
        horizon=horizon,
        mode=mode,
        loop=loop,
        warm_start=warm_start,
        origin=origin,
        span=span,
        id_stride=stride,
    )
    meta = {**(meta or {}), "mode": mode, "rate_factor": rate_factor, "horizon": horizon}
    if cluster is not None:
        if generator.realtime:  # asked for: each actor's run (its default is normal)
            engine = RealtimeEngine(engine, generator.realtime)
        hooks = (on_start, generator.stop)  # (the actors are told to stop when it is set)
        log, run = _run_cluster(trace, config, params, cluster, meta, hooks, engine, avoid_cpus)
        if out is not None:
            log.write_parquet(out)
        return log, run
    if n == 1:
        return _run_inline(trace, config, params, cpus, out, meta, on_start, realtime, engine)
    return _run_spawned(trace, config, params, cpus, n, out, meta, on_start, realtime, engine)


@dataclass(frozen=True)
class AwakeEngine:
    """An engine told to keep its CPUs awake for the run (the ``awake`` option of
    :class:`shrink.replay.contract.RunOptions`; engines without the means ignore it)."""

    engine: Any

    def __call__(self, *args: Any, **options: Any) -> EngineStats:
        return self.engine(*args, **options, awake=True)


@dataclass(frozen=True)
class NoPollEngine:
    """An engine whose loop never waits on the clock (the ``may_poll`` option of
    :class:`shrink.replay.contract.RunOptions`) when the CPUs it runs on (as pinned
    then: each process of a scaled-out run its own) are among the server's."""

    engine: Any
    server_cpus: frozenset[int]

    def __call__(self, *args: Any, **options: Any) -> EngineStats:
        if os.sched_getaffinity(0) & self.server_cpus:
            options["may_poll"] = False
        return self.engine(*args, **options)


@dataclass(frozen=True)
class RealtimeEngine:
    """An engine run under SCHED_FIFO ``priority`` in the thread that calls it, and back to
    that thread's scheduling after: how a Ray actor's run gets ``--realtime`` (it was
    dropped on a cluster without a word)."""

    engine: Any
    priority: int

    def __call__(self, *args: Any, **options: Any) -> EngineStats:
        old = set_realtime(self.priority)
        try:
            return self.engine(*args, **options)
        finally:
            restore_scheduler(old)


def _run_cluster(
    trace: Trace,
    config: EngineConfig,
    params: dict[str, Any],
    cluster: ClusterSpec,
    meta: dict[str, Any],
    hooks: tuple[Callable[[float], None] | None, Any],
    engine: Any,
    avoid_cpus: set[int] | frozenset[int],
) -> tuple[RunLog, EngineRun]:
    on_start, stop = hooks  # (stop: the run's stop event, or None)
    zero: list[float] = []

    def started(t0: float) -> None:
        zero.append(t0)
        if on_start is not None:
            on_start(t0)

    parts = split_sessions(trace, cluster.generators)
    log, run = run_on_cluster(
        cluster, parts, config, params, meta,
        avoid_cpus=avoid_cpus, engine=engine, on_start=started, stop=stop,
    )  # fmt: skip
    extra: dict[str, Any] = {"cluster": cluster.describe(), "generators": run.generators}
    if run.lost:
        extra["lost_generators"] = [g.to_dict() for g in run.lost]
    return log, EngineRun(run.stats, zero[0] if zero else monotonic(), None, extra)


def _run_inline(
    trace: Trace,
    config: EngineConfig,
    params: dict[str, Any],
    cpus: list[int] | None,
    out: str | Path | None,
    meta: dict[str, Any],
    on_start: Callable[[float], None] | None,
    realtime: int,
    engine: Any,
) -> tuple[RunLog, EngineRun]:
    old = os.sched_getaffinity(0)
    old_sched = None
    if cpus:
        os.sched_setaffinity(0, set(cpus))

    def ready() -> float:
        gc.collect()  # a full collection takes tens of ms on a big heap: not inside the run
        t0 = monotonic() + 0.05
        if on_start is not None:
            # (the window's sampler and the stop watch start here: made under SCHED_FIFO
            # they ran at the send thread's priority on its CPU, which could then not
            # preempt their /proc reads at the window's edges)
            with normal_priority():
                on_start(t0)
        return t0

    writer: RunLogWriter | None = None
    try:
        sched = build_schedule(trace, **params)
        writer = RunLogWriter(out, meta)
        # (after the schedule is built: that CPU work need not preempt the neighbours)
        old_sched = set_realtime(realtime)
        stats = engine(sched, config, writer, on_ready=ready)
    except BaseException:
        # Stopped before the engine closed its log (Ctrl-C while it set up): no
        # empty temporary file is left behind.
        if writer is not None:
            writer.discard()
        raise
    finally:
        restore_scheduler(old_sched)
        if cpus:
            os.sched_setaffinity(0, old)
    if writer.error is not None:
        raise writer.error  # the file keeps the rows written before it
    log = writer.runlog()
    log.meta.update(processes=1)
    return log, EngineRun([stats], stats.t0, cpus)


def _run_spawned(
    trace: Trace,
    config: EngineConfig,
    params: dict[str, Any],
    cpus: list[int] | None,
    n: int,
    out: str | Path | None,
    meta: dict[str, Any],
    on_start: Callable[[float], None] | None,
    realtime: int,
    engine: Any,
) -> tuple[RunLog, EngineRun]:
    import secrets

    from shrink.replay.part_dirs import (
        SPAWNED,
        drop_part_temporaries,
        make_part_dir,
        part_stem,
        remove_lost_part_dirs,
        remove_part_dir,
    )

    ctx = mp.get_context("fork")
    parts = split_sessions(trace, n)
    tmp = None
    if out is None:
        remove_lost_part_dirs(scratch_base(), SPAWNED)
        tmp = make_part_dir(scratch_base(), SPAWNED)
    base = Path(out).with_name(part_stem(out)) if tmp is None else tmp / "run"
    run_id = secrets.token_hex(6)  # this run's parts, told from any an earlier run left
    paths = [f"{base}.part{i}.{run_id}.parquet" for i in range(n)]
    procs, pipes = [], []
    try:
        for i in range(n):
            parent, child = ctx.Pipe()
            cpu = cpus[i] if cpus else None
            p = ctx.Process(
                target=_child,
                args=(
                    child,
                    parts[i],
                    config,
                    params,
                    cpu,
                    paths[i],
                    {**meta, "part": i},
                    realtime,
                    engine,
                    os.getpid(),
                ),
                daemon=True,
            )
            p.start()
            child.close()  # (held here, a process's death was no end of file: waited for ever)
            procs.append(p)
            pipes.append(parent)
        started: list[dict[str, Any]] = []  # each one's spinners (see _child's ready)
        for i, pipe in enumerate(pipes):
            try:
                kind, payload = pipe.recv()
            except EOFError:
                kind, payload = "error", "exited before it was ready"
            if kind != "ready":
                raise ReplayError(f"engine process {i} (PID {procs[i].pid}) failed: {payload}")
            started.append(payload or {})
        deadline = float(params["horizon"]) + config.timeout + 5.0  # (then a stopped one is killed)
        t0, stats, ended, stopped = let_go(pipes, procs, realtime, on_start, deadline)
        reap(procs)
        errors, lost = say_lost(ended, procs, started)
        if not stopped and (alone := stopped_alone(stats, ended, procs))[1] is not None:
            errors += alone[0]
            interrupts.note(alone[1])  # (the command stops as that signal says)
        logs = [RunLog.read_parquet(pth) for pth in paths if Path(pth).exists()]
        if stopped and not logs:
            raise KeyboardInterrupt  # the processes ended on the stop before their logs
        if errors and (not logs or any("cannot write" in e for e in errors)):
            raise ReplayError("; ".join(errors))
        merged = {**meta, **_zero(t0), "processes": n, **parts_say(logs)}
        log = RunLog.concat(logs, meta=merged)
        if out is not None:
            log.write_parquet(out)
        extra: dict[str, Any] = {"errors": errors, **lost} if errors else {}
        # The stop came to this process: the run is stopped, whatever its processes said (one
        # the group's signal ended before its engine took it said an error: the sweep went on).
        return log, EngineRun(stats, t0, cpus, {**extra, "interrupted": True} if stopped else extra)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if isinstance(engine, AwakeEngine):  # (the idle cgroups of killed ones)
            remove_groups_of([p.pid for p in procs if p.pid is not None])
        # The processes' parts beside ``out`` are the merge's inputs, never a result: a
        # merged RunLog that could not be written (a full disk) or a run stopped before
        # it left OUT.part0.parquet, OUT.part1.parquet, ... that no message named.
        for pth in paths if out is not None else ():
            Path(pth).unlink(missing_ok=True)
        if out is not None:  # (and what the writer of one killed mid-run left)
            drop_part_temporaries(paths)
        if tmp is not None:
            remove_part_dir(tmp)
