"""A recorded request body's cost to a replay: peak RSS and send lag, against the same
replay with a 1-byte body measured in the same run.

The trace: one POST of ``--body-mb`` MB (4 bits of entropy a byte, so Parquet cannot
shrink it to nothing) at 0.2 s among 2,000 GETs over 2 s. ``shrink replay`` (a fresh
process, ``--engine native``, RunLog to a file, ``--json``) sends it to the fake server
(``shrink.replay.fakeserver``, on loopback), which reads each body whole. The reference
is the same trace with a 1-byte body, run next to it (interleaved, ``--runs`` times).
The ratio is the extra peak over the body's size: how many copies of the body the
replay held at once.

    python bench/bench_body_memory.py [--body-mb 80] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shrink.trace import Trace  # noqa: E402

GETS = 2000
SECONDS = 2.0


def _trace(path: Path, body: bytes) -> Path:
    """2,000 GETs over 2 s, and one POST of ``body`` at 0.2 s."""
    t = [SECONDS * i / GETS for i in range(GETS)] + [0.2]
    n = len(t)
    Trace.from_columns(
        {"session": list(range(n)), "t": t, "path": ["/x?bytes=100"] * n,
         "method": ["GET"] * GETS + ["POST"], "body": [b""] * GETS + [body]},
    ).write_parquet(path)  # fmt: skip
    return path


_CHILD = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if done.returncode != 0:
    sys.exit(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(done.stdout)
"""


def _replay(trace: Path, port: int, out: Path) -> tuple[float, float]:
    """Peak RSS in MB of one ``shrink replay`` process, and its send-lag p99 in ms."""
    cmd = [sys.executable, "-m", "shrink", "replay", str(trace),
           "--target", f"http://127.0.0.1:{port}", "--engine", "native",
           "-o", str(out), "--json"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *cmd], capture_output=True, text=True, check=True, cwd=ROOT
    )
    peak_kib, rest = done.stdout.split("\n", 1)
    summary = json.loads(rest)
    out.unlink(missing_ok=True)
    return int(peak_kib) / 1024, summary["send_lag_p99"] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--body-mb", type=float, default=80.0)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    size = int(a.body_mb * 1e6)
    rng = np.random.default_rng(0)
    body = (rng.integers(0, 16, size, dtype=np.uint8) + ord("a")).tobytes()
    with tempfile.TemporaryDirectory(prefix="bench-body-") as tmp:
        work = Path(tmp)
        big, small = _trace(work / "big.parquet", body), _trace(work / "small.parquet", b"x")
        del body
        srv = subprocess.Popen(
            [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        try:
            port = int(srv.stdout.readline().split()[2])  # type: ignore[union-attr]
            for run in range(a.runs):
                ref_mb, ref_lag = _replay(small, port, work / "r.parquet")
                peak_mb, lag = _replay(big, port, work / "r.parquet")
                row = {
                    "run": run, "body_mb": a.body_mb, "peak_mb": round(peak_mb, 1),
                    "reference_peak_mb": round(ref_mb, 1), "send_lag_p99_ms": round(lag, 3),
                    "reference_send_lag_p99_ms": round(ref_lag, 3),
                    "copies_held": round((peak_mb - ref_mb) * (1 << 20) / size, 2),
                }  # fmt: skip
                print(json.dumps(row), flush=True)
        finally:
            srv.kill()
            srv.wait()


if __name__ == "__main__":
    main()
