"""``shrink testbed up|status|down``: the real server (a recipe), per replica."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    cli_errors,
    echo_json,
    output_path,
    plural,
)
from shrink.cli._typed_paths import file_named
from shrink.defaults import MAX_BODY
from shrink.errors import OptionError, ParameterError, TestbedError, printable

if TYPE_CHECKING:
    from shrink.irq import IrqAssignment
    from shrink.machine import Machine
    from shrink.mapping import Mapping
    from shrink.share import Share
    from shrink.testbed.config import PhpLimits
    from shrink.testbed.private import ServerUser
    from shrink.testbed.state import TestbedState
    from shrink.trace import Trace

# The defaults of shrink.enforce.DEFAULT and shrink.testbed.config.PHP_CHILDREN_PER_CORE,
# the bound shrink.testbed.command.MAX_WORKERS_PER_CORE and shrink.testbed.lifecycle.CGROUPS,
# written out so that `shrink --help` need not import the testbed (a test checks they agree).
DEFAULT_ENFORCE = "cfs"
PHP_CHILDREN_PER_CORE = 1
MAX_WORKERS_PER_CORE = 1024
CGROUPS = ("auto", "yes", "no")
# The lowest port a user without CAP_NET_BIND_SERVICE may bind (the servers' user).
_UNPRIVILEGED_PORTS = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")

# At most as many as a recipe file's workers_per_core: a pool past it is no server's.
_PhpChildren = Annotated[
    int,
    typer.Option(
        "--php-children-per-core",
        min=1,
        max=MAX_WORKERS_PER_CORE,
        help="PHP pool children per core.",
    ),
]

testbed_app = typer.Typer(help="Start, check and stop the real testbed.", no_args_is_help=True)

_STATE = typer.Option(
    "--state", readable=False, parser=file_named, metavar="<path>", help="Testbed state JSON file."
)
StateOpt = Annotated[Path, _STATE]
ServerOpt = Annotated[
    str,
    typer.Option(
        "--server",
        help="Server recipe: lighttpd-php-cgi (default), nginx-php-fpm, or a RECIPE.toml file.",
    ),
]


@testbed_app.command("up")
def up(
    docroot: Annotated[Path, typer.Option("--docroot", help="Document root (shrink synth).")],
    state: StateOpt,
    share: Annotated[
        str,
        typer.Option(
            "--share", help="all | FRACTION (0.5) | CPULIST (0-1) | CPULIST@QUOTA (0@50%)."
        ),
    ] = "all",
    mapping: Annotated[
        str,
        typer.Option(
            "--mapping", help="1-replica | 2-replica-direct | 2-replica-indirect | K-replica."
        ),
    ] = "1-replica",
    machine: Annotated[
        str, typer.Option("--machine", help="'this' or a TOML spec naming this machine's CPUs.")
    ] = "this",
    port: Annotated[
        int,
        typer.Option(
            "--port", min=0, max=65_535, help="Listen port of every replica; 0 picks a free one."
        ),
    ] = 8080,
    server: ServerOpt = "lighttpd-php-cgi",
    php_children: _PhpChildren = PHP_CHILDREN_PER_CORE,
    php_max_execution: Annotated[
        str,
        typer.Option(
            "--php-max-execution",
            help="PHP's max_execution_time, e.g. 10s: as long as the replay's request "
            "timeout, so that a request given up on stops.",
        ),
    ] = "10s",
    php_memory_limit: Annotated[
        str, typer.Option("--php-memory-limit", help="PHP's memory_limit, e.g. 256M.")
    ] = "256M",
    period: Annotated[
        int | None,
        typer.Option(
            "--period-us",
            help="CFS period in us for a CPU-time share (default: shortest with a one-tick quota).",
        ),
    ] = None,
    cgroups: Annotated[str, typer.Option("--cgroups", help="auto | yes | no.")] = "auto",
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Warn before starting if the docroot lacks its paths; PHP's post_max_size "
            "then holds its largest request body.",
        ),
    ] = None,
    max_body: MaxBodyOpt = MAX_BODY,
    enforce: Annotated[
        str,
        typer.Option(
            "--enforce",
            help="How a CPU-time share is enforced: cfs (a CFS quota) | corunner "
            "(a SCHED_FIFO spinner on each share CPU).",
        ),
    ] = DEFAULT_ENFORCE,
    nic: Annotated[
        list[str] | None,
        typer.Option("--nic", help="Real NIC interface feeding the replicas (repeat per replica)."),
    ] = None,
    apply_irq: Annotated[
        bool,
        typer.Option(
            "--apply-irq", help="Write the RSS IRQ affinity plan (root, real NIC); else print it."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the state as JSON.")] = False,
) -> None:
    """Start one server replica per mapping replica, pinned to its cores, capped by the share."""
    from shrink.share import Share
    from shrink.testbed import lifecycle
    from shrink.testbed.config import ServerSettings
    from shrink.topology import load_machine

    warn_stale()
    with cli_errors(measures=False):
        output_path(state, what="--state")
        if cgroups not in CGROUPS:
            # Anything but yes or auto read as no: a typo ran the share without its cgroups.
            raise OptionError("--cgroups", f"{cgroups!r}; accepted: {', '.join(CGROUPS)}")
        _refuse_a_privileged_port(port)
        tr = docroot_checked(docroot, trace, max_body, server)
        php = _php_limits(tr, php_max_execution, php_memory_limit)
        warn_foreign_spec(machine)
        m = load_machine(machine)
        sh = Share.parse(share, m, period_us=period)
        plan = (
            _irq(lifecycle.mapping_for(mapping, m, sh, port)[0], m, nic, apply_irq) if nic else []
        )
        st = lifecycle.up(
            docroot,
            m,
            sh,
            mapping,
            state_path=state,
            port=port,
            server=ServerSettings(server, php_children, php, enforce),
            cgroups=cgroups,
            irq_plan=plan,
        )
        if plan:
            typer.echo(f"applied {len(plan)} IRQ affinities ({_IRQ_NOTE})")
    if as_json:
        echo_json(st.to_dict())
        return
    _print_up(st, m, sh, state)


def _refuse_a_privileged_port(port: int) -> None:
    """A port the servers' user may not bind: they run without root and without
    capabilities, so lighttpd said only "Permission denied" once it had started."""
    try:
        start = int(_UNPRIVILEGED_PORTS.read_text())
    except (OSError, ValueError):
        return
    if 0 < port < start:
        raise OptionError(
            "--port",
            f"{port} is below net.ipv4.ip_unprivileged_port_start ({start}), and the servers "
            f"run without root: pass --port {start} or above (0 picks a free one), or lower "
            "that sysctl",
        )


def _print_up(st: TestbedState, m: Machine, sh: Share, state: Path) -> None:
    """What testbed up started, one line per replica, and how to stop it."""
    from shrink.topology import format_cpulist

    typer.echo(
        f"testbed up: {st.mapping['name']} on {m.name}, share {sh.text} "
        f"(alpha {sh.fraction:g} of the server it stands for); server {st.server['name']}: "
        + ", ".join(v for k, v in st.versions.items() if k != "recipe")
    )
    for r in st.replicas:
        typer.echo(
            f"  {r.name}  http://{r.address}:{r.port}/  CPUs {format_cpulist(r.cpus)}  "
            + "  ".join(f"{role} {pids}" for role, pids in r.processes.items())
        )
    for note in st.notes:  # a warning (another testbed on these CPUs) says so itself
        warn = note.startswith("warning: ")
        typer.echo(note if warn else f"note: {note}", err=warn)
    # Quoted for a shell: a state named "a b.json" (or "x.json; cmd"), pasted back,
    # split in two (or ran the second command). A name with CR, LF or an ANSI escape
    # is shown escaped (it reached the terminal raw), and quoted as $'...' for bash.
    typer.echo(
        f"state: {printable(state)}   stop with: shrink testbed down --state {shell_word(state)}"
    )


def shell_word(path: Path | str) -> str:
    """``path`` as one word for a POSIX shell; with characters not printable, bash's
    ``$'...'`` with each of them as the bytes the file's name holds (``\\xHH``): bash
    reads ``\\uHHHH`` by the locale (under LC_ALL=C it kept it as text), and a name's
    byte that is no UTF-8 (0xff, read as U+DCFF) came back as three other bytes."""
    text = str(path)
    if text.isprintable():
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        else:
            out.append(ch if ch.isprintable() else "".join(f"\\x{b:02x}" for b in os.fsencode(ch)))
    return "$'" + "".join(out) + "'"


_IRQ_NOTE = "stop irqbalance, or it will undo them; testbed down puts them back"


def _irq(mapping: Mapping, machine: Machine, nic: list[str], apply: bool) -> list[IrqAssignment]:
    """Print the IRQ plan; the plan for up to apply once its servers run, if asked."""
    from shrink.irq import format_plan, plan_irq_affinity

    plan = plan_irq_affinity(mapping, machine, nic, Path("/proc/interrupts").read_text())
    typer.echo(format_plan(plan))
    if not apply:
        typer.echo("(dry run: pass --apply-irq as root to write them)")
        return []
    return plan


@testbed_app.command("status")
def status(
    state: StateOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Which replicas run and answer; a crashed, stopped or frozen replica is named with
    its PIDs (exit code 1).

    After ``shrink testbed down`` it says the testbed is down (exit code 1: not up).
    """
    from shrink.testbed.state import TestbedState
    from shrink.topology import format_cpulist

    with cli_errors(measures=False):
        _unwritten(state)
        st = TestbedState.read(state)
        from shrink.testbed.status import status as testbed_status

        reps = testbed_status(state)
    ok = all(r.ok for r in reps) and st.stopped is None
    if as_json:
        echo_json(
            {
                "schema": "shrink.testbed-status/1",
                "ok": ok,
                "stopped": st.stopped,
                "mapping": st.mapping["name"],
                "share": st.to_dict()["share"],
                "notes": st.notes,
                "server": st.server,
                "versions": st.versions,
                "replicas": [r.to_dict() for r in reps],
            }
        )
    elif st.stopped:
        # Its processes are gone because `down` stopped them: not a crash.
        typer.echo(
            f"testbed is down: stopped by `shrink testbed down` at {st.stopped} "
            f"({plural(len(reps), 'replica')}); start it with `shrink testbed up`"
        )
    else:
        typer.echo(f"server {st.server.get('name')} ({st.server.get('source')})")
        for r in reps:
            flag = "ok" if r.ok else "PROBLEM"
            typer.echo(
                f"{r.name}  {r.address}:{r.port}  CPUs {format_cpulist(r.cpus)}  "
                f"{len(r.alive)}/{len(r.pids)} processes  {flag}"
                + (f": {r.problem}" if r.problem else "")
            )
        for note in st.notes:
            typer.echo(f"note: {note}")
    if not ok:
        raise typer.Exit(code=1)


@testbed_app.command("down")
def down(
    state: Annotated[Path | None, _STATE] = None,
    stale: Annotated[
        bool,
        typer.Option(
            "--stale",
            help="Stop every testbed whose owner (a killed predict) or state file is gone, "
            "and remove its cgroups (and the empty ones a killed up left).",
        ),
    ] = False,
) -> None:
    """Stop exactly the processes `up` started (and anything they forked); leave none."""
    from shrink.testbed import lifecycle

    if stale:
        _down_stale()
        if state is None:
            return
    if state is None:
        with cli_errors(measures=False):
            raise ParameterError("give --state FILE, or --stale to clean up stale testbeds.")
    with cli_errors(measures=False):
        stopped = lifecycle.down(state)
    for name, pids in stopped.items():
        typer.echo(
            f"{name}: stopped {plural(len(pids), 'process')} {pids}"
            if pids
            else f"{name}: nothing was running"
        )
    _left_elsewhere(state)


def _left_elsewhere(state: Path) -> None:
    """The run folders down left: an ``up`` under another SHRINK_RUN_DIR made them, or
    one under this one could not be removed (a mount point, a chattr-locked file)."""
    from shrink.testbed import registry, teardown

    for root, why in teardown.run_roots_left(state):
        if why is not None:
            typer.echo(
                f"warning: left {printable(root)} (the servers' configs and logs): {why}",
                err=True,
            )
            continue
        typer.echo(
            f"note: left {printable(root)} (the servers' configs and logs): up made it under "
            f"another SHRINK_RUN_DIR than this one ({printable(registry.run_dir())}), and down "
            "removes nothing outside it; run down with that SHRINK_RUN_DIR, or remove it",
            err=True,
        )


def _unwritten(state: Path) -> None:
    """A state file ``up`` never wrote (killed while it started the servers), whose
    servers shrink recorded: say so, not "was `testbed up` run?"."""
    from shrink.testbed import registry
    from shrink.testbed.recipe import replica_pids

    if state.exists() or (kept := registry.recorded(state)) is None:
        return
    pids = [p for r in kept.replicas for p in replica_pids(r)]
    raise TestbedError(
        f"{printable(state)}: not written: the `testbed up` that was to write it stopped "
        f"while starting the servers, which may still run (PIDs {pids}); stop them with "
        f"`shrink testbed down --state {printable(state)}`"
    )


def _down_stale() -> None:
    from shrink.testbed import registry, teardown

    with cli_errors(measures=False):
        done = teardown.down_stale()
        unrecorded = registry.unrecorded_groups()
        orphaned = teardown.remove_groups(registry.orphaned_groups())
        left = registry.clear_killed_ups()
    if not done:
        typer.echo(f"no stale testbed recorded in {registry.run_dir()}")
    if left:
        locks = sum(p.name.endswith(".lock") for p in left)
        typer.echo(
            f"removed {plural(len(left) - locks, 'run folder')} and {plural(locks, 'lock file')}"
            " a killed `testbed up` left before it recorded a server"
        )
    if orphaned:
        names = sorted({g.name for g in orphaned})
        typer.echo(
            f"removed {plural(len(names), 'empty cgroup')} a killed `testbed up` left before "
            f"it recorded a server: {printable(', '.join(names))}"
        )
    for sb, stopped in done:
        n = sum(len(p) for p in stopped.values())
        typer.echo(
            f"{printable(sb.state_path)}: {sb.reason}; stopped {n} process(es), removed its cgroups"
        )
        for root, why in sb.left:
            typer.echo(
                f"warning: left {printable(root)} (the servers' configs and logs): {why}",
                err=True,
            )
    # One line a group: under cgroup v1 a group has a folder in each controller.
    by_name: dict[str, tuple[list[Path], set[int]]] = {}
    for group, pids in unrecorded:
        dirs, members = by_name.setdefault(group.name, ([], set()))
        dirs.append(group)
        members.update(pids)
    for dirs, members in by_name.values():
        pids = sorted(members)
        shown = ", ".join(str(p) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
        where = printable(", ".join(str(d) for d in dirs))
        typer.echo(
            f"note: {where} holds PIDs {shown}, of no testbed recorded here: one started "
            "under another SHRINK_RUN_DIR (or one since deleted)? Not stopped: run this "
            "with that SHRINK_RUN_DIR, `shrink testbed down --state FILE`, or stop them by PID",
            err=True,
        )


def _php_limits(trace: Trace | None, max_execution: str, memory_limit: str) -> PhpLimits:
    """PHP's limits from the options, ``post_max_size`` from the trace's largest body."""
    import math

    from shrink.cli._common import parse_duration_option
    from shrink.testbed.config import PhpLimits

    seconds = math.ceil(parse_duration_option(max_execution, "php-max-execution"))
    if trace is None:
        return PhpLimits(seconds, memory_limit)
    return PhpLimits(seconds, memory_limit).for_trace(trace)


def docroot_checked(
    docroot: Path, trace: Path | None, max_body: int, server: str | None = None
) -> Trace | None:
    """Refuse a document root no testbed may serve (not a folder, or /, or one the
    built-in ``server``'s config cannot hold: exit 2 naming --docroot, before anything
    runs), and warn when it lacks ``trace``'s paths or others may write there; returns
    the trace as read (None without one)."""
    from shrink.testbed.lifecycle import check_docroot

    with as_option("--docroot"):
        check_docroot(docroot, server)
    tr = None
    if trace is not None:
        from shrink.trace import Trace

        # Read once: its docroot's coverage and its largest body both come from it.
        tr = Trace.read_parquet(trace, max_body=max_body)
        warn_docroot(trace, docroot, tr, server)
    warn_writable_docroot(docroot)
    return tr


def warn_docroot(
    trace: Path, docroot: Path | str, read: Trace | None = None, server: str | None = None
) -> None:
    """Warn (one line, stderr) when ``docroot`` lacks paths of ``trace`` (``read``: the
    trace already read from that file) as the testbed's ``server`` would answer them."""
    from shrink.testbed.coverage import docroot_coverage
    from shrink.trace import Trace

    if not Path(docroot).is_dir():
        return  # up says so itself
    tr = read if read is not None else Trace.read_parquet(trace)
    line = docroot_coverage(tr, docroot, coverage_user(), server or "").warning(str(trace))
    if line:
        typer.echo(line, err=True)


def coverage_user() -> ServerUser | None:
    """The user whose reads a docroot's coverage checks: the servers' (as root), else None."""
    from shrink.testbed.private import server_user

    try:
        return server_user()
    except TestbedError:
        return None  # up says so itself


def warn_writable_docroot(docroot: Path | str) -> None:
    """Warn (one line, stderr) when a user other than root and the servers' user may
    change ``docroot`` or a folder on its path: a warning, as the user may mean it."""
    import pwd

    from shrink.testbed.private import docroot_writers, server_user

    if not Path(docroot).is_dir():
        return  # up says so itself
    try:
        user = server_user()
    except TestbedError:
        return  # up says so itself
    found = docroot_writers(Path(docroot), user)
    if found is None:
        return
    folder, how = found
    runs_as = user.name if user is not None else pwd.getpwuid(os.geteuid()).pw_name
    root = Path(docroot).resolve()
    where = (
        ""
        if folder == root
        else f": {folder}, a folder above it,"
        if folder in root.parents
        else f": {folder}, inside it,"
    )
    typer.echo(
        printable(
            f"warning: document root {docroot}{where} is {how}: they could put pages there "
            f"that the server serves, or PHP it runs as {runs_as}; let only root and "
            f"{runs_as} write it"
        ),
        err=True,
    )


def warn_stale() -> None:
    """One line per stale testbed left by a killed command, with the way to clean it up."""
    from shrink.testbed import registry

    try:
        found = registry.stale()
    except TestbedError as exc:
        # Only a look (a predict on the simulator needs no run folder): SHRINK_RUN_DIR on a
        # read-only file system refused it ("error: DIR: Read-only file system").
        typer.echo(printable(f"warning: stale testbeds not looked for: {exc}"), err=True)
        return
    for sb in found:
        running = sb.running()
        typer.echo(
            f"warning: stale testbed {sb.state_path} ({sb.reason}"
            + (f"; PIDs {running} still run" if running else "")
            + "): clean up with `shrink testbed down --stale`",
            err=True,
        )


def warn_foreign_spec(machine: str) -> None:
    """One line when ``--machine SPEC`` (for a testbed on this machine) names CPUs that are
    not this machine's online CPUs: the testbed measures this machine's CPUs and the
    prediction reported them as the spec's, without a word. A spec of these same CPUs
    that models sockets this machine lacks is a model of it, and is not warned of."""
    if machine == "this":
        return
    from shrink.topology import format_cpulist, load_machine, online_cpus

    spec, online = load_machine(machine).all_cpus, online_cpus()
    if online is None or set(spec) == set(online):
        return
    typer.echo(
        f"warning: {printable(machine)} models CPUs {format_cpulist(tuple(sorted(spec)))}, "
        f"but this machine's online CPUs are {format_cpulist(online)}: the testbed runs on "
        "this machine's CPUs, and what it measures is reported as the spec's; give a spec "
        "of this machine's CPUs (shrink machine write), or predict that machine with "
        "--target sim:SPEC",
        err=True,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(testbed_app, name="testbed")


__all__ = ["TestbedError", "register"]
