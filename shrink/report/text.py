"""How the report writes a latency, a rate and a bound."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path

from shrink.mat import bound_of, mat_text

__all__ = [
    "STAT_NAME",
    "bound_prefix",
    "level_text",
    "out_of_time_text",
    "parts_kept_text",
    "rate_text",
    "recompute_text",
    "seconds_text",
    "thin_tail_text",
    "unwatched_text",
]

STAT_NAME = {"mean": "mean", "p999": "p99.9"}


def seconds_text(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    # Seconds from 1 s up: "1.36 s" reads better than "1.36e+03 ms".
    return f"{x:.3g} s" if x >= 1.0 else f"{x * 1e3:.3g} ms"


def level_text(x: float) -> str:
    """A load level as the report writes it everywhere (the levels table, the checks,
    the figures' captions): four significant digits."""
    return f"{x:.4g}"


def rate_text(x: float | None) -> str:
    """A throughput as a MAT is written (:func:`shrink.mat.mat_text`)."""
    return mat_text(x)


def bound_prefix(status: str | None) -> str:
    """The prefix of a MAT that is only a bound: not reached (>=), below range (<), as
    :func:`shrink.mat.mat_text` writes it."""
    return {"lower": ">= ", "upper": "< "}.get(bound_of(status) or "", "")


def thin_tail_text(need: int, thin: dict[float, int]) -> str:
    """Why a percentile from fewer than ``need`` requests a repetition at the levels
    ``thin`` (level -> the fewest, :func:`shrink.selfchecks.thin_tails`) is no tail."""
    return (
        f"rests on fewer than {need:,} requests a repetition (fewest "
        f"{min(thin.values()):,}): there it is the slowest request or two, not a tail; "
        "measure longer (--duration) or at higher rates for it"
    )


def out_of_time_text(out_of_time: tuple[int, list[float]] | None, budget: str) -> str:
    """A note when a time budget left levels of an automatic sweep unmeasured
    (``out_of_time``: the levels measured, those left out); "" when it left none."""
    measured, left = out_of_time or (0, [])
    if not left:
        return ""
    levels = ", ".join(f"{float(x):g}" for x in left)
    return (
        f"note: the time budget (--budget {budget}) left {len(left)} level(s) of the sweep "
        f"unmeasured ({levels}); it measured {measured}: allow more time for them"
    )


def recompute_text(
    failed: str | Path,
    target: str,
    machine: str,
    mappings: Sequence[str],
    thresholds: str,
    calibration: str,
    server_cpus: str | None = None,
) -> str:
    """The end of predict's error when the file it ``failed`` to write is its
    ``prediction.json``: the command that recomputes its MATs from the measured curve
    kept beside it, with the run's machine, mappings, thresholds and calibration, and
    what that command does not carry: predict's error budgets (which widen its
    intervals) and, for a run on ``server_cpus`` (``--server-cpus``), those CPUs
    (``extrapolate`` predicts the whole machine); "" for another file, or without
    that curve."""
    curve = Path(failed).parent / "measured-curve.json"
    if Path(failed).name != "prediction.json" or not curve.is_file():
        return ""
    spec = target[4:] if target.startswith("sim:") else None if machine == "this" else machine
    args = [curve, "--machine", spec or "MACHINE.toml"]
    for m in mappings:
        args += ["--mapping", m]
    args += ["--thresholds", thresholds]
    if calibration != "published":
        args += ["--calibration", calibration]
    command = " ".join(["shrink", "extrapolate", *(shlex.quote(str(a)) for a in args)])
    how = "" if spec else " (shrink machine write MACHINE.toml writes this machine's spec)"
    kept = "; -o FILE, on a disk with room, keeps them"
    if server_cpus:
        return (
            f"; no MAT table was printed: `{command}` predicts from that kept measured "
            f"curve{how}, but for the whole machine, not for this run's --server-cpus "
            f"{server_cpus} (extrapolate has no such option), and with intervals not "
            f"widened by predict's error budgets: its MATs are not this run's{kept}"
        )
    return (
        f"; no MAT table was printed: `{command}` recomputes the MATs from that kept "
        f"measured curve{how} (its intervals are not widened by predict's error "
        f"budgets, as predict's are{kept})"
    )


def parts_kept_text(written: int, parts: int, folder: str) -> str:
    """What a stopped ``split`` kept: ``written`` of its ``parts`` parts in ``folder``.
    Fewer than all is an incomplete partition: the sessions of the parts not written
    are in none of them, and replaying those as the whole trace is short of load."""
    if written >= parts:
        return f"all {parts:,} parts in {folder}"
    return (
        f"{written:,} of {parts:,} parts in {folder} (incomplete: the sessions of the other "
        f"{parts - written:,} are in none of them; run split again)"
    )


def unwatched_text(looks: int, why: OSError) -> str:
    """The line said once when none of a run's ``looks`` at its testbed could be made."""
    import errno
    import resource

    reason = why.strerror or str(why)
    if why.errno == errno.EMFILE:
        reason += f" (ulimit -n {resource.getrlimit(resource.RLIMIT_NOFILE)[0]})"
    elif why.errno == errno.ENFILE:  # (the system's table, not this process's limit)
        reason += " (the system's open files, sysctl fs.file-max)"
    # (one stopped for good is seen all the same: the servers are looked at after the run)
    none = "its one look" if looks == 1 else f"none of its {looks:,} looks"
    return (
        f"warning: the testbed was not watched during a run: {none} at the servers could "
        f"{'not ' if looks == 1 else ''}be made ({reason}); a server stopped, frozen or "
        "re-shared meanwhile and put back before the run's end would not have been seen "
        "(said once)"
    )
