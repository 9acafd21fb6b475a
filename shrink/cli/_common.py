"""Helpers shared by the CLI modules: error reporting, output checks and JSON output.

Exit status of every command:

====  =================================================================
0     done
1     an error of shrink's (bad input, bad parameter, testbed, replay ...),
      or the system refused a file or standard output (no space, permission):
      one line on stderr, naming it
2     a usage error: an unknown option, a missing argument (from click), or an
      option's value refused before anything runs (:class:`shrink.errors.OptionError`)
70    a bug in shrink: one line, and ``SHRINK_TRACEBACK=1`` shows the traceback
99    a MAT command (``mat``, ``predict``, ``extrapolate``, ``validate``, ``sim
      scaling``, ``sim mappings``): a threshold was not crossed within the measured
      range, so a MAT is only a bound (">= X" or "< X"; k6 uses 99 when a
      threshold fails). Everything is still written and printed first.
129   stopped by SIGHUP  } 128 + the signal's number; each keeps what was
130   interrupted (Ctrl-C) } measured and says in one line what it kept, as
143   stopped by SIGTERM   } Ctrl-C does (:mod:`shrink.interrupts`); before the
                           } command began, the line says nothing was written;
                           } after it finished, the signal is ignored
131   stopped by SIGQUIT (138 SIGUSR1, 140 SIGUSR2, 142 SIGALRM, 152 SIGXCPU,
      154 SIGVTALRM, 155 SIGPROF): as SIGTERM
141   stdout closed (``shrink ... | head -1``), as SIGPIPE ends a command: quietly,
      or, when files were written, one line naming them (they are whole)
====  =================================================================
"""

from __future__ import annotations

import errno
import functools
import os
import resource
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from shrink import interrupts
from shrink.cli._kept import kept_files, kept_words
from shrink.cli._kept import plural as plural  # (its home; said here to every command)
from shrink.cli._oom import memory_refused
from shrink.cli._stdout import STDOUT, silence_stdout
from shrink.defaults import MAX_BODY_TEXT
from shrink.errors import (
    OptionError,
    ParameterError,
    ShrinkError,
    ThreadLimitError,
    WriteError,
    printable,
    thread_refused,
)
from shrink.jsonout import dumps

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_BUG = 70
EXIT_INTERRUPTED = 130
EXIT_PIPE = 128 + signal.SIGPIPE

F = TypeVar("F", bound=Callable[..., Any])

# Every command that reads a trace's request bodies takes one bound, defined in
# shrink.defaults.MAX_BODY: the error over it names the option, so each must have it.
MaxBodyOpt = Annotated[
    int,
    typer.Option(
        "--max-body",
        min=1,
        help=f"The longest request body a trace may record, in bytes (default {MAX_BODY_TEXT}); "
        "a longer one is an error naming its row, before it is held in memory.",
    ),
]


@functools.cache
def console() -> Console:
    """rich's Console on stderr, made on first use (importing rich.console costs about
    what importing typer does, and ``shrink --help`` needs neither it nor its markup)."""
    return _unwrapped(_console_type()(stderr=True))


def out_console() -> Console:
    """rich's Console on stdout: a closed stdout stops the command as SIGPIPE does
    (:data:`EXIT_PIPE`), where rich's own exits 1 and says nothing."""
    return _unwrapped(_console_type()())


# The narrowest a table is laid out at: below it (``COLUMNS=1`` to ``3`` printed rows of
# ``│││`` with every value lost; 10 or 20, values cut to "…") it is laid out as at this
# width, and the terminal wraps its lines: every value is still there.
TABLE_MIN_WIDTH = 40


def print_table(screen: Console, table: Table) -> None:
    """``table`` (a rich Table) printed on ``screen`` at :data:`TABLE_MIN_WIDTH` columns at
    least, its cells folded, never cut to "…": a value too long for its column goes on
    the next line. ``screen`` is left at that width."""
    for column in table.columns:
        column.overflow = "fold"
    # print(width=) takes the smaller of it and the console's: the console's own is set
    # (what follows on this screen is laid out at this width too, no narrower)
    screen.width = max(screen.width, TABLE_MIN_WIDTH)
    screen.print(table)


def _unwrapped(con: Console) -> Console:
    """Off a terminal a line is written whole: rich wrapped it at 80 columns, and a long
    path in a log or a pipe was cut in two where a script reads it."""
    if not con.is_terminal:
        con.soft_wrap = True
    return con


@functools.cache
def _console_type() -> type[Console]:
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more can be shown on it
            if not self.stderr:  # stdout's reader has gone: see _report
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    return PipeConsole


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``shrink ... | head -1``)."""
    import select

    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poll.poll(0))
    except (OSError, ValueError):
        return False


def exit_stdout_closed(kept: list[str]) -> None:
    """Exit as a command that SIGPIPE ended (:data:`EXIT_PIPE`): stdout's reader has
    gone, so nothing more is printed there. Quietly, unless files were written:
    those are whole, and one line names them (``kept``)."""
    silence_stdout()  # what is still buffered goes nowhere, not into an error at exit
    if kept:
        shown = ", ".join(escape(printable(k)) for k in kept)
        console().print(f"[yellow]stdout closed[/]: kept {shown}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=EXIT_PIPE)


def escape(text: str) -> str:
    """``text`` shown as it is in rich markup (``x[/y]`` is text, not a tag)."""
    from rich.markup import escape

    return escape(text)


def error_line(text: str) -> None:
    # One line: a message with a newline (a subprocess's stderr) is folded.
    # Escaped: a path or field name like "x[/y]" is text, not a rich markup tag.
    # Printable: a control character (an ANSI escape in a file name) is shown escaped.
    flat = printable(" ".join(str(text).split()))
    try:
        console().print(f"[bold red]error:[/] {escape(flat)}", highlight=False, soft_wrap=True)
    except (MemoryError, SystemError, ImportError):
        # Out of memory (`ulimit -v`): too little left to import the terminal library
        # (a MemoryError in an import is a SystemError). The line, plain.
        with suppress(OSError):
            sys.stderr.write(f"error: {flat}\n")


def refuse_empty(argv: list[str]) -> None:
    """Exit 2 on an empty argument: typer reads ``""`` as the path ``.``, and the
    error then named the working directory, not the blank the user left."""
    if "" in argv:
        i = argv.index("")
        after = f" (after {argv[i - 1]})" if i > 0 else ""
        error_line(f"argument {i + 1}{after} is empty: a path or a value was left blank")
        raise SystemExit(EXIT_USAGE)


@contextmanager
def cli_errors(*, measures: bool = True) -> Iterator[None]:
    """Turn shrink's errors into one clear line on stderr and exit code 1.

    A command stopped part-way (a full disk, a signal) also names the files it had
    written: they are whole, and stay. ``measures`` is False for a command that
    measures nothing (``testbed up``): stopped, it says that nothing was written, not
    that nothing measured was. A stop signal is the command's inside the
    block, and ignored once the outermost one ends (:func:`shrink.interrupts.working`).
    """
    from shrink.atomic import recording
    from shrink.folder_locks import release_outputs

    with recording() as written, interrupts.working():
        try:
            yield
            # What is still buffered for a pipe, met here where the files written are
            # known: at exit, a closed pipe ended ``replay -o X | true`` with 141 and
            # nothing said of X.
            if sys.stdout is not None:
                sys.stdout.flush()
        except BaseException as exc:
            interrupts.ignore()  # stopped: a second signal would cut its one line short
            _report(exc, written, measures)
        finally:
            if interrupts.depth() == 1:  # the command's outputs are written: let them go
                release_outputs()


@contextmanager
def printing(*kept: Path | None) -> Iterator[None]:
    """What a command prints once its files are written, outside :func:`cli_errors`: a
    stdout that refuses it (its reader gone, a full disk) names the files ``kept``, as
    inside. ``replay -o X | true`` exited 141 saying nothing of X (click's own EPIPE
    exit), where ``sample`` named its file."""
    try:
        yield
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as exc:
        if exc.filename != STDOUT and exc.errno != errno.EPIPE:
            raise
        _report(exc, [k for k in kept if k is not None])


def _cwd_deleted() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def _report(exc: BaseException, written: list[Path], measures: bool = True) -> None:
    """One line for ``exc`` (see :func:`cli_errors`), then the exit it calls for."""
    try:
        raise exc
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except OptionError as exc:
        error_line(str(exc))
        raise typer.Exit(code=EXIT_USAGE) from None
    except ShrinkError as exc:
        # An error that stopped a sweep says, on the same line, what it kept.
        failed = exc.path if isinstance(exc, WriteError) else None
        error_line(str(exc) + kept_words(exc.kept, written, failed) + exc.then)
        raise typer.Exit(code=EXIT_ERROR) from None
    except OSError as exc:
        if exc.errno == errno.EPIPE and stdout_closed():
            exit_stdout_closed(kept_files((), written))
        # The system refused a file (full disk, permission, read-only file system),
        # or stdout (``>/dev/full``: :mod:`shrink.cli._stdout` names it).
        if exc.filename == STDOUT:
            silence_stdout()
        where = f"{exc.filename}: " if exc.filename else ""
        why = exc.strerror or str(exc)
        if not where and exc.errno == errno.ENOENT and _cwd_deleted():
            # A relative path made absolute (os.getcwd) names no file.
            where, why = "", "the current folder was deleted: give absolute paths, or run from one"
        error_line(f"{where}{why}" + kept_words((), written))
        raise typer.Exit(code=EXIT_ERROR) from None
    except KeyboardInterrupt as exc:
        # Say only what exists: a command that kept files lists them on the exception.
        kept = [escape(printable(k)) for k in kept_files(getattr(exc, "kept", []), written)]
        console().print(
            f"[yellow]{interrupts.stopped_by()}[/]: "
            + (f"kept {', '.join(kept)}" if kept else _nothing_written(measures)),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=interrupts.exit_status()) from None
    except MemoryError:
        # Not a bug: the machine, or `ulimit -v`, gave too little (was exit 70 "internal").
        _out_of_memory(written)
    except Exception as exc:
        if memory_refused(exc):
            _out_of_memory(written)
        if thread_refused(exc):  # (was "internal error ... a bug in shrink", exit 70)
            error_line(str(ThreadLimitError()) + kept_words((), written))
            raise typer.Exit(code=EXIT_ERROR) from None
        # Path.resolve() met a symlink loop (--docroot, --machine): before Python 3.13 a
        # RuntimeError, not the OSError (ELOOP) every other read of that path gives.
        if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):
            loop = str(exc).removeprefix("Symlink loop from ").strip("'")
            error_line(f"{loop}: {os.strerror(errno.ELOOP)}" + kept_words((), written))
            raise typer.Exit(code=EXIT_ERROR) from None
        if os.environ.get("SHRINK_TRACEBACK"):
            raise
        error_line(
            f"internal error ({type(exc).__name__}: {exc}); this is a bug in shrink: "
            "rerun with SHRINK_TRACEBACK=1 to see where"
        )
        raise typer.Exit(code=EXIT_BUG) from None


def _out_of_memory(written: Sequence[Path]) -> NoReturn:
    limits = [
        f"ulimit {flag} {soft // 1024}"
        for which, flag in ((resource.RLIMIT_AS, "-v"), (resource.RLIMIT_DATA, "-d"))
        if (soft := resource.getrlimit(which)[0]) != resource.RLIM_INFINITY
    ]
    limit = f" ({', '.join(limits)})" if limits else ""
    text = f"out of memory{limit}: raise the limit, or give a smaller input"
    text += kept_words((), written)
    error_line(text)
    raise typer.Exit(code=EXIT_ERROR) from None


def _nothing_written(measures: bool) -> str:
    return "nothing measured was written" if measures else "nothing was written"


def guarded(func: F) -> F:
    """``func`` (a command) run inside :func:`cli_errors`: no traceback reaches a user."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        with cli_errors():
            return func(*args, **kwargs)

    return run  # type: ignore[return-value]


def guard_all(app: typer.Typer) -> None:
    """Wrap every command of ``app`` and of its sub-apps in :func:`cli_errors`."""
    for cmd in app.registered_commands:
        if cmd.callback is not None and not getattr(cmd.callback, "__wrapped__", None):
            cmd.callback = guarded(cmd.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            guard_all(group.typer_instance)


def output_path(
    path: Path | None,
    *,
    kind: str = "file",
    what: str = "output",
    inputs: tuple[Path | None, ...] = (),
    option: str | None = None,
) -> Path | None:
    """Check an output path before any measuring (see :func:`shrink.files.check_output`).

    A path that cannot be written is a refused option (``option``, default ``what`` when
    it is one, else --out): one line, exit status 2; so is one that is the file
    ``inputs`` read (a sample written over its trace lost it).
    """
    from shrink.files import check_output

    if path is None:
        return None
    option = option or (what if what.startswith("--") else "--out")
    for src in inputs:
        if src is not None and _same_file(path, src):
            text = f"{what} {path} is the input {src}, which writing it would destroy; "
            raise OptionError(option, text.removeprefix(f"{option} ") + "name another file")
    try:
        checked = check_output(path, kind=kind, what=what)
    except ParameterError as exc:
        # the option is said before the line: "--runlogs: --runlogs rl: ..." said it twice
        text = str(exc)
        raise OptionError(option, text.removeprefix(f"{option} ")) from None
    from shrink.folder_locks import hold_output

    # until the command ends: a second run with it is refused (named as typed: --state)
    hold_output(checked, kind, "-o" if option == "--out" else option)
    if kind == "file":
        from shrink.atomic import expect_unchanged
        from shrink.folder_locks import refuse_held_folder

        refuse_held_folder(checked)  # a folder another run writes (its RunLogs)
        expect_unchanged(checked)  # another run's file there later is not replaced
    return checked


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # either one missing, or a name the system refuses
        return False


def echo_json(obj: Any) -> None:
    sys.stdout.write(dumps(obj, indent=2, sort_keys=True, default=_default) + "\n")
    sys.stdout.flush()  # a closed stdout is met inside the command, not at exit


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def parse_duration_option(
    text: str,
    name: str,
    *,
    zero_ok: bool = False,
    units: tuple[str, ...] | None = None,
    least: float = 0.0,
    why: str = "a measurement window",
) -> float:
    """An option's duration in seconds: ``2s``, ``500ms``, ``1m`` (one spelling everywhere;
    ``units`` narrows it, as a latency's us, ms or s).

    A bad one is a refused option (exit status 2) naming ``--NAME``.
    """
    from shrink.checks import parse_duration

    try:
        return parse_duration(text, name, zero_ok=zero_ok, units=units, least=least, why=why)
    except OptionError:
        raise
    except ParameterError as exc:
        raise OptionError(f"--{name.replace(' ', '-')}", str(exc)) from None


def fmt_number(x: float, digits: int = 4) -> str:
    """One way to write a measured number: thousands separators, never ``5.304e+04``.

    ``digits`` significant digits, but never fewer than the integer part's.
    """
    import math

    if not math.isfinite(x):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{x:,.0f}"
    magnitude = math.floor(math.log10(abs(x))) + 1
    decimals = max(digits - magnitude, 0)
    return f"{x:,.{decimals}f}"


STATS = ("mean", "p50", "p90", "p99", "p999")


@contextmanager
def as_option(option: str) -> Iterator[None]:
    """A :class:`ParameterError` inside is the refused value of ``option`` (exit status 2)."""
    try:
        yield
    except OptionError:
        raise
    except ParameterError as exc:
        raise OptionError(option, str(exc)) from None


@contextmanager
def options_named(options: dict[str, str]) -> Iterator[None]:
    """A :class:`ParameterError` about a value the library checks under another name (its
    message starts ``NAME == ``, the form of :mod:`shrink.checks`) is the refused value of
    the option ``options[NAME]`` (exit status 2): ``think_mean_s == -1`` named no option
    the user wrote, ``--think-mean``. Any other passes on as it is."""
    try:
        yield
    except OptionError:
        raise
    except ParameterError as exc:
        option = options.get(str(exc).split(" == ", 1)[0])
        if option is None:
            raise
        raise OptionError(option, str(exc)) from None


def cpu_list(text: str, option: str) -> list[int]:
    """The CPUs of a CPU-list option (``0-3,8``); a malformed one is the refused value
    of ``option`` (exit status 2), not a machine's error."""
    from shrink.errors import TopologyError
    from shrink.topology import parse_cpulist

    try:
        return list(parse_cpulist(text))
    except TopologyError as exc:
        raise OptionError(option, str(exc)) from None


def stat_name(text: str, name: str = "stat") -> str:
    """A statistic's name as the files spell it: ``p99.9`` (as users write it) is ``p999``.

    Any percentile users write (``p95``, ``p99.99``) is accepted; see
    :func:`shrink.checks.parse_stat`. A ``name`` like ``--stat`` is an option's.
    """
    from shrink.checks import parse_stat

    if not name.startswith("--"):
        return parse_stat(text, name)
    with as_option(name):
        return parse_stat(text, name.lstrip("-"))


def stat_label(stat: str) -> str:
    """How a statistic is written for people: ``p999`` is ``p99.9``."""
    from shrink.checks import stat_label as label

    return label(stat)


def threshold_text(stat: str, seconds: float) -> str:
    """One way to write a threshold for people: ``mean < 10 ms``, ``p99.9 < 500 ms``."""
    return f"{stat_label(stat)} < {seconds * 1e3:,.6g} ms"


def exit_nothing_served(reason: str) -> None:
    """Exit with status 1 after a replay or sweep that served nothing: ``reason`` says why."""
    error_line(f"nothing was served: {reason}")
    raise typer.Exit(code=EXIT_ERROR)


def note_if_partial(curve: Any, path: str | Path) -> None:
    """One line on stderr when ``curve`` holds only what a run finished before it stopped
    (or while it still ran: ``X.partial.json``): a MAT or a fit read from it may lack
    the levels the whole run would have measured, and nothing else said so."""
    meta = getattr(curve, "meta", None) or {}
    if meta.get("interrupted") or meta.get("stopped") or meta.get("kept_as_measured"):
        typer.echo(
            f"note: {printable(path)} holds the levels a run finished before it stopped (or "
            "while it still ran): it may lack levels the whole run would have measured",
            err=True,
        )


def exit_if_bound(bounds: list[str]) -> None:
    """Exit with status 99 (:data:`shrink.mat.EXIT_BOUND`) when a MAT is only a bound.

    ``bounds`` names them (``1-replica p99.9``); called after every file is written
    and the results printed, so a bound loses nothing, and a script can still tell.
    """
    if not bounds:
        return
    from shrink.mat import EXIT_BOUND

    shown = ", ".join(bounds[:4]) + (f" and {len(bounds) - 4} more" if len(bounds) > 4 else "")
    console().print(
        f"[yellow]bound[/]: {escape(shown)}: the threshold was not crossed within the "
        f"measured range (exit status {EXIT_BOUND})",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(code=EXIT_BOUND)


def bounded_mats(mappings: dict[str, Any]) -> list[str]:
    """``mapping stat`` for each MAT that is only a bound in a prediction's ``mappings``.

    Takes :class:`shrink.prediction.MappingPrediction` objects or their dicts (a
    stat's ``status`` ``not_reached`` or ``below_range``).
    """
    from shrink.mat import bound_of

    out = []
    for name, m in mappings.items():
        stats = m.stats if hasattr(m, "stats") else m
        for stat, sp in stats.items():
            status = getattr(sp, "status", None) if not isinstance(sp, dict) else sp.get("status")
            if isinstance(sp, dict) and "mat" not in sp:
                continue
            if bound_of(status) is not None:
                out.append(f"{name} {stat_label(stat)}")
    return out


def parse_lag_limit(text: str) -> float:
    """``--lag-limit``: a send lag, so a latency's units (us, ms, s); 5min was accepted."""
    from shrink.checks import THRESHOLD_UNITS

    return parse_duration_option(text, "lag limit", units=THRESHOLD_UNITS)
