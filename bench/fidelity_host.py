"""Does the host's move between the share's time and the validation's own levels explain
the errors?

The validation reads its MAT on the full target's own levels, after the runs it took
beside the share; ``host_after_over_beside`` is the full target's busy capacity on
those later levels over that beside the share. If the host speeding up or slowing
down in between made the errors, they would fall with ln(after / beside), and
correcting each error by it would shrink them. For each conclusive statistic of the
runs quiet on both sides, this prints the error as run and corrected, then their
correlation and medians.

    python bench/fidelity_host.py bench/corpus/2026-11-28-vm2-nominal5 ...
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity_corpus
from bench_fidelity import NOT_QUIET

STATS = ("mean", "p999")


def pairs(rows: list[dict[str, Any]]) -> list[tuple[str, str, float, float]]:
    """(run, statistic, log error as run, ln(after / beside)) of every conclusive
    statistic of the CPU-time-share runs quiet on both sides."""
    out = []
    for r in rows:
        other = max(r.get("max_other_cpu") or 0.0, r.get("full_other_cpu") or 0.0)
        moved = r.get("host_after_over_beside")
        if r.get("share_kind") != "cpu_time" or other > NOT_QUIET or not moved:
            continue
        for s in STATS:
            c = r.get(s) or {}
            if c.get("status") == "ok/ok" and c.get("predicted") and c.get("measured"):
                err = math.log(c["predicted"] / c["measured"])
                run = f"{r['config']} {r.get('label') or r.get('dir') or ''}"
                out.append((run, s, err, math.log(moved)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="folders of corpus records")
    args = ap.parse_args(argv)
    rows = [fidelity_corpus.read(p) for p in fidelity_corpus.records(args.dirs)]
    got = pairs(rows)
    for run, s, err, moved in got:
        print(
            f"{run:55s} {s:5s} error {100 * math.expm1(err):+6.1f}%  after/beside "
            f"{math.exp(moved):.2f}  corrected {100 * math.expm1(err + moved):+6.1f}%"
        )
    if len(got) < 3:
        print("fewer than three pairs: no correlation", file=sys.stderr)
        return 1
    errs, moves = [g[2] for g in got], [g[3] for g in got]
    raw = statistics.median(abs(math.expm1(e)) for e in errs)
    fixed = statistics.median(abs(math.expm1(e + m)) for e, m in zip(errs, moves, strict=True))
    print(
        f"{len(got)} pairs: correlation of the log error with ln(after / beside) "
        f"{statistics.correlation(errs, moves):+.2f}; median |error| {100 * raw:.1f}% as "
        f"run, {100 * fixed:.1f}% corrected by the host's move"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
