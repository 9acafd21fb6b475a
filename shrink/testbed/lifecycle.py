"""``up``, ``status`` and ``down`` of the real testbed: lighttpd + php-cgi per replica.

``up`` renders each replica's config, starts ``lighttpd -D`` already pinned to
the replica's CPUs and inside its cgroup (set between fork and exec), waits for
the workers and the php-cgi pool to appear, pins each worker to its own core and
the php-cgi children evenly over the cores, waits for a static file and a PHP
page to answer, and records every PID (with its start time) in the state file.
``down`` stops exactly those PIDs, plus any descendant or cgroup member found at
that moment, and checks that none is left.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shrink.errors import TestbedError, TopologyError
from shrink.machine import Machine
from shrink.mapping import Mapping, Replica, build_mapping
from shrink.share import Cgroup, Share, can_write_cgroups, cgroup_layout
from shrink.testbed import health, process, registry
from shrink.testbed.config import (
    PHP_MAX_EXECUTION_S,
    PHP_MEMORY_LIMIT,
    ReplicaConfig,
    write_probe,
)
from shrink.testbed.state import ReplicaState, TestbedState

__all__ = ["ReplicaStatus", "down", "find_tool", "mapping_for", "status", "tool_versions", "up"]

INSTALL_HINT = (
    "install it with `apt-get install lighttpd php-cgi` as root "
    "(the README's set-up, `make setup`, does this)"
)


def find_tool(name: str) -> str:
    """The path of ``lighttpd`` or ``php-cgi``; /usr/sbin is searched even if not on PATH."""
    extra = os.pathsep.join(["/usr/sbin", "/usr/local/sbin", "/sbin"])
    path = shutil.which(name) or shutil.which(name, path=extra)
    if path is None:
        raise TestbedError(f"{name} is not installed: {INSTALL_HINT}")
    return path


def tool_versions(lighttpd: str, php_cgi: str) -> dict[str, str]:
    """First lines of ``lighttpd -v`` and ``php-cgi -v`` (e.g. ``lighttpd/1.4.69``)."""
    out = {}
    for key, argv in (("lighttpd", [lighttpd, "-v"]), ("php", [php_cgi, "-v"])):
        try:
            text = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise TestbedError(f"{argv[0]} -v failed: {exc}") from None
        out[key] = text.strip().splitlines()[0] if text.strip() else "unknown"
    return out


def mapping_for(name: str, machine: Machine, share: Share, port: int) -> tuple[Mapping, list[str]]:
    """The mapping over the share's CPUs, and notes on what it means here.

    On a one-socket machine the two-replica mappings still split the CPUs, but
    direct and indirect cannot differ: there is no other socket to feed from.
    """
    notes: list[str] = []
    try:
        mapping = build_mapping(name, machine, share.cpus, base_port=port)
    except TopologyError as exc:
        if machine.sockets == 1 and name.endswith("-indirect"):
            direct = build_mapping(
                name.replace("-indirect", "-direct"), machine, share.cpus, base_port=port
            )
            mapping = Mapping(name, direct.replicas)
        else:
            raise TopologyError(
                f"{exc} (share {share.text or share.kind}: CPUs {list(share.cpus)})"
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


def _socket_dir(run_dir: Path) -> Path:
    # A Unix socket path must fit in 108 bytes; long run dirs get a short one in /tmp.
    if len(str(run_dir / "r00" / "php.sock-0")) < 100:
        return run_dir
    tag = hashlib.sha1(str(run_dir).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"shrink-{tag}"


def _wait_tree(
    master: subprocess.Popen[bytes], workers: int, php_children: int, timeout_s: float
) -> tuple[list[int], int | None, list[int]]:
    """Wait until lighttpd has forked its workers and php-cgi its children."""
    deadline = time.monotonic() + timeout_s
    while True:
        if master.poll() is not None:
            raise TestbedError("lighttpd exited during start-up", pid=master.pid)
        tree = process.children_map()
        kids = [process.proc_info(p) for p in tree.get(master.pid, [])]
        lt = [k.pid for k in kids if k is not None and k.comm.startswith("lighttpd")]
        php = [k.pid for k in kids if k is not None and k.comm.startswith("php")]
        php_kids = sorted(tree.get(php[0], [])) if php else []
        want_workers = workers if workers > 1 else 0
        if len(lt) >= want_workers and php and len(php_kids) >= php_children:
            return sorted(lt) or [master.pid], php[0], php_kids
        if time.monotonic() > deadline:
            raise TestbedError(
                f"lighttpd started {len(lt)} of {want_workers} workers and php-cgi "
                f"{len(php_kids)} of {php_children} children within {timeout_s:g} s",
                pid=master.pid,
            )
        time.sleep(0.02)


def _pin(pids: list[int], cpus: tuple[int, ...]) -> dict[int, list[int]]:
    """Pin pids[i] to cpus[i % n]: each worker its own core, php children evenly."""
    out = {}
    for i, pid in enumerate(pids):
        cpu = cpus[i % len(cpus)]
        os.sched_setaffinity(pid, {cpu})
        out[pid] = [cpu]
    return out


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _start_replica(
    r: Replica,
    *,
    docroot: Path,
    run_root: Path,
    sock_root: Path,
    lighttpd: str,
    php_cgi: str,
    php_per_core: int,
    cgroup: Cgroup | None,
    share: Share,
    timeout_s: float,
    owned: bool = False,
    php_limits: tuple[int, str] = (PHP_MAX_EXECUTION_S, PHP_MEMORY_LIMIT),
) -> ReplicaState:
    run_dir = run_root / r.name
    run_dir.mkdir(parents=True, exist_ok=True)
    sock_dir = sock_root / r.name
    sock_dir.mkdir(parents=True, exist_ok=True)
    cfg = ReplicaConfig(
        replica=r,
        docroot=docroot,
        run_dir=run_dir,
        socket_path=sock_dir / "php.sock",
        php_cgi=php_cgi,
        php_children=php_per_core * len(r.cpus),
        workers=len(r.cpus),
        php_max_execution_s=php_limits[0],
        php_memory_limit=php_limits[1],
    )
    write_probe(cfg)
    check = subprocess.run(
        [lighttpd, "-tt", "-f", str(cfg.conf_path)], capture_output=True, text=True, timeout=20
    )
    if check.returncode != 0:
        raise TestbedError(f"lighttpd refused {cfg.conf_path}: {check.stderr.strip()}")
    if cgroup is not None:
        cgroup.create(r.cpus, share.quota_us(len(r.cpus)), share.period_us)
    master = process.start_process(
        [lighttpd, "-D", "-f", str(cfg.conf_path)],
        cpus=r.cpus,
        join_cgroup=cgroup.add if cgroup is not None else None,
        log_path=run_dir / "stdout.log",
        owned=owned,
    )
    try:
        workers, php_parent, php_kids = _wait_tree(master, len(r.cpus), cfg.php_children, timeout_s)
        pinned = _pin(workers if workers != [master.pid] else [], r.cpus)
        if workers == [master.pid]:
            pinned[master.pid] = [r.cpus[0]]
            os.sched_setaffinity(master.pid, {r.cpus[0]})
        pinned.update(_pin(php_kids, r.cpus))
        health.wait_healthy(
            r.address, r.port, timeout_s=timeout_s, still_running=lambda: master.poll() is None
        )
    except TestbedError as exc:
        _kill_tree(master.pid)
        raise TestbedError(
            f"replica {r.name} ({r.address}:{r.port}): {exc}; "
            f"error log {cfg.errorlog}: {_tail(cfg.errorlog)}"
        ) from None
    lt_pids = [master.pid, *[w for w in workers if w != master.pid]]
    php_pids = [php_parent, *php_kids] if php_parent else php_kids
    starttimes = {}
    for p in lt_pids + php_pids:
        info = process.proc_info(p)
        if info is not None:
            starttimes[p] = info.starttime
    return ReplicaState(
        name=r.name,
        address=r.address,
        port=r.port,
        cpus=list(r.cpus),
        master_pid=master.pid,
        lighttpd_pids=lt_pids,
        php_pids=php_pids,
        starttimes=starttimes,
        pinned=pinned,
        config=str(cfg.conf_path),
        errorlog=str(cfg.errorlog),
        run_dir=str(run_dir),
        nic_socket=r.nic_socket,
        cgroup=cgroup.to_dict() if cgroup is not None else None,
    )


def _kill_tree(master: int) -> None:
    pids = [master, *process.descendants(master)]
    info = {p: process.proc_info(p) for p in pids}
    process.stop_processes({p: i.starttime for p, i in info.items() if i}, first=[master])


def up(
    docroot: str | Path,
    machine: Machine,
    share: Share,
    mapping: str = "1-replica",
    *,
    state_path: str | Path,
    port: int = 8080,
    php_children_per_core: int = 2,
    cgroups: str = "auto",
    timeout_s: float = 15.0,
    owned: bool = False,
    php_limits: tuple[int, str] = (PHP_MAX_EXECUTION_S, PHP_MEMORY_LIMIT),
) -> TestbedState:
    """Start one lighttpd + php-cgi per replica of ``mapping`` over ``share``; write the state.

    ``port`` 0 picks a port free on every replica's address. ``cgroups``:
    ``"auto"`` uses them where we may write them (always needed for a CPU-time
    share), ``"no"`` uses CPU affinity alone. ``owned``: the testbed dies with this
    process (a command that starts and stops it itself); it is recorded with this
    process as its owner, so ``down --stale`` finds what a kill -9 leaves
    (:mod:`shrink.testbed.registry`). ``php_limits``: PHP's max_execution_time
    (seconds) and memory_limit, so that a request the client abandoned stops.
    """
    docroot = Path(docroot).resolve()
    if not docroot.is_dir():
        raise TestbedError(
            f"document root {docroot} is not a directory (make one with shrink synth)"
        )
    state_path = Path(state_path).resolve()
    if state_path.exists():
        _refuse_if_running(state_path)
    lighttpd, php_cgi = find_tool("lighttpd"), find_tool("php-cgi")
    versions = tool_versions(lighttpd, php_cgi)
    m, notes = mapping_for(mapping, machine, share, port)
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
    missing = sorted(set(share.cpus) - os.sched_getaffinity(0))
    if missing:
        raise TopologyError(
            f"share CPUs {missing} are outside this process's allowed CPUs "
            f"{sorted(os.sched_getaffinity(0))}"
        )
    layout = cgroup_layout()
    use_cg = (
        cgroups == "yes"
        or share.kind == "cpu_time"
        or (cgroups == "auto" and can_write_cgroups(layout))
    )
    if share.kind == "cpu_time" and cgroups == "no":
        raise TopologyError("a CPU-time share needs a cgroup quota; cgroups='no' cannot give it")
    if use_cg and not can_write_cgroups(layout):
        raise TopologyError(
            "no permission for cgroups (CPU-time shares need root or a delegated cgroup). "
            "Without root, core shares work through CPU affinity: `shrink testbed up --share "
            "0-1` (or --share 0.5), or `shrink predict --share-kind cores` with an alpha "
            "of whole cores."
        )
    run_root = state_path.with_name(state_path.stem + ".run")
    run_root.mkdir(parents=True, exist_ok=True)
    sock_root = _socket_dir(run_root)
    tag = f"{state_path.stem}-{os.getpid()}-{int(time.time())}"
    started: list[ReplicaState] = []
    cgs: list[Cgroup] = []
    try:
        for r in m.replicas:
            cg = Cgroup(f"{tag}-{r.name}", layout) if use_cg else None
            if cg is not None:
                cgs.append(cg)
            started.append(
                _start_replica(
                    r,
                    docroot=docroot,
                    run_root=run_root,
                    sock_root=sock_root,
                    lighttpd=lighttpd,
                    php_cgi=php_cgi,
                    php_per_core=php_children_per_core,
                    cgroup=cg,
                    share=share,
                    timeout_s=timeout_s,
                    owned=owned,
                    php_limits=php_limits,
                )
            )
    except BaseException:
        for rs in started:
            _stop_replica(rs)
        for cg in cgs:
            cg.remove()
        raise
    state = TestbedState(
        replicas=started,
        share=share.to_dict(),
        mapping=m.to_dict(),
        machine=machine.to_dict(),
        docroot=str(docroot),
        versions=versions,
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        notes=notes,
    )
    state.write(state_path)
    registry.record(state_path, state, owned=owned)
    return state


def _refuse_if_running(state_path: Path) -> None:
    try:
        old = TestbedState.read(state_path)
    except TestbedError:
        return  # not a state file of ours: it will be overwritten
    running = [p for r in old.replicas for p in r.pids if process.is_alive(p, r.starttimes.get(p))]
    if running:
        raise TestbedError(
            f"{state_path} records a testbed that still runs (PIDs {running}); "
            f"stop it first: shrink testbed down --state {state_path}"
        )


@dataclass
class ReplicaStatus:
    """What ``status`` found for one replica."""

    name: str
    address: str
    port: int
    cpus: list[int]
    pids: list[int]
    alive: list[int]
    dead: list[int]
    answering: bool
    problem: str | None = None
    usage_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.dead and self.answering

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "cpus": self.cpus,
            "pids": self.pids,
            "alive": self.alive,
            "dead": self.dead,
            "answering": self.answering,
            "ok": self.ok,
            "problem": self.problem,
            "cpu_seconds": self.usage_s,
        }


def status(state_path: str | Path, *, check_health: bool = True) -> list[ReplicaStatus]:
    """Which recorded processes still run and whether each replica answers."""
    st = TestbedState.read(state_path)
    out = []
    for r in st.replicas:
        alive = [p for p in r.pids if process.is_alive(p, r.starttimes.get(p))]
        dead = [p for p in r.pids if p not in alive]
        problem = None
        if dead:
            kinds = ["lighttpd" if p in r.lighttpd_pids else "php-cgi" for p in dead]
            problem = "crashed or killed: " + ", ".join(
                f"{k} PID {p}" for k, p in zip(kinds, dead, strict=True)
            )
        answering = False
        if check_health and st.stopped is None:
            err = health.check(r.address, r.port, timeout_s=2.0)
            answering = err is None
            if err and not problem:
                problem = err
        usage = Cgroup.from_dict(r.cgroup).usage_s() if r.cgroup else None
        if usage is None:
            usage = process.cpu_seconds(alive)
        out.append(
            ReplicaStatus(
                r.name,
                r.address,
                r.port,
                r.cpus,
                r.pids,
                alive,
                dead,
                answering,
                problem,
                usage,
                list(st.notes),
            )
        )
    return out


def _stop_replica(r: ReplicaState) -> list[int]:
    targets: dict[int, int | None] = {p: r.starttimes.get(p) for p in r.pids}
    # Anything forked since `up` (a respawned php-cgi child) is found two ways.
    for p in list(targets):
        if process.is_alive(p, targets[p]):
            for d in process.descendants(p):
                targets.setdefault(d, None)
    cg = Cgroup.from_dict(r.cgroup) if r.cgroup else None
    if cg is not None:
        for p in cg.pids():
            targets.setdefault(p, None)
    stopped = process.stop_processes(targets, first=[r.master_pid])
    left = [p for p, t in targets.items() if process.is_alive(p, t)]
    if left:
        raise TestbedError(f"replica {r.name}: PIDs {left} survived SIGKILL")
    if cg is not None:
        cg.remove()
    return stopped


def down(state_path: str | Path) -> dict[str, list[int]]:
    """Stop every process ``up`` recorded (and their descendants); return what was stopped."""
    st = TestbedState.read(state_path)
    out = {r.name: _stop_replica(r) for r in st.replicas}
    st.stopped = datetime.now(UTC).isoformat(timespec="seconds")
    st.write(state_path)
    registry.forget(state_path)
    return out


def down_stale() -> list[tuple[registry.StaleTestbed, dict[str, list[int]]]]:
    """Stop every stale testbed (:func:`shrink.testbed.registry.stale`), remove its cgroups."""
    out = []
    for sb in registry.stale():
        stopped = {r.name: _stop_replica(r) for r in sb.state.replicas}
        sb.entry.unlink(missing_ok=True)
        out.append((sb, stopped))
    return out
