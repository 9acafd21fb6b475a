"""The capture reader: pcap and pcapng files (gzip too) -> a Trace of HTTP requests.

:mod:`~shrink.ingest.capture.reader` runs the steps, one module each: container
files, record walks, header decoding (numpy, or scapy as the reference engine),
IP fragments, TCP reassembly, HTTP parsing and sessions.
"""

from shrink.ingest.capture.reader import read_capture, read_segments

__all__ = ["read_capture", "read_segments"]
