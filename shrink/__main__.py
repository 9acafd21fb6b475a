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
    main()


if __name__ == "__main__":
    run()
