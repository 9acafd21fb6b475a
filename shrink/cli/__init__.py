"""The ``shrink`` command line: parses arguments and calls the library, nothing more.

Each command group lives in its own module with a ``register(app)`` function.
Exit statuses are listed in :mod:`shrink.cli._common`.

Start-up is kept short (``bench/bench_cli.py``): the command modules import the
library inside their commands, so ``shrink --help`` never loads numpy, pyarrow or
pydantic; :func:`main` builds only the command that the arguments name (typer builds
every command's options before parsing, which costs more than importing typer);
help is click's plain text (typer's rich help imports rich's Markdown and traceback
renderers, about as much again as typer itself).
"""

from __future__ import annotations

import copy
import errno
import inspect
import io
import os
import sys

import typer

from shrink import interrupts
from shrink._version import DISTRIBUTION, __version__
from shrink.cli import (
    extrapolate_cmd,
    ingest_cmd,
    machine_cmd,
    predict_cmd,
    replay_cmd,
    sample_cmd,
    sim_cmd,
    synth_cmd,
    testbed_cmd,
    trace_cmd,
    validate_cmd,
)
from shrink.cli._common import (
    EXIT_ERROR,
    EXIT_PIPE,
    error_line,
    guard_all,
    refuse_empty,
    stdout_closed,
)
from shrink.cli._stdout import STDOUT, name_stdout, silence_stdout
from shrink.cli._style import tidy

app = typer.Typer(
    name="shrink",
    help="Predict a multi-core web server's capacity from scaled-down (SHRiNK) experiments.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"{DISTRIBUTION} {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """shrink: sample a trace, replay it on a share of the server, extrapolate the whole machine."""


for _module in (
    ingest_cmd,
    trace_cmd,
    synth_cmd,
    sample_cmd,
    machine_cmd,
    testbed_cmd,
    replay_cmd,
    sim_cmd,
    extrapolate_cmd,
    predict_cmd,
    validate_cmd,
):
    _module.register(app)
tidy(app)
# Every command: a ShrinkError (or a refused file) is one line and exit 1, never a traceback.
guard_all(app)


def _stub(info: typer.models.CommandInfo) -> typer.models.CommandInfo:
    """``info`` with a callback of no options: the same name and help in a list of commands."""

    def listed() -> None:
        raise AssertionError("a listed-only command ran")  # main() builds the one that runs

    listed.__doc__ = inspect.getdoc(info.callback) if info.callback else None
    stub = copy.copy(info)
    stub.callback = listed
    return stub


def _pruned(group: typer.Typer, keep: str | None) -> typer.Typer:
    """``group`` with every command but ``keep`` (a command or sub-group's name) listed only."""
    out = copy.copy(group)
    out.registered_commands = [
        c if keep is not None and c.name == keep else _stub(c) for c in group.registered_commands
    ]
    out.registered_groups = []
    for g in group.registered_groups:
        if not (keep is not None and g.name == keep) and g.typer_instance is not None:
            g = copy.copy(g)
            g.typer_instance = _pruned(g.typer_instance, None)
        out.registered_groups.append(g)
    return out


def app_for(args: list[str]) -> typer.Typer:
    """The app with only the command that ``args`` name built in full (all of it to complete)."""
    if any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return app  # completing a word needs every command's options
    keep = next((a for a in args if not a.startswith("-")), None)
    return _pruned(app, keep)


def _stdout_closed_at_start() -> None:
    """fd 1 closed (``shrink trace info T >&-``): Python makes sys.stdout None, and what
    the command printed went nowhere, exit 0. It becomes a pipe no one reads, so the
    first line printed stops the command as when stdout's reader has gone (exit 141,
    the files written named)."""
    if sys.stdout is not None:
        return
    r, w = os.pipe()  # (r may be the free fd 1 itself: dup2 then closes it)
    os.dup2(w, 1)
    for fd in {r, w} - {1}:
        os.close(fd)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False),
                                                   line_buffering=True)  # fmt: skip


def _stdin_stderr_closed_at_start() -> None:
    """fd 0 or fd 2 closed (``shrink sweep ... 2>&-``, as a cron job or a daemon's child
    may be started): Python makes sys.stderr None, and the first progress line was
    "internal error (AttributeError ...)", exit 70, every level measured lost; and the
    next file opened took the free descriptor, so what a child process (a server,
    tshark) wrote on its inherited stderr went into it. Each closed one becomes
    /dev/null: what would be said there goes nowhere, as the caller asked."""
    for fd, name in ((0, "stdin"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            stream = io.TextIOWrapper(io.FileIO(fd, "r" if fd == 0 else "w", closefd=False),
                                      line_buffering=fd == 2)  # fmt: skip
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)


def _no_zero_size() -> None:
    """``COLUMNS=0`` (as a container or CI environment may hold it): rich took a width
    of 0 and printed nothing, so an error exited 1 without a word and a table went
    nowhere. A size of 0 says nothing of the screen: it is dropped, and the terminal's
    own size (or 80 columns) is used. ``LINES=0`` likewise."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) == 0:
            del os.environ[name]


def main(args: list[str] | None = None) -> None:
    """The ``shrink`` command: ``args`` (default: the command line's) run as typer runs them."""
    # SIGTERM and SIGHUP stop a command as Ctrl-C does: what was measured is kept.
    interrupts.install()
    _stdin_stderr_closed_at_start()
    _stdout_closed_at_start()
    _no_zero_size()
    # A character stdout's encoding lacks (a path's "ü" under PYTHONIOENCODING=ascii) is
    # shown escaped, as on stderr, not an internal error after the work is done.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    name_stdout()
    try:
        argv = sys.argv[1:] if args is None else args
        refuse_empty(argv)
        app_for(argv)(args=args)
    except interrupts.NotStarted:
        interrupts.exit_not_started()
    except SystemExit as exc:
        # typer met a closed stdout outside a command (``shrink --help | head -1``):
        # it put a wrapper in stdout's place and exits 1; SIGPIPE's status is 141.
        if exc.code == EXIT_ERROR and sys.stdout is not sys.__stdout__ and stdout_closed():
            raise SystemExit(EXIT_PIPE) from None
        if exc.code in (0, None):
            try:  # what is still buffered, met here and not as an error at exit
                sys.stdout.flush()
            except OSError as err:
                _stdout_refused(err)
        raise
    except OSError as exc:
        # stdout refused click's help or version text (``--help >/dev/full``): outside
        # a command, so not met by the commands' error reporter.
        if interrupts.stopped_before_work(exc):
            interrupts.exit_not_started()
        _stdout_refused(exc)
    except Exception as exc:
        # A stop signal before the work, which a library on the way (typer's lazy
        # imports while it parsed the options) turned into an error of its own.
        if not interrupts.stopped_before_work(exc):
            raise
        interrupts.exit_not_started()


def _stdout_refused(exc: OSError) -> None:
    """One line and exit 1 for a write stdout refused (exit 141 for a closed pipe);
    ``exc`` itself when it is not stdout's."""
    if exc.filename != STDOUT:
        raise exc
    silence_stdout()
    if exc.errno == errno.EPIPE:
        raise SystemExit(EXIT_PIPE) from None
    error_line(f"{STDOUT}: {exc.strerror or exc}")
    raise SystemExit(EXIT_ERROR) from None
