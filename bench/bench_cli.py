"""How fast the ``shrink`` command starts, against importing what every typer CLI imports.

Times, as new processes (median of N runs, the commands taking turns so that a
busy machine slows them alike):

- the reference: ``python -c "import typer, rich"``, the floor of any CLI built on typer;
- ``shrink --help``, ``shrink --version``, a usage error at the top
  (``shrink --no-such-option``) and one in a command (``shrink replay --no-such-option``).

and prints each one's median and its ratio to the reference. ``shrink`` is the
console script beside this Python (``.venv/bin/shrink``), else ``python -m shrink``.
They run as in a user's shell, with Python's bytecode cache: ``PYTHONDONTWRITEBYTECODE``
is dropped from their environment and a first run of each writes the cache (without
it, compiling shrink's CLI modules at every start cost more than importing typer).

    python bench/bench_cli.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("shrink")
SHRINK = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "shrink"]

CASES = {
    'python -c "import typer, rich"': [sys.executable, "-c", "import typer, rich"],
    "shrink --help": [*SHRINK, "--help"],
    "shrink --version": [*SHRINK, "--version"],
    "shrink --no-such-option (exit 2)": [*SHRINK, "--no-such-option"],
    "shrink replay --no-such-option (exit 2)": [*SHRINK, "replay", "--no-such-option"],
}


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs of each command (default 15)")
    args = ap.parse_args()
    for argv in CASES.values():  # warm the file cache and write the .pyc files
        once(argv)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, argv in CASES.items():
            times[name].append(once(argv))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    ref = medians[next(iter(CASES))]
    print(f"{sys.executable}, {args.runs} runs each, median wall time")
    print("| command | median | ratio to the reference |")
    print("|---|---|---|")
    for name, m in medians.items():
        print(f"| `{name}` | {m * 1e3:,.0f} ms | {m / ref:.2f} |")


if __name__ == "__main__":
    main()
