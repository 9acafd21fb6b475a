"""Benchmark: packets/s of the capture readers on generated HTTP/1.1 keep-alive traffic.

Run as ``python bench/bench_capture.py [--packets N] [--scapy-packets M]``.
Writes a classic pcap of at least N packets (default 200,000) of keep-alive
traffic, then times, in the same run and on one core each:

* shrink's fast engine (``read_capture(engine="fast")``): the whole pipeline,
  file to Trace;
* shrink's scapy engine, on a prefix of M packets (scapy dissects every
  packet in Python, so the whole file would take minutes);
* tshark (``-Y http.request`` with TCP reassembly, its defaults), if installed.

It prints packets/s for each and the ratios fast/tshark and fast/scapy.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shrink.ingest.capture import read_capture
from shrink.ingest.pcap_synth import Conn, http_response, write_capture


def make_capture(path: Path, packets: int) -> int:
    """Keep-alive connections of 50 requests each, bodies 1-12 KB, until ``packets``."""
    conns = []
    n = 0
    i = 0
    while n < packets:
        ex = []
        for k in range(50):
            size = 1000 + ((i * 7919 + k * 104729) % 11000)
            req = f"GET /static/f{i}_{k}.gif HTTP/1.1\r\nHost: bench\r\nCookie: s={i}\r\n\r\n"
            ex.append((req.encode(), http_response(size)))
            n += 2 + 1 + (size + 1447) // 1448 * 3 // 2
        conns.append(
            Conn(
                ex,
                client=f"10.1.{i // 250}.{i % 250 + 1}",
                cport=20000 + i % 40000,
                start=i * 0.05,
                gap=0.02,
            )
        )
        n += 6
        i += 1
    write_capture(path, conns)
    from shrink.ingest.pcap_files import read_records

    return len(read_records(path, strict=True))


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--scapy-packets", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "keepalive.pcap"
        small = Path(tmp) / "keepalive-prefix.pcap"
        n = make_capture(big, args.packets)
        m = make_capture(small, args.scapy_packets)
        fast = best_of(lambda: read_capture(big, engine="fast"), args.repeat)
        tr = read_capture(big, engine="fast")
        print(f"capture: {n} packets, {tr.meta['requests']} requests, {big.stat().st_size} bytes")
        print(f"fast engine : {fast:8.3f} s  {n / fast:12,.0f} packets/s")
        sc = best_of(lambda: read_capture(small, engine="scapy"), 1)
        print(f"scapy engine: {sc:8.3f} s  {m / sc:12,.0f} packets/s  (on {m} packets)")
        tshark = shutil.which("tshark")
        ts = None
        if tshark:

            def run_tshark() -> None:
                subprocess.run(
                    [
                        tshark,
                        "-r",
                        str(big),
                        "-Y",
                        "http.request",
                        "-T",
                        "fields",
                        "-e",
                        "frame.number",
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )

            ts = best_of(run_tshark, 1)
            print(f"tshark      : {ts:8.3f} s  {n / ts:12,.0f} packets/s")
        else:
            print("tshark      : not installed")
        print(f"ratio fast/scapy  = {(n / fast) / (m / sc):.1f}x")
        if ts:
            print(f"ratio fast/tshark = {(n / fast) / (n / ts):.1f}x")


if __name__ == "__main__":
    main()
