"""The ``shrink`` command line: parses arguments and calls the library, nothing more.

Each command group lives in its own module with a ``register(app)`` function.
Exit statuses are listed in :mod:`shrink.cli._common`.
"""

from __future__ import annotations

import typer

from shrink import interrupts
from shrink._version import __version__
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
)
from shrink.cli._common import guard_all
from shrink.cli._style import tidy

app = typer.Typer(
    name="shrink",
    help="Predict a multi-core web server's capacity from scaled-down (SHRiNK) experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"shrink {__version__}")
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
):
    _module.register(app)
tidy(app)
# Every command: a ShrinkError (or a refused file) is one line and exit 1, never a traceback.
guard_all(app)


def main() -> None:
    # SIGTERM and SIGHUP stop a command as Ctrl-C does: what was measured is kept.
    interrupts.install()
    app()
