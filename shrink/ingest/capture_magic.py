"""The magic numbers that open a capture file, in one place.

Read by the format detection (:mod:`shrink.ingest.detect`, which stays light: no
numpy, no capture package) and by the capture reader.
"""

from __future__ import annotations

__all__ = ["CAPTURE_MAGICS", "MODIFIED_MAGICS", "PCAPNG_MAGIC", "PCAP_MAGICS"]

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
CAPTURE_MAGICS: tuple[bytes, ...] = (*PCAP_MAGICS, *MODIFIED_MAGICS, PCAPNG_MAGIC)
