"""Files of shrink's own for a capture's bytes, mapped read-only.

A capture too large to hold in memory is read from a file that only this process holds
(a copy, or a variant converted to classic pcap): it has no name, so no one else can
cut or rewrite it, and its mapping keeps it until it is unmapped. It is made beside the
capture (the same file system: a reflink where the copy can make one), else in the
temporary directory.
"""

from __future__ import annotations

import mmap
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from shrink.errors import CaptureFormatError

__all__ = ["map_readonly", "own_mapping"]


def map_readonly(fd: int) -> mmap.mmap:
    """Map a file read-only; on Linux prefault it in one call (cheaper than a fault a page)."""
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate and hasattr(mmap, "MAP_SHARED"):
        return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
    return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)


def own_mapping(
    path: Path, fill: Callable[[BinaryIO], None], *, what: str, remedy: str
) -> mmap.mmap:
    """A mapping of an unnamed file that ``fill`` wrote, for the capture at ``path``.

    Where the file cannot be made or filled (no space, no write access), the next place
    is tried; failing both, an error naming the capture says ``what`` was to be made
    and the ``remedy``.
    """
    tried = []
    for where in (path.parent, Path(tempfile.gettempdir())):
        try:
            with tempfile.TemporaryFile(dir=where) as dst:
                fill(dst)
                dst.flush()
                return map_readonly(dst.fileno())
        except OSError as exc:
            tried.append(f"{where} ({exc.strerror or exc})")
    raise CaptureFormatError(f"{what} could be made in {' or '.join(tried)}: {remedy}", path=path)
