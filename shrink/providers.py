"""Where a prediction's runs happen: the real testbed, or the simulator.

A provider (see :class:`shrink.predict.TargetProvider`) opens a target on a share
under a mapping and closes it again whatever happens: the testbed provider stops
every process it started, by PID, even when a run is interrupted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shrink.atomic import make_dirs
from shrink.errors import ForeignCpusError, TopologyError
from shrink.machine import Machine
from shrink.share import Share
from shrink.target import GeneratorPlacement, RunResult, Target
from shrink.testbed.config import ServerSettings
from shrink.topology import foreign_cpus
from shrink.trace import Trace

__all__ = ["SimProvider", "TargetSettings", "TestbedProvider", "make_provider"]


class _ShareUtilization:
    """Reports utilization as the server's CPU over what the share may use.

    Under a CPU-time quota of f a saturated CPU is busy f of the time, so divide
    by f: utilization 1.0 means the share is used up.
    """

    def __init__(self, inner: Target, cpu_fraction: float, n_cpus: int) -> None:
        self.inner = inner
        self.cpu_fraction = cpu_fraction
        self.n_cpus = n_cpus

    @property
    def loops_trace(self) -> bool:
        return bool(getattr(self.inner, "loops_trace", False))

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def run(
        self, trace: Trace, *, rate_factor: float, warmup: float, duration: float, seed: int
    ) -> RunResult:
        # A run built from a loop window (shrink.measure.looped_run) already holds its
        # copies and the sessions open at its start: the engine must not loop it again
        # (its own warm start would add those sessions a second time).
        own_loop = getattr(self.inner, "loop", None)
        if "loop_copies" in trace.meta and own_loop:
            self.inner.loop = False  # type: ignore[attr-defined]
        try:
            res = self.inner.run(
                trace, rate_factor=rate_factor, warmup=warmup, duration=duration, seed=seed
            )
        finally:
            if own_loop is not None:
                self.inner.loop = own_loop  # type: ignore[attr-defined]
        # Prefer the server processes' own CPU: /proc/stat also counts whatever else
        # ran on the share's CPUs (and misses nothing the quota caps).
        from shrink.replay.window_cpu import of_share

        return of_share(res, self.cpu_fraction, self.n_cpus)


def _default_enforce() -> str:
    from shrink.enforce import DEFAULT

    return DEFAULT


class TestbedProvider:
    """The real testbed on this machine, driven by the replay engine.

    The generator keeps its ``generator`` placement's CPUs (default: the lowest CPU);
    the full target is every other CPU (on a 2-core machine: CPU 1). ``server``: how the
    server runs, its recipe ``lighttpd-php-cgi`` (default), ``nginx-php-fpm`` or a
    ``RECIPE.toml`` file (read once, here, so a bad one fails before any run).
    """

    __test__ = False
    name = "testbed"

    def __init__(
        self,
        docroot: str | Path,
        *,
        machine: Machine | None = None,
        server_cpus: tuple[int, ...] | None = None,
        generator: GeneratorPlacement = GeneratorPlacement(),
        run_dir: str | Path = ".",
        engine: dict[str, Any] | None = None,
        server: ServerSettings = ServerSettings(),
    ) -> None:
        from shrink.testbed.mounts import refuse_served
        from shrink.testbed.servers import load_recipe
        from shrink.topology import discover

        self.recipe = load_recipe(server.recipe)
        self.server = replace(server, recipe=self.recipe)
        self.docroot = Path(docroot)
        self._machine = machine or discover()
        allowed = sorted(os.sched_getaffinity(0))
        gen = tuple(generator.cpus) if generator.cpus else (allowed[0],)
        if generator.cluster is None and (why := foreign_cpus(gen)):
            raise ForeignCpusError("--generator-cpus", why)  # before a testbed starts
        if server_cpus is None:
            server_cpus = tuple(c for c in allowed if c not in gen)
        overlap = sorted(set(gen) & set(server_cpus))
        if overlap and not generator.allow_overlap:
            raise TopologyError(
                f"generator CPUs {list(gen)} overlap the server's CPUs {list(server_cpus)} "
                f"(CPU {', '.join(map(str, overlap))}); pass --allow-overlap to measure anyway "
                "(the generator then takes cycles from the server, and the report says how many)"
            )
        if not server_cpus:
            raise TopologyError(
                f"no CPU left for the server: this process may use {allowed} and the "
                f"generator keeps {list(gen)}"
            )
        self._server = tuple(server_cpus)
        self.generator_cpus = gen
        self.run_dir = Path(run_dir)
        self.engine = engine or {}
        self.generator = replace(generator, cpus=gen)
        self._opened = 0
        refuse_served(
            run_dir, docroot, "output folder", "its run logs and the testbed's state"
        )  # before a folder is made or a run starts

    def machine(self) -> Machine:
        return self._machine

    def server_cpus(self) -> tuple[int, ...]:
        return self._server

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "testbed",
            "docroot": str(self.docroot),
            "server_cpus": list(self._server),
            "generator_cpus": list(self.generator_cpus),
            "allow_overlap": self.generator.allow_overlap,
            "realtime": self.generator.realtime,
            "awake": self.generator.awake,
            "server": self.server_record(),
            "enforce": self.server.enforce or _default_enforce(),
        }

    def server_record(self) -> dict[str, Any]:
        """The recipe's name and source (its versions are recorded with every run)."""
        from shrink.testbed.lifecycle import server_record

        return server_record(self.recipe)

    @contextmanager
    def open(self, share: Share, mapping: str) -> Iterator[Target]:
        from shrink import testbed
        from shrink.enforce import DEFAULT as DEFAULT_ENFORCE
        from shrink.kept_records import record_only
        from shrink.replay.live import LiveTarget
        from shrink.testbed.lifecycle import use_cgroups

        if not share.cpus:
            share = replace(share, cpus=self._server)
        if share.kind == "cpu_time" and share.period_us is None:
            share = Share.cpu_time(share.cpus, share.cpu_fraction, text=share.text)
        # what up refuses for this share (a CPU-time share without cgroups: not root),
        # refused before the run folder is made: a refused predict left it empty
        use_cgroups(share, "auto", DEFAULT_ENFORCE)
        state_path = self.run_dir / f"testbed-{self._opened}.json"
        # (the check and the record of the testbed it allows: one step)
        with starting_alone(expect=start_bound(self.recipe, share)):
            refuse_crowded(share.cpus, state_path, self.run_dir)  # (before its folder is made)
            make_dirs(self.run_dir)
            self._opened += 1
            testbed.up(
                self.docroot,
                self._machine,
                share,
                mapping,
                state_path=state_path,
                port=0,
                owned=True,  # dies with this process, even by kill -9
                server=self.server,
            )
        live = None
        try:
            live = LiveTarget.from_state(state_path, generator=self.generator, config=self.engine)
            yield _ShareUtilization(live, share.cpu_fraction, len(share.cpus))
        finally:
            if live is not None:
                live.close()  # (its hold on the testbed: one run at a time on it)
            testbed.down(state_path)
            # down: the state records what ran, and was no measurement; a predict stopped
            # at its first level said "kept" of it
            record_only(state_path)


# The longest a predict waits for another's testbed to be started before it checks the CPUs,
# where the other says nothing of how long its start may take (an older shrink's, or one
# whose note cannot be read): see :func:`starting_alone`.
START_WAIT = 120.0
# A start's bound beyond its servers' own start timeouts (one per replica): the checks,
# the cgroups, the ports.
START_SLACK = 30.0
# The note the run holding the start lock leaves in the locked folder: its PID and the time
# (``time.time()``) by which its start will be done or have failed.
_STARTING = ".starting"


@contextmanager
def starting_alone(wait: float = START_WAIT, expect: float = START_WAIT) -> Iterator[None]:
    """Held from a predict's check of the CPUs (:func:`refuse_crowded`) through ``up``'s
    record of the testbed it starts: two predicts starting at once both passed the check,
    neither testbed recorded yet, and both ran on one CPU. The lock is the kernel's
    ``flock`` on shrink's private folder (the one ``up`` records this user's testbeds
    in), taken in turn: the second waits for the first's testbed to be recorded, then
    finds it. It says so, once, naming the first (a second predict said nothing for up
    to 120 s). How long it waits is the first's own bound: the holder notes the time its
    start will be over by (``expect`` seconds from when it took the lock: its servers'
    start timeouts, one per replica, and :data:`START_SLACK`), and past it the holder is
    stuck; where the holder left no note this run can read, ``wait`` seconds. Where the
    folder cannot be locked: unguarded. Not covered: another user's predict (its
    testbeds are recorded in its own folder; root's are seen through their summary only
    once recorded), and a plain ``testbed up``, which warns only."""
    from shrink.testbed import registry

    folder = registry.private_dir()
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # (replaced since it was checked: unguarded, as where it cannot be locked)
        yield
        return
    noted = False
    try:
        if _lock_in_turn(fd, wait):
            noted = _note_start(fd, expect)
        yield
    finally:
        if noted:
            with contextlib.suppress(OSError):
                os.unlink(_STARTING, dir_fd=fd)
        os.close(fd)  # (the lock with it)


def _lock_in_turn(fd: int, wait: float) -> bool:
    """Take the ``flock`` on ``fd``, waiting for its holder (see :func:`starting_alone`):
    whether this process took it (False: unguarded)."""
    import fcntl
    import math
    import sys
    import time

    from shrink.errors import TestbedError
    from shrink.replay.testbed_lock import holder

    deadline: float | None = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is None:
                # (this process holds it itself, by another open: SHRINK_RUN_DIR naming its
                # own -o folder; it waited for itself, then named "a process this user
                # cannot see"; looked at once: /proc's every open file is read)
                if _held_by_this_process(fd):
                    return False  # (unguarded)
                who, until = holder(fd), _start_noted(fd)
                deadline = until if until is not None else time.time() + wait
                sys.stderr.write(
                    f"waiting for another run ({who}) to start its testbed (up to "
                    f"{math.ceil(max(0.0, deadline - time.time()))} s) before this run checks "
                    "which CPUs are free\n"
                )
                sys.stderr.flush()
                began = time.time()
            if time.time() > deadline:
                # (a holder notes its bound once it holds the lock: looked at before that,
                # it had none, and one starting many replicas was refused at the fixed wait)
                until = _start_noted(fd)
                if until is not None and until > deadline:
                    deadline = until
                    continue
                raise TestbedError(
                    f"another run ({holder(fd)}) is still starting a testbed after "
                    f"{time.time() - began:.1f} s of waiting here, past the time its start "
                    "may take; a testbed started beside it would not see whether it takes "
                    "these CPUs: wait for it, or stop it"
                ) from None
            time.sleep(0.05)
        except OSError:
            return False  # (a folder that cannot be locked: unguarded, as before)


def _note_start(fd: int, expect: float) -> bool:
    """Note in the locked folder ``fd`` this process's PID and the time its start will be
    over by (``expect`` seconds from now): whether it was noted."""
    import time

    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    try:
        note = os.open(_STARTING, flags | os.O_NONBLOCK, 0o600, dir_fd=fd)
    except OSError:
        return False
    try:
        os.write(note, f"{os.getpid()} {time.time() + expect:.3f}\n".encode())
        return True
    except OSError:
        return False
    finally:
        os.close(note)


def _start_noted(fd: int) -> float | None:
    """The time the holder of the lock on folder ``fd`` noted its start will be over by,
    where the note is its (the PID holding the lock now): None otherwise."""
    import math

    from shrink.procfs import flock_holding_processes

    st = os.fstat(fd)
    holders = flock_holding_processes(st.st_dev, st.st_ino, first=True)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        note = os.open(_STARTING, flags, dir_fd=fd)
        try:
            pid, until = os.read(note, 100).decode().split()
        finally:
            os.close(note)
        bound = float(until)  # (nan, inf: not a bound, waited on for ever)
        return bound if holders == [int(pid)] and math.isfinite(bound) else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _held_by_this_process(fd: int) -> bool:
    """Whether the ``flock`` on ``fd``'s file is held by this process alone (another of
    its open files), as ``/proc`` shows it."""
    from shrink.procfs import flock_holding_processes

    st = os.fstat(fd)
    return flock_holding_processes(st.st_dev, st.st_ino) == [os.getpid()]


def start_bound(recipe: Any, share: Share) -> float:
    """How long ``up`` may take to start a testbed of ``recipe`` on ``share``: its start
    timeout for each replica (at most one per CPU), and :data:`START_SLACK`."""
    from shrink.testbed.lifecycle import START_TIMEOUT_S

    timeout = float(getattr(recipe, "start_timeout", None) or START_TIMEOUT_S)
    return timeout * max(1, len(share.cpus)) + START_SLACK


def refuse_crowded(cpus: tuple[int, ...], state_path: Path, run_dir: Path) -> None:
    """Refuse to start a testbed on ``cpus`` where another running testbed (not this
    run's own, in ``run_dir``: a paired full run's) has one: two predicts at once each
    brought up a server on the same CPUs, each measured about half of one, and their
    curves said nothing of it (``up``'s warning went into the state's notes, unprinted)."""
    from shrink.errors import TestbedError
    from shrink.testbed.lifecycle import others_on

    mine = {p.resolve() for p in run_dir.glob("testbed-*.json")}
    if crowded := others_on(cpus, state_path.resolve(), mine):
        said = "; ".join(w.removeprefix("warning: ") for w in crowded)
        raise TestbedError(
            f"{said}: the testbed this run would start there is not started (two servers "
            "on one CPU each measure part of it); wait for the other to end, bring it down, "
            "or give --server-cpus apart from its CPUs"
        )


# The utilization the knee search's probe aims at on the simulator.
PROBE_UTILIZATION = 0.1


class SimProvider:
    """The simulator (``sim:SPEC.toml``): the whole machine is the full target."""

    name = "sim"

    def __init__(self, machine: Machine, params: Any = None) -> None:
        self._machine = machine
        self.params = params

    def machine(self) -> Machine:
        return self._machine

    def server_cpus(self) -> tuple[int, ...]:
        return self._machine.all_cpus

    def describe(self) -> dict[str, Any]:
        return {"kind": "sim", "machine": self._machine.name}

    @contextmanager
    def open(self, share: Share, mapping: str) -> Iterator[Target]:
        from shrink.sim.target import SimTarget

        if not share.cpus:
            share = replace(share, cpus=self._machine.all_cpus)
        yield SimTarget(self._machine, mapping, share, self.params)

    def probe_level(self, sample: Any, share: Share, knob: str) -> float | None:
        """The rate factor at about a tenth of the share's capacity, from pilot runs.

        A trace's own rate can lie a thousand times below what the simulated machine
        serves (the tcp trace: 2,000 req/s against ~100,000); the knee search's probe at
        a tenth of the trace's rate then reads a utilization too small to estimate the
        capacity from, and doubles its way up, spending most of its levels far below
        the knee. The simulator is cheap and exact: find the capacity first.
        """
        if knob != "rate_factor":
            return None
        from shrink.sim.target import SimTarget

        if not share.cpus:
            share = replace(share, cpus=self._machine.all_cpus)
        target = SimTarget(self._machine, "1-replica", share, self.params)
        factor, u = 1.0, 0.0
        for _ in range(8):
            res = target.run(sample, rate_factor=factor, warmup=0.5, duration=1.0, seed=7)
            u = float(res.utilization or 0.0)
            if 0.02 <= u <= 0.6:
                return PROBE_UTILIZATION * factor / u
            factor = factor * (0.3 / u) if u > 0 else factor * 10.0
        return None


@dataclass(frozen=True)
class TargetSettings:
    """Where a prediction's runs happen, as the user named it.

    ``target``: ``testbed`` (the real server on this machine) or ``sim:SPEC.toml``;
    ``machine``: ``this`` or a TOML machine spec; ``docroot``: the testbed's document
    root; ``server_cpus``: the full target's CPUs (None: all but the generator's);
    ``server``: the testbed's recipe; ``generator``: where and how the load generator
    runs (on this machine, or as Ray actors on a cluster).
    """

    target: str = "testbed"
    machine: str = "this"
    docroot: str | Path | None = None
    server_cpus: tuple[int, ...] | None = None
    server: str | None = None
    generator: GeneratorPlacement = field(default_factory=GeneratorPlacement)


def make_provider(
    settings: TargetSettings, *, run_dir: str | Path = ".", trace: Any = None
) -> TestbedProvider | SimProvider:
    """The testbed (the real server on this machine, run by the ``server`` recipe) or the
    simulator the ``settings`` name, its runs' files under ``run_dir``. With ``trace``,
    PHP's ``post_max_size`` holds its largest body."""
    from shrink.testbed.config import PhpLimits
    from shrink.topology import load_machine

    target = settings.target
    if target.startswith("sim:"):
        return SimProvider(Machine.read_toml(target[4:]))
    if target != "testbed":
        raise TopologyError(f"target == {target!r}, must be 'testbed' or 'sim:SPEC.toml'")
    if settings.docroot is None:
        raise TopologyError("the testbed needs a document root (--docroot, from shrink synth)")
    php = PhpLimits() if trace is None else PhpLimits().for_trace(trace)
    return TestbedProvider(
        settings.docroot,
        machine=load_machine(settings.machine),
        run_dir=run_dir,
        server_cpus=settings.server_cpus,
        server=ServerSettings(settings.server, php=php),
        generator=settings.generator,
    )
