"""LiveTarget: the Target protocol over a running testbed (state JSON) or plain URLs.

A run replays the trace with the engine (one process per generator CPU), keeps
the requests intended in ``[warmup, warmup + duration)`` as the window, reads
the share's CPUs' busy fractions over exactly that window from /proc/stat, and
runs the generator's self-check on it.

Generator and server CPUs are kept apart: the engine runs on the CPUs this
process may use minus the share's, and refuses to run on the share's CPUs unless
``allow_overlap=True`` (a generator on the server's cores steals the cycles it
is measuring). Targets must be loopback unless ``allow_remote=True``.
"""

from __future__ import annotations

import weakref
from dataclasses import asdict, replace
from pathlib import Path
from time import monotonic
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from shrink import files, interrupts
from shrink._version import __version__
from shrink.errors import (
    ForeignCpusError,
    OptionError,
    ParameterError,
    ReplayError,
    ShrinkError,
    TestbedError,
)
from shrink.procfs import cpu_times, utilization
from shrink.replay.answers import (
    UNREACHED_SHARE,
    expects_4xx,
    refused,
    stopped_window,
    unreached,
)
from shrink.replay.clients import ClientSampler
from shrink.replay.engine import EngineConfig
from shrink.replay.engine_parts import EngineRun
from shrink.replay.fd_limit import out_of_files, raise_open_file_limit
from shrink.replay.gen_cpus import generator_cpus
from shrink.replay.idle import wait_idle
from shrink.replay.native import engine_name, idle_group_unavailable, select_engine
from shrink.replay.scaleout import run_engines, scheduling
from shrink.replay.selfcheck import LAG_LIMIT, generator_check, thread_wait
from shrink.replay.stopwatch import Continued, StopWatch, flag_if_stopped, stopped_for
from shrink.replay.testbed_lock import hold_testbed, let_go
from shrink.replay.window_cpu import of_share, window_cpu
from shrink.replay.window_sampler import _other_load, _WindowSampler
from shrink.runlog import RunLog
from shrink.schedule import ScheduleOptions
from shrink.target import GeneratorCheck, GeneratorPlacement, RunResult
from shrink.testbed.logcap import cap_log
from shrink.testbed.private import forgeable
from shrink.testbed.problems import (
    _replicas,
    _spinners,
    docroot_mount_problem,
    pids_alive,
    server_problem,
    settled,
    testbed_problem,
)
from shrink.testbed.state import ReplicaState, TestbedState
from shrink.testbed.watch import Watch, say_unwatched
from shrink.topology import foreign_cpus
from shrink.trace import Trace
from shrink.wire import refuse_remote

__all__ = [
    "IDLE_BOUND",
    "LiveTarget",
    "cpu_times",
    "parse_url",
    "testbed_problem",
    "utilization",
    "wait_idle",
]

# A run's RunLog in ``runlog_dir`` (``sweep --runlogs``), and the names it may have.
RUNLOG_NAME = "run{run:03d}-rf{rate_factor:g}.parquet"
RUNLOG_NAMES = r"run[0-9]{3,}-rf[^/]+\.parquet"

# Twice PHP's default max_execution_time on the testbed (shrink.testbed.config): by
# then an abandoned request has been stopped by PHP itself.
IDLE_BOUND = 20.0


def parse_url(url: str) -> tuple[str, int]:
    """``http://127.0.0.1:8080`` (or ``127.0.0.1:8080``) -> (address, port)."""
    if url.startswith("sim:"):
        # predict's --target sim:SPEC.toml; here a target is a server that runs.
        raise ParameterError(
            f"url == {url!r}: the simulator is not a running server; "
            "simulate with shrink sim sweep, or predict --target sim:SPEC.toml"
        )
    try:
        parts = urlsplit(url if "//" in url else f"http://{url}")
        port = parts.port  # urllib raises ValueError on a port that is not 0-65535
    except ValueError as exc:
        raise ParameterError(f"url == {url!r}, must be http://ADDR:PORT ({exc}).") from None
    if parts.scheme not in ("http", ""):
        raise ParameterError(f"url == {url!r}, must be http:// (the engine speaks plain HTTP/1.1).")
    if not parts.hostname:
        raise ParameterError(f"url == {url!r}, must name a host.")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        # http://127.0.0.1:8080/app/ sent the trace's /x to /x, not /app/x, and a user
        # part sent no credentials, without a word: the target is a server, no more.
        raise ParameterError(
            f"url == {url!r}: a target is a server, http://ADDR:PORT; its path, query or "
            "user part would not be used (the trace's paths are sent as they are)"
        )
    if port == 0:
        # Nothing listens on port 0: every request would fail to connect.
        raise ParameterError(f"url == {url!r}: port 0 is no server's; give the port it listens on.")
    # RFC 6874's zone in a URL, "[fe80::1%25eth0]": "%25" is "%"
    return parts.hostname.replace("%25", "%", 1), port or 80


class LiveTarget:
    """Replays traces on a live server; implements :class:`shrink.target.Target`."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        *,
        state: dict[str, Any] | None = None,
        share_cpus: list[int] | None = None,
        generator: GeneratorPlacement = GeneratorPlacement(),
        allow_remote: bool = False,
        config: dict[str, Any] | None = None,
        schedule: ScheduleOptions = ScheduleOptions(),
        lag_limit: float | None = None,
        runlog_dir: str | Path | None = None,
        idle_bound: float = IDLE_BOUND,
    ) -> None:
        if not addresses:
            raise ReplayError("no target address (a testbed state with replicas, or a URL)")
        for host, _ in addresses:
            refuse_remote(host, allow_remote, ReplayError)
        self.addresses = list(addresses)
        raise_open_file_limit()
        self.state = state or {}
        self._parsed: list[ReplicaState] | None = None  # its replicas, read at the first look
        self.state_path: Path | None = None  # the state file it was read from, if any
        # Its replicas' error logs are cut at each look (as root): not those a state file
        # another user could have written names (any file of root's on the machine).
        self.cap_logs = True
        self.share_cpus = sorted(share_cpus or [])
        self.generator_cpus = generator_cpus(
            self.share_cpus, generator.cpus, generator.allow_overlap
        )
        if generator.cluster is None and (why := foreign_cpus(self.generator_cpus)):
            # (else the first pinning failed: "Invalid argument")
            raise ForeignCpusError("--generator-cpus", why)
        self.config = dict(config or {})
        self.mode = schedule.mode
        self.loop = schedule.loop
        self.warm_start = schedule.warm_start  # start a looped run in the trace's steady state
        # the caller's limit, else the generator placement's, else the default
        limit = lag_limit if lag_limit is not None else generator.lag_limit
        self.lag_limit = LAG_LIMIT if limit is None else limit
        self.runlog_dir = None if runlog_dir is None else Path(runlog_dir)
        # the send thread's SCHED_FIFO priority (0: normal), whether the native core keeps the
        # generator's CPUs from halting, and whether the default chose SCHED_FIFO
        self.realtime, self.awake = scheduling(generator, self.generator_cpus, self.share_cpus)
        self.realtime_by_default = generator.realtime is None and self.realtime > 0
        # why --awake, asked for, was not done (outside the root cpu cgroup, no idle one)
        self.awake_refused = generator.awake and not self.awake and idle_group_unavailable()
        # one engine process per generator CPU unless told fewer
        self.processes = generator.processes
        # "auto" | "native" | "python", or an engine callable such as a FakeEngine
        engine = generator.engine
        self.engine = engine if callable(engine) else select_engine(engine or "auto")
        if generator.awake and engine_name(self.engine) == "python":  # (it was dropped unsaid)
            raise OptionError("--awake", "the Python engine keeps no CPU awake; the native "
                              "core does (--engine native; make setup builds it)")  # fmt: skip
        self.idle_bound = idle_bound  # longest wait for an idle server before a run
        self.cluster = generator.cluster  # generators as Ray actors (shrink.replay.cluster)
        self._slots: dict[int, dict[str, Any]] = {}  # per generator slot, over the runs
        self._spun: list[int] = []  # the spinners that ran, per run (the awake asked for)
        self._why_not: str | None = None  # why none ran in a run, where that was known
        self.last_engine: EngineRun | None = None
        self._runs = 0
        # (cpu_fraction, CPUs) of the testbed's share: utilization as a part of it, not of
        # the CPUs (None: the caller scales it, as shrink.providers does, or no share)
        self.share_scale: tuple[float, int] | None = None
        # lets go of the testbed's lock (:mod:`shrink.replay.testbed_lock`), where held
        self.close: Any = lambda: None

    @property
    def loops_trace(self) -> bool:
        """Whether a run replays the trace again when it runs out (any window fills)."""
        return self.loop

    @classmethod
    def from_state(cls, path: str | Path, **kw: Any) -> LiveTarget:
        """A target over the replicas of a ``shrink testbed up`` state file."""
        state = files.read_json(path, what=TestbedState.WHAT)
        st = TestbedState.from_dict(state, source=str(path))
        if kw.get("share_cpus") is None:
            # The generator keeps off the share's CPUs (an older state: its replicas').
            replica_cpus = {c for r in st.replicas for c in r.cpus}
            kw["share_cpus"] = list(st.share.cpus) or sorted(replica_cpus)
        for r in st.replicas:
            try:
                refuse_remote(r.address, bool(kw.get("allow_remote")), ReplayError)
            except ReplayError as exc:  # (said without the file, it read as an option's)
                raise ReplayError(f"{path}: replica {r.name}: {exc}") from None
        # One run at a time on a testbed: held before anything runs, let go with the target
        # (two runs at once were told apart only after a level, and both lost it).
        held = hold_testbed(state, path)
        try:
            target = cls([(r.address, r.port) for r in st.replicas], state=state, **kw)
        except BaseException:
            let_go(held)
            raise
        target.state_path = Path(path)
        target.cap_logs = forgeable(path) is None
        target.close = weakref.finalize(target, let_go, held)  # (close(): let go now)
        return target

    @classmethod
    def from_targets(cls, targets: list[str], **kw: Any) -> LiveTarget:
        """From ``STATE.json`` (one item) or URLs."""
        if len(targets) == 1 and targets[0].endswith(".json"):
            return cls.from_state(targets[0], **kw)
        return cls([parse_url(u) for u in targets], **kw)

    def _placement(self, stop: Any = None) -> GeneratorPlacement:
        """The engine processes of a run: on the generator's CPUs (as many as asked);
        ``stop``: the event that ends the run early (its testbed's watch's)."""
        cpus = self.generator_cpus
        if cpus is not None and self.processes is not None and self.processes < len(cpus):
            cpus = cpus[: self.processes]
        return GeneratorPlacement(
            None if cpus is None else tuple(cpus), realtime=self.realtime,
            processes=self.processes, engine=self.engine, cluster=self.cluster, awake=self.awake,
            stop=stop,
        )  # fmt: skip

    def _count_slots(self, generators: list[dict[str, Any]]) -> None:
        """Each cluster slot's record over the runs: where, runs lost, worst clock offset."""
        for g in generators:
            slot = self._slots.setdefault(
                int(g["slot"]),
                {"slot": int(g["slot"]), "node": g["node"], "runs": 0, "lost": 0,
                 "max_clock_offset": 0.0, "max_clock_rtt": 0.0},
            )  # fmt: skip
            slot["runs"] += 1
            slot["lost"] += int(bool(g.get("lost")))
            slot["max_clock_offset"] = max(slot["max_clock_offset"], abs(g["clock_offset"]))
            slot["max_clock_rtt"] = max(slot["max_clock_rtt"], g["clock_rtt"])

    def describe(self) -> dict[str, Any]:
        st = self.state
        out: dict[str, Any] = {
            "target": "live",
            "addresses": [f"{a}:{p}" for a, p in self.addresses],
            "generator_cpus": self.generator_cpus,
            "share_cpus": self.share_cpus,
            "realtime": self.realtime,
            "realtime_by_default": self.realtime_by_default,
            "awake": self.awake and engine_name(self.engine) != "python",  # (it has no spinners)
            # the fewest that ran in a run (0: asked for, none ran; None: no run yet)
            "awake_spinners": min(self._spun, default=None),
            **({"awake_why_not": self._why_not} if self._why_not else {}),  # (why none ran)
            "engine": engine_name(self.engine),
            "lag_limit": self.lag_limit,
        }
        if self.cluster is not None:
            out["cluster"] = {**self.cluster.describe(), "slots": list(self._slots.values())}
        for k in ("share", "mapping", "machine", "server", "versions", "docroot", "started"):
            if k in st:
                out[k] = st[k]
        return {**out, "shrink_version": __version__}  # as the simulator's target records it

    def run(
        self,
        trace: Trace,
        *,
        rate_factor: float,
        warmup: float,
        duration: float,
        seed: int = 0,
        out: str | Path | None = None,
    ) -> RunResult:
        """Replay ``trace`` at ``rate_factor``; measure ``[warmup, warmup + duration)``."""
        self._check_server()
        if out is None and self.runlog_dir is not None:
            out = self.runlog_dir / RUNLOG_NAME.format(run=self._runs, rate_factor=rate_factor)
        self._runs += 1
        horizon = warmup + duration
        cfg = EngineConfig(targets=self.addresses, **self.config)
        meta = {
            "shrink_version": __version__,
            "seed": seed,
            "warmup": warmup,
            "duration": duration,
            "target": self.describe(),
            "engine_config": asdict(cfg),
        }
        samplers: list[_WindowSampler] = []
        server_pids = [int(p) for r in self.state.get("replicas", []) for p in r.get("pids", [])]
        idle_wait, idle = wait_idle(server_pids, self.idle_bound) if server_pids else (0.0, True)

        paused: list[StopWatch] = []

        def on_start(t0: float) -> None:
            paused.append(StopWatch())
            paused[0].start()
            # the window's edges are known once the engine has fixed its zero
            if self.share_cpus:
                pids = [int(p) for r in self.state.get("replicas", []) for p in r.get("pids", [])]
                # (a cluster's generators are not this process's: their sockets look foreign)
                clients = ClientSampler(self.addresses, pids) if self.cluster is None else None
                spin = [p for r in self.state.get("replicas", []) for p in _spinners(r)]
                samplers.append(_WindowSampler((t0 + warmup, t0 + horizon), pids, clients, spin))
                samplers[0].start()

        watch = self._watch()
        continued = Continued()  # (a stop told from a frozen process by its SIGCONT)
        try:
            with continued:
                log, engine = run_engines(
                    trace,
                    cfg,
                    rate_factor=rate_factor,
                    horizon=horizon,
                    schedule=ScheduleOptions(self.mode, self.loop, self.warm_start),
                    generator=self._placement(None if watch is None else watch.halt),
                    out=out,
                    meta=meta,
                    on_start=on_start,
                    avoid_cpus=frozenset(self.share_cpus),
                )
        except BaseException:
            for smp in [*samplers, *paused]:
                smp.stop.set()
            if watch is not None:
                watch.finish()
            raise
        # The run is over: a stop signal from here waits until its result is kept
        with interrupts.deferred():
            # A server stopped, frozen or re-shared during the level and put back before its
            # end: the level measured what the recorded share was not, so it is not a level.
            seen = watch.finish() if watch is not None else None
            say_unwatched(watch)  # (every look failed: said once)
            for w in paused:
                w.stop.set()
            for smp in samplers:
                # a run whose sessions all ended early still measures the whole window;
                # an interrupted one stops now (Ctrl-C must not wait for the planned end)
                if engine.interrupted:
                    smp.cut()
                smp.join(timeout=max(0.0, smp.at[1] - monotonic()) + 1.0)
                smp.stop.set()
            sampler = samplers[0] if samplers else None
            self.last_engine = engine
            window = (warmup, horizon)
            if not self.loop and len(log):
                # one pass runs its sessions out: the window holds every request it sent
                last = float(np.nanmax(log.column("intended")))
                window = (warmup, max(horizon, float(np.nextafter(last, np.inf))))
            if engine.interrupted:
                # a stopped run measured up to its stop, not over the planned window
                window = stopped_window(window, engine.stopped_at, log)
            per_cpu: dict[int, float] = {}
            util = None
            if sampler is not None and len(sampler.snaps) == 2:
                per_cpu = utilization(sampler.snaps[0], sampler.snaps[1], self.share_cpus)
                util = sum(per_cpu.values()) / len(per_cpu) if per_cpu else None
            wall = engine.wall or horizon
            check = self._generator_check(log, window, engine, wall, (paused, continued.count))
            alive = pids_alive(self.state)
            desc = self._run_describe(engine, wall)
            desc.update(
                window_cpu(sampler, duration, per_cpu, self.share_cpus, self.generator_cpus)
            )
            if server_pids:
                desc["server_idle_wait"] = idle_wait
                if not idle:  # still busy after the bound: the level carries load over
                    desc["server_busy_at_start"] = True
            if alive and not all(alive.values()):
                desc["dead_pids"] = [p for p, ok in alive.items() if not ok]
            # (a run its watch ended, the server seen stopped or gone, is no level either)
            if not engine.interrupted or (watch is not None and watch.halt.is_set()):
                # (a crash seen while `testbed down` ran: said as down, once it says so)
                seen = settled(seen, self._problem) if self.state_path else seen
                seen = seen or _other_load(sampler)
                if seen is not None:
                    raise TestbedError(f"during the level, the server under test {seen}")
                out_of_files(log)
                self._check_server(log, window, trace)
            res = RunResult(log, window, check, util, per_cpu, desc)
            return res if self.share_scale is None else of_share(res, *self.share_scale)

    def _run_describe(self, engine: EngineRun, wall: float) -> dict[str, Any]:
        """:meth:`describe`, and how the run's engine ran."""
        spun, gs = engine.awake_spinners, engine.awake_groups  # (a killed process's too)
        why_not = next((w for st in engine.stats if (w := st.extra.get("awake_why_not"))), None)
        if self.awake and engine_name(self.engine) != "python":
            self._spun.append(spun)
            self._why_not = self._why_not or (why_not if not spun else None)
        return {
            **self.describe(),
            "engine": {
                "engine": engine_name(self.engine),
                "processes": len(engine.stats),
                "cpu_seconds": engine.cpu_seconds,
                "wall": wall,
                "interrupted": engine.interrupted,
                "pool_waits": sum(int(st.extra.get("pool_waits", 0)) for st in engine.stats),
                "awake_spinners": spun,  # (the RunLog's awake says what was asked)
                # the idle cpu cgroup they ran in (else None; a list, one per process)
                "awake_group": gs[0] if len(gs) == 1 else gs or None,
                # why none ran, when an idle cgroup for them could not be had
                "awake_why_not": why_not,
                **engine.extra,
            },
        }

    def _problem(self) -> str | None:
        """:func:`testbed_problem`; processes gone because ``testbed down`` stopped the
        testbed meanwhile (its state file says so now) are said as that, not as killed."""
        if self._parsed is None:  # read once: validating them was half a look's time
            self._parsed = _replicas(self.state)
        for replica in self._parsed:
            # An overloaded server's error log grew by megabytes a level, uncapped, in
            # the run folder (a tmpfs): kept bounded at each look.
            if self.cap_logs:
                for log in replica.error_logs:  # (php-fpm's own log was left uncapped)
                    cap_log(log)
        problem = testbed_problem(self.state, self._parsed)
        if problem is None or not problem.startswith("is down: crashed") or not self.state_path:
            return problem
        try:
            now = files.read_json(self.state_path, what=TestbedState.WHAT)
        except (ShrinkError, OSError):
            return problem
        same = [r.get("pids") for r in now.get("replicas") or []] == [
            r.get("pids") for r in self.state["replicas"]
        ]
        if now.get("stopped") and same and now.get("started") == self.state.get("started"):
            return f"is down: {server_problem(now)}"
        return problem

    def _watch(self) -> Watch | None:
        """A started :class:`Watch` on the testbed for one run (None for plain URLs)."""
        if not self.state.get("replicas"):
            return None
        watch = Watch(self._problem)
        watch.start()
        return watch

    def _generator_check(
        self,
        log: RunLog,
        window: tuple[float, float],
        engine: EngineRun,
        wall: float,
        paused: tuple[list[StopWatch], int | None],
    ) -> GeneratorCheck:
        """Whether the generator kept the run's schedule: its send lag, a generator lost
        (cluster, a killed engine process), or this process stopped meanwhile (``paused``:
        its watcher and the SIGCONTs it got); an engine in processes of its own, or on a
        cluster, ran on while this one was stopped (:func:`flag_if_stopped`)."""
        inline = len(engine.stats) == 1 and self._placement().cluster is None
        # (a stop is counted up to the engine's own end, not through its clean-up after)
        ended = engine.stats[0].ended if inline else None
        watch = paused[0][0].ended(ended) if paused[0] else None
        gap, missed = (watch.gap, watch.missed) if watch is not None else (0.0, 0.0)
        stopped = stopped_for(engine.stats, missed if inline else 0.0, paused[1])
        if engine.interrupted:
            # never sent because the run was stopped: neither intended nor late
            log = RunLog(log.table.filter(~log.cut_off(("unsent",))), log.meta)
        check = generator_check(
            log,
            window,
            cpu=engine.work_cpu_seconds / wall if wall > 0 else None,
            lag_limit=self.lag_limit,
            processes=max(1, len(engine.stats)),
            thread_wait=thread_wait(engine.stats),
            realtime=self.realtime > 0,
            stopped=stopped,
        )
        self._count_slots(engine.extra.get("generators") or [])
        lost = engine.extra.get("lost_generators") or []
        if lost:
            # A lost generator's sessions were not sent (or not recorded): the level's
            # load was not what it says, so it is never used for a MAT.
            slots = ", ".join(f"{g['slot']} on {g['node']}" for g in lost)
            check = replace(check, behind=True, reason=f"generator lost ({slots})")
        if failed := engine.extra.get("errors"):  # an engine process killed (-9, OOM killer)
            why = "; ".join(failed) + ": its part of the load was not sent or not recorded"
            check = replace(check, behind=True, reason=why)
        return flag_if_stopped(check, gap, inline, stopped)

    def _check_server(
        self,
        log: RunLog | None = None,
        window: tuple[float, float] = (0, 0),
        trace: Trace | None = None,
    ) -> None:
        """Raise a TestbedError when the testbed's server is down: a process of it died,
        its state says it was stopped, or (after a run) the run's requests found nothing
        listening; or when a process of it is stopped or frozen, or its share changed, or
        (after a run) it answered 4xx to every request. A level measured on such a server
        is not a level."""
        problem = self._problem()
        docroot = self.state.get("docroot") if self.state.get("replicas") else None
        if (
            problem is None
            and docroot
            and (mounted := docroot_mount_problem(str(docroot), self._parsed))
        ):
            problem = f"went wrong: {mounted}"  # (not in the watch's looks: 4 a second)
        if problem is None and log is not None and self.state.get("replicas"):
            n, lost = unreached(log, window)
            if n >= 10 and lost >= UNREACHED_SHARE * n:
                where = ", ".join(f"{a}:{p}" for a, p in self.addresses)
                problem = f"is down: {lost:,} of {n:,} requests found no server at {where}"
        if problem is None and log is not None and trace is not None and self.state.get("replicas"):
            problem = self._refusing(log, window, trace)
        if problem is not None:
            raise TestbedError(f"the server under test {problem}")

    def _refusing(self, log: RunLog, window: tuple[float, float], trace: Trace) -> str | None:
        """Why the run's server is not serving the trace: (nearly) every request of the
        run answered 4xx where the trace recorded none (the docroot's files removed or
        made unreadable under it), or None. A level of 403s is a testbed's error, not
        a level: 5xx stay failures of the level (an overloaded server may answer so)."""
        n, bad, code = refused(log, window)
        if n < 10 or bad < UNREACHED_SHARE * n or expects_4xx(trace):
            return None
        logs = ", ".join(
            log
            for r in self.state["replicas"]
            for log in (r.get("errorlog"), *(r.get("logs") or []))
            if log
        )
        return (
            f"went wrong: {bad:,} of {n:,} requests were answered HTTP {code} (or another "
            "4xx): it serves none of the trace's pages (its docroot's files gone or "
            "unreadable, or not the trace's)" + (f"; see {logs}" if logs else "")
        )

    def replay(
        self, trace: Trace, *, rate_factor: float, duration: float, out: str | Path | None = None
    ) -> tuple[RunLog, RunResult]:
        """One run measured over its whole length (``shrink replay``)."""
        res = self.run(trace, rate_factor=rate_factor, warmup=0.0, duration=duration, out=out)
        return res.runlog, res
