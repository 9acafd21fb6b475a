"""Each way of enforcing a CPU-time share against the ideal slower server, on the demo's pages.

    python bench/bench_share_mechanisms.py                       # alpha 0.25, 2 rounds
    python bench/bench_share_mechanisms.py --rounds 3 --seconds 4
    python bench/bench_share_mechanisms.py --pages mem --php-env USE_ZEND_ALLOC=0

The server (lighttpd + php-cgi, the testbed) runs on CPU 1, wrk -t1 pinned to CPU 0.
In one run it measures the whole core and each mechanism of shrink.enforce at alpha,
page by page: light load (wrk -c1: p50, p99), saturation (wrk -c8: req/s), and the
server processes' CPU per request (the scheduler's nanosecond count,
/proc/PID/task/*/schedstat), its system part (clock ticks, /proc/PID/stat: coarse)
and minor page faults per request; ``others`` is the part of CPU 1 that other
processes took during the saturation run (0% on a quiet machine).

The reference is the ideal slower server: the whole core measured in the same
round, its latency divided by alpha, its throughput times alpha, its CPU per
request unchanged. Each figure is printed as a ratio to that ideal (1.00 is
faithful; CPU above 1 means a request costs more on the share). The mechanisms
alternate within each round, in a rotated order, because this host's speed drifts.

Pages (the synth docroot, the demo's kind): ``static`` a 1 KiB file; ``php`` the
issue's 0.7 ms page; ``cpu`` 15 ms of CPU over a 64 KiB working set; ``mem`` 2 ms of
CPU over an 8 MiB one (above PHP's 2 MiB chunk and this CPU's 4 MiB L2); ``mid``
(not run by default) the same work over 1.5 MiB, inside both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAGES = {
    "static": "/static/file1k.bin",
    "php": "/app/product.php?bytes=1000&work=1000&mem=64",
    "cpu": "/app/product.php?bytes=1000&work=15000&mem=64",
    "mem": "/app/product.php?bytes=1000&work=2000&mem=8192",
    # 1.5 MiB: inside PHP's 2 MiB chunk (no fresh pages per request) and this L2
    "mid": "/app/product.php?bytes=1000&work=2000&mem=1536",
}
DEFAULT_PAGES = ["static", "php", "cpu", "mem"]
SERVER_CPU, GENERATOR_CPU = 1, 0


def _server_counters(pids: list[int]) -> tuple[float, float, int]:
    """CPU s (the scheduler's ns count), system s (clock ticks), minor faults, summed."""
    from shrink.replay.selfcheck import process_cpu_seconds

    cpu = sys_s = flt = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for p in pids:
        try:
            text = Path(f"/proc/{p}/stat").read_text()
            cpu += process_cpu_seconds(p)
        except (OSError, ValueError):
            continue
        f = text[text.rindex(")") + 2 :].split()
        sys_s, flt = sys_s + int(f[12]) / tick, flt + int(f[7])
    return cpu, sys_s, int(flt)


def _unit(v: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", v)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def _wrk(url: str, conns: int, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        [
            "taskset",
            "-c",
            str(GENERATOR_CPU),
            "wrk",
            "-t1",
            f"-c{conns}",
            f"-d{seconds}s",
            "--latency",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    ).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m is None:
        raise SystemExit(f"wrk gave no rate for {url}: {out.strip()[:300]}")
    res = {"rps": float(m.group(1))}
    n = re.search(r"(\d+) requests in", out)
    res["requests"] = float(n.group(1)) if n else float("nan")
    for q in ("50", "99"):
        m = re.search(rf"^\s+{q}(?:\.000)?%\s+(\S+)", out, re.M)
        res[f"p{q}_ms"] = _unit(m.group(1)) if m else float("nan")
    return res


def _measure(
    base: str, pids: list[int], spinners: list[int], page: str, seconds: int
) -> dict[str, float]:
    from shrink.replay.live import cpu_times

    url = base + PAGES[page]
    _wrk(url, 1, 1)  # warm: opcache, the allocator's chunks, the connection
    before = _server_counters(pids)
    light = _wrk(url, 1, seconds)
    after = _server_counters(pids)
    # Under saturation the server would use all CPU 1 gives it: what else ran there
    # (other users' processes, kernel threads) is what this machine took from the run.
    t0, s0, r0 = cpu_times()[SERVER_CPU], _server_counters(pids), _server_counters(spinners)
    sat = _wrk(url, 8, seconds)
    t1, s1, r1 = cpu_times()[SERVER_CPU], _server_counters(pids), _server_counters(spinners)
    busy = (t1[0] - t0[0]) / max(t1[1] - t0[1], 1)
    others = max(0.0, busy - (s1[0] - s0[0] + r1[0] - r0[0]) / seconds)
    n = max(light["requests"], 1.0)
    return {
        "p50_ms": light["p50_ms"],
        "p99_ms": light["p99_ms"],
        "light_rps": light["rps"],
        "sat_rps": sat["rps"],
        "cpu_ms": 1e3 * (after[0] - before[0]) / n,
        "sys_ms": 1e3 * (after[1] - before[1]) / n,
        "faults": (after[2] - before[2]) / n,
        "others": others,
    }


def _one(
    mech: str, alpha: float, docroot: Path, work: Path, pages: list[str], seconds: int
) -> dict[str, dict[str, float]]:
    from shrink import testbed
    from shrink.share import Share
    from shrink.topology import discover

    machine = discover()
    text = f"{SERVER_CPU}" if mech == "whole" else f"{SERVER_CPU}@{alpha:g}"
    share = Share.parse(text, machine)
    state = work / f"tb-{mech}.json"
    kw = {} if mech == "whole" else {"enforce": mech}
    st = testbed.up(docroot, machine, share, state_path=state, port=0, **kw)
    try:
        r = st.replicas[0]
        base = f"http://{r.address}:{r.port}"
        spin = [int(p) for p in (r.enforce or {}).get("spinners", {})]
        return {p: _measure(base, r.pids, spin, p, seconds) for p in pages}
    finally:
        testbed.down(state)


def _docroot(work: Path) -> Path:
    from shrink.synth import SupportParams, build_site, support_docroot

    docroot = work / "docroot"
    support_docroot(docroot, build_site(SupportParams(), 50))
    return docroot


def _ratios(m: dict[str, float], whole: dict[str, float], alpha: float) -> dict[str, float]:
    cpu, cpu_w = m["cpu_ms"], whole["cpu_ms"]
    return {
        "p50": m["p50_ms"] / (whole["p50_ms"] / alpha),
        "p99": m["p99_ms"] / (whole["p99_ms"] / alpha),
        "sat": m["sat_rps"] / (whole["sat_rps"] * alpha),
        "cpu": cpu / cpu_w if cpu_w > 0 else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=3, help="wrk runs whole seconds")
    ap.add_argument("--mechanisms", nargs="+", default=["cfs", "corunner"])
    ap.add_argument("--pages", nargs="+", default=DEFAULT_PAGES, choices=list(PAGES))
    ap.add_argument(
        "--php-env",
        action="append",
        default=[],
        help="KEY=VALUE for php-cgi (USE_ZEND_ALLOC, USE_ZEND_ALLOC_HUGE_PAGES)",
    )
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    a = ap.parse_args(argv)
    for kv in a.php_env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="shrink-mech-") as tmp:
        os.chmod(tmp, 0o711)  # as root the servers run as www-data, who must reach the docroot
        work = Path(tmp)
        docroot = _docroot(work)
        order = ["whole", *a.mechanisms]
        for rnd in range(a.rounds):
            k = rnd % len(order)
            for mech in order[k:] + order[:k]:
                got = _one(mech, a.alpha, docroot, work, a.pages, a.seconds)
                for page, m in got.items():
                    rows.append({"round": rnd, "mechanism": mech, "page": page, **m})
                print(
                    f"round {rnd} {mech}: "
                    + ", ".join(
                        f"{p} {m['light_rps']:.0f}/{m['sat_rps']:.0f} req/s" for p, m in got.items()
                    ),
                    file=sys.stderr,
                )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    _report(rows, a)
    return 0


def _report(rows: list[dict[str, Any]], a: argparse.Namespace) -> None:
    """Median over rounds of each ratio; each round's share against its own whole core."""
    whole = {(r["round"], r["page"]): r for r in rows if r["mechanism"] == "whole"}
    print(
        f"alpha {a.alpha:g}, {a.rounds} rounds of {a.seconds:g} s a page; ratios to the "
        "ideal slower server (the whole core of the same round, latency / alpha, "
        "throughput * alpha); median over rounds"
    )
    print(
        "| mechanism | page | p50 | p99 | saturation | CPU/req | CPU ms/req (sys) | faults "
        "| others |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for mech in ["whole", *a.mechanisms]:
        for page in a.pages:
            mine = [r for r in rows if r["mechanism"] == mech and r["page"] == page]
            rat = [_ratios(r, whole[(r["round"], page)], a.alpha) for r in mine]
            med = {k: statistics.median(x[k] for x in rat) for k in rat[0]} if rat else {}
            cpu = statistics.median(r["cpu_ms"] for r in mine)
            sys_ = statistics.median(r["sys_ms"] for r in mine)
            flt = statistics.median(r["faults"] for r in mine)
            others = statistics.median(r.get("others", 0.0) for r in mine)
            cells = (
                ["-", "-", "-", "-"]
                if mech == "whole"
                else [f"{med[k]:.2f}" for k in ("p50", "p99", "sat", "cpu")]
            )
            print(
                f"| {mech} | {page} | "
                + " | ".join(cells)
                + f" | {cpu:.3f} ({sys_:.3f}) | {flt:.0f} | {others:.0%} |"
            )


if __name__ == "__main__":
    sys.exit(main())
