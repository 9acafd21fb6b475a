"""Standard output that says its own name when the system refuses a write to it.

``shrink machine show >/dev/full`` said "error: No space left on device" and nothing of
where, and ``shrink --help >/dev/full`` was a traceback: the error came from a write of
rich's or click's, which hold no path. Here stdout's buffer puts its name on such an
error (``OSError.filename``), so the one error reporter names it as it names a file.
"""

from __future__ import annotations

import io
import os
import select
import sys

__all__ = ["STDOUT", "name_stdout", "silence_stdout"]

STDOUT = "standard output"


class _WaitingFile(io.FileIO):
    """fd 1 that waits for its reader when it was left non-blocking (a parent's pipe set
    ``O_NONBLOCK``): a full pipe made a write fail with EAGAIN, the output past the
    pipe's buffer lost and the command ended "write could not complete without
    blocking"; a blocking stdout would have waited. The file's own flags are not
    changed: others (the parent) share them."""

    def write(self, b):  # type: ignore[no-untyped-def, override]
        while True:
            n = super().write(b)
            if n is not None:
                return n
            select.select([], [self], [])  # full: wait until the reader takes some


class _NamedBuffer(io.BufferedWriter):
    """fd 1's buffer: an ``OSError`` from a write or a flush carries ``STDOUT``."""

    def write(self, b):  # type: ignore[no-untyped-def, override]
        try:
            return super().write(b)
        except OSError as exc:
            raise _named(exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise _named(exc) from None


def _named(exc: OSError) -> OSError:
    if exc.filename is None:
        exc.filename = STDOUT
    return exc


def name_stdout() -> None:
    """Put stdout (when it is fd 1's own text stream) on a :class:`_NamedBuffer`, with
    the same encoding, error handler and buffering."""
    old = sys.stdout
    try:
        if not isinstance(old, io.TextIOWrapper) or old.fileno() != 1:
            return
        old.flush()
    except (OSError, ValueError):
        return  # nothing could be written yet: the first write says so, unnamed
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        _NamedBuffer(_WaitingFile(1, "w", closefd=False)),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
        write_through=old.write_through,
    )


def silence_stdout() -> None:
    """Send what is still buffered for stdout nowhere: a stdout that refused a write
    would refuse it again at exit, as a second error after the one line."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
