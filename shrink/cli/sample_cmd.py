"""``shrink sample`` and ``shrink split``: keep a fraction alpha of a trace, or partition it."""

from __future__ import annotations

import math
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.cli._common import (
    MaxBodyOpt,
    cli_errors,
    console,
    echo_json,
    options_named,
    output_path,
    plural,
)
from shrink.cli._kept import KeptParts
from shrink.cli._typed_paths import file_out
from shrink.defaults import MAX_BODY
from shrink.errors import ParameterError, ShrinkError, printable


class Level(StrEnum):
    session = "session"
    object = "object"
    request = "request"
    stratified = "stratified"


class Balance(StrEnum):
    session = "session"
    connection = "connection"
    request = "request"


def sample(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file to sample.")],
    alpha: Annotated[float, typer.Option(help="Fraction to keep, in (0, 1].")],
    out: Annotated[
        Path,
        file_out("Output trace Parquet file."),
    ],
    level: Annotated[
        Level, typer.Option(help="Unit sampled: session, object, request or stratified.")
    ] = Level.session,
    seed: Annotated[int, typer.Option(help="Seed of the keyed hash (same seed, same rows).")] = 0,
    balance: Annotated[
        Balance, typer.Option(help="Where the real system balances load.")
    ] = Balance.session,
    keepalive: Annotated[
        bool, typer.Option("--keepalive/--no-keepalive", help="Clients use HTTP/1.1 keep-alive.")
    ] = True,
    force: Annotated[
        bool, typer.Option(help="Sample even where the level contradicts --balance.")
    ] = False,
    column: Annotated[
        str, typer.Option(help="Column whose mix --level stratified keeps exact.")
    ] = "cls",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Keep a fraction alpha of TRACE's sessions (or objects, requests, strata), SHRiNK-style.

    Sampling at another level than the load balancing with keep-alive is refused
    (the scaled server would see the wrong number of connections) unless --force.
    Example: shrink sample t.parquet --alpha 0.25 --level session --seed 7 -o s.parquet
    """
    import samplers
    from samplers import SamplerWarning
    from shrink.trace import Trace

    with cli_errors(measures=False), warnings.catch_warnings(record=True) as caught:
        output_path(out, inputs=(trace,))
        warnings.simplefilter("always", SamplerWarning)
        parent = Trace.read_parquet(trace, max_body=max_body)
        if len(parent) == 0:  # it wrote an empty sample, exit 0
            raise ParameterError(
                f"{printable(trace)}: the trace holds no request: nothing to sample"
            )
        why = samplers.check_consistency(
            level.value,
            balance.value,
            keepalive,
            force,
            open_loop=samplers.is_open_loop(parent),
        )
        options: dict[str, Any] = {"column": column} if level is Level.stratified else {}
        with options_named({"alpha": "--alpha", "column": "--column"}):
            result = samplers.sample(parent, alpha, seed=seed, level=level.value, **options)
        if len(result) == 0 and len(parent) > 0:
            # (an empty trace was written, exit 0: every later step then refused it)
            fix = "raise alpha"
            if level is Level.stratified:
                fix = _stratified_fix(parent, result, column)
            raise ParameterError(
                f"{printable(trace)}: alpha {alpha:g} kept none of its "
                f"{plural(len(parent), 'request')} ({level.value} sampling, seed {seed}); {fix}."
            )
        extra: dict[str, Any] = {"balance": balance.value, "keepalive": keepalive}
        if why is not None:
            extra["forced"] = why
        result = result.with_meta(**extra)
        result.write_parquet(out)
    for w in caught:
        if issubclass(w.category, SamplerWarning):
            console().print(f"[yellow]warning:[/] {w.message}", highlight=False, soft_wrap=True)
    summary = {
        "out": str(out),
        **{
            k: result.meta.get(k)
            for k in (
                "sampler",
                "alpha",
                "seed",
                "parent",
                "parent_sessions",
                "kept_sessions",
                "parent_requests",
                "kept_requests",
            )
        },
        "warnings": result.meta.get("warnings", []),
    }
    if as_json:
        echo_json(summary)
        return
    typer.echo(
        f"{printable(out)}: kept {summary['kept_sessions']:,} of "
        f"{summary['parent_sessions']:,} sessions, "
        f"{summary['kept_requests']:,} of {summary['parent_requests']:,} requests "
        f"({level.value} sampling, alpha {alpha:g}, seed {seed})"
    )


def split(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file to partition.")],
    parts: Annotated[int, typer.Option(help="Number of disjoint parts, 1 to 1000.")],
    out: Annotated[Path, typer.Option("-o", "--out", readable=False, help="Output directory.")],
    seed: Annotated[int, typer.Option(help="Seed of the session hash.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Partition TRACE into K disjoint parts by session hash: DIR/part-000.parquet, ...

    Each session lands in exactly one part; the generator's processes and the
    replica addresses each replay one part.
    """
    import samplers
    from shrink.trace import Trace

    with cli_errors(measures=False):
        output_path(out, kind="dir")
        from shrink.cli._derived import inside, refuse_long_derived

        refuse_long_derived(out, inside(out, "split", parts - 1))
        tr = Trace.read_parquet(trace, max_body=max_body)
        with options_named({"parts": "--parts"}):
            pieces = samplers.split(tr, parts, seed=seed)
        files: list[Path] = []
        try:
            for i, piece in enumerate(pieces):
                files.append(piece.write_parquet(out / f"part-{i:03d}.parquet"))
        except (ShrinkError, KeyboardInterrupt) as exc:
            if files:  # an incomplete partition, said as one: not "kept 13 files"
                exc.kept = [*getattr(exc, "kept", ()), KeptParts(out, len(files), len(pieces))]
            raise
    rows = [
        {
            "file": str(f),
            "part": p.meta["part"],
            "sessions": p.meta["kept_sessions"],
            "requests": p.meta["kept_requests"],
        }
        for f, p in zip(files, pieces, strict=True)
    ]
    empty = sum(1 for r in rows if r["sessions"] == 0)
    if empty:  # (replaying such a part sends nothing)
        console().print(
            f"[yellow]warning:[/] {empty:,} of the {parts:,} parts hold no session: "
            f"{printable(trace)} has {plural(tr.n_sessions, 'session')}",
            highlight=False,
            soft_wrap=True,
        )
    if as_json:
        echo_json({"parts": parts, "seed": seed, "files": rows})
        return
    for r in rows:
        typer.echo(
            f"{printable(r['file'])}: {plural(r['sessions'], 'session')}, "
            f"{plural(r['requests'], 'request')}"
        )


def register(app: typer.Typer) -> None:
    """Add ``sample`` and ``split`` to ``app``."""
    app.command("sample")(sample)
    app.command("split")(split)


def _stratified_fix(parent: Any, result: Any, column: str) -> str:
    """What to do when a stratified sample kept nothing: a stratum keeps alpha of its
    units, rounded, so alpha below 0.5 over the largest stratum's units keeps none.
    Strata of a unit or two (a column of distinct values) need alpha near 0.5 or more:
    another column then; else the alpha that keeps one (a column whose values repeat
    was told to stratify by a column whose values repeat)."""
    strata = result.meta.get("strata") or {}
    largest = max((int(s.get("units", 0)) for s in strata.values()), default=0)
    units = str(result.meta.get("strata_units") or "units").split(" (")[0]
    if largest > 2:
        # 0.5 / largest rounded up to three figures: rounded to nearest, it could keep none
        step = 10.0 ** (math.floor(math.log10(0.5 / largest)) - 2)
        least = math.ceil(round(0.5 / largest / step, 6)) * step
        return (f"--column {column}'s largest stratum holds {largest:,} {units}, and a "
                f"stratum keeps alpha of its {units}, rounded: alpha {least:.3g} or more "
                "keeps one")  # fmt: skip
    values = len(parent.table.column(column).unique())
    return (f"--column {column} holds {values:,} distinct values over {len(parent):,} "
            "requests, so each stratum is too small to keep alpha of; stratify by a column "
            "whose values repeat (such as cls), or raise alpha")  # fmt: skip
