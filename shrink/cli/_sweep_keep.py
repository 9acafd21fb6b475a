"""What a sweep keeps of its curve: the finished levels as they end, a stopped or
failed sweep's levels and exports, and a smaller summary when the curve cannot be
written (a full disk). Used by ``shrink sweep``, ``shrink sim sweep``, ``mat``,
``predict`` and ``validate``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from shrink.cli._common import plural
from shrink.errors import ShrinkError, WriteError, printable
from shrink.jsonout import dumps

if TYPE_CHECKING:  # pydantic is heavy: the CLI's start-up must not load it
    from shrink.measure.keep import FolderGuard, KeepLevels

OUTPUT_FOLDER, RUNLOGS_FOLDER = "output folder", "--runlogs folder"


def _curve_summary(curve: Any) -> list[dict[str, Any]]:
    """Per level: each statistic as [mean over repetitions, 95% CI low, high] (NaN: null)."""

    def triple(lv: Any, stat: str) -> list[float | None]:
        return [None if not math.isfinite(v) else float(v) for v in lv.stat(stat)]

    return [
        {
            "level": lv.level,
            "reps": len(lv.reps),
            **{st: triple(lv, st) for st in ("throughput", "mean", "p50", "p90", "p99", "p999")},
            "utilization": lv.utilization,
            "errors": sum(r.errors for r in lv.reps),
            "failures": lv.failure_counts(),
            "failed": lv.failed,
            "generator_behind": lv.generator_behind,
        }
        for lv in curve.levels
    ]


def _write_curve(curve: Any, output: Path, keeper: KeepLevels | None = None) -> None:
    """Write a finished sweep's ``curve`` to ``output``; on a full disk its per-level
    summary is kept instead, and the error names it (and what ``keeper`` kept)."""
    try:
        curve.write_json(output)
    except WriteError as exc:
        exc.kept = _keep_smaller(curve, output, exc)
        _say_earlier(exc, keeper)
        raise
    if keeper is not None:
        keeper.drop_aside()  # its levels beside another run's: all in OUTPUT now


def _say_earlier(stop: Any, keeper: KeepLevels | None) -> None:
    """Name the ``.partial.json`` that ``keeper`` wrote as levels ended, with how many
    it holds, when it could not be rewritten after later ones: it was listed as kept
    beside a summary of more levels, as if it held them all."""
    if keeper is None or keeper.failed is None or not keeper.levels_written:
        return
    if not keeper.path.exists() or any(str(k).startswith(f"{keeper.path} ") for k in stop.kept):
        return  # gone, or rewritten whole (and named so) as the sweep stopped
    held = plural(keeper.levels_written, "finished level")
    stop.kept = [
        *stop.kept,
        f"{keeper.path} (only the first {held}: it could not be rewritten after later ones)",
    ]


def keep_levels(output: Path, guard: FolderGuard | None = None) -> KeepLevels:
    """What writes a sweep's finished levels to OUTPUT's ``.partial.json`` twin as each
    ends, and says once, on stderr, if it cannot; ``guard`` is checked before each."""
    from shrink.atomic import expect_unchanged
    from shrink.measure.keep import KeepLevels, partial_twin

    # Noted as they are now: another run's (a second sweep -o of the same file, stopped,
    # keeps its levels there) is then neither replaced level by level nor removed at
    # the end as stale; it was, and that run's kept levels were lost.
    for twin in (partial_twin(output), *_summary_twins(output)):
        expect_unchanged(twin)

    def cannot(exc: Exception) -> None:
        typer.echo(
            f"warning: the finished levels cannot be kept as they end ({printable(exc)}); "
            "they are written when the sweep ends or stops",
            err=True,
        )

    def aside(theirs: Path, ours: Path) -> None:
        typer.echo(
            f"note: another run wrote {printable(theirs)} while this one ran: left as it "
            f"is; this run's finished levels are kept in {printable(ours)} as they end "
            "(removed once the whole curve is written)",
            err=True,
        )

    return KeepLevels(partial_twin(output), cannot, guard, aside)


def _summary_twins(output: Path) -> tuple[Path, Path]:
    """``X.summary.json`` and ``X.partial.summary.json`` (:func:`_keep_smaller`)."""
    stem = output.name.removesuffix(".json")
    return output.with_name(f"{stem}.summary.json"), output.with_name(
        f"{stem}.partial.summary.json"
    )


def _keep_partial_sweep(
    stop: Any,
    output: Path,
    runlogs: Path | None,
    guard: FolderGuard | None = None,
    keeper: KeepLevels | None = None,
) -> None:
    """Write a stopped sweep's finished levels to OUTPUT's ``.partial.json`` twin.

    ``stop`` is a SweepInterrupted or an error that stopped the sweep (a dead server, a
    full disk); the files written are added to its ``kept``."""
    from shrink.measure.keep import partial_twin

    kept: list[str] = []
    if stop.curve is not None and stop.curve.levels:
        # where its levels went as they ended: beside another run's, if it wrote there
        kept += _keep_curve(stop.curve, keeper.path if keeper else partial_twin(output))
    if runlogs is not None and runlogs.is_dir() and any(runlogs.glob("*.parquet")):
        # A --runlogs folder unmounted under the sweep holds only the logs written since.
        since = " written after it changed" if guard and guard.changed(RUNLOGS_FOLDER) else ""
        kept.append(f"the run logs{since} in {runlogs}")
    stop.kept = [*stop.kept, *kept]
    _say_earlier(stop, keeper)


def _keep_partial_exports(
    stop: Any, output: Path, trace: Any, runs: list[Any], formats: tuple[str, ...]
) -> None:
    """Write the exports asked for (``--export``) of a stopped sweep's finished levels
    beside its ``.partial.json`` (``X.partial-hdr/``, ``X.partial_stats.csv``, ...);
    the files written are added to ``stop.kept``. The level the stop cut short has no
    export, as it has no place in the curve."""
    from shrink.export import level_samples, write_sweep_exports
    from shrink.measure.keep import partial_twin

    if not formats or stop.curve is None or not stop.curve.levels:
        return
    samples = level_samples(stop.curve, trace, runs)
    if not samples:
        return
    try:
        written = write_sweep_exports(partial_twin(output), samples, formats)
    except ShrinkError as exc:  # a full disk: the curve is kept, say what is not
        stop.kept = [*stop.kept, f"not the exports ({printable(exc)})"]
        return
    # The HdrHistogram folder as a Path: the files in it are then said by its name once.
    stop.kept = [*stop.kept, *_export_summary(written)]


def _keep_curve(curve: Any, path: Path) -> list[str]:
    """Write ``curve`` to ``path``, or failing that (a full disk) something smaller;
    what was kept, in words."""
    from shrink.measure.keep import write_or_aside

    held = plural(len(curve.levels), "finished level")
    try:
        alt = write_or_aside(curve, path)
    except WriteError as exc:
        return _keep_smaller(curve, path, exc)
    if alt is not None:
        return [f"{alt} ({held}; another run wrote {path} meanwhile, left as it is)"]
    return [f"{path} ({held})"]


def _keep_smaller(curve: Any, path: Path, exc: WriteError) -> list[str]:
    """``curve`` could not be written to ``path``: its per-level summary, a small file,
    beside it, or printed to stdout if even that fails; what was kept, in words."""
    from shrink.atomic import write_text

    n = len(curve.levels)
    summary = {"knob": curve.knob, "summary": _curve_summary(curve), "not_written": str(exc)}
    small = path.with_name(path.name.removesuffix(".json") + ".summary.json")
    try:
        write_text(small, dumps(summary, indent=1, sort_keys=True) + "\n")
    except WriteError:
        typer.echo(dumps(summary, sort_keys=True))
        return [f"a summary of the {plural(n, 'finished level')}, printed above"]
    return [f"{small} (a summary of the {plural(n, 'finished level')})"]


def _export_summary(paths: list[Path]) -> list[Path]:
    """The export files, the HdrHistogram folder named once."""
    folders = sorted({p.parent for p in paths if p.suffix in (".hlog", ".hgrm")})
    return [*(f / "" for f in folders), *(p for p in paths if p.suffix == ".csv")]
