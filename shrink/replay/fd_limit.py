"""The generator's open-file limit: a connection takes a file descriptor, and a run
that found none for a request was short of its own limit, not of the server."""

from __future__ import annotations

import contextlib
import resource

import pyarrow.compute as pc

from shrink.errors import ReplayError
from shrink.runlog import RunLog

__all__ = ["out_of_files", "raise_open_file_limit"]


def raise_open_file_limit() -> int:
    """The open-file limit, its soft value first raised to the hard one: the engine takes
    a file descriptor a connection, and a shell's soft default (1,024) is below what
    its pools may open (1,024 an address) with its own files besides."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def out_of_files(log: RunLog) -> None:
    """Raise if a request of the run found no file descriptor for its connection: it was
    never sent, for the generator's open-file limit, not the server's doing. Counted as
    the server's failures, a level under ``ulimit -n 64`` had 4,245 "FAILED" and was
    excluded, naming nothing."""
    n = int(pc.sum(pc.equal(log.table.column("error"), "files")).as_py() or 0)
    if n:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        raise ReplayError(
            f"the load generator ran out of file descriptors (ulimit -n {limit}): {n:,} "
            f"requests could not open a connection; raise the limit (ulimit -n "
            f"{max(4096, 4 * limit)}) and run again"
        )
