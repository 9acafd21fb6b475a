"""A server's error log kept to a bounded size while load runs against it.

An overloaded server writes lines for every request it fails: lighttpd's mod_fastcgi
four (about 2.7 KB) for each request its php-cgi backlog refused, nginx one (about
400 bytes) for each ``connect() ... failed (11: Resource temporarily unavailable)``.
Neither rotates nor caps its log, which lies in the run folder (``/run/shrink``, a
tmpfs in RAM on most systems). One 10 s level at ten times the share's capacity grew
lighttpd's error log by 16 MB; a sweep or ``mat`` that spends many levels past the
knee grew it without bound.

:func:`cap_log` cuts a log over :data:`CAP_BYTES` down to its first
:data:`HEAD_BYTES` (how the server started, the first errors) and last
:data:`TAIL_BYTES` (what it says now, which ``testbed`` errors quote), with a line
saying how much was cut. A last line longer than the tail keeps its last bytes, and
the note says so. The servers open their logs ``O_APPEND``, so they go on
writing at the new end. What a server writes while the log is read is kept; what it
writes between the last look at the size and the cut (two system calls) is lost, and
a line written between the cut and the kept tail's write lands before the note.

The log lies in the server user's own folder, where that user could put a symlink
or a hard link to a file of root's: only a regular file with one link, opened
without following a symlink, is cut.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

__all__ = ["CAP_BYTES", "HEAD_BYTES", "TAIL_BYTES", "cap_log"]

CAP_BYTES = 8 * 2**20
HEAD_BYTES = 64 * 2**10
TAIL_BYTES = 2 * 2**20
_NOTE = re.compile(rb"^\[shrink\] ([0-9]+) bytes of this log cut here[^\n]*\n", re.M)


def _line_end(data: bytes) -> int:
    """Bytes up to and including the last newline of ``data`` (0 if none)."""
    return data.rfind(b"\n") + 1


def _line_start(data: bytes) -> int:
    """Offset just past the first newline of ``data`` (len(data) if none)."""
    nl = data.find(b"\n")
    return len(data) if nl < 0 else nl + 1


def cap_log(
    path: str | Path, cap: int | None = None, head: int | None = None, tail: int | None = None
) -> int:
    """Cut the log at ``path`` to its first ``head`` and last ``tail`` bytes (at line
    ends) when it holds more than ``cap`` (by default the module's sizes); returns the
    bytes cut now (0: none, or not a file shrink may cut). Its note line counts every
    cut so far."""
    cap = CAP_BYTES if cap is None else cap
    head = HEAD_BYTES if head is None else head
    tail = TAIL_BYTES if tail is None else tail
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size <= cap:
            return 0
        size = st.st_size
        # An earlier cut's note lies in the head, its line perhaps past ``head`` bytes:
        # the head is kept up to it, and the server's bytes it counts are added to
        # these (less the note's own).
        first = os.pread(fd, head + 256, 0)
        m = _NOTE.search(first, 0, head + 256)
        if m is not None and m.start() >= head:
            m = None
        kept_head = m.start() if m else _line_end(first[:head])
        tail = min(tail, size - kept_head)
        last = os.pread(fd, tail, size - tail)
        kept_tail = last[_line_start(last) :]
        # One line longer than ``tail`` (no line starts in it): the note said the last
        # lines stay and nothing of it was kept; its last bytes are, said as cut.
        one_line = not kept_tail and bool(last)
        if one_line:
            kept_tail = last
        # What the server wrote during this look is kept, not cut with the rest.
        if (now := os.fstat(fd).st_size) > size:
            kept_tail += os.pread(fd, now - size, size)
            size = now
        cut = size - kept_head - len(kept_tail)
        if cut <= 0:
            return 0
        total = cut + (int(m.group(1)) - len(m.group(0)) if m else 0)
        stay = (
            f"its first lines and the last {len(kept_tail)} bytes of its last line stay"
            if one_line
            else "its first and last lines stay"
        )
        note = (
            f"[shrink] {total} bytes of this log cut here: it is kept under {cap} bytes "
            f"while load runs ({stay})\n"
        ).encode()
        os.ftruncate(fd, kept_head)
        os.write(fd, note + kept_tail)
        return cut
    except OSError:
        return 0
    finally:
        os.close(fd)
