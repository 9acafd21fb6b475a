"""Stop every long command at a random moment, and count what it left behind.

Run (root, lighttpd, php-cgi, nginx, php-fpm): ``python bench/bench_kill_campaign.py
--minutes 10``. Each run starts one of ``testbed up`` (lighttpd-php-cgi or
nginx-php-fpm, share 1@50%, cfs or corunner), ``sweep`` (with --runlogs and --export),
``replay -o``, ``mat --adaptive``, ``predict`` (one level of 1 s a repetition),
``validate`` and ``python -m shrink.demo --quick`` under a private SHRINK_RUN_DIR, and
at a moment drawn uniformly from its usual length sends one of SIGKILL (the process),
SIGKILL (its process group), SIGTERM, SIGHUP or SIGINT, or gives its outputs a full
disk (a tmpfs of 16-128 KiB, unmounted after). Then it counts the processes the run
started that still run (its session, its descendants, its run folder in a command
line, its cgroups), the cgroups of the run left under ``<mount>/shrink/``, what
``testbed status``/``down --state``/``down --stale`` said and left, the temporary
files (``.*.tmp``, ``*.reserve``, ``*.part``) in its outputs, whether the finished
levels were kept (``*.partial.json``), the exit status against the documented one,
and whether the last line on stderr says what stopped it (no traceback).

The table has one row per command and stop: runs, runs the stop reached before the
command ended ("stopped"), runs that left a process or a cgroup after ``down
--stale``, runs ``down --stale`` had to clean, temporary files, runs with a finished
level and those whose levels were kept, unexpected exit statuses, missing last lines
and tracebacks. The records, one JSON line a run, go to OUT/results.jsonl. Bounded by
--minutes (a run in progress then ends; the demo is drawn only when it fits).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent
TMP_RE = re.compile(r"(^\..*\.tmp$)|(\.part(?!ial))|(\.reserve$)")
KINDS = ["KILL", "KILLPG", "TERM", "HUP", "INT"]
EXPECT = {"TERM": 143, "HUP": 129, "INT": 130, "KILL": -9, "KILLPG": -9, "DISK": 1}
WEIGHTS = {"predict": 0.5, "demo": 0.15, "validate": 0.8}
Plan = tuple[Callable[[str, str, str], list[str]], float, str | None, bool]


def _stat(pid: int) -> dict[str, Any] | None:
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = st[st.rindex(")") + 2 :].split()
    return {"state": rest[0], "ppid": int(rest[1]), "sid": int(rest[3]), "start": rest[19]}


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _family(leader: int, known: dict[int, str]) -> None:
    """Add the leader's session and descendants to ``known`` (PID -> start time)."""
    infos = {p: i for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if (i := _stat(p))}
    kids: dict[int, list[int]] = defaultdict(list)
    for p, i in infos.items():
        kids[i["ppid"]].append(p)
        if i["sid"] == leader:
            known.setdefault(p, i["start"])
    stack = [leader]
    while stack:
        p = stack.pop()
        if p in infos:
            known.setdefault(p, infos[p]["start"])
        stack.extend(kids.get(p, []))


def _groups(leader: int, stem: str) -> list[str]:
    """The run's cgroups: named after its state file, or made by its process."""
    found = glob.glob("/sys/fs/cgroup/*/shrink/*") + glob.glob("/sys/fs/cgroup/shrink/*")
    return sorted(
        d for d in set(found)
        if os.path.isdir(d)
        and (f"-{leader}-" in os.path.basename(d) or os.path.basename(d).startswith(stem + "-"))
    )  # fmt: skip


def _left(known: dict[int, str], mark: str, leader: int, stem: str) -> dict[int, str]:
    alive = {p for p, start in known.items() if (i := _stat(p)) and i["start"] == start}
    for p in map(int, filter(str.isdigit, os.listdir("/proc"))):
        if mark in _cmdline(p):
            alive.add(p)
    for g in _groups(leader, stem):
        with contextlib.suppress(OSError):
            alive.update(int(x) for x in Path(g, "cgroup.procs").read_text().split())
    alive.discard(os.getpid())
    return {p: _cmdline(p)[:80] for p in sorted(alive) if (_stat(p) or {}).get("state", "Z") != "Z"}


def _temps(d: Path) -> list[str]:
    return [str(Path(r, f)) for r, _, fs in os.walk(d) for f in fs if TMP_RE.search(f)]


def _shrink(env: dict[str, str], *args: str) -> tuple[int, str]:
    r = subprocess.run([PY, "-m", "shrink", *args], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)  # fmt: skip
    return r.returncode, (r.stdout + r.stderr).strip()


def _plans(c: Path) -> dict[str, Plan]:
    """command -> (argv from (out, state, enforce), usual seconds, partial file, disk)."""
    t, base, doc = str(c / "t.parquet"), str(c / "base.json"), str(c / "docroot")
    gen = ["--generator-cpus", "0"]

    def up(server: str) -> Callable[[str, str, str], list[str]]:
        return lambda o, s, e: [
            "testbed", "up", "--docroot", doc, "--state", s, "--share", "1@50%",
            "--enforce", e, "--port", "0", "--server", server,
        ]  # fmt: skip

    return {
        "up-lighttpd": (up("lighttpd-php-cgi"), 1.1, None, False),
        "up-nginx": (up("nginx-php-fpm"), 1.3, None, False),
        "sweep": (
            lambda o, s, e: [
                "sweep",
                t,
                "--target",
                base,
                "--levels",
                "0.5,1,1.5",
                "--warmup",
                "0.5s",
                "--duration",
                "1s",
                "--reps",
                "1",
                "-o",
                f"{o}/c.json",
                "--runlogs",
                f"{o}/rl",
                "--export",
                "all",
                *gen,
            ],
            4.5,
            "c.partial.json",
            True,
        ),
        "replay": (
            lambda o, s, e: [
                "replay",
                t,
                "--target",
                base,
                "--duration",
                "4s",
                "-o",
                f"{o}/r.parquet",
                *gen,
            ],
            5.0,
            None,
            True,
        ),
        "mat": (
            lambda o, s, e: [
                "mat",
                str(c / "c2.json"),
                "--threshold",
                "1.2ms",
                "--adaptive",
                "--trace",
                t,
                "--target",
                base,
                "--max-levels",
                "5",
                "-o",
                f"{o}/m.json",
                *gen,
            ],
            6.5,
            "m.partial.json",
            True,
        ),
        "predict": (
            lambda o, s, e: [
                "predict",
                t,
                "--docroot",
                doc,
                "-o",
                f"{o}/p",
                "--alpha",
                "0.5",
                "--server-cpus",
                "1",
                "--share-kind",
                "cpu_time",
                "--reps",
                "1",
                "--warmup",
                "0.5s",
                "--duration",
                "1s",
                "--max-levels",
                "3",
                "--mappings",
                "1-replica",
                "--paired-full-run",
                *gen,
            ],
            24.0,
            "p/measured-curve.partial.json",
            True,
        ),
        "validate": (
            lambda o, s, e: ["validate", str(c / "p0/prediction.json"), "-o", f"{o}/v"],
            8.0,
            "v/full-curve.partial.json",
            True,
        ),
        "demo": (lambda o, s, e: ["DEMO", "--quick", "--out", f"{o}/demo"], 90.0, None, False),
    }


def _default_signals() -> None:
    # a background job (nohup, a CI step) ignores SIGINT and SIGHUP, and a child keeps that
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(s, signal.SIG_DFL)


def _drive(cmd: list[str], env: dict[str, str], kind: str, at: float, cap: float):
    """Run ``cmd``, stop it ``at`` seconds in; (process, its family, sent at, stdout, stderr)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=ROOT,
                            preexec_fn=_default_signals)  # fmt: skip
    known: dict[int, str] = {}
    sent = None
    while proc.poll() is None and time.monotonic() - t0 < cap:
        _family(proc.pid, known)
        if kind != "DISK" and sent is None and time.monotonic() - t0 >= at:
            sent = round(time.monotonic() - t0, 2)
            if kind == "KILLPG":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                os.kill(proc.pid, getattr(signal, "SIG" + kind))
        time.sleep(0.05)
    try:
        so, se = proc.communicate(timeout=30)
        hang = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        so, se = proc.communicate()
        hang = True
    return proc, known, sent, so, se, hang


def _run(c: Path, env: dict[str, str], name: str, kind: str, idx: int, rng: random.Random):
    build, usual, partial, _ = _plans(c)[name]
    out = c / "runs" / f"{idx:03d}-{name}-{kind}"
    out.mkdir(parents=True)
    stem = f"kc_{idx:03d}"
    state = str(out / f"{stem}.json")
    argv = build(str(out), state, rng.choice(["cfs", "corunner"]))
    if kind == "DISK":
        size = rng.choice([16, 48, 128])
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}k", "tmpfs", str(out)], check=True
        )
        out.chmod(0o755)
    cmd = [PY, "-m", "shrink.demo", *argv[1:]] if argv[0] == "DEMO" else [PY, "-m", "shrink", *argv]
    at = rng.uniform(0.0, usual)
    proc, known, sent, so, se, hang = _drive(cmd, env, kind, at, usual * 3 + 40)
    time.sleep(1.5)  # a killed server's orphans are reaped by init, a while later
    res: dict[str, Any] = {"idx": idx, "cmd": name, "kind": kind, "at": round(at, 2), "sent": sent,
                           "rc": proc.returncode, "hang": hang,
                           "left_after_stop": _left(known, str(out), proc.pid, stem)}  # fmt: skip
    if name.startswith("up-"):
        res["status"] = _shrink(env, "testbed", "status", "--state", state)
        res["down"] = _shrink(env, "testbed", "down", "--state", state)
        res["left_after_down"] = _left(known, str(out), proc.pid, stem)
    if _left(known, str(out), proc.pid, stem) or _groups(proc.pid, stem):
        res["stale_needed"] = True
        res["stale"] = _shrink(env, "testbed", "down", "--stale")
    time.sleep(0.5)
    res["left"] = _left(known, str(out), proc.pid, stem)
    res["cgroups"] = _groups(proc.pid, stem)
    res["temps"] = _temps(out)
    lines = [ln for ln in se.splitlines() if ln.strip()]
    res["traceback"] = "Traceback" in se + so
    res["last"] = lines[-1][:200] if lines else ""
    # with one repetition a level, a second level's run log means the first finished
    res["level_done"] = len(glob.glob(f"{out}/rl/*.parquet")) >= 2
    res["partial"] = bool(partial and (out / partial).exists())
    res["whole"] = any(Path(out, f).exists() for f in ("c.json", "m.json", "p/prediction.json"))
    if kind == "DISK":
        subprocess.run(["umount", str(out)], check=False)
    return res


def _set_up(c: Path, env: dict[str, str]) -> None:
    """The trace, the base testbed the sweeps replay against, a curve of two repetitions
    for mat --adaptive and a prediction for validate."""
    t, doc, base = str(c / "t.parquet"), str(c / "docroot"), str(c / "base.json")
    gen = ["--generator-cpus", "0"]
    for args in (
        ["synth", "support", "--users", "40", "--duration", "30s", "--seed", "1", "-o", t,
         "--docroot", doc],
        ["testbed", "up", "--docroot", doc, "--state", base, "--share", "1@50%", "--port", "0"],
        ["sweep", t, "--target", base, "--levels", "0.5,1,2", "--warmup", "0.5s", "--duration",
         "1s", "--reps", "2", "-o", str(c / "c2.json"), *gen],
        ["predict", t, "--docroot", doc, "-o", str(c / "p0"), "--alpha", "0.5", "--server-cpus",
         "1", "--share-kind", "cpu_time", "--reps", "1", "--warmup", "0.5s", "--duration", "1s",
         "--max-levels", "3", "--mappings", "1-replica", "--paired-full-run", *gen],
    ):  # fmt: skip
        rc, said = _shrink(env, *args)
        if rc not in (0, 99):
            sys.exit(f"set-up failed: shrink {args[0]}: {said[-300:]}")


def _table(rows: list[dict[str, Any]]) -> list[str]:
    cols = ["runs", "stopped", "left", "stale needed", "temporaries", "level done",
            "levels kept", "bad status", "no last line", "traceback"]  # fmt: skip
    t: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        c = t[(r["cmd"], r["kind"])]
        stopped = r["rc"] not in (0, 99)
        c["runs"] += 1
        c["stopped"] += stopped
        c["left"] += bool(r["left"] or r["cgroups"])
        c["stale needed"] += bool(r.get("stale_needed"))
        c["temporaries"] += bool(r["temps"])
        if r["level_done"] and stopped and not r["whole"]:
            c["level done"] += 1
            c["levels kept"] += r["partial"]
        c["bad status"] += r["rc"] not in (EXPECT[r["kind"]], 0, 99)
        said = r["last"].startswith(("stopped by", "interrupted", "error:"))
        c["no last line"] += stopped and r["kind"] not in ("KILL", "KILLPG") and not said
        c["traceback"] += r["traceback"]
    out = ["| command | stop | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    total: dict[str, int] = defaultdict(int)
    for k in sorted(t):
        out.append(f"| {k[0]} | {k[1]} | " + " | ".join(str(t[k][c]) for c in cols) + " |")
        for col in cols:
            total[col] += t[k][col]
    out.append("| all | all | " + " | ".join(str(total[c]) for c in cols) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--minutes", type=float, default=10.0, help="campaign length (runs start until then)"
    )
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--only", default="", help="comma list of commands (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="work folder (default: a new one)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (testbeds with a CPU-time share, tmpfs mounts)")
    c = a.out or Path(tempfile.mkdtemp(prefix="shrink-kill-"))
    c.mkdir(parents=True, exist_ok=True)
    c.chmod(0o755)  # the servers' user enters the document root under it
    run_dir = c / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "SHRINK_RUN_DIR": str(run_dir), "PYTHONPATH": str(ROOT)}
    _set_up(c, env)
    rng = random.Random(a.seed)
    plans = _plans(c)
    names = [n for n in plans if not a.only or n in a.only.split(",")]
    end = time.monotonic() + a.minutes * 60
    rows: list[dict[str, Any]] = []
    try:
        with open(c / "results.jsonl", "a") as log:
            while time.monotonic() < end:
                name = rng.choices(names, [WEIGHTS.get(n, 1.0) for n in names])[0]
                if time.monotonic() + plans[name][1] * 2 + 20 > end:
                    if all(time.monotonic() + plans[n][1] * 2 + 20 > end for n in names):
                        break
                    continue
                kind = rng.choice(KINDS + (["DISK"] if plans[name][3] else []))
                rows.append(_run(c, env, name, kind, len(rows), rng))
                log.write(json.dumps(rows[-1]) + "\n")
                log.flush()
    finally:
        _shrink(env, "testbed", "down", "--state", str(c / "base.json"))
        _shrink(env, "testbed", "down", "--stale")
    print("\n".join(_table(rows)))
    print(f"records: {c / 'results.jsonl'}")


if __name__ == "__main__":
    main()
