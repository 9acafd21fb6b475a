"""How well does the full target predict itself? The floor a scaled-down prediction is
judged against.

A prediction is checked against one full-scale run. If the full target's own MAT
moves from one run to the next (the same code, trace and configuration, another
time), no prediction can come closer to a single run than that run's distance from
the others. For each configuration and statistic with three conclusive runs or more,
this predicts each run's measured MAT by the geometric mean of the *other* runs'
measured MATs (an oracle that drove the full target every other time: exactly what
SHRiNK exists to avoid) and prints its errors beside the prediction's own over the
same (statistic, run) pairs: as run (the model each prediction ran with), and
corrected by the model fitted on the other configurations (``fidelity_fit``).

The runs are those made as ``predict`` now runs them (``--fresh-only``: a CPU-time
share at its nominal fraction, a core subset), quiet on both sides, with MATs read
on both sides (no bound).

    python bench/fidelity_floor.py bench/corpus
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fidelity_corpus
from bench_fidelity import NOT_QUIET
from fidelity_fit import _pairs, fit_model

from shrink.scaling.transform import NOMINAL

STATS = ("mean", "p999")
MIN_RUNS = 3  # two runs leave the oracle one other run: no spread to speak of


class Pair(NamedTuple):
    """One (statistic, run): the prediction's error as run, corrected leaving its
    configuration out, and the oracle's, as fractions."""

    config: str
    stat: str
    ours: float
    loo: float
    oracle: float
    measured: float


def _fresh_and_quiet(r: dict[str, Any]) -> bool:
    if "error" in r:
        return False
    if r.get("share_kind") == "cpu_time" and r.get("calibration") != NOMINAL:
        return False
    return max(r.get("max_other_cpu") or 0.0, r.get("full_other_cpu") or 0.0) <= NOT_QUIET


def loo_errors(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(run, statistic) -> its error corrected by the model fitted on the other
    configurations of its share kind (as bench_fidelity's table brackets it)."""
    out = {}
    for kind in {r.get("share_kind") for r in rows} - {None}:
        got = _pairs(rows, kind)
        for name in {n for n, _ in got}:
            model = fit_model([p for p in got if p[0] != name])
            for n, c in got:
                if n == name:
                    out[(c["run"], c["stat"])] = math.expm1(c["log_error"] - model.at(c))
    return out


def pairs(rows: list[dict[str, Any]]) -> list[Pair]:
    """Every (statistic, run) of a configuration with MIN_RUNS conclusive runs or more,
    with the prediction's errors and the leave-one-run-out oracle's."""
    rows = [r for r in rows if _fresh_and_quiet(r)]
    loo = loo_errors(rows)
    cells: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for r in rows:
        for s in STATS:
            c = r.get(s) or {}
            if c.get("status") == "ok/ok" and c.get("predicted") and c.get("measured"):
                p, m = float(c["predicted"]), float(c["measured"])
                cells[(r["config"], s)].append((p / m - 1, loo.get((r["dir"], s), p / m - 1), m))
    out = []
    for (config, s), got in sorted(cells.items()):
        if len(got) < MIN_RUNS:
            continue
        logs = [math.log(m) for *_, m in got]
        for i, (ours, corrected, measured) in enumerate(got):
            others = statistics.fmean(logs[:i] + logs[i + 1 :])
            oracle = math.exp(others) / measured - 1
            out.append(Pair(config, s, ours, corrected, oracle, measured))
    return out


def spread(got: list[Pair], stat: str) -> tuple[float, float, float]:
    """(sd of the log measured MAT, sd of the log predicted MAT, their correlation),
    each about its configuration's mean, pooled over the configurations."""
    dm: list[float] = []
    dp: list[float] = []
    for config in {p.config for p in got}:
        cells = [p for p in got if p.config == config and p.stat == stat]
        if not cells:
            continue
        m = [math.log(p.measured) for p in cells]
        q = [math.log(p.measured * (1 + p.ours)) for p in cells]
        dm += [x - statistics.fmean(m) for x in m]
        dp += [x - statistics.fmean(q) for x in q]
    sd = [math.sqrt(sum(x * x for x in d) / len(d)) for d in (dm, dp)]
    if not sd[0] or not sd[1]:
        return sd[0], sd[1], math.nan  # one side did not move: no correlation
    corr = sum(a * b for a, b in zip(dm, dp, strict=True)) / (len(dm) * sd[0] * sd[1])
    return sd[0], sd[1], corr


def _line(name: str, got: list[Pair]) -> str:
    cols = [[abs(getattr(p, f)) for p in got] for f in ("ours", "loo", "oracle")]
    med = " / ".join(f"{100 * statistics.median(c):4.1f}%" for c in cols)
    top = " / ".join(f"{100 * max(c):4.1f}%" for c in cols)
    within = " / ".join(f"{sum(e <= 0.15 for e in c)}" for c in cols)
    return f"{name:18s} {len(got):3d}  {med}  {top}  {within}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="folders of corpus records")
    args = ap.parse_args(argv)
    try:
        rows = [fidelity_corpus.read(p) for p in fidelity_corpus.records(args.dirs)]
    except fidelity_corpus.RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    got = pairs(rows)
    if not got:
        print(f"no configuration with {MIN_RUNS} conclusive runs", file=sys.stderr)
        return 1
    print(
        "(statistic, run) pairs; each column: as run / corrected leaving the "
        "configuration out / the oracle"
    )
    print(f"{'configuration':18s} {'n':>3s}  {'median |error|':22s}  {'largest':22s}  within 15%")
    for config in sorted({p.config for p in got}):
        print(_line(config, [p for p in got if p.config == config]))
    print(_line("all", got))
    for stat in STATS:
        if any(p.stat == stat for p in got):
            m, q, r = spread(got, stat)
            print(
                f"{stat}: about each configuration's mean, the measured MAT moved by "
                f"{m:.3f} (sd, log), the predicted by {q:.3f}, correlation {r:+.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
