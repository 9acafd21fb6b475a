"""``python -m shrink`` and the ``shrink`` command.

The stop signals are taken before the CLI is imported (typer and the commands take
a good part of a second on a busy machine): a SIGTERM then exits 143 with one line,
not silently killed, and a Ctrl-C shows no traceback.
"""

import contextlib
import os
import resource

from shrink import interrupts
from shrink.defaults import LEAST_ADDRESS_SPACE
from shrink.own_env import set_own

# numpy's OpenBLAS starts a thread per CPU at import, for matrix sizes shrink never
# has: they spin on the generator's CPU after a call, reserve address space, and when
# one cannot be created (under `ulimit -v`) OpenBLAS raises SIGINT on the process, a
# limit then reported as a Ctrl-C. A user's own setting is kept; ours is not passed on
# to the servers shrink starts (shrink.own_env).
OPENBLAS_THREADS = ("OPENBLAS_NUM_THREADS", "1")


# The limits a command starts under at least: ``ulimit -v`` (the address space) and
# ``ulimit -d`` (the data segment, which since Linux 4.7 counts private mappings too:
# under 40-80 MiB of it the same libraries crashed, SIGSEGV, "OpenBLAS error: Memory
# allocation still failed", jemalloc's "cannot allocate memory for thread-local data:
# ABORT").
_LIMITS = ((resource.RLIMIT_AS, "-v"), (resource.RLIMIT_DATA, "-d"))


def _address_space_too_small() -> None:
    for which, flag in _LIMITS:
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY and soft < LEAST_ADDRESS_SPACE:
            line = (
                f"error: ulimit {flag} {soft // 1024} (KiB) is less than the "
                f"{LEAST_ADDRESS_SPACE >> 10} shrink needs: its numerical libraries' native "
                "code crashes, rather than fails, with less\n"
            )
            # (stderr closed, `2>&-`: Python's sys.stderr is None; the exit says it)
            with contextlib.suppress(OSError):
                os.write(2, line.encode())
            raise SystemExit(1)


def run() -> None:
    """The ``shrink`` command (see :func:`shrink.cli.main`)."""
    set_own(*OPENBLAS_THREADS, keep_users=True)
    _address_space_too_small()
    interrupts.install()
    try:
        from shrink.cli import main
    except interrupts.NotStarted:
        interrupts.exit_not_started()
    except Exception as exc:
        # The signal came inside a step of the import machinery that wraps what it
        # raises (a class's __set_name__: "RuntimeError: Error calling __set_name__"):
        # still a stop before the work began, not a traceback.
        if not interrupts.stopped_before_work(exc):
            raise
        interrupts.exit_not_started()
    main()


if __name__ == "__main__":
    run()
