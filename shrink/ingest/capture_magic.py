"""The magic numbers that open a capture file, in one place.

Read by the format detection (:mod:`shrink.ingest.detect`, which stays light: no
numpy, no capture package) and by the capture reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "CAPTURE_MAGICS",
    "CLASSIC_MAGICS",
    "MODIFIED_MAGICS",
    "PCAPNG_MAGIC",
    "PCAP_MAGICS",
    "header_at",
    "joined",
]

PCAP_MAGICS: dict[bytes, tuple[str, int]] = {
    # magic -> (byte order, ticks per second of the sub-second field)
    b"\xd4\xc3\xb2\xa1": ("<", 1_000_000),
    b"\xa1\xb2\xc3\xd4": (">", 1_000_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1_000_000_000),
    b"\xa1\xb2\x3c\x4d": (">", 1_000_000_000),
}
# Kuznetzov's "modified" pcap and SuSE 6.3's (microseconds): magic -> byte order.
MODIFIED_MAGICS: dict[bytes, str] = {b"\xa1\xb2\xcd\x34": ">", b"\x34\xcd\xb2\xa1": "<"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"  # a section header block
CLASSIC_MAGICS: tuple[bytes, ...] = (*PCAP_MAGICS, *MODIFIED_MAGICS)
CAPTURE_MAGICS: tuple[bytes, ...] = (*CLASSIC_MAGICS, PCAPNG_MAGIC)


def joined(whose: str, differs: str) -> str:
    """What to say where a second capture's file header is met in a file and not read
    on, for the reason ``differs``."""
    return (
        f"{whose} file header starts here (two captures joined, as `cat a.pcap.gz b.pcap.gz` "
        f"joins them), not read on as the first ({differs}): read each alone, or join them "
        "with mergecap"
    )


def header_at(data: Any, offsets: Sequence[int], lengths: Sequence[int], k: int) -> int | None:
    """The record index (``k``, or ``k - 1`` when that record has no bytes) whose header
    is a capture's file header, or None: two captures joined into one file (``cat
    a.pcap.gz b.pcap.gz`` is one gzip stream of both) read the second's header as
    records, the first of them empty (its sigfigs field as the length), and then a
    record of impossible length."""
    for j in (k - 1, k) if k and lengths[k - 1] == 0 else (k,):
        if j < len(offsets) and bytes(data[offsets[j] : offsets[j] + 4]) in CAPTURE_MAGICS:
            return j
    return None
