"""Text-log readers on a large file: wall time and peak RSS, this checkout against another.

Generates one log per format in a fresh temporary folder (``--mib`` MiB each, default
200): a Combined Log Format access log (20,000 clients, each with one of 40 user
agents, 50,000 paths), a recorded-session TSV (``specweb``) and an httperf session log
(``wsesslog``). Each read runs in a fresh process that reports its wall time, its
peak RSS (``ru_maxrss``) and its RSS once the reader was imported (the baseline),
so that the growth is the reader's own. With ``--code DIR`` the same reads run
with DIR's shrink too, the two taking turns (``--runs`` rounds), so that both see
the same machine load: a before/after on a shared machine.

    python bench/bench_log_memory.py [--mib 200] [--formats clf,specweb,wsesslog]
        [--runs 1] [--code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_READ = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from shrink.ingest import read_clf, read_specweb, read_wsesslog
fn = {{"clf": read_clf, "specweb": read_specweb, "wsesslog": read_wsesslog}}[sys.argv[2]]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
tr = fn(sys.argv[3])
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print({{"wall": wall, "peak_kib": peak, "base_kib": base, "requests": len(tr),
        "skipped": tr.meta.get("skipped", 0)}})
"""

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _stamp(t: int) -> str:
    import time

    g = time.gmtime(t)
    return f"{g.tm_mday:02d}/{_MONTHS[g.tm_mon - 1]}/{g.tm_year}:{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d} +0000"  # noqa: E501


def _write(path: Path, size: int, line, header: str = "") -> int:
    """Write ``header``, then lines from ``line(i)`` until ``size`` bytes; the line count."""
    n = 0
    done = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        fh.write(header)
        while done < size:
            block = "".join(line(n + k) for k in range(10_000))
            fh.write(block)
            done += len(block)
            n += 10_000
    return n


def make_clf(path: Path, size: int) -> int:
    rnd = random.Random(1)
    hosts = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(20_000)]
    paths = [
        f"/static/img/d{i % 97}/f{i}.gif" if i % 5 else f"/app/product.php?id={i}"
        for i in range(50_000)
    ]
    agents = [f"Mozilla/5.0 (X11; Linux x86_64) Agent/{i}.0" for i in range(40)]
    stamps = {}

    def line(i: int) -> str:
        t = 800_000_000 + i // 50
        s = stamps.get(t) or stamps.setdefault(t, _stamp(t))
        if len(stamps) > 1000:
            stamps.clear()
        h = rnd.randrange(len(hosts))  # a client keeps its user agent
        return (
            f'{hosts[h]} - - [{s}] "GET {rnd.choice(paths)} HTTP/1.1" 200 '
            f'{rnd.randrange(100, 200_000)} "http://example.com/" "{agents[h % 40]}"\n'
        )

    return _write(path, size, line)


def make_specweb(path: Path, size: int) -> int:
    rnd = random.Random(2)
    paths = [f"/static/f{i}.gif" if i % 5 else f"/app/p.php?id={i}" for i in range(50_000)]
    header = "#shrink-sessions v1\n# fields: time session url method status bytes rt\n"

    def line(i: int) -> str:
        return (
            f"{i * 0.001:.3f}\tu{i // 20}\t{rnd.choice(paths)}\tGET\t200\t"
            f"{rnd.randrange(100, 200_000)}\t0.004\n"
        )

    return _write(path, size, line, header)


def make_wsesslog(path: Path, size: int) -> int:
    rnd = random.Random(3)
    paths = [f"/static/f{i}.gif" if i % 5 else f"/app/p.php?id={i}" for i in range(50_000)]

    def line(i: int) -> str:
        k = i % 12
        if k == 11:
            return "\n"  # ends the session
        if k % 4 == 0:
            return f"{rnd.choice(paths)} think=2.5\n"
        return f"\t{rnd.choice(paths)}\n"

    return _write(path, size, line)


MAKERS = {"clf": make_clf, "specweb": make_specweb, "wsesslog": make_wsesslog}


def read_once(code: Path, fmt: str, log: Path) -> dict:
    script = _READ.replace("{{", "{").replace("}}", "}")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run(
        [sys.executable, "-c", script, str(code), fmt, str(log)],
        capture_output=True,
        text=True,
        env=env,
        cwd=code,
    )
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "?"}
    import ast

    return ast.literal_eval(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=200.0, help="size of each generated log")
    ap.add_argument("--formats", default="clf,specweb,wsesslog")
    ap.add_argument("--runs", type=int, default=1, help="rounds (the checkouts taking turns)")
    ap.add_argument("--code", help="another checkout to read with too (e.g. the code before)")
    a = ap.parse_args()
    codes = [("this", ROOT)] + ([("other", Path(a.code).resolve())] if a.code else [])
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        for fmt in a.formats.split(","):
            log = Path(d) / f"big.{fmt}"
            lines = MAKERS[fmt](log, int(a.mib * 2**20))
            mib = log.stat().st_size / 2**20
            print(f"{fmt}: {mib:.0f} MiB, {lines:,} lines", flush=True)
            for run in range(a.runs):
                order = codes if run % 2 == 0 else codes[::-1]
                for name, code in order:
                    r = read_once(code, fmt, log)
                    r.update(format=fmt, code=name, run=run, mib=mib)
                    results.append(r)
                    if "error" in r:
                        print(f"  {name:<6} run {run}: {r['error']}", flush=True)
                        continue
                    print(
                        f"  {name:<6} run {run}: {r['wall']:6.1f} s, peak RSS "
                        f"{r['peak_kib'] / 1024:7.0f} MiB (after imports "
                        f"{r['base_kib'] / 1024:4.0f} MiB), {r['requests']:,} requests, "
                        f"{r['skipped']:,} skipped",
                        flush=True,
                    )
            log.unlink()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
