"""Benchmark: hostile values for every option of the offline commands.

Run as ``python bench/bench_cli_options.py [--workers 2] [--limit 60] [--only "sim sweep"]``.

Each offline command (sample, split, export, trace info, synth, sim, mat,
extrapolate, whatif, machine show) first runs once as given below, on a
small synthetic trace and a simulated curve made here; then each of its options
(read from the command itself, so a new option is probed too) and each positional
argument is given, one at a time, values a field does not hold: nan, inf, 1e308,
1e-320, twenty digits, 3,000 characters, an ANSI escape, a directory, a device.

A finding is an exit status other than 0, 1, 2 (or 99: a MAT that stayed a
bound), a traceback, shrink's "internal error" line, or a run past ``--limit``
seconds. Every command runs in a fresh process in a directory of its own; nothing
is sent over the network (``replay``, ``sweep``, ``predict``, ``validate`` and
``testbed`` are left out: they drive servers; ``calibrate`` too, for want of a small
curve that crosses its thresholds). It prints each finding and, at the
end, the number of invocations and findings, and the wall time; the reference is
the count of invocations that ran clean.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import typer.main  # noqa: E402

from shrink.cli import app_for  # noqa: E402

MACHINE = str(ROOT / "examples/machines/nehalem-2s.toml")
BASES: dict[tuple[str, ...], list[str]] = {
    ("sample",): ["T.parquet", "--alpha", "0.5", "-o", "OUT.parquet"],
    ("split",): ["T.parquet", "--parts", "2", "-o", "OUTDIR"],
    ("export",): ["T.parquet", "-o", "OUT.log"],
    ("trace", "info"): ["T.parquet"],
    ("synth", "support"): ["--users", "5", "--duration", "10s", "-o", "OUT.parquet"],
    ("synth", "tcp"): ["--rate", "100", "--duration", "2s", "-o", "OUT.parquet"],
    ("sim", "run"): ["T.parquet", "--machine", MACHINE, "--duration", "1s", "-o", "OUT.parquet"],
    ("sim", "sweep"): [
        *("T.parquet", "--machine", MACHINE, "--levels", "1,2", "--reps", "1"),
        *("--duration", "1s", "--warmup", "0s", "-o", "OUT.json"),
    ],
    ("sim", "scaling"): ["--machine", MACHINE],
    ("sim", "mappings"): ["--machine", MACHINE],
    ("mat",): ["C.json", "--threshold", "5ms"],
    ("extrapolate",): ["C.json", "--machine", MACHINE],
    ("whatif",): ["--machine", MACHINE, "--workload", "tcp", "--no-sweep"],
    ("machine", "show"): ["--machine", MACHINE],
}
VALUES = (
    *("nan", "inf", "-inf", "-1", "0", "1e308", "1e-320", "99999999999999999999"),
    *("x" * 3000, "\x1b[31mred", "0x10", "1,,2", " ", "-", "/dev/null", "/"),
)
POSITIONAL = ("/dev/null", "/", "missing.parquet", "/proc/self/status", "machine.toml")
# Options whose value is an output path or a live target: probed by the tests.
SKIP_OPTIONS = {"-o", "--out", "--output", "--target", "--trace", "--docroot", "--export"}


def _command(path: tuple[str, ...]) -> object:
    cmd = typer.main.get_command(app_for(list(path)))
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return cmd


def invocations() -> list[tuple[str, list[str]]]:
    """(what, argv) for every hostile value of every option and positional argument."""
    out = []
    for path, base in BASES.items():
        out.append((f"{' '.join(path)} (as given)", [*path, *base]))
        for prm in _command(path).params:  # type: ignore[attr-defined]
            kind = type(prm).__name__
            if kind == "TyperArgument":
                first = next(a for a in base if a.endswith((".parquet", ".json", ".toml")))
                for v in POSITIONAL:
                    argv = [v if a == first else a for a in base]
                    out.append((f"{' '.join(path)} {prm.name}={v}", [*path, *argv]))
                continue
            if kind != "TyperOption" or prm.is_flag or prm.name == "help":
                continue
            opt = max(prm.opts, key=len)
            if opt in SKIP_OPTIONS or set(prm.opts) & SKIP_OPTIONS:
                continue
            for v in VALUES:
                argv = list(base)
                if opt in argv:
                    argv[argv.index(opt) + 1] = v
                else:
                    argv += [opt, v]
                out.append((f"{' '.join(path)} {opt}={v[:24]!r}", [*path, *argv]))
    return out


def run_one(work: Path, what: str, argv: list[str], limit: float) -> str | None:
    d = Path(tempfile.mkdtemp(dir=work))
    for name in ("T.parquet", "C.json"):
        (d / name).symlink_to(work / name)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "shrink", *argv],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        return f"HANG (> {limit:g} s): {what}"
    text = r.stdout + r.stderr
    last = text.strip().splitlines()[-1][:200] if text.strip() else ""
    if r.returncode not in (0, 1, 2, 99) or "Traceback" in text or "internal error" in text:
        return f"FINDING exit {r.returncode}: {what}: {last}"
    if what.endswith("(as given)") and r.returncode not in (0, 99):
        return f"BASE FAILED exit {r.returncode}: {what}: {last}"
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--limit", type=float, default=60.0, help="seconds before a run is a hang")
    p.add_argument("--only", default=None, help="one command, e.g. 'sim sweep'")
    a = p.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shrink = [sys.executable, "-m", "shrink"]
        subprocess.run(
            [*shrink, "synth", "support", "--users", "5", "--duration", "10s", "-o", "T.parquet"],
            cwd=work,
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *(*shrink, "sim", "sweep", "T.parquet", "--machine", MACHINE, "--levels", "1,2,4"),
                *("--reps", "1", "--duration", "2s", "--warmup", "0s", "-o", "C.json"),
            ],
            cwd=work,
            check=True,
            capture_output=True,
        )
        jobs = invocations()
        if a.only:
            jobs = [j for j in jobs if j[0].startswith(a.only + " ")]
        print(f"{len(jobs)} invocations, {a.workers} at a time", flush=True)
        with ThreadPoolExecutor(a.workers) as ex:
            found = [
                f
                for f in ex.map(lambda j: run_one(work, j[0], j[1], a.limit), jobs)
                if f is not None
            ]
    for f in found:
        print(f)
    clean = len(jobs) - len(found)
    print(
        f"{len(jobs)} invocations, {len(found)} findings, {clean} clean; "
        f"{time.monotonic() - t0:.0f} s"
    )
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
