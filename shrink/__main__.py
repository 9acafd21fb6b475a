"""``python -m shrink`` and the ``shrink`` command.

The stop signals are taken before the CLI is imported (typer and the commands take
a good part of a second on a busy machine): a SIGTERM then exits 143 with one line,
not silently killed, and a Ctrl-C shows no traceback.
"""

from shrink import interrupts


def run() -> None:
    """The ``shrink`` command (see :func:`shrink.cli.main`)."""
    interrupts.install()
    try:
        from shrink.cli import main
    except interrupts.NotStarted:
        interrupts.exit_not_started()
    except Exception as exc:
        # The signal came inside a step of the import machinery that wraps what it
        # raises (a class's __set_name__: "RuntimeError: Error calling __set_name__"):
        # still a stop before the work began, not a traceback.
        if not interrupts.caused_by_stop(exc):
            raise
        interrupts.exit_not_started()
    main()


if __name__ == "__main__":
    run()
