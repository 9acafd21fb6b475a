"""Benchmark: packets/s of the capture readers on generated HTTP/1.1 keep-alive traffic.

Run as ``python bench/bench_capture.py [--packets N] [--scapy-packets M] [--mix web|small]``.

It writes a classic pcap (Ethernet, IPv4) of at least N packets (default
200,000): clients on keep-alive connections of 50 requests each; response
bodies drawn from a log-normal web-object mix (median 8 KB, mean ~16 KB,
clipped to 2 MB; about 20 packets per request, ACK every second segment),
or with ``--mix small`` uniform 1-12 KB (about 10 packets per request, so the
per-request work weighs twice as much). Then, in the same run, one process
each:

* shrink's fast engine (``read_capture(engine="fast")``): file to Trace,
  the whole pipeline;
* shrink's scapy engine on a capture of M packets of the same traffic
  (scapy dissects every packet in Python; the whole file would take minutes);
* tshark ``-Y http.request`` with its default TCP reassembly, if installed.

Speeds are packets per second of CPU time of the reading process (one core:
every reader here is single-threaded), which is what the target is about
and is steadier than wall time on a shared machine; wall times are printed
too. The ratios compare the fast engine with tshark and with scapy.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shrink.ingest.capture import read_capture
from shrink.ingest.capture.pcap_files import read_records
from tests.helpers.pcap_synth import Conn, http_response, write_capture


def body_sizes(mix: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if mix == "small":
        return rng.integers(1000, 12_000, n)
    return np.clip(rng.lognormal(np.log(8000), 1.2, n), 100, 2_000_000).astype(int)


def make_capture(path: Path, packets: int, mix: str, seed: int = 7) -> tuple[int, int]:
    """Write keep-alive traffic of at least ``packets`` packets; (packets, requests)."""
    conns = []
    est = 0
    i = 0
    bodies: dict[int, bytes] = {}
    while est < packets:
        sizes = body_sizes(mix, 50, seed + i)
        ex = []
        for k, size in enumerate(sizes.tolist()):
            req = f"GET /static/f{i}_{k}.gif HTTP/1.1\r\nHost: bench\r\nCookie: s={i}\r\n\r\n"
            resp = bodies.get(size) or bodies.setdefault(size, http_response(size))
            ex.append((req.encode(), resp))
            seg = (len(resp) + 1447) // 1448
            est += 2 + seg + seg // 2  # request, segments, ACK every 2nd, final ACK
        conns.append(
            Conn(
                ex,
                client=f"10.1.{i // 250}.{i % 250 + 1}",
                cport=20000 + i % 40000,
                start=i * 0.05,
                gap=0.02,
            )
        )
        est += 6
        i += 1
    write_capture(path, conns)
    return len(read_records(path, strict=True)), 50 * len(conns)


def timed(fn) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call, in this process."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def child_cpu(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a child process run to the end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def python_speed() -> float:
    """CPU ms of a fixed pure-Python loop: says how fast (or how shared) the core was."""
    best = float("inf")
    for _ in range(3):
        c0 = time.process_time()
        x = 0
        for j in range(1_000_000):
            x += j
        best = min(best, time.process_time() - c0)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--scapy-packets", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="fast engine: best of this many")
    ap.add_argument("--mix", choices=["web", "small"], default="web")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "keepalive.pcap"
        small = Path(tmp) / "keepalive-small.pcap"
        n, nreq = make_capture(big, args.packets, args.mix)
        m, _ = make_capture(small, args.scapy_packets, args.mix)
        print(
            f"capture: {n:,} packets, {nreq:,} requests ({n / nreq:.1f} packets/request), "
            f"{big.stat().st_size / 1e6:.0f} MB, mix {args.mix}; machine: {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print(f"calibration: a 1M-iteration Python loop takes {python_speed():.0f} ms CPU")
        tr = read_capture(big, engine="fast")
        assert tr.meta["requests"] == nreq and tr.meta["responses"] == nreq
        runs = [timed(lambda: read_capture(big, engine="fast")) for _ in range(args.repeat)]
        fast_cpu = min(c for c, _ in runs)
        fast_wall = min(w for _, w in runs)
        print(
            f"fast engine : {n / fast_cpu:12,.0f} packets/s CPU ({fast_cpu:.3f} s), "
            f"{n / fast_wall:12,.0f} packets/s wall ({fast_wall:.3f} s)"
        )
        sc_cpu, sc_wall = timed(lambda: read_capture(small, engine="scapy"))
        print(
            f"scapy engine: {m / sc_cpu:12,.0f} packets/s CPU ({sc_cpu:.3f} s), "
            f"{m / sc_wall:12,.0f} packets/s wall, on {m:,} packets"
        )
        tshark = shutil.which("tshark")
        ts_cpu = None
        if tshark:
            cmd = [tshark, "-r", str(big), "-Y", "http.request", "-T", "fields"]
            ts_cpu, ts_wall = child_cpu([*cmd, "-e", "frame.number"])
            print(
                f"tshark      : {n / ts_cpu:12,.0f} packets/s CPU ({ts_cpu:.3f} s), "
                f"{n / ts_wall:12,.0f} packets/s wall ({ts_wall:.3f} s)"
            )
        else:
            print("tshark      : not installed")
        print(f"ratio fast/scapy  = {sc_cpu / m * n / fast_cpu:.0f}x (CPU)")
        if ts_cpu:  # ts_wall is bound with it
            wall = ts_wall / fast_wall
            print(f"ratio fast/tshark = {ts_cpu / fast_cpu:.1f}x (CPU), {wall:.1f}x (wall)")


if __name__ == "__main__":
    main()
