"""Replay on a Ray cluster: one generator actor per slot, one merged RunLog.

When one machine cannot drive the load (a full-scale validation of a two-socket
server), the sample is split by session hash into one part per generator slot
(:func:`shrink.replay.scaleout.split_sessions`, so each session stays whole on one
generator) and each part runs in a Ray actor, placed by a placement group
(``SPREAD``: one slot per node while there are nodes, then several per node).

Start. Each actor builds its schedule and engine, then waits. The driver measures
every actor's wall-clock offset by a round trip (Cristian's method: the offset is
the actor's clock minus the midpoint of the driver's send and receive, uncertain
by half the round trip), picks one wall-clock instant ``START_MARGIN`` ahead, and
hands each actor that instant in its own clock. Each actor turns it into its own
monotonic zero, so all intended times share one t0 up to the offset estimate's
error. The hosts' clocks must therefore stay within ``CLOCK_LIMIT`` of each other
*after* this correction (the residual is at most half the measured round trip
plus the drift over one run); the measured offsets and round trips go into the
RunLog's metadata (``generators``), and a round trip over ``2 * CLOCK_LIMIT``
is refused because the start could then be off by more than that.

Merge. RunLog times are relative to the run's zero, so the parts concatenate as
they are (exactly what one generator would have written, rows in part order);
percentiles are then exact from the merged arrays.

Faults. An actor that dies (its node lost, its process killed) or that does not
report within its run's horizon plus ``GRACE`` is recorded in ``lost`` with its
slot, node and reason; the other actors' rows are kept, and nothing waits past
the grace. A cluster that cannot be reached is a one-line :class:`ReplayError`.

Ray is an optional extra (``pip install 'shrink-capacity[ray]'``); without it, asking for a
cluster is a one-line error naming the extra.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from time import monotonic
from typing import Any

from shrink.errors import ParameterError, ReplayError, printable
from shrink.replay import ray_local
from shrink.replay.cluster_collect import GRACE, STOP_WAIT, LostGenerator
from shrink.replay.cluster_collect import collect as _collect
from shrink.replay.engine import EngineConfig, EngineStats, run_schedule
from shrink.replay.part_dirs import ACTOR, make_part_dir, remove_lost_part_dirs, remove_part_dir
from shrink.replay.writer import RunLogWriter
from shrink.runlog import RunLog
from shrink.schedule import build_schedule
from shrink.testbed.registry import scratch_base
from shrink.trace import Trace

__all__ = [
    "CLOCK_LIMIT",
    "ClusterRun",
    "ClusterSpec",
    "LostGenerator",
    "parse_cluster",
    "ray_available",
    "run_on_cluster",
]

CLOCK_LIMIT = 0.005  # s: the start skew we accept between generators (a few % of a 100 ms think)
START_MARGIN = 0.5  # s between the last clock reading and the common start
READY_TIMEOUT = 120.0  # s for every actor to build its engine


def ray_available() -> bool:
    """Whether the optional ``ray`` extra is installed."""
    return importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class ClusterSpec:
    """Where the generators run: a Ray cluster address and how many slots to use."""

    address: str  # as ray.init takes it; "auto" is the running cluster
    generators: int = 2

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address, "generators": self.generators}


def parse_cluster(text: str | None, generators: int | None = None) -> ClusterSpec | None:
    """Read ``--cluster ray:ADDRESS`` (``ray:auto`` for the running cluster); None if absent."""
    if text is None or text == "":
        return None
    kind, sep, address = text.partition(":")
    if text.startswith("ray://") and len(text) > len("ray://"):
        address = text  # Ray Client's own scheme, written as ray.init takes it
    if kind != "ray" or not sep or not address or address.startswith("//"):
        raise ParameterError(
            f"--cluster {text!r}: expected ray:ADDRESS (e.g. ray:auto, ray:10.0.0.5:6379)."
        )
    from samplers.split import MAX_PARTS  # each slot replays one part of the trace

    n = 2 if generators is None else generators
    if not 1 <= n <= MAX_PARTS:
        # Above it the split refused "parts == 100000", naming no option.
        raise ParameterError(f"--generators == {n}, must be in [1, {MAX_PARTS}].")
    return ClusterSpec(address=address, generators=n)


@dataclass
class ClusterRun:
    """What the actors of one run reported, besides their rows."""

    stats: list[EngineStats]
    lost: list[LostGenerator] = field(default_factory=list)
    generators: list[dict[str, Any]] = field(default_factory=list)


def place() -> dict[str, Any]:
    """Where this process runs: its host's name and boot (one machine), its network
    namespace (whose loopback it reaches) and the shrink it runs."""
    from shrink import __version__

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        boot, netns = "", 0
    return {"host": socket.gethostname(), "boot": boot, "netns": netns, "version": __version__}


def check_places(places: list[dict[str, Any]], targets: list[tuple[str, int]]) -> None:
    """Refuse generator slots that run another shrink, or that would send a loopback
    target's load to their own host's loopback (another machine or network namespace:
    another server, or none, measured as if it were the target), or a link-local
    target's through an interface of their own."""
    from shrink.wire import is_loopback

    here = place()
    loop = [f"{h}:{p}" for h, p in targets if is_loopback(h)]
    linked = [f"[{h}]:{p}" for h, p in targets if "%" in h]  # (zone_why let only link-local)
    for i, p in enumerate(places):
        node = ascii(p.get("host", "?"))
        if p.get("version") != here["version"]:
            raise ReplayError(
                f"generator slot {i} on {node} runs shrink {p.get('version')!a}, this is "
                f"{here['version']}: install the same shrink on every node of the cluster"
            )
        same = p.get("boot") == here["boot"] and p.get("netns") == here["netns"]
        where = _elsewhere(p, here)
        if loop and not same:
            raise ReplayError(
                f"generator slot {i} runs on {node}, {where}: "
                f"the loopback target {loop[0]} there is not this machine's server; give the "
                "server an address every node reaches (with --allow-remote)"
            )
        if linked and not same:
            # The zone was checked against this machine's interfaces (wire.zone_why):
            # there it names that machine's (eth0 may be another link, %2 another
            # interface or none) and the address a neighbour on its links, if any.
            raise ReplayError(
                f"generator slot {i} runs on {node}, {where}: "
                f"the link-local target {linked[0]} is reached through this machine's "
                "interface; there its zone names that machine's interfaces, if any, and the "
                "address another link's host: give the server an address every node reaches"
            )


def _elsewhere(p: dict[str, Any], here: dict[str, Any]) -> str:
    """Where a slot that is not in this process's place runs, as its boot id tells: the
    same boot is this machine (another network namespace of it); another, or none said,
    another machine."""
    if p.get("boot") and p.get("boot") == here["boot"]:
        return (
            f"another network namespace of this machine (net:[{p.get('netns')}], this "
            f"process's net:[{here['netns']}]), whose loopback is its own"
        )
    return "another machine (another boot id)"


class _Generator:
    """One generator slot (the Ray actor's class; ``ray.remote`` wraps it at run time).

    The actor is threaded (``max_concurrency=3``): :meth:`run` blocks in the engine
    while :meth:`clock` and :meth:`start` answer the driver.
    """

    def __init__(self) -> None:
        self._start = threading.Event()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._t0_wall: float | None = None

    def node(self) -> str:
        return socket.gethostname()

    def where(self) -> dict[str, Any]:
        return place()

    def clock(self) -> float:
        return time.time()

    def ready(self) -> bool:
        return self._ready.wait(timeout=1.0)

    def start(self, t0_wall: float) -> None:
        self._t0_wall = t0_wall
        self._start.set()

    def stop(self) -> None:
        """Stop the run as a signal would: the rows so far come back, and the part's
        temporary folder goes (a killed actor leaves it on its node)."""
        self._stop.set()
        self._start.set()

    def run(
        self,
        trace: Trace,
        config: EngineConfig,
        params: dict[str, Any],
        cpu: int | None,
        meta: dict[str, Any],
        engine: Any,
    ) -> tuple[Any, EngineStats]:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        sched = build_schedule(trace, **params)
        base = scratch_base()
        remove_lost_part_dirs(base, ACTOR)
        tmp = make_part_dir(base, ACTOR)
        try:
            path = tmp / "part.parquet"
            writer = RunLogWriter(path, meta)

            def on_ready() -> float:
                self._ready.set()
                if not self._start.wait(timeout=READY_TIMEOUT) or self._t0_wall is None:
                    raise ReplayError("the driver never gave the start time")
                # the common wall-clock instant, in this host's monotonic clock
                return monotonic() + (self._t0_wall - time.time())

            stats = engine(sched, config, writer, on_ready=on_ready, stop=self._stop)
            log = RunLog.read_parquet(path)
        finally:
            remove_part_dir(tmp)
        return log.table, stats


def _connect(spec: ClusterSpec) -> Any:
    if not ray_available():
        raise ReplayError(
            "--cluster needs Ray: install the extra with pip install 'shrink-capacity[ray]'"
        )
    import ray

    if ray.is_initialized():
        return ray
    _refuse_auto_as_root(spec.address)
    _check_reachable(spec.address)
    extra: dict[str, Any] = {}
    base = None
    if spec.address == "local":
        # Ray's default is /tmp/ray, made world-writable (0777) with a session_latest
        # symlink in it: as root, a folder any user may have made first, or fill.
        extra["_temp_dir"], base = ray_local.private_ray_dir()
    try:
        ray.init(address=spec.address, logging_level="ERROR", log_to_driver=False, **extra)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReplayError(f"cannot reach Ray cluster {spec.address!r}: {first}") from None
    finally:
        if base is not None:
            import atexit

            atexit.register(ray_local.shutdown_and_remove, ray, base)
    from shrink import interrupts

    interrupts.retake()  # Ray's core put its own SIGTERM handler (a stack dump, exit 1)
    if base is not None:
        ray_local.start_watch(ray)  # its head's end stops the run at once, said
    return ray


def _refuse_auto_as_root(address: str) -> None:
    """``auto`` connects to whatever cluster Ray finds on this machine: the address in
    /tmp/ray/ray_current_cluster (any user may make /tmp/ray) or any user's running
    ``gcs_server``. Root would then send the trace to, and unpickle the results of,
    workers another user runs; as root the cluster must be named."""
    if address == "auto" and os.geteuid() == 0:
        raise ReplayError(
            "--cluster ray:auto as root would join any Ray cluster a user of this machine "
            "started; name it: --cluster ray:HOST:PORT (or ray:local for one started here)"
        )


# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS) answers
# with a SETTINGS frame of its own; anything else (a web server on a mistyped port) not.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
PROBE_TIMEOUT = 5.0  # s to connect, and again for the answer


def _check_reachable(address: str) -> None:
    """Refuse an address whose GCS port does not answer as a gRPC server, before Ray
    sees it.

    Ray's core aborts the whole process (no Python exception) when it cannot reach
    the GCS it was pointed at, and waits on a port that accepts but does not speak
    gRPC (a web server's) for minutes, so both are caught here instead.
    """
    if address in ("auto", "local") or address.startswith(("ray://", "anyscale://")):
        return  # ray.init finds (or refuses) those itself, with a Python error
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ReplayError(f"Ray cluster address {address!r} is not HOST:PORT, auto or ray://...")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT)
    except OSError as exc:
        raise ReplayError(f"cannot reach Ray cluster {address!r}: {exc.strerror or exc}") from None
    head = b""
    with sock:
        try:
            sock.sendall(_H2_PREFACE)
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except OSError:  # reset or silent: not a GCS either
            pass
    if len(head) < 9 or head[3] != 4:  # frame type 0x4: SETTINGS
        raise ReplayError(
            f"Ray cluster {address!r}: that port does not answer as a Ray head's GCS does "
            "(gRPC); give the head's --port (6379 unless it was started with another)"
        )


def _offsets(ray: Any, actors: list[Any]) -> list[dict[str, float]]:
    """Each actor's wall-clock offset from the driver, and the round trip it was read over."""
    out = []
    for actor in actors:
        best: dict[str, float] | None = None
        for _ in range(5):  # the shortest of a few round trips bounds the error best
            sent = time.time()
            theirs = ray.get(actor.clock.remote(), timeout=30)
            back = time.time()
            cand = {"offset": theirs - (sent + back) / 2, "rtt": back - sent}
            if best is None or cand["rtt"] < best["rtt"]:
                best = cand
        assert best is not None
        out.append(best)
    return out


def run_on_cluster(
    spec: ClusterSpec,
    parts: list[Trace],
    config: EngineConfig,
    params: dict[str, Any],
    meta: dict[str, Any],
    *,
    avoid_cpus: set[int] | frozenset[int] = frozenset(),
    engine: Any = run_schedule,
    on_start: Any = None,
    stop: Any = None,
) -> tuple[RunLog, ClusterRun]:
    """Run one part of the trace per actor; return the merged RunLog and what was lost.

    ``params`` are :func:`build_schedule`'s keyword arguments, the same for every
    part (the whole trace's origin, span and id stride). ``avoid_cpus``: CPUs an
    actor on the driver's own host must not pin to (the server's share).
    ``on_start(t0)`` gets the common zero in the driver's monotonic clock. ``stop``: the
    run's stop event (its testbed's watch's): set, every actor is told to stop.
    """
    # Any Ray call may fail first when the local head ends (an RPC CANCELLED while a
    # slot was being placed): said as the head's stop, not as a bug in shrink.
    with ray_local.settled():
        ray = _connect(spec)
        n = len(parts)
        _refuse_more_slots_than_local_cpus(ray, spec, n, avoid_cpus)
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg = placement_group([{"CPU": 1}] * n, strategy="SPREAD")
        try:
            ray.get(pg.ready(), timeout=READY_TIMEOUT)
        except Exception:
            ray_local.settle()  # (the head's end: its stop instead, and no call that waits)
            remove_placement_group(pg)
            raise ReplayError(
                f"the Ray cluster {spec.address!r} cannot place {n} generator slots of one CPU each"
            ) from None
        remote = ray.remote(num_cpus=1, max_concurrency=3)(_Generator)
        actors = [
            remote.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=i
                )
            ).remote()
            for i in range(n)
        ]
        runs: list[Any] = []
        try:
            return _drive(
                ray,
                actors,
                parts,
                config,
                params,
                {**meta, "cluster": spec.describe()},
                avoid_cpus,
                engine,
                (on_start, stop),
                runs,
            )
        except Exception:
            ray_local.settle()  # an actor's error of the head's end: the head's stop instead
            raise
        finally:
            if not ray_local.head_gone():  # (each call would wait for the head, up to 60 s)
                _stop_all(ray, actors, runs, config)
                for actor in actors:
                    ray.kill(actor)
                remove_placement_group(pg)


def _stop_all(ray: Any, actors: list[Any], runs: list[Any], config: EngineConfig) -> None:
    """Ask every actor still running to stop, and wait (bounded) for it to: killed at once,
    an actor left its part's temporary folder on its node and its rows unsaid."""
    if not runs:
        return
    _, pending = ray.wait(runs, num_returns=len(runs), timeout=0)
    if not pending:
        return
    for a in actors:
        a.stop.remote()
    with contextlib.suppress(BaseException):  # a second Ctrl-C: kill them now
        ray.wait(pending, num_returns=len(pending), timeout=config.drain + STOP_WAIT)


def _refuse_more_slots_than_local_cpus(
    ray: Any, spec: ClusterSpec, n: int, avoid: set[int] | frozenset[int] = frozenset()
) -> None:
    """A cluster Ray starts here (``ray:local``) has this machine's CPUs and no more: more
    generator slots than those waited, silent, for :data:`READY_TIMEOUT` for a CPU
    that never came (``--generators 3`` on 2 CPUs), then said the cluster could not
    place them. Its actors may run only on the CPUs this process may use (they are
    pinned among those): more slots than those took turns on them (``taskset -c 0``, two
    slots on CPU 0), each behind its schedule. A cluster elsewhere may grow, so it is
    given that time. Nor are the server's CPUs (``avoid``) a slot's: the default two slots
    beside a server on CPU 1 of two were both pinned to CPU 0, each SCHED_FIFO, and each
    level was flagged behind at 20 requests a second (send lag p99 16.9 ms)."""
    if spec.address != "local":
        return
    mine = set(os.sched_getaffinity(0))
    free = mine - set(avoid)
    cpus = min(int(ray.cluster_resources().get("CPU", 0)), len(free or mine))
    if n > cpus:
        beside = f" beside the server's ({','.join(map(str, sorted(avoid)))})" if free else ""
        raise ReplayError(
            f"--generators {n}: the local Ray cluster has {cpus} CPUs this process may use"
            f"{beside}, one a generator slot (two on one CPU take turns, each behind its "
            f"schedule); at most {cpus}: --generators {cpus}"
        )


def _pin(places: list[dict[str, Any]], avoid: set[int] | frozenset[int]) -> list[int | None]:
    """A CPU per actor: distinct on each host, never one of ``avoid`` on the driver's host."""
    here = place()["boot"] or socket.gethostname()
    free = sorted(set(os.sched_getaffinity(0)) - set(avoid))
    taken: dict[str, int] = {}
    cpus: list[int | None] = []
    for p in places:
        host = p.get("boot") or p.get("host", "")
        k = taken.get(host, 0)
        taken[host] = k + 1
        if host == here:
            cpus.append(free[k % len(free)] if free else None)
        else:
            cpus.append(None)  # another host: its own scheduler places it
    return cpus


# Seconds a generator slot has to say where it runs.
PLACES_WAIT = 60.0


def _places(ray: Any, actors: list[Any]) -> list[dict[str, Any]]:
    try:
        places = ray.get([a.where.remote() for a in actors], timeout=PLACES_WAIT)
    except Exception as exc:  # an actor that cannot load this shrink, or an older one
        raise ReplayError(_unplaced(exc)) from None
    if not all(isinstance(p, dict) for p in places):
        raise ReplayError("a generator slot answered where it runs with something else")
    return places


def _unplaced(exc: Exception) -> str:
    """Why a generator slot did not say where it runs. A Ray actor whose process or node
    died (kill -9, its raylet gone) is not one that could not load shrink: that was
    "install the same shrink on every node" after a worker was killed mid-sweep."""
    name = type(exc).__name__
    if getattr(exc, "actor_init_failed", None) is False:  # ray's RayActorError: it died
        lines = [x.strip() for x in str(exc).splitlines() if x and not x[0].isspace()]
        why = printable(lines[-1] if lines else "")[:200]
        return (
            f"a generator slot's Ray actor died before its run started ({name}: {why}): "
            "its process or its node was killed or crashed; run the sweep again"
        )
    if isinstance(exc, TimeoutError):  # ray's GetTimeoutError: no answer, not a wrong one
        return (
            f"a generator slot did not say where it runs within {PLACES_WAIT:g} s ({name}): "
            "its node is overloaded or still starting the slot's worker (a runtime "
            "environment being installed); run the sweep again once the cluster is idle"
        )
    return (
        f"a generator slot could not say where it runs ({name}): "
        "install the same shrink on every node of the cluster"
    )


def _drive(
    ray: Any,
    actors: list[Any],
    parts: list[Trace],
    config: EngineConfig,
    params: dict[str, Any],
    meta: dict[str, Any],
    avoid: set[int] | frozenset[int],
    engine: Any,
    hooks: tuple[Any, Any],
    runs: list[Any],
) -> tuple[RunLog, ClusterRun]:
    on_start, stop = hooks  # (the run's stop event: its testbed's watch's, or None)
    places = _places(ray, actors)
    check_places(places, list(config.targets))
    nodes = [str(p.get("host", "?")) for p in places]
    cpus = _pin(places, avoid)
    runs.extend(
        a.run.remote(parts[i], config, params, cpus[i], {**meta, "part": i}, engine)
        for i, a in enumerate(actors)
    )
    deadline = monotonic() + READY_TIMEOUT
    for i, a in enumerate(actors):
        while not ray.get(a.ready.remote(), timeout=60):
            done, _ = ray.wait([runs[i]], timeout=0)
            if done or monotonic() > deadline:
                ray.get(runs[i])  # raises the actor's error, if that is why
                raise ReplayError(f"generator {i} on {nodes[i]} never became ready")
    clocks = _offsets(ray, actors)
    worst = max(c["rtt"] for c in clocks) / 2
    if worst > CLOCK_LIMIT:
        raise ReplayError(
            f"a generator's clock offset is uncertain by {worst * 1e3:.1f} ms (half its round "
            f"trip), over the {CLOCK_LIMIT * 1e3:g} ms the start may be off by"
        )
    t0_wall = time.time() + START_MARGIN
    if on_start is not None:
        on_start(monotonic() + (t0_wall - time.time()))
    for a, c in zip(actors, clocks, strict=True):
        a.start.remote(t0_wall + c["offset"])
    horizon = float(params.get("horizon", 0.0))
    wait_until = monotonic() + START_MARGIN + horizon + GRACE
    tables, stats, lost = _collect(ray, actors, runs, nodes, wait_until, config, stop)
    generators = [
        {"slot": i, "node": nodes[i], "cpu": cpus[i], "clock_offset": clocks[i]["offset"],
         "clock_rtt": clocks[i]["rtt"], "lost": any(g.slot == i for g in lost)}
        for i in range(len(actors))
    ]  # fmt: skip
    log = RunLog.concat(
        tables,
        meta={**meta, "t0_unix": t0_wall, "processes": len(actors),
              "generators": generators, "lost_generators": [g.to_dict() for g in lost]},
    )  # fmt: skip
    return log, ClusterRun(stats, lost, generators)
