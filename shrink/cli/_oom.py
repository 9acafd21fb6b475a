"""Memory running out, in the guises it takes before it reaches the error reporter."""

from __future__ import annotations

import errno
import os
import resource

__all__ = ["memory_refused"]


def memory_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is memory running out in another guise: the dynamic loader could
    not map a library (`ulimit -v 200000`: "libarrow.so: failed to map segment from
    shared object"), or a MemoryError inside an import, which CPython words as
    "SystemError: <function _find_and_load> returned NULL without setting an
    exception", or any error raised while one was handled."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur)
        if isinstance(cur, MemoryError):
            return True
        if isinstance(cur, ImportError) and (
            "failed to map segment" in text or os.strerror(errno.ENOMEM) in text
        ):
            return True
        if isinstance(cur, SystemError) and "returned NULL without setting an" in text:
            return any(
                resource.getrlimit(w)[0] != resource.RLIM_INFINITY
                for w in (resource.RLIMIT_AS, resource.RLIMIT_DATA)
            )
        cur = cur.__cause__ or cur.__context__
    return False
