"""Which content term: candidate forms of the share model's bias, each judged leaving
one configuration out on the kept corpus.

    python bench/fidelity_forms.py                      # bench/corpus, both readings
    python bench/fidelity_forms.py --summarize DIR...   # other records or run dirs

For a CPU-time share, each form gives a run a term x from its dynamic part d and its
alpha; the bias is -slope * x, the slope fitted through the origin on the other
configurations (fidelity_fit), or, for "constant", a mean log error. Printed per
form and per reading of the share's speed (nominal: as predict runs it by default,
the calibrated runs read at alpha; calibrated: the calibrated runs): the median and
largest |error| of the corrected predictions, the pairs the 95% intervals covered and
their median half-width. The shipped form is ``d * ln(1/alpha)``
(shrink.scaling.content_term).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fidelity_fit

FORMS: dict[str, Callable[[float, float], float] | None] = {
    "constant": None,
    "d": lambda d, a: d,
    "ln(1/alpha)": lambda d, a: math.log(1 / a),
    "d * (1 - alpha)": lambda d, a: d * (1 - a),
    "d * (1/alpha - 1)": lambda d, a: d * (1 / a - 1),
    "d * ln(1/alpha)": lambda d, a: d * math.log(1 / a),
}


def judge(rows: list[dict[str, Any]], form: str) -> dict[str, Any]:
    """Leave-one-configuration-out errors and intervals of ``form`` over ``rows``."""
    f = FORMS[form]
    pairs = []
    for name, c in fidelity_fit._pairs(rows, "cpu_time"):
        r = next(r for r in rows if r["dir"] == c["run"])
        d, a = r.get("dynamic_share"), float(r.get("alpha") or 1.0)
        x = 0.0 if f is None or d is None else f(float(d), a)
        pairs.append((name, {**c, "x": x}))
    errors, covered, half = [], 0, []
    for name in sorted({n for n, _ in pairs}):
        others = [p for p in pairs if p[0] != name]
        if f is None:
            b = fidelity_fit.fit_bias(others)
            model = fidelity_fit.Model(bias=b, sigma=fidelity_fit.fit_sigma(others, b))
        else:
            model = fidelity_fit.fit_model(others)
        dof = fidelity_fit.fit_dof(others, fitted=True)
        for n, c in pairs:
            if n != name:
                continue
            bias = model.at(c)
            lo, hi = fidelity_fit.cell_interval(c, bias, model.sigma, dof)
            errors.append(abs(fidelity_fit.corrected(c, bias) / c["measured"] - 1))
            covered += lo <= c["measured"] <= hi
            half.append((hi / lo) ** 0.5 - 1)
    return {"pairs": len(errors), "median": statistics.median(errors), "max": max(errors),
            "covered": covered, "half_width": statistics.median(half)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    root = Path(__file__).resolve().parent
    ap.add_argument("--summarize", type=Path, nargs="*", default=[root / "corpus"])
    args = ap.parse_args(argv)
    import fidelity_corpus
    from bench_fidelity import current, full_side_judged
    from fidelity_nominal import nominal_rows

    from shrink.scaling.transform import NOMINAL

    rows = [fidelity_corpus.read(p) for p in fidelity_corpus.records(args.summarize)]
    # A run whose validation is inconclusive (other work on the full target) has no truth.
    rows = full_side_judged(rows)
    if not rows:
        print(f"no record under {', '.join(map(str, args.summarize))}", file=sys.stderr)
        return 1
    readings = {"nominal": nominal_rows(rows, NOMINAL), "calibrated": current(rows)[0]}
    print("| reading | form | pairs | median abs error | largest | covered | median half-width |")
    print("|---|---|---|---|---|---|---|")
    for reading, rs in readings.items():
        for form in FORMS:
            j = judge(rs, form)
            print(f"| {reading} | {form} | {j['pairs']} | {100 * j['median']:.1f}% | "
                  f"{100 * j['max']:.1f}% | {j['covered']} of {j['pairs']} | "
                  f"{100 * j['half_width']:.0f}% |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
