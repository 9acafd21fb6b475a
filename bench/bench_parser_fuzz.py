"""Benchmark: a differential fuzz of the two replay engines' response parsers.

Run as ``python bench/bench_parser_fuzz.py [--cases N] [--seed S] [--limit S] [--live K]``
with the native core built with its test hook (``shrink_core.parse_stream``, see
native/src/lib.rs) and RFC 9112 framing first on the path.

N cases (default 100,000) from tests/helpers/http_fuzz.py: server answers of lighttpd,
PHP through nginx (chunked, trailers), 304, 204, HEAD, 100-continue, bodies up to
the close and second answers on the same connection, mutated (byte flips, insertions,
deletions, splices, CRLF and digit games, repeats past the 64 KiB bounds) and cut into
reads of random sizes. Each goes to the Python engine's connection and to the native
core's parser; they must record the same (outcome, status, body bytes) for each
request and leave the connection open or closed alike. It prints the agreements, the
disagreements by kind (with the first case of each), crashes (an exception or a Rust
panic), hangs (a case past ``--limit`` seconds, default 1) and the cases whose first
answer each engine reads differently when the same bytes come in one read (an outcome
must not hang on how TCP cuts the stream). Where a case's first answer has a clean head
framed by one of the RFC rules this fuzz judges (RFC 9112 section 6.3: differing or
invalid Content-Length values, Transfer-Encoding with Content-Length, chunked not the
final coding; 6.1: chunked more than once; 5.1: whitespace between a field name and its
colon; RFC 9110 7.6.1: Connection as a list of tokens), what each engine recorded is
checked against the rule (helpers.http_fuzz.rfc_expect).

``--live K`` then sends K of the cases, one by one, from a scripted loopback server
to both real engines (a one-session trace; the native engine's epoll loop and the
Python engine's asyncio loop), and compares their RunLog rows with each other and
with what the hook predicted.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.http_fuzz import (  # noqa: E402
    Case,
    kind,
    make_case,
    native_core,
    native_stream,
    python_stream,
    rfc_expect,
)


def _run(fn: Any, *args: Any) -> tuple[Any, str]:
    try:
        return fn(*args), ""
    except BaseException as exc:  # a Rust panic is a BaseException (PanicException)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, f"{type(exc).__name__}: {exc}"[:200]


def fuzz(core: Any, cases: int, seed: int, limit: float) -> dict[str, Any]:
    rnd = random.Random(seed)
    kinds: collections.Counter[str] = collections.Counter()
    first: dict[str, tuple[int, Case, Any, Any]] = {}
    frag: collections.Counter[str] = collections.Counter()
    crashes: list[tuple[int, str]] = []
    hangs: list[tuple[int, float]] = []
    slowest = (0.0, -1)
    rules: collections.Counter[str] = collections.Counter()
    unlike_rfc: collections.Counter[tuple[str, str]] = collections.Counter()
    first_unlike: dict[tuple[str, str], tuple[int, Case, Any]] = {}
    for i in range(cases):
        case = make_case(rnd)
        t0 = time.perf_counter()
        py, perr = _run(python_stream, case)
        nat, nerr = _run(native_stream, core, case)
        dt = time.perf_counter() - t0
        slowest = max(slowest, (dt, i))
        if dt > limit:
            hangs.append((i, dt))
        if perr or nerr:
            crashes.append((i, f"python {perr or '-'} / native {nerr or '-'}"))
            continue
        rule = rfc_expect(case)
        if rule is not None:
            rules[rule[0]] += 1
            for name, got in (("python", py), ("native", nat)):
                if not rule[1](got):
                    unlike_rfc[(name, rule[0])] += 1
                    first_unlike.setdefault((name, rule[0]), (i, case, got))
        k = kind(py, nat)
        kinds[k or "agree"] += 1
        if k and k not in first:
            first[k] = (i, case, py, nat)
        whole = case.whole()
        if python_stream(whole)[0][:1] != py[0][:1]:
            frag["python"] += 1
        if native_stream(core, whole)[0][:1] != nat[0][:1]:
            frag["native"] += 1
    return {"kinds": kinds, "first": first, "frag": frag, "crashes": crashes,
            "hangs": hangs, "slowest": slowest, "rules": rules, "unlike_rfc": unlike_rfc,
            "first_unlike": first_unlike}  # fmt: skip


def _show(case: Case) -> str:
    reads = case.reads
    text = repr(b"".join(reads))
    return f"{len(reads)} reads, end={case.end}, head_only={case.head_only}: {text[:300]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=1.0, help="seconds a case may take")
    ap.add_argument("--live", type=int, default=0, help="cases sent to both real engines")
    args = ap.parse_args(argv)
    core = native_core()
    if core is None:
        print(
            "the native core with its test hook (shrink_core.parse_stream) and RFC 9112"
            " framing (shrink_core.FRAMING) is not built"
        )
        return 2
    t0 = time.perf_counter()
    out = fuzz(core, args.cases, args.seed, args.limit)
    wall = time.perf_counter() - t0
    agree = out["kinds"].pop("agree", 0)
    print(f"cases {args.cases} (seed {args.seed}) in {wall:.1f} s: agree {agree}, "
          f"disagree {sum(out['kinds'].values())}, crashes {len(out['crashes'])}, "
          f"hangs (> {args.limit} s) {len(out['hangs'])}")  # fmt: skip
    print(f"slowest case: #{out['slowest'][1]} {out['slowest'][0] * 1000:.1f} ms")
    print(f"first answer read differently whole and in reads: python {out['frag']['python']}, "
          f"native {out['frag']['native']}")  # fmt: skip
    for k, n in out["kinds"].most_common():
        i, case, py, nat = out["first"][k]
        print(f"  {n:6d}  {k}\n          #{i} {_show(case)}\n          python {py}  native {nat}")
    for rule, n in out["rules"].most_common():
        bad = {e: out["unlike_rfc"][(e, rule)] for e in ("python", "native")}
        print(f"RFC, {rule}: {n} cases; unlike the RFC: python {bad['python']}, "
              f"native {bad['native']}")  # fmt: skip
    for key, (i, case, got) in out["first_unlike"].items():
        print(f"          {key[0]} #{i} {_show(case)}\n          recorded {got}")
    for i, what in out["crashes"][:10]:
        print(f"  crash #{i}: {what}")
    for i, dt in out["hangs"][:10]:
        print(f"  hang #{i}: {dt:.2f} s")
    if args.live:
        from helpers.http_live import confirm

        confirm(args.live, args.seed, core)
    bad = out["kinds"] or out["crashes"] or out["hangs"] or out["unlike_rfc"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
