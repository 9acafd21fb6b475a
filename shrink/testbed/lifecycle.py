"""``up``, ``status`` and ``down`` of the real testbed: one server replica per mapping replica.

The server is a recipe (:mod:`shrink.testbed.recipe`): ``lighttpd-php-cgi`` (the
default), ``nginx-php-fpm``, or a user's TOML file. ``up`` picks the ports,
makes each replica's cgroup, and lets the recipe start the replica through a
spawn function that starts every process already pinned to the replica's CPUs
and inside its cgroup (set between fork and exec); the recipe pins its workers
to their cores. ``up`` then waits until the replica answers its health check and
records every PID (with its start time and program) in the state file. If
anything fails, every process spawned so far is stopped, with all it forked, and
the error names the recipe and what failed. ``down`` stops exactly those PIDs
(still the same processes: start time and program), plus any descendant or
member of the replica's cgroup found at that moment, checks that none is left,
and removes the run directories.

As root, the servers run as an unprivileged user, and run directories and
sockets live in a fresh private folder (:mod:`shrink.testbed.private`). A state
file is not trusted: one naming a cgroup outside shrink's own hierarchy is
refused (:class:`~shrink.errors.StateError`), and nothing it names is touched.
One ``up`` at a time per state file (a lock); another testbed on the same CPUs
is warned about.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shrink import processes as process
from shrink.atomic import make_dirs, resolve_path
from shrink.enforce import DEFAULT as DEFAULT_ENFORCE
from shrink.enforce import Enforcer, check_mechanism, make_enforcer
from shrink.enforce.cfs import cgroups_refused
from shrink.errors import (
    DocrootError,
    ParameterError,
    RecipeError,
    TestbedError,
    TopologyError,
    printable,
)
from shrink.irq import IrqAssignment, apply_plan, current_affinities, restore_affinities
from shrink.machine import Machine
from shrink.mapping import Mapping, Replica, build_mapping
from shrink.share import Share, can_write_cgroups, cgroup_layout
from shrink.testbed import cpus_in_use, registry
from shrink.testbed.config import PhpLimits, ServerSettings
from shrink.testbed.mounts import refuse_served, refuse_whole_fs
from shrink.testbed.private import (
    ServerUser,
    UpLock,
    check_reachable,
    check_run_dir_reachable,
    check_server_env,
    config_value,
    new_run_root,
    replica_dirs,
    safe_stem,
    server_env,
    server_user,
    user_name,
)
from shrink.testbed.recipe import (
    BUILTIN_RECIPES,
    ReplicaContext,
    ServerRecipe,
    kill_spawned,
    label,
    tail_log,
    wait_until,
)
from shrink.testbed.servers import load_recipe
from shrink.testbed.state import ReplicaState, TestbedState
from shrink.testbed.teardown import down, recipe_of, release, stop_and_release

__all__ = ["CGROUPS", "check_docroot", "down", "mapping_for", "others_on", "recipe_of", "up"]

# What up's ``cgroups`` may be (its docstring).
CGROUPS = ("auto", "yes", "no")
# How long a replica may take to answer its health check, where its recipe says not.
START_TIMEOUT_S = 15.0


def mapping_for(name: str, machine: Machine, share: Share, port: int) -> tuple[Mapping, list[str]]:
    """The mapping over the share's CPUs, and notes on what it means here.

    On a one-socket machine the two-replica mappings still split the CPUs, but
    direct and indirect cannot differ: there is no other socket to feed from.
    """
    notes: list[str] = []
    try:
        mapping = build_mapping(name, machine, share.cpus, base_port=port)
    except TopologyError as exc:
        why = exc
        if machine.sockets == 1 and name.endswith("-indirect"):
            as_direct = name.replace("-indirect", "-direct")
            try:
                mapping = Mapping(
                    name, build_mapping(as_direct, machine, share.cpus, base_port=port).replicas
                )
            except TopologyError as err:  # said of the mapping asked for: it named the direct one
                why = TopologyError(str(err).replace(repr(as_direct), repr(name)))
            else:
                why = None
        if why is not None:
            raise TopologyError(
                f"{why} (share {share.text or share.kind}: CPUs {list(share.cpus)})"
            ) from None
    if machine.sockets == 1:
        notes.append(
            f"machine {machine.name!r} has one socket: each replica's NIC socket is nominal "
            "(on loopback a replica's NIC is its address), so direct and indirect differ "
            "only in name here; cross-socket effects are modelled, not measured."
        )
    return mapping, notes


def _port_free(address: str, port: int) -> bool:
    fam = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        # lighttpd sets SO_REUSEADDR too, so a TIME_WAIT leftover is no conflict.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise TestbedError(f"cannot bind {address}:{port}: {exc.strerror}") from None
    return True


def _free_port(addresses: list[str]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        if all(_port_free(a, port) for a in addresses):
            return port
    raise TestbedError(f"found no port free on all of {addresses}")


@dataclass(frozen=True)
class _Launch:
    """What every replica of one ``up`` starts with: the recipe, the document root, the
    run folder, how long a start may take, whether the servers die with this process,
    the PHP pool and limits, and the unprivileged user (None: the caller)."""

    recipe: ServerRecipe
    docroot: Path
    run_root: Path
    timeout_s: float
    owned: bool
    children_per_core: int
    php: PhpLimits
    user: ServerUser | None
    # Records the replicas started so far, while up runs (see ``up``).
    note: Callable[[list[ReplicaState]], None] = lambda started: None


def _start_replica(launch: _Launch, r: Replica, enforcer: Enforcer | None) -> ReplicaState:
    """Start one replica through the recipe; on any failure stop all it spawned."""
    recipe, user, owned = launch.recipe, launch.user, launch.owned
    run_dir, sock_dir = replica_dirs(launch.run_root, r.name, user)
    if len(str(sock_dir / "php-fpm.sock-00")) > 107:  # a Unix socket path holds 108 bytes
        raise TestbedError(f"{sock_dir}: too long a path for a Unix socket; set a shorter "
                           "SHRINK_RUN_DIR")  # fmt: skip
    spawned: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def spawn(
        argv: list[str], log_name: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        # The one door every server process goes through: pinned and in the cgroup
        # from its first instruction, and known here for clean-up.
        (run_dir / log_name).unlink(missing_ok=True)  # a log of this start only
        before = process.own_children()

        def recorded(proc: subprocess.Popen[bytes]) -> None:
            spawned.append(proc)
            launch.note([_starting(r, spawned, run_dir, enforcer)])

        try:
            proc = process.start_process(
                argv,
                cpus=r.cpus,
                join_cgroup=enforcer.join if enforcer is not None else None,
                log_path=run_dir / log_name,
                env=server_env(user, env),
                owned=owned,
                user=(user.uid, user.gid) if user is not None else None,
                recorded=recorded,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise TestbedError(f"cannot start {argv[0]}: {why}") from None
        except BaseException:
            # A stop signal after the fork: the server runs, but no Popen names it.
            process.stop_new_children(before)
            raise
        logs.append(run_dir / log_name)
        return proc

    ctx = ReplicaContext(
        r, launch.docroot, run_dir, sock_dir, launch.children_per_core, launch.timeout_s, spawn,
        launch.php, user,
    )  # fmt: skip
    try:
        if enforcer is not None:
            enforcer.start(r.cpus)
        started = recipe.start(ctx)
        rs = ReplicaState(
            name=r.name,
            address=r.address,
            port=r.port,
            cpus=list(r.cpus),
            masters=started.masters,
            processes=started.processes,
            starttimes={},
            pinned=started.pinned,
            config=started.config,
            errorlog=started.errorlog,
            logs=list(started.logs),
            run_dir=str(run_dir),
            nic_socket=r.nic_socket,
            cgroup=(enforcer.to_dict().get("cgroup") if enforcer is not None else None),
            enforce=enforcer.to_dict() if enforcer is not None else None,
        )
        if enforcer is not None:  # the share's enforcement acts on every server PID
            enforcer.add(recipe.pids(rs))
            rs.enforce = enforcer.to_dict()  # what adding started (a co-runner's spinners)
            rs.cgroup = rs.enforce.get("cgroup")
            launch.note([rs])

        def answering() -> str | None:
            problem = recipe.health(r.address, r.port)
            return None if problem is None else f"no healthy answer ({problem})"

        wait_until(answering, spawned, launch.timeout_s)
        _record(recipe, rs)
    except BaseException as exc:
        kill_spawned(spawned)
        if enforcer is not None:
            release(enforcer, enforcer.to_dict().get("cgroup"))
        if not isinstance(exc, TestbedError) or isinstance(exc, RecipeError):
            raise
        output = "; ".join(f"{p.name}: {t}" for p in dict.fromkeys(logs) if (t := tail_log(p)))
        msg = str(exc).replace("\n", " | ") + (f"; output {output}" if output else "")
        where = f"replica {r.name} ({r.address}:{r.port})"
        raise RecipeError(msg, recipe=label(recipe), field=where) from None
    return rs


def _starting(
    r: Replica, spawned: list[subprocess.Popen[bytes]], run_dir: Path, enforcer: Enforcer | None
) -> ReplicaState:
    """What a replica has started so far, for the registry while ``up`` runs: its
    processes by start time, its cgroup (which ``down --stale`` empties too)."""
    pids = [p.pid for p in spawned]
    starttimes = {p: info.starttime for p in pids if (info := process.proc_info(p)) is not None}
    enf = enforcer.to_dict() if enforcer is not None else None
    return ReplicaState(
        name=r.name, address=r.address, port=r.port, cpus=list(r.cpus), masters=pids[:1],
        processes={"starting": pids}, starttimes=starttimes, pinned={}, config="",
        run_dir=str(run_dir), nic_socket=r.nic_socket,
        cgroup=enf.get("cgroup") if enf is not None else None, enforce=enf,
    )  # fmt: skip


def _record(recipe: ServerRecipe, rs: ReplicaState) -> None:
    """Record every server PID with its start time, including what was forked since start.

    ``recipe.pids`` is the replica's whole process list: the same list a CPU-time
    share's enforcement acts on.
    """
    known = set(rs.pids)
    forked = [p for p in recipe.pids(rs) if p not in known]
    if forked:
        rs.processes.setdefault("forked", []).extend(forked)
        for p in forked:
            with contextlib.suppress(OSError):  # it may have exited already
                rs.pinned.setdefault(p, list(process.allowed_cpus(p)))
    for p in rs.pids:
        info = process.proc_info(p)
        exe = process.exe_of(p)
        if info is not None:
            rs.starttimes[p] = info.starttime
        if exe is not None:
            rs.exes[p] = exe


def check_docroot(docroot: str | Path, server: str | None = None) -> Path:
    """``docroot`` resolved, where a testbed may serve it: a folder, not the whole file
    system, and, for a built-in recipe's ``server``, a path its config can hold (no byte
    that is not UTF-8, no quote: checked before any work, not when the config is
    written) (:class:`DocrootError` otherwise)."""
    resolved = resolve_path(docroot)
    if server in BUILTIN_RECIPES:
        try:
            config_value(resolved, "document root")
        except TestbedError as exc:
            raise DocrootError(str(exc)) from None
    if not resolved.is_dir():
        raise DocrootError(
            f"document root {resolved} is not a directory (make one with shrink synth)"
        )
    if resolved == Path(resolved.anchor):
        raise DocrootError(f"document root {resolved}: the whole file system; name a folder")
    refuse_whole_fs(resolved)  # / reached another way: a bind mount of it
    return resolved


_STATE_HOLDS = "the state names the servers' PIDs, cgroups and run folder"
# (SHRINK_RUN_DIR=doc/run: GET /run/up-tb-XXXXXXXX/r0/lighttpd.conf was 200)
_RUN_HOLDS = "the servers' configs and logs; set SHRINK_RUN_DIR or XDG_RUNTIME_DIR elsewhere"


def up(
    docroot: str | Path,
    machine: Machine,
    share: Share,
    mapping: str = "1-replica",
    *,
    state_path: str | Path,
    port: int = 8080,
    server: ServerSettings = ServerSettings(),
    cgroups: str = "auto",
    owned: bool = False,
    irq_plan: list[IrqAssignment] | None = None,
) -> TestbedState:
    """Start one server replica per replica of ``mapping`` over ``share``; write the state.

    ``server``: how the server runs (:class:`ServerSettings`: its recipe, a recipe, a
    built-in recipe's name (``lighttpd-php-cgi``, the default, or ``nginx-php-fpm``) or a
    recipe file ``RECIPE.toml``; the PHP pool of the built-in recipes; PHP's limits, said
    in the state's notes; the mechanism of a CPU-time share, :mod:`shrink.enforce`:
    ``cfs`` or ``corunner``). ``port`` 0 picks a port free on every replica's address.
    ``cgroups``: ``"auto"`` uses them where we may write them (always needed for a
    CPU-time share), ``"no"`` uses CPU affinity alone. ``irq_plan``: the NIC queues'
    IRQ affinities ``--apply-irq`` writes (:func:`shrink.irq.apply_plan`) once every
    server runs, the lists they replace recorded first and kept for ``down``.
    """
    enforce = server.enforce or DEFAULT_ENFORCE
    check_mechanism(enforce)
    if cgroups not in CGROUPS:
        # Anything but yes or auto read as no: a typo ran the share without its cgroups.
        raise ParameterError(f"cgroups == {cgroups!r}, must be one of {', '.join(CGROUPS)}.")
    recipe = server.recipe
    recipe = recipe if recipe is not None and not isinstance(recipe, str) else load_recipe(recipe)
    docroot = check_docroot(docroot, recipe.name)
    # A test double may run as the caller; every real recipe drops root.
    user = server_user() if getattr(recipe, "drops_root", True) else None
    check_server_env(user)  # (OPTIND=x: refused at the first server's start)
    check_reachable(docroot, user)
    refuse_served(state_path, docroot, "state", _STATE_HOLDS)  # before a folder is made
    # Checked as the user named it: resolved, a symlink another user planted on the way
    # is gone from the path, and the state was written where it pointed.
    make_dirs(Path(state_path).parent)
    state_path = Path(state_path).resolve()
    refuse_served(state_path, docroot, "state", _STATE_HOLDS)
    refuse_served(registry.run_dir(), docroot, "private folder", _RUN_HOLDS)
    base = registry.private_dir()
    check_run_dir_reachable(base, user)
    with UpLock(base, state_path):
        if state_path.exists():
            _refuse_if_running(state_path)
        versions = recipe.versions()
        m, notes = mapping_for(mapping, machine, share, port)
        if recipe.name in BUILTIN_RECIPES:  # the PHP limits it runs with, printed by testbed up
            notes.append(server.php.describe(server.php_children_per_core))
        notes.extend(others_on(share.cpus, state_path))
        notes.extend([*process.limits_lifted(), *process.limits_kept()])
        _refuse_irqs_placed(irq_plan or [], state_path)
        m = _with_free_ports(m, port)
        use_cg, layout = use_cgroups(share, cgroups, enforce)
        # Read before the run root is made: a stop signal while /proc was read (some ms)
        # left the empty run root behind, outside the clean-up below.
        before = process.own_children()
        run_root = new_run_root(base, state_path, user)

        post_max = server.php.post_max_mib
        irq: dict[str, str] = {}  # the IRQ lists irq_plan replaces, once read

        def state_of(started: list[ReplicaState]) -> TestbedState:
            return TestbedState(
                replicas=started, share=share, mapping=m.to_dict(), machine=machine.to_dict(),
                docroot=str(docroot), versions=versions,
                started=datetime.now(UTC).isoformat(timespec="seconds"), notes=notes,
                server=server_record(recipe),
                share_enforce=enfs[0].describe() if enfs else None,
                php_post_max_mib=post_max if recipe.name in BUILTIN_RECIPES else None,
                irq=irq or None, pid_ns=process.pid_namespace(),
            )  # fmt: skip

        enfs: list[Enforcer] = []
        # Recorded from the first server started, with this process as owner: a kill -9
        # of up before its state was written left servers and cgroups no state or
        # registry entry named, which ``down --stale`` never found.
        launch = _Launch(
            recipe, docroot, run_root,
            timeout_s=float(getattr(recipe, "start_timeout", None) or START_TIMEOUT_S), owned=owned,
            children_per_core=server.php_children_per_core, php=server.php, user=user,
            note=lambda now: registry.record(state_path, state_of(now), owned=owned, starting=True),
        )  # fmt: skip
        try:
            started, enfs = _start_all(
                launch, m, share, tag=f"{safe_stem(state_path)}-{os.getpid()}-{int(time.time())}",
                cgroups=(use_cg, layout), enforce=enforce,
            )  # fmt: skip
        except BaseException:
            registry.forget(state_path)
            shutil.rmtree(run_root, ignore_errors=True)
            raise
        try:
            if irq_plan:
                # Recorded before the first is written: a kill between the two left an
                # IRQ moved that no state or registry entry named.
                irq.update(current_affinities(irq_plan))
                registry.record(state_path, state_of(started), owned=owned, starting=True)
                apply_plan(irq_plan)
            state = state_of(started)
            state.write(state_path)
            # ``owned``: it dies with this process (a parent-death signal) and is recorded
            # with this process as owner, so ``down --stale`` finds what a kill -9 left.
            registry.record(state_path, state, owned=owned)
        except BaseException:
            # Without a state or a record nothing could stop them (a full disk, a state
            # path that cannot be written, a stop signal before the write): the servers
            # ran on, untracked.
            for rs in started:
                stop_and_release(recipe, rs)
            restore_affinities(irq)
            process.stop_new_children(before)
            registry.forget(state_path)
            shutil.rmtree(run_root, ignore_errors=True)
            raise
    return state


def _start_all(
    launch: _Launch, m: Mapping, share: Share, *, tag: str, cgroups: tuple[bool, Any], enforce: str
) -> tuple[list[ReplicaState], list[Enforcer]]:
    """Start every replica; if one fails, stop those started and raise."""
    use_cg, layout = cgroups
    started: list[ReplicaState] = []
    enfs: list[Enforcer] = []
    before = process.own_children()
    outer = launch.note
    launch = replace(launch, note=lambda current: outer([*started, *current]))
    try:
        for r in m.replicas:
            enf = None
            if use_cg or share.kind == "cpu_time":
                enf = make_enforcer(
                    enforce,
                    name=f"{tag}-{r.name}",
                    cpu_fraction=share.cpu_fraction,
                    period_us=share.period_us,
                    layout=layout if use_cg else None,
                )
                enfs.append(enf)
            started.append(_start_replica(launch, r, enf))
    except BaseException as exc:
        kept = process.limits_kept()
        if isinstance(exc, TestbedError) and exc.args and kept:
            # a ulimit the servers could not lose: the likely cause, named
            names = "; ".join(k.removeprefix("warning: ") for k in kept)
            exc.args = (f"{exc.args[0]}; {names}", *exc.args[1:])
        for rs in started:
            stop_and_release(launch.recipe, rs)
        # A replica that started as a stop signal came, before it was listed here.
        process.stop_new_children(before)
        for enf in enfs[len(started) :]:
            release(enf, enf.to_dict().get("cgroup"))
        raise
    return started, enfs


def others_on(cpus: tuple[int, ...] | list[int], state_path: Path, mine: Any = ()) -> list[str]:
    """A warning for each other running testbed (another state file, none of ``mine``) on
    any of ``cpus``."""
    out = []
    for other, st in registry.running():
        if other == state_path or other in mine or not registry.serving(st):
            continue  # (its servers all gone: on no CPU)
        shared = sorted({c for r in st.replicas for c in r.cpus} & set(cpus))
        if shared:
            out.append(
                f"warning: CPU(s) {shared} also run the testbed of {other} (started "
                f"{st.started}); the two disturb each other's measurements"
            )
    for uid, other, st in registry.others_running():
        shared = sorted({c for r in st.replicas for c in r.cpus} & set(cpus))
        if shared:
            out.append(
                f"warning: CPU(s) {shared} also run a testbed of {user_name(uid)} (its state "
                f"file {printable(str(other))}, started {printable(str(st.started))}); the two "
                "disturb each other's measurements"
            )
    for cpus_of_roots, started in cpus_in_use.roots_testbeds():  # (another user's up)
        if shared := sorted(set(cpus_of_roots) & set(cpus)):
            why = f"started {printable(started)}); the two disturb each other's measurements"
            out.append(f"warning: CPU(s) {shared} also run a testbed of root ({why}")
    return out


def _refuse_irqs_placed(plan: list[IrqAssignment], state_path: Path) -> None:
    """Another running testbed's ``--apply-irq`` placed one of ``plan``'s IRQs: this one
    would record that placement as the list to put back, and the two ``down`` runs,
    first one first, left the IRQ on the first's CPUs for good."""
    wanted = {str(a.irq) for a in plan}
    for other, st in registry.running() if wanted else []:
        shared = sorted(wanted & set(st.irq or {}), key=int)
        if other != state_path and shared:
            raise TestbedError(
                f"IRQ {', '.join(shared)} placed by the testbed of {printable(str(other))} "
                "(up --apply-irq), whose down puts back the lists it found: bring it down "
                "first, or start this one without --apply-irq"
            )


def server_record(recipe: ServerRecipe) -> dict[str, Any]:
    """What result files say about the server: the recipe's name, its source, its signal."""
    return {
        "name": recipe.name,
        "source": recipe.source,
        "stop_signal": int(getattr(recipe, "stop_signal", 15)),
    }


def _with_free_ports(m: Mapping, port: int) -> Mapping:
    addresses = sorted({r.address for r in m.replicas})
    if port == 0:
        port = _free_port(addresses)
        m = Mapping(
            m.name,
            tuple(
                Replica(r.name, r.cpus, r.address, port, r.sockets, r.nic_socket)
                for r in m.replicas
            ),
        )
    for r in m.replicas:
        if not _port_free(r.address, r.port):
            raise TestbedError(
                f"port {r.port} on {r.address} is in use (replica {r.name}); "
                "stop what holds it or pass another --port (0 picks a free one)"
            )
    return m


def use_cgroups(share: Share, cgroups: str, enforce: str) -> tuple[bool, Any]:
    missing = sorted(set(share.cpus) - os.sched_getaffinity(0))
    if missing:
        raise TopologyError(
            f"share CPUs {missing} are outside this process's allowed CPUs "
            f"{sorted(os.sched_getaffinity(0))}"
        )
    layout = cgroup_layout()
    quota = share.kind == "cpu_time" and enforce == "cfs"
    use_cg = cgroups == "yes" or quota or (cgroups == "auto" and can_write_cgroups(layout))
    if quota and cgroups == "no":
        raise TopologyError("a CPU-time share needs a cgroup quota; cgroups='no' cannot give it")
    if use_cg and layout.cpu is None:
        raise TopologyError(
            "no cgroup with the cpu controller is mounted (/proc/self/mounts lists none; "
            "in a chroot or container, mount /sys/fs/cgroup with its controllers, e.g. "
            "mount --rbind). CPU-time shares need one; core shares work through CPU "
            "affinity: `shrink testbed up --share 0-1` (or --share 0.5), or `shrink predict "
            "--share-kind cores` with an alpha of whole cores."
        )
    if use_cg and not can_write_cgroups(layout):
        raise TopologyError(cgroups_refused(layout))
    return use_cg, layout


def _refuse_if_running(state_path: Path) -> None:
    try:
        old = TestbedState.read(state_path)
    except TestbedError:
        return  # not a state file of ours: it will be overwritten
    running = [p for r in old.replicas for p in r.pids if process.is_alive(p, r.starttimes.get(p))]
    if running:
        raise TestbedError(
            f"{state_path} records a testbed that still runs (PIDs {running}); "
            f"stop it first: shrink testbed down --state {shlex.quote(str(state_path))}"
        )
