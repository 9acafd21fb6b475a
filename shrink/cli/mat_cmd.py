"""``shrink mat``: the maximum achievable throughput read off a LoadCurve (``--adaptive``:
adding levels on a live server until its interval is narrow)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shrink.checks import STAT_HELP, check_int, check_positive, parse_threshold
from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    cli_errors,
    echo_json,
    exit_if_bound,
    note_if_partial,
    output_path,
    plural,
    stat_label,
    stat_name,
    threshold_text,
)
from shrink.cli._replay_opts import (
    EngineOptions,
    _EngineOpt,
    _GenCpus,
    _Json,
    _LagLimit,
    _limit_text,
    _Overlap,
    _progress_sweep,
    _warn_docroot,
    naming_trace,
    note_realtime,
)
from shrink.cli._typed_paths import file_out
from shrink.defaults import MAX_BODY, MAX_LEVELS, MOST_LEVELS
from shrink.errors import ParameterError, ShrinkError

if TYPE_CHECKING:
    from shrink.loadcurve import LoadCurve
    from shrink.mat import MATResult


def mat_cmd(
    curve: Annotated[Path, typer.Argument(help="LoadCurve JSON (shrink sweep).")],
    stat: Annotated[
        str, typer.Option("--stat", help=STAT_HELP[0].upper() + STAT_HELP[1:] + ".")
    ] = "mean",
    threshold: Annotated[
        str, typer.Option("--threshold", help="SLA on the statistic, e.g. 5ms or 500ms.")
    ] = ...,  # type: ignore[assignment]
    cls: Annotated[
        str | None, typer.Option("--cls", help="Only this request class (static | dynamic).")
    ] = None,
    adaptive: Annotated[
        bool,
        typer.Option("--adaptive", help="Add levels around the crossing until the CI is narrow."),
    ] = False,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="With --adaptive: the trace to replay.")
    ] = None,
    target: Annotated[
        list[str] | None, typer.Option("--target", help="With --adaptive: state JSON or URLs.")
    ] = None,
    rel_width: Annotated[
        float,
        typer.Option("--rel-width", help="With --adaptive: stop when CI width / MAT <= this."),
    ] = 0.1,
    max_levels: Annotated[
        int,
        typer.Option(
            "--max-levels",
            help="With --adaptive: load levels of the curve in all (those it has included), "
            "at most, as predict's --max-levels.",
        ),
    ] = MAX_LEVELS,
    output: Annotated[
        Path | None,
        file_out("With --adaptive: write the extended curve here."),
    ] = None,
    generator_cpus: _GenCpus = None,
    allow_overlap: _Overlap = False,
    lag_limit: _LagLimit = "1ms",
    engine: _EngineOpt = "auto",
    max_body: MaxBodyOpt = MAX_BODY,
    as_json: _Json = False,
) -> None:
    """Maximum achievable throughput: where the statistic crosses the threshold, with a CI.

    When the threshold is not crossed within the measured range the MAT is only a
    bound, printed ">= X" (never reached) or "< X" (over at the lowest level), and
    the command exits with status 99 (as k6 does when a threshold fails).
    """
    from shrink.loadcurve import LoadCurve
    from shrink.mat import check_class, mat
    from shrink.replay.adaptive import other_testbed, refine

    with cli_errors(), naming_trace(trace):
        output_path(output)
        with as_option("--threshold"):
            thr = parse_threshold(threshold, "threshold")
        stat = stat_name(stat, "--stat")
        # nan or a negative width never reads as narrow, and a count under one adds
        # nothing: each was taken without a word.
        with as_option("--rel-width"):
            check_positive(rel_width, "rel width")
        with as_option("--max-levels"):
            check_int(max_levels, "max levels", low=1, high=MOST_LEVELS)
        if adaptive and (trace is None or not target):
            raise ParameterError("--adaptive needs --trace and --target to run more levels.")
        if adaptive:  # (its levels are kept in OUT.partial.json if it stops)
            from shrink.cli._derived import refuse_long_derived, sweep_twins

            kept = output or curve
            refuse_long_derived(kept, sweep_twins(kept), "--out" if output else "CURVE")
        note_if_partial(lc := LoadCurve.read_json(curve), curve)
        with as_option("--cls"):
            check_class(lc, cls)
        added: list[float] = []
        if adaptive:
            from shrink.cli._sweep_keep import _keep_partial_sweep, _write_curve
            from shrink.measure import SweepInterrupted
            from shrink.trace import Trace

            tgt = EngineOptions(
                routing=lc.sweep.generator.routing,
                conns=lc.sweep.generator.conns_per_session,
                generator_cpus=generator_cpus,
                allow_overlap=allow_overlap,
                lag_limit=lag_limit,
                engine=engine,
            ).target(target, note=False)
            with as_option("--target"):
                if (why := other_testbed(lc, tgt)) is not None:
                    raise ParameterError(
                        f"the curve was not measured on this testbed ({why}): a level "
                        "measured here would not be the curve's; sweep it anew"
                    )
            _adaptive_needs_reps(lc)
            note_realtime(tgt)  # (not before the refusals: it is for a run that will be)
            tr = Trace.read_parquet(trace, max_body=max_body)
            _warn_docroot(tgt, tr, trace)  # as sweep: PHP's body limit, the docroot's paths
            try:
                lc, added = _progress_sweep(lambda progress: refine(
                    tgt, tr, lc, stat, thr, cls=cls, rel_width=rel_width,
                    max_levels=max(0, max_levels - len(lc.levels)), progress=progress,
                ))  # fmt: skip
            except (SweepInterrupted, ShrinkError) as stop:
                # A signal, a dead server: the levels added before it are kept, as
                # sweep keeps its finished levels, in OUT.partial.json.
                _keep_partial_sweep(stop, output or curve, None)
                raise
            _write_curve(lc, output or curve)
        res = mat(lc, stat, thr, cls=cls)
    if as_json:  # with the levels added, and the curve it was read from
        echo_json({**_mat_json(res, lc), "added_levels": added, "curve": str(curve)})
    else:
        _print_mat(res, stat, thr, added, lc)
    _warn_after(lc, stat, thr, cls, res)


def _warn_after(lc: LoadCurve, stat: str, thr: float, cls: str | None, res: MATResult) -> None:
    """What the MAT was read from (thin tails, crowded levels), and exit 99 for a bound."""
    from shrink.cli.sweep_cmd import crowded_warning
    from shrink.selfchecks import crowded_levels

    _warn_thin_tails(lc, stat, cls, res)
    if crowded := crowded_levels(lc):
        # The MAT was read from them: a server slowed by what ran beside it.
        typer.echo(crowded_warning(crowded, lc.sweep.target.get("share_cpus")), err=True)
    if res.bound is not None:
        # The threshold was not crossed inside the measured range: not a MAT, a bound;
        # one line on stderr says so (exit status 99), as every MAT command does.
        exit_if_bound([threshold_text(stat, thr)])


def _not_falling(lc: LoadCurve, res: MATResult) -> bool:
    """Whether ``res``'s statistic at the lowest usable level is not under the one above
    (a sweep's step down stops there): "measure lower levels" may not help then."""
    usable = lc.usable()
    if len(usable) < 2:
        return False
    low, up = (lv.stat(res.stat, res.cls)[0] for lv in usable[:2])
    return not low < up


def _print_mat(res: MATResult, stat: str, thr: float, added: list[float], lc: LoadCurve) -> None:
    from shrink.mat import mat_text

    ci = "" if res.bound else f"  CI [{res.ci[0]:,.1f}, {res.ci[1]:,.1f}]"
    if not res.bound and _one_repetition(res, lc):
        # [x, x] from one repetition a level is no spread measured, not a certain MAT.
        ci = f"  CI none ({_ONE_REP})"
    typer.echo(
        f"MAT ({threshold_text(stat, thr)}): "
        f"{mat_text(res.mat, res.status, fmt=',.1f')} req/s{ci}  ({res.status})"
    )
    if res.bound == "lower":
        typer.echo(
            "the statistic stayed under the threshold at every level measured: the MAT is at "
            "least the highest throughput measured (measure higher levels for the MAT itself)"
        )
    elif res.bound == "upper":
        typer.echo(
            "the statistic was over the threshold already at the lowest level: the MAT lies "
            "below the lowest throughput measured ("
            + (
                "it did not fall from the level above to the lowest: the threshold may lie "
                "under what the server takes unloaded, which no lower level goes under)"
                if _not_falling(lc, res)
                else "measure lower levels for the MAT itself)"
            )
        )
    if res.stalled_ceiling is not None:
        typer.echo(
            f"hint: under {res.stalled_ceiling:,.1f} req/s, where the generator only stalled "
            "and the latency stayed over the threshold by more than twice its longest send "
            "lag (not a MAT: such levels are never used for one)"
        )
    failed = lc.failed_levels()
    if failed:
        typer.echo(
            f"levels left out (over {_limit_text()} of their requests failed): "
            + ", ".join(f"{lv.level:g} ({sum(r.errors for r in lv.reps)} failed)" for lv in failed)
        )
    if added:
        typer.echo(f"added levels: {', '.join(f'{x:g}' for x in added)}")


_ONE_REP = "one repetition per level: no spread to read; --reps 2 or more"


def _mat_json(res: MATResult, lc: LoadCurve) -> dict[str, Any]:
    """``res`` as ``mat --json`` writes it: with one repetition a level no interval (null,
    and ``ci_note`` says why), as the text says 'CI none'; it wrote ``[x, x]``."""
    from shrink.mat import mat_text

    d = res.to_dict()
    if res.bound or not _one_repetition(res, lc):
        return d
    return {**d, "ci": None, "text": mat_text(res.mat, res.status, fmt=",.1f"), "ci_note": _ONE_REP}


def _one_repetition(res: MATResult, lc: LoadCurve) -> bool:
    """Whether the MAT's interval is [x, x] because the levels around the crossing had
    one usable repetition each (a t-interval needs two)."""
    if res.ci[0] != res.ci[1] or res.bracket is None:
        return False
    around = [lv for lv in lc.levels if lv.level in res.bracket]
    return bool(around) and all(len(lv.kept) < 2 for lv in around)


def register(app: typer.Typer) -> None:
    """Add ``mat`` to ``app``."""
    app.command("mat")(mat_cmd)


def _adaptive_needs_reps(lc: LoadCurve) -> None:
    """A ParameterError for a curve of one repetition a level: its interval has no
    width, so ``--adaptive`` read it as narrow at once and ran nothing, without a word."""
    if lc.levels and max(len(lv.reps) for lv in lc.levels) < 2:
        raise ParameterError(
            "--adaptive narrows the MAT's interval, and a curve of one repetition a "
            "level has none: sweep it with --reps 2 or more"
        )


def _warn_thin_tails(lc: LoadCurve, stat: str, cls: str | None, res: MATResult) -> None:
    """A line on stderr when the levels the MAT was read from (the bracket, else every
    level) had too few requests a repetition for the percentile: it was their slowest
    request or two, and the MAT was printed "(ok)" without a word."""
    from shrink.selfchecks import thin_tails

    around = tuple(float(x) for x in res.bracket) if res.bracket is not None else None
    need, thin = thin_tails(lc, stat, cls, around)
    if not thin:
        return
    from shrink.report.text import thin_tail_text

    typer.echo(
        f"note: the {stat_label(stat)} at {plural(len(thin), 'level')} "
        f"({', '.join(f'{x:g}' for x in thin)}) {thin_tail_text(need, thin)}",
        err=True,
    )
