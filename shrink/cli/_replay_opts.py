"""What ``shrink replay``, ``sweep`` and ``mat`` share: their options, the live
target they build from them, and how they print a latency, a failure limit and progress.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from shrink.cli._cluster import ClusterOpt, GeneratorsOpt, cluster_spec
from shrink.cli._common import (
    as_option,
    console,
    cpu_list,
    parse_duration_option,
    parse_lag_limit,
    plural,
)
from shrink.errors import (
    OptionError,
    ParameterError,
    TestbedError,
    TraceFormatError,
    printable,
)

if TYPE_CHECKING:
    from shrink.replay.live import LiveTarget

F = TypeVar("F", bound=Callable[..., Any])

_Targets = Annotated[
    list[str],
    typer.Option(
        "--target",
        help="A running server: testbed state JSON (shrink testbed up) or http://ADDR:PORT "
        "URLs, repeated per replica. (predict's --target says where to start one.)",
    ),
]
_Json = Annotated[bool, typer.Option("--json", help="Print a JSON summary.")]
_Export = Annotated[
    str | None,
    typer.Option(
        "--export",
        help="Also write the sweep's requests for other tools (default: none): hdr "
        "(CURVE-hdr/: HdrHistogram logs, wrk2 spectra), locust (CURVE_stats.csv, "
        "CURVE_stats_history.csv), k6 (CURVE_requests.csv), csv (locust and k6), all.",
    ),
]
_Mode = Annotated[
    str, typer.Option("--mode", help="auto (from the trace) | session (wsesslog) | open.")
]
_Routing = Annotated[
    str, typer.Option("--routing", help="hash (by session) | round-robin over the addresses.")
]
_Conns = Annotated[
    int,
    typer.Option(
        "--conns",
        help="Connections per session for embedded requests (1: one keep-alive connection "
        "per session, as httperf --wsesslog).",
    ),
]
_Procs = Annotated[
    int | None,
    typer.Option(
        "--processes",
        min=1,
        max=1_000,
        help="Engine processes (default: one per generator CPU; at most one per CPU).",
    ),
]
_NewConn = Annotated[
    bool,
    typer.Option("--conn-per-request", help="Open mode: a new TCP connection for every request."),
]
_GenCpus = Annotated[
    str | None,
    typer.Option("--generator-cpus", help="CPU list for engine processes, e.g. 0 or 0,2."),
]
_Overlap = Annotated[
    bool, typer.Option("--allow-overlap", help="Let the generator run on the share's CPUs.")
]
_Remote = Annotated[
    bool, typer.Option("--allow-remote", help="Allow targets that are not loopback addresses.")
]
_LagLimit = Annotated[
    str, typer.Option("--lag-limit", help="Send-lag p99 above which the generator is behind.")
]


def _timeout(text: str) -> float:
    """``--timeout`` in seconds: at least :data:`shrink.checks.MIN_TIMEOUT_S` (why there)."""
    from shrink.checks import MIN_TIMEOUT_S, MIN_TIMEOUT_WHY

    return parse_duration_option(text, "timeout", least=MIN_TIMEOUT_S, why=MIN_TIMEOUT_WHY)


_Timeout = Annotated[str, typer.Option("--timeout", help="Per-request timeout.")]
REALTIME_HELP = (
    "Run the engine's send thread SCHED_FIFO at this priority (root). Default: 10 as root "
    "when the generator is pinned to CPUs the server does not use, else normal scheduling. "
    "0: normal scheduling."
)
# SCHED_FIFO priorities are 1-99 on Linux: 100 was EINVAL in every engine process,
# -1 meant normal scheduling silently, 1e20 overflowed sched_param.
_Realtime = Annotated[int | None, typer.Option("--realtime", min=0, max=99, help=REALTIME_HELP)]
AWAKE_HELP = (
    "Keep the generator's CPUs from halting during a run (a spinner at idle priority on "
    "each, native engine), so that its timed sends are not late by the CPU's wake-up. "
    "Default: on when the generator is pinned to CPUs the server does not use and shrink "
    "runs in the root cpu cgroup, or shrink can make an idle cpu cgroup for the spinners."
)
_Awake = Annotated[bool | None, typer.Option("--awake/--no-awake", help=AWAKE_HELP)]
_EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Replay engine: auto (the native core when built, else Python) | native | python.",
    ),
]


# What to do when the load generator could not keep to its schedule.
GENERATOR_HINT = (
    "hint: the load generator fell behind its schedule at {levels} (not the server's "
    "result); other work on its CPU delays it: give it a CPU nothing else runs on "
    "(--generator-cpus, the server and other jobs elsewhere), run it SCHED_FIFO "
    "(--realtime 10, as root), or accept a later send (--lag-limit)"
)


def generator_hint(levels: str, realtime: int | None = None) -> str:
    """:data:`GENERATOR_HINT` for ``levels``, naming this process's nice value when it
    is above 0 (``nice -n 19 shrink sweep``): at normal scheduling its send thread then
    yields to the other work of its CPU, which was not said. A run whose send thread
    already ran SCHED_FIFO (``realtime``, the default as root) is not told to run it so."""
    hint = GENERATOR_HINT.format(levels=levels)
    if not realtime and (instead := _no_realtime_here()):
        hint = hint.replace("run it SCHED_FIFO (--realtime 10, as root)", instead)
    if realtime:
        hint = hint.replace(
            "run it SCHED_FIFO (--realtime 10, as root)",
            f"its send thread already ran SCHED_FIFO {realtime}, so other realtime work "
            "there delays it (another generator's, an IRQ thread)",
        )
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > 0:
        hint += (
            f"; shrink runs at nice {nice} (nice, renice), which puts its send thread at "
            "normal scheduling behind that work: run it at nice 0"
        )
    return hint


def _no_realtime_here() -> str | None:
    """What to say for SCHED_FIFO where this process is root and still may not use it:
    root of a user namespace (``unshare -U -r``) was told to run it "as root"."""
    if os.geteuid() != 0:
        return None
    from shrink.replay.scaleout import may_realtime

    if may_realtime():
        return None
    from shrink.testbed.userns import in_user_namespace

    if in_user_namespace():
        return (
            "run it as the machine's root for SCHED_FIFO (--realtime 10: root of this user "
            "namespace, unshare -U, may not use it)"
        )
    return (
        "give it CAP_SYS_NICE for SCHED_FIFO (--realtime 10: this root runs without it, "
        "as in a container or under capsh --drop)"
    )


# Said when the generator's CPUs were to be kept awake and no spinner ran in a run.
AWAKE_NONE_RAN = (
    "warning: the generator's CPUs were to be kept awake (--awake, or the default), but "
    "no spinner ran in at least one run: the core could not start one there (built "
    "without it, on more than 64 CPUs, or no process could be made), so its CPUs slept"
)

# The same, when the reason is known (outside the root cpu cgroup, no idle group for them).
AWAKE_NOT_RAN = (
    "warning: the generator's CPUs were to be kept awake (--awake, or the default), but "
    "no spinner ran: {why}, so its CPUs slept"
)


# Said once when --awake was asked for outside the root cpu cgroup and no idle one made.
AWAKE_REFUSED = (
    "note: --awake: the generator's CPUs are left to halt: shrink runs in a cpu cgroup "
    "other than the root, where the spinners would take CPU time from the group's "
    "neighbours, and an idle cgroup for them could not be made: {why}"
)


# Said once when the default put the send thread under SCHED_FIFO.
REALTIME_NOTE = (
    "note: the load generator's send thread runs SCHED_FIFO {priority} on CPU {cpus} (as "
    "root, on CPUs the server does not use) so that other work cannot delay its sends; "
    "--realtime 0 for normal scheduling"
)


def note_realtime(target: Any) -> None:
    """Print :data:`REALTIME_NOTE` when the default chose SCHED_FIFO for ``target``'s
    generator, and :data:`AWAKE_REFUSED` when --awake was asked for and not done."""
    if getattr(target, "realtime_by_default", False):
        cpus = ",".join(map(str, target.generator_cpus))
        typer.echo(REALTIME_NOTE.format(priority=target.realtime, cpus=cpus), err=True)
    if why := getattr(target, "awake_refused", None):
        typer.echo(AWAKE_REFUSED.format(why=why), err=True)


def _cpus(text: str | None) -> list[int] | None:
    return None if text is None else cpu_list(text, "--generator-cpus")


def _refuse_time_sliced(processes: int | None) -> None:
    """More engine processes than the CPUs this process may run on can only take turns
    on them: each falls behind its schedule while it waits (1,000 on 2 CPUs ran, flagged
    behind). Pinned (``--generator-cpus``), the count is checked against that list."""
    cpus = len(os.sched_getaffinity(0))
    if processes is not None and processes > cpus:
        raise OptionError(
            "--processes",
            f"{processes} engine processes on the {cpus} CPUs this process may use would "
            f"take turns on them and fall behind the schedule; at most {cpus}",
        )


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """The live load generator's options: one set of flags for ``replay`` and ``sweep``.

    A command takes them as one parameter (see :func:`engine_options`); each field's
    type is its option, and its default the option's.
    """

    mode: _Mode = "auto"
    routing: _Routing = "hash"
    conns: _Conns = 1
    timeout: _Timeout = "10s"
    generator_cpus: _GenCpus = None
    allow_overlap: _Overlap = False
    allow_remote: _Remote = False
    lag_limit: _LagLimit = "1ms"
    realtime: _Realtime = None
    awake: _Awake = None
    conn_per_request: _NewConn = False
    processes: _Procs = None
    engine: _EngineOpt = "auto"
    cluster: ClusterOpt = None
    generators: GeneratorsOpt = None

    def target(
        self,
        targets: list[str],
        *,
        loop: bool = True,
        warm_start: bool = True,
        runlog_dir: Path | None = None,
        note: bool = True,
    ) -> Any:
        """The LiveTarget these options describe, on the servers ``targets`` name;
        ``note``: print :func:`note_realtime`'s lines now (else the caller does, once
        the run is sure to come)."""
        from shrink.replay.live import LiveTarget, parse_url
        from shrink.schedule import ScheduleOptions
        from shrink.target import GeneratorPlacement
        from shrink.wire import refuse_remote

        cluster = cluster_spec(self.cluster, self.generators)
        if cluster is not None and self.processes is not None:
            # Each generator slot runs one engine process: the count was dropped unsaid.
            raise OptionError(
                "--processes",
                f"{self.processes} does not apply with --cluster, where each generator slot "
                "is one engine process; set how many with --generators",
            )
        for option, value, accepted in (
            ("--routing", self.routing, ("hash", "round-robin")),
            ("--mode", self.mode, ("auto", "session", "open")),
            ("--engine", self.engine, ("auto", "native", "python")),
        ):
            if value not in accepted:
                raise OptionError(option, f"{value!r}; accepted: {', '.join(accepted)}")
        items = [x for t in targets for x in t.split(",") if x]
        with as_option("--target"):
            # A bad URL is refused before anything runs, naming the option.
            for item in items:
                if not item.endswith(".json"):
                    refuse_remote(parse_url(item)[0], self.allow_remote)
            states = [i for i in items if i.endswith(".json")]
            if states and len(items) > 1:
                # A state names every replica of its testbed; beside another target it
                # was taken for a host name ("pass --allow-remote").
                raise ParameterError(
                    f"{states[0]} is a testbed state: give it alone (it names all its "
                    f"replicas), not with {len(items) - 1} other target(s); one testbed a run"
                )
        gen_cpus = _cpus(self.generator_cpus)
        if gen_cpus is None and cluster is None:
            _refuse_time_sliced(self.processes)
        elif cluster is None and self.processes is not None and self.processes > len(gen_cpus):
            # Refused here, before any progress line (the engine refused it only as the
            # first run started).
            raise OptionError(
                "--processes",
                f"{self.processes} engine processes need {self.processes} generator CPUs, "
                f"--generator-cpus gives {len(gen_cpus)} ({self.generator_cpus})",
            )
        target = LiveTarget.from_targets(
            items,
            generator=GeneratorPlacement(
                None if gen_cpus is None else tuple(gen_cpus),
                self.allow_overlap,
                self.realtime,
                self.processes,
                self.engine,
                cluster,
                awake=self.awake,
            ),
            allow_remote=self.allow_remote,
            config={
                "routing": self.routing,
                "conns_per_session": self.conns,
                "timeout": _timeout(self.timeout),
                "conn_per_request": self.conn_per_request,
            },
            schedule=ScheduleOptions(self.mode, loop, warm_start),
            lag_limit=parse_lag_limit(self.lag_limit),
            runlog_dir=runlog_dir,
        )
        target.share_scale = share_scale(target)
        if note:
            note_realtime(target)
        return target


def share_scale(target: LiveTarget) -> tuple[float, int] | None:
    """(the share's CPU fraction, its CPU count) of a target over a testbed state: a
    share's utilization is a part of what it may use, as predict records it."""
    if isinstance(share := target.state.get("share"), dict) and target.share_cpus:
        # Read as the state's reader reads it (an older file's null or missing
        # cpu_fraction: a cores share's is 1.0, not its fraction of the machine).
        from shrink.share import Share

        fields = {k: v for k, v in share.items() if k != "enforce"}
        fraction = Share.from_dict(fields).cpu_fraction
        if fraction <= 0:  # (each run's utilization is divided by it)
            raise TestbedError(
                f"{printable(target.state_path)}: share.cpu_fraction: 0 gives the share no "
                "CPU time (no testbed up makes such a share)"
            )
        return (fraction, len(target.share_cpus))
    return None


ENGINE_DEFAULTS = EngineOptions()


def engine_options(command: F) -> F:
    """``command`` with its ``live: EngineOptions`` parameter shown to typer as the options.

    The options stand where ``live`` stands, in the order of EngineOptions' fields, so
    every command that takes them lists them alike; the command gets them as one value.
    """
    hints = typing.get_type_hints(EngineOptions, include_extras=True)
    group = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                          annotation=hints[f.name])
        for f in dataclasses.fields(EngineOptions)
    ]  # fmt: skip
    sig = inspect.signature(command, eval_str=True)
    params = []
    for p in sig.parameters.values():
        params += group if p.name == "live" else [p.replace(kind=p.KEYWORD_ONLY)]

    @functools.wraps(command)
    def run(**kw: Any) -> Any:
        live = EngineOptions(**{f.name: kw.pop(f.name) for f in dataclasses.fields(EngineOptions)})
        return command(live=live, **kw)

    run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return typing.cast(F, run)


def _ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.3f} ms"


def _limit_text() -> str:
    from shrink.loadcurve import FAILURE_LIMIT

    return f"{100 * FAILURE_LIMIT:g}%"


def _progress_sweep(fn: Any) -> Any:
    """Run ``fn(progress)`` under a rich progress bar (what runs, time left).

    Off a terminal, one line per run instead (a bar drawn to a pipe shows nothing).
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from shrink.cli._progress import line_progress, on_terminal

    if not on_terminal():
        return fn(line_progress("", "runs"))

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} runs"),
        TimeRemainingColumn(),
        console=console(),
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=1)

        def progress(desc: str, step: int, total: int) -> None:
            bar.update(task, description=desc, completed=step, total=total)

        return fn(progress)


def _warn_docroot(tgt: Any, tr: Any, name: Any) -> None:
    """Before a run on a testbed: refuse a trace with bodies over its PHP's post_max_size
    (:func:`_check_bodies`); warn when its docroot lacks the trace's paths."""
    from shrink.cli.testbed_cmd import coverage_user
    from shrink.testbed.coverage import docroot_coverage

    _check_bodies(tgt, tr, name)
    docroot = (tgt.state or {}).get("docroot")
    server = str(((tgt.state or {}).get("server") or {}).get("name") or "")
    if docroot and Path(docroot).is_dir():
        cover = docroot_coverage(tr, docroot, coverage_user(), server)
        line = cover.warning(str(name or "the trace"))
        if line:
            typer.echo(line, err=True)


def alpha_mismatch(tgt: Any, tr: Any, name: Any) -> str | None:
    """A warning, before a sweep, when the trace's sample fraction is not the testbed's
    share: the curve measures that load on that share, but SHRiNK scaling (extrapolate,
    the main job) takes only the sampled fraction on the same fraction of the server,
    and refuses the curve once it is measured (:func:`shrink.scaling.share_fraction`)."""
    share = (tgt.state or {}).get("share") or {}
    alpha, frac = tr.meta.get("alpha", 1.0), share.get("fraction")
    if share.get("kind") in (None, "all") or not isinstance(frac, int | float):
        return None
    if not isinstance(alpha, int | float) or abs(frac - alpha) <= 0.01 * alpha:
        return None
    return (
        f"warning: {printable(str(name or 'the trace'))} holds alpha {alpha:g} of the "
        f"sessions but the testbed is a {frac:g} share: its curve measures that load on "
        "this share, and extrapolate refuses to scale it (SHRiNK takes the sampled "
        f"fraction on the same fraction of the server); for that, sample --alpha {frac:g}"
    )


def _check_bodies(tgt: Any, tr: Any, name: Any) -> None:
    """A TestbedError when the trace holds a request body over the testbed's PHP
    ``post_max_size`` (``up`` without ``--trace``: 8M): PHP drops such a body and runs
    the page without it (200 on lighttpd), a cheaper request than the one recorded,
    measured without a word."""
    from shrink.bodies import largest_body
    from shrink.errors import TestbedError

    mib = (tgt.state or {}).get("php_post_max_mib")
    largest = largest_body(tr.table) if mib else 0
    if mib and largest > int(mib) * 2**20:
        raise TestbedError(
            f"{name or 'the trace'} holds a request body of {largest:,} bytes, over the "
            f"testbed's PHP post_max_size ({mib}M): PHP would drop it and run the page "
            "without it, a cheaper request than recorded; bring the testbed up with "
            "--trace naming this trace (post_max_size then holds its largest body)"
        )


@contextmanager
def naming_trace(path: Path | None) -> Iterator[None]:
    """A trace's row refused as it is sent (a CR in a path, a method no server takes) is
    named with the trace file given: it named the row, and the log the trace was once
    ingested from, but not the file."""
    try:
        yield
    except TraceFormatError as exc:
        if exc.path is not None or path is None:
            raise
        raise TraceFormatError(str(exc), path=path) from None


def note_stale_parts(folder: Path, names: list[str], whose: str) -> None:
    """One line on stderr naming the engine processes' parts (``OUT.part0....parquet``)
    that ``whose`` stopped before merging them (kill -9) left in ``folder``: kept, as they
    hold measured rows, and never read by this run."""
    if names:
        shown = ", ".join(printable(n) for n in names)
        count = plural(len(names), "engine process part")
        typer.echo(
            f"note: {printable(folder)} holds {count} of {whose} "
            f"that stopped before merging them: {shown}; kept, and not read by this run",
            err=True,
        )
