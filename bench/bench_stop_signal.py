"""How soon a signal stops the sends: ``shrink replay`` under load, then SIGTERM.

lighttpd (one 1 KiB file) is pinned to CPU 1; ``shrink replay --generator-cpus 0`` (as
users run it: as root its send thread runs SCHED_FIFO) sends ``--rate`` requests/s for
``--seconds``; ``--after`` seconds into the sends it gets the signal. Reported per run:
the time from the signal to the last send in its RunLog (``sent``, wall clock by the
log's ``t0_unix``), the rows, and the exit status. Runs alternate between the cores
given with ``--core`` (a directory holding a built ``shrink_core``, put first on
PYTHONPATH, or a checkout of shrink, run as it is; ``base``: the one installed), so
that a busy machine weighs on each alike.

    python bench/bench_stop_signal.py --rate 150000 --runs 10 --core base --core DIR
        [--signal TERM] [--processes 2 --generator-cpus 0,1 --allow-overlap]
        [--engine python] [--extra "--realtime 10"]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shrink.runlog import RunLog  # noqa: E402
from tests.helpers.servers import LIGHTTPD_SHORT_MAX, static_lighttpd  # noqa: E402

SERVER_CPU = 1


def start_lighttpd(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    conf, port = static_lighttpd(
        root,
        max_keep_alive_requests=LIGHTTPD_SHORT_MAX,
        max_keep_alive_idle=60,
        max_connections=4096,
    )
    proc = subprocess.Popen(["/usr/sbin/lighttpd", "-D", "-f", str(conf)], start_new_session=True)
    os.sched_setaffinity(proc.pid, {SERVER_CPU})
    time.sleep(0.5)
    return proc, port


def one_run(core: str, port: int, args: argparse.Namespace, out: Path) -> dict[str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) if core == "base" else f"{core}:{ROOT}"
    cmd = [
        sys.executable, "-m", "shrink", "replay", "--target", f"127.0.0.1:{port}",
        "--rate", str(args.rate), "--path", "/static/file1k.bin",
        "--duration", f"{args.seconds}s", "--generator-cpus", args.generator_cpus,
        "--engine", args.engine, "-o", str(out), *shlex.split(args.extra),
    ]  # fmt: skip
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    # (a checkout of shrink runs its own package: ``-m`` puts the working folder first)
    cwd = core if core != "base" and (Path(core) / "shrink").is_dir() else ROOT
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # the RunLog (a temporary name until the end) or a part's opens as the sends start
    # (not the output's lock, taken as the command checks its options)
    deadline = time.monotonic() + 60
    while not [p for p in out.parent.iterdir() if p.is_file() and not p.name.endswith(".lock")]:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(proc.communicate()[1].decode()[-2000:])
        time.sleep(0.01)
    time.sleep(args.after)
    sent_at = time.time()
    proc.send_signal(getattr(signal, f"SIG{args.signal}"))
    proc.communicate(timeout=60)
    log = RunLog.read_parquet(out)
    sent = log.column("sent")
    # (none sent: the signal came before the first send)
    last = float(np.nanmax(sent)) + float(log.meta["t0_unix"]) if len(sent) else float("nan")
    return {"last_after": last - sent_at, "rows": len(log), "rc": proc.returncode,
            "planned_end_after": float(log.meta["t0_unix"]) + args.seconds - sent_at}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--after", type=float, default=1.3)
    ap.add_argument("--signal", default="TERM")
    ap.add_argument("--core", action="append", required=True)
    ap.add_argument("--generator-cpus", default="0")
    ap.add_argument("--processes", type=int, default=0)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--extra", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, port = start_lighttpd(Path(tmp))
        got: dict[str, list[float]] = {c: [] for c in args.core}
        try:
            for i in range(args.runs):
                for core in args.core:
                    d = Path(tmp) / f"r{i}-{len(got[core])}-{abs(hash(core))}"
                    d.mkdir()
                    r = one_run(core, port, args, d / "run.parquet")
                    got[core].append(r["last_after"])
                    name = "base" if core == "base" else Path(core).name
                    print(f"{name:10s} run {i}: last send {r['last_after']:+.3f} s after the "
                          f"signal (planned end {r['planned_end_after']:+.2f}), "
                          f"{r['rows']} rows, exit {r['rc']}", flush=True)  # fmt: skip
        finally:
            server.kill()
            server.wait()
    for core, v in got.items():
        print(f"{core}: " + ", ".join(f"{x:.3f}" for x in v) + f"; median {np.median(v):.3f}")


if __name__ == "__main__":
    main()
