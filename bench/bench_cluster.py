"""Two Ray generator nodes against one local generator process, same load, same run.

A local Ray cluster (a head and two worker nodes, ``ray.cluster_utils.Cluster``)
and one process replay the same session trace at the same rate against the same
loopback HTTP server (the project's ``shrink.replay.fakeserver``), interleaved
rep by rep because the host drifts. Prints, per side, the answered requests in
the window, the mean and the p99.9 (median and range over the repetitions), and
the ratio ray / one for each; plus the clock offsets and round trips the actors
were started with.

    python bench/bench_cluster.py [--reps 5] [--sessions 400] [--seconds 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shrink.replay import EngineConfig, run_engines  # noqa: E402
from shrink.replay.cluster import ClusterSpec  # noqa: E402
from shrink.schedule import ScheduleOptions  # noqa: E402
from shrink.target import GeneratorPlacement  # noqa: E402
from shrink.trace import Trace  # noqa: E402


def _trace(n: int) -> Trace:
    cols: dict[str, list] = {k: [] for k in ("session", "burst", "t", "think", "path", "cls")}
    for s in range(n):
        for b in range(4):
            for k, p in enumerate(("/a?bytes=512", "/b?bytes=2048")):
                cols["session"].append(s)
                cols["burst"].append(b)
                cols["t"].append(s * 0.01)
                cols["think"].append(0.05)
                cols["path"].append(p)
                cols["cls"].append("dynamic" if k == 0 else "static")
    return Trace.from_columns(cols, meta={"mode": "session"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    server = subprocess.Popen(
        [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[2])
        tr = _trace(args.sessions)
        cfg = EngineConfig([("127.0.0.1", port)])
        kw = dict(rate_factor=1.0, horizon=args.seconds, schedule=ScheduleOptions(loop=False))
        sides = {
            "one": GeneratorPlacement(processes=1),
            "ray": GeneratorPlacement(cluster=ClusterSpec(cluster.address, 2)),
        }
        figs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
        clocks = []
        for _ in range(args.reps):
            for name, gen in sides.items():
                log, eng = run_engines(tr, cfg, generator=gen, **kw)
                win = log.window(0.5, args.seconds - 1.0)
                lat = win.latencies()
                figs[name].append((float(win.ok_mask().sum()), float(np.mean(lat)),
                                   float(np.quantile(lat, 0.999))))  # fmt: skip
                clocks += eng.extra.get("generators", [])
        print(f"{'':>10} {'answered':>18} {'mean ms':>18} {'p99.9 ms':>18}")
        rows = {k: np.array(v) for k, v in figs.items()}
        for name, a in rows.items():
            cells = [
                f"{np.median(a[:, 0]):.0f} [{a[:, 0].min():.0f}-{a[:, 0].max():.0f}]",
                *(f"{1e3 * np.median(a[:, c]):.3f} [{1e3 * a[:, c].min():.3f}-"
                  f"{1e3 * a[:, c].max():.3f}]" for c in (1, 2)),
            ]  # fmt: skip
            print(f"{name:>10} " + " ".join(f"{c:>18}" for c in cells))
        ratio = [np.median(rows["ray"][:, c]) / np.median(rows["one"][:, c]) for c in range(3)]
        print(f"{'ray/one':>10} " + " ".join(f"{r:>18.3f}" for r in ratio))
        off = np.array([g["clock_offset"] for g in clocks])
        rtt = np.array([g["clock_rtt"] for g in clocks])
        print(f"clock offsets {1e3 * np.abs(off).max():.3f} ms at most, "
              f"round trips {1e3 * np.median(rtt):.3f} ms median")  # fmt: skip
    finally:
        server.kill()
        server.wait()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
