"""Trace readers and writers behind one registry.

``read_trace(path)`` tells the format from the content (:func:`detect_format`)
and calls the reader registered for it:

=========  =================================================  =========================
format     reader                                             options
=========  =================================================  =========================
wsesslog   httperf ``--wsesslog`` session log                 session_rate, think_default
specweb    recorded-session log (TSV/CSV: time session url)   burst_gap
clf        Common / Combined Log Format access log            idle_gap, burst_gap
pcap       pcap / pcapng capture (``shrink.ingest.capture``)  the capture reader's
parquet    a Trace shrink wrote                               -
=========  =================================================  =========================

Every reader takes ``strict`` (raise at the first bad line instead of counting
it) and ``classifier`` (static/dynamic rules). Writers: ``wsesslog``, ``jsonl``,
``parquet`` (:func:`write_trace`). The file formats are described in the
readers' module docstrings and in docs/formats.md.
"""

from shrink.ingest.clf import read_clf
from shrink.ingest.detect import detect_format
from shrink.ingest.registry import READ_FORMATS, WRITE_FORMATS, read_trace, write_trace
from shrink.ingest.specweb import read_specweb
from shrink.ingest.wsesslog import read_wsesslog, write_wsesslog

__all__ = [
    "READ_FORMATS",
    "WRITE_FORMATS",
    "detect_format",
    "read_clf",
    "read_specweb",
    "read_trace",
    "read_wsesslog",
    "write_trace",
    "write_wsesslog",
]
