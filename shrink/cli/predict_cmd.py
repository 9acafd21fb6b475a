"""``shrink predict``: the main job (its check, ``shrink validate``, is validate_cmd)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shrink.checks import MIN_WINDOW_S
from shrink.cli._cluster import ClusterOpt, GeneratorsOpt, cluster_spec
from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    bounded_mats,
    cli_errors,
    console,
    cpu_list,
    echo_json,
    exit_if_bound,
    out_console,
    output_path,
    parse_duration_option,
    parse_lag_limit,
    print_table,
    stat_label,
    threshold_text,
)
from shrink.cli._derived import inside, refuse_long_derived
from shrink.cli._predict_sim import check_sim_options as _check_sim_options
from shrink.cli._progress import line_progress, on_terminal
from shrink.cli._replay_opts import _Awake, _GenCpus, _LagLimit, _Overlap, _Realtime
from shrink.cli._sweep_keep import _keep_smaller
from shrink.defaults import (
    ALPHA,
    DURATION,
    MAX_BODY,
    MAX_LEVELS,
    MAX_REPS,
    MOST_LEVELS,
    REPS,
    THRESHOLDS_TEXT,
    WARMUP,
)
from shrink.errors import OptionError, WriteError, printable
from shrink.folder_locks import claimed

if TYPE_CHECKING:
    from shrink.prediction import Prediction

# The options with long help, named here to keep the command short.
_PairedFullRun = Annotated[
    bool,
    typer.Option(
        "--paired-full-run",
        help="For validation: also run the whole trace on the full target, each repetition "
        "next to its scaled twin, then at levels of its own search, for 'shrink validate "
        "--full-run paired' on a machine whose speed drifts (a VM). None of it reaches the "
        "prediction or chooses the share's levels.",
    ),
]
_TimeScaling = Annotated[
    bool,
    typer.Option(
        "--time-scaling/--no-time-scaling",
        help="On a CPU-time share, run the share in slow motion: its warm-up and window "
        "1/s times --warmup and --duration and its users' think times 1/s as long, s its "
        "measured speed (alpha where none was measured): a server at s of the speed "
        "settles 1/s slower and serves s of the requests a second.",
    ),
]
_Skip = Annotated[
    str,
    typer.Option(
        "--skip",
        help="Trace time left out at the start of every run, e.g. 30s; 'auto': a tenth "
        "of the trace's span, at most 1m (its first seconds are not its steady mix).",
    ),
]
_Thresholds = Annotated[
    str,
    typer.Option(
        "--thresholds",
        help="SLA thresholds: STAT=DURATION, STAT mean or a percentile (p95, p99.9).",
    ),
]
_Target = Annotated[
    str,
    typer.Option(
        "--target",
        help="Where to measure: 'testbed' (start the server here) or sim:SPEC.toml "
        "(the simulator). sweep's and replay's --target name a running server instead.",
    ),
]
_Server = Annotated[
    str,
    typer.Option(
        "--server",
        help="Server recipe of the testbed: lighttpd-php-cgi (default), nginx-php-fpm, "
        "or a RECIPE.toml file.",
    ),
]
_Calibrate = Annotated[
    bool,
    typer.Option(
        "--calibrate/--no-calibrate",
        help="On a CPU-time share: --no-calibrate (the default) takes its nominal "
        "fraction and nothing runs on the full target; --calibrate adds light runs on it "
        "to read the share's speed (at most 10% busy, 20 s in all; prediction.json "
        "records them). Each has its own corpus-fitted model error.",
    ),
]
_Budget = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Time the sweep may spend on runs, e.g. 8m: no level starts that would end past it.",
    ),
]


def _progress_bar():
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(),
        transient=False,
    )


_MAPPINGS_HELP = (
    "'all' (the built-in mappings the server's CPUs can give) or a comma list of mappings."
)


@contextmanager
def _progress(title: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on a terminal; elsewhere (a pipe, a log, CI) one line per level."""
    if not on_terminal():
        yield line_progress(title)
        return
    with _progress_bar() as bar:
        task = bar.add_task(title, total=1)

        def cb(what: str, step: int, total: int) -> None:
            bar.update(task, description=f"{title}: {what}", completed=step, total=total)

        yield cb


def predict(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file (shrink ingest/synth).")],
    out: Annotated[Path, typer.Option("-o", "--out", readable=False, help="Output directory.")],
    machine: Annotated[
        str, typer.Option("--machine", help="'this' or a TOML machine spec.")
    ] = "this",
    alpha: Annotated[float, typer.Option("--alpha", help="Sample fraction, in (0, 1].")] = ALPHA,
    level: Annotated[
        str, typer.Option("--level", help="Sampling level: session|object|request|stratified.")
    ] = "session",
    mappings: Annotated[str, typer.Option("--mappings", help=_MAPPINGS_HELP)] = "all",
    thresholds: _Thresholds = THRESHOLDS_TEXT,
    target: _Target = "testbed",
    docroot: Annotated[
        Path | None, typer.Option("--docroot", help="Document root for the testbed.")
    ] = None,
    server: _Server = "lighttpd-php-cgi",
    share_kind: Annotated[
        str, typer.Option("--share-kind", help="auto | cores | cpu_time.")
    ] = "auto",
    server_cpus: Annotated[
        str | None, typer.Option("--server-cpus", help="CPUs of the full target, e.g. 1 or 1-3.")
    ] = None,
    calibration: Annotated[
        str, typer.Option("--calibration", help="'published' or a calibration JSON.")
    ] = "published",
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seed of the sample and the runs.")
    ] = 0,
    reps: Annotated[
        int, typer.Option("--reps", min=1, max=MAX_REPS, help="Repetitions per load level.")
    ] = REPS,
    warmup: Annotated[
        str, typer.Option("--warmup", help="Warm-up per level, e.g. 2s (0s: none).")
    ] = WARMUP,
    duration: Annotated[
        str, typer.Option("--duration", help="Measurement window per level, e.g. 8s.")
    ] = DURATION,
    max_levels: Annotated[
        int, typer.Option("--max-levels", help="Load levels of the curve in all, at most.")
    ] = MAX_LEVELS,
    paired_full_run: _PairedFullRun = False,
    time_scaling: _TimeScaling = True,
    skip: _Skip = "auto",
    budget: _Budget = None,
    cluster: ClusterOpt = None,
    generators: GeneratorsOpt = None,
    generator_cpus: _GenCpus = None,
    allow_overlap: _Overlap = False,
    realtime: _Realtime = None,
    awake: _Awake = None,
    lag_limit: _LagLimit = "1ms",
    calibrate: _Calibrate = False,
    max_body: MaxBodyOpt = MAX_BODY,
    as_json: Annotated[bool, typer.Option("--json", help="Print prediction.json.")] = False,
) -> None:
    """Predict the full machine's MAT for each mapping from a scaled-down run.

    Samples alpha of the sessions, runs them on alpha of the server (cores, or a
    CPU-time share), sweeps load levels around the knee, and extrapolates.
    Writes DIR/prediction.json, DIR/report.md, DIR/report.html and figures.
    """
    from shrink.checks import parse_thresholds
    from shrink.pipeline import GeneratorPlacement, TargetSettings, run_predict
    from shrink.predict import PredictConfig
    from shrink.report.text import out_of_time_text, recompute_text

    with cli_errors():
        refuse_long_derived(output_path(out, kind="dir"), inside(out, "predict", target=target))
        with as_option("--thresholds"):
            th = parse_thresholds(thresholds)
        names = _mapping_names(mappings)
        _check_sim_options(target, machine=machine, docroot=docroot, server_cpus=server_cpus)
        _check_options(
            alpha=alpha, level=level, share_kind=share_kind, reps=reps, max_levels=max_levels,
            target=target, calibration=calibration, server=server,
        )  # fmt: skip
        plan = _plan(warmup, duration, reps, max_levels, budget)
        cpus = tuple(cpu_list(server_cpus, "--server-cpus")) if server_cpus else None
        gen_cpus = _cpu_tuple(generator_cpus, "--generator-cpus")
        with as_option("--skip"):
            skip_s = None if skip == "auto" else _skip_seconds(skip)
        from shrink.cli import testbed_cmd as tb

        tb.warn_stale()  # what a killed predict left: `shrink testbed down --stale`
        if docroot is not None:  # (a missing page is measured as a failure)
            tb.docroot_checked(docroot, trace, max_body, server)
        config = PredictConfig(
            alpha=alpha, level=level, thresholds=th, mappings=names, share_kind=share_kind,
            seed=seed, calibration=calibration, plan=plan, paired_full_run=paired_full_run,
            time_scaling=time_scaling, skip=skip_s, calibrate=calibrate,
        )  # fmt: skip
        lag = parse_lag_limit(lag_limit)
        placement = GeneratorPlacement(gen_cpus, allow_overlap, realtime, lag_limit=lag,
                                       cluster=cluster_spec(cluster, generators),
                                       awake=awake)  # fmt: skip
        settings = TargetSettings(target, machine, docroot, cpus, server, placement)
        title = "scaled + full runs" if paired_full_run else "scaled run"
        try:
            with _held(out), _progress(title) as progress:
                pred = run_predict(
                    trace, out, config, target=settings, progress=progress, max_body=max_body
                )
        except WriteError as exc:
            if exc.curve is not None and not exc.kept:
                # No room for the measured curve: its summary is kept, as sweep keeps it.
                exc.kept = _keep_smaller(exc.curve, Path(exc.path), exc)
            exc.then = recompute_text(
                exc.path, target, machine, names, thresholds, calibration, server_cpus
            )
            raise
    if as_json:
        echo_json(pred.to_dict())
    else:
        _print_summary(pred, out)
        if text := out_of_time_text(pred.extra.get("out_of_time"), printable(budget)):
            typer.echo(text, err=True)  # the budget, not the server, ended the sweep
        if target.startswith("sim:"):
            typer.echo(_sim_workload(trace, pred, max_body))
    exit_if_bound(bounded_mats(pred.mappings))


def _sim_workload(trace_path: Path, pred: Prediction, max_body: int = MAX_BODY) -> str:
    """On the simulator: the workload and thresholds this answer is for. ``whatif`` and
    ``sim --workload support`` run the papers' Support, whose PHP pages take 3.25 ms;
    a synthesized trace's pages name their own work, and the MATs differ with it."""
    from shrink.cli.sim_cmd import mix_text
    from shrink.sim.params import SimParams
    from shrink.sim.scaling import workload_mix
    from shrink.trace import Trace

    mix = workload_mix(Trace.read_parquet(trace_path, max_body=max_body))
    thr = ", ".join(threshold_text(s, t) for s, t in (pred.thresholds or {}).items())
    return (
        f"{mix_text(trace_path.name, mix)}; thresholds {thr} (whatif's and sim's "
        f"--workload support: PHP work {SimParams().dynamic_php_us / 1e3:g} ms a page, "
        "mean < 5 ms)"
    )


def _mapping_names(mappings: str) -> tuple[str, ...]:
    """``--mappings``: 'all' or a comma list, each name checked (the machine's CPUs are
    checked against them before the first run)."""
    from shrink.mapping import ALL_MAPPINGS, check_mapping_names

    names = ALL_MAPPINGS if mappings == "all" else tuple(m.strip() for m in mappings.split(","))
    if not names or not all(names):
        raise OptionError("--mappings", f"{mappings!r}: must be 'all' or a comma list")
    check_mapping_names(names)
    return names


def _plan(warmup: str, duration: str, reps: int, max_levels: int, budget: str | None) -> Any:
    """The sweep's plan from the options (each refused by its name)."""
    from shrink.autolevels import AutoPlan

    plan = AutoPlan(
        warmup=parse_duration_option(warmup, "warmup", zero_ok=True),
        duration=parse_duration_option(duration, "duration", least=MIN_WINDOW_S),
        reps=reps,
        max_levels=max_levels,
        budget_s=None if budget is None else parse_duration_option(budget, "budget"),
    )
    # The sweep refuses it too, but only once a testbed has started (5 s or so): a
    # repetition takes at least its warm-up and window (a share's run is slower still).
    side = plan.warmup + plan.duration
    if plan.budget_s is not None and plan.budget_s < side:
        raise OptionError(
            "--budget",
            f"{budget}: cannot hold one repetition ({side:g} s of warm-up and window); "
            "allow more time or shorten --warmup and --duration",
        )
    return plan


def _check_options(
    *,
    alpha: float,
    level: str,
    share_kind: str,
    reps: int,
    max_levels: int,
    target: str,
    calibration: str,
    server: str,
) -> None:
    """Every option predict would otherwise refuse only after its sweep: one line, exit 2."""
    from samplers.consistency import SAMPLE_LEVELS
    from shrink.checks import check_alpha, check_int
    from shrink.testbed.servers import load_recipe

    with as_option("--alpha"):
        check_alpha(alpha)
    if level not in SAMPLE_LEVELS:
        raise OptionError("--level", f"{level!r}; accepted: {', '.join(SAMPLE_LEVELS)}")
    if share_kind not in ("auto", "cores", "cpu_time"):
        raise OptionError("--share-kind", f"{share_kind!r}; accepted: auto, cores, cpu_time")
    with as_option("--reps"):
        check_int(reps, "reps", low=1, high=MAX_REPS)
    with as_option("--max-levels"):
        # a MAT is read between two levels: the probe and one more at least
        check_int(max_levels, "max levels", low=2, high=MOST_LEVELS)
    if target != "testbed" and not target.startswith("sim:"):
        raise OptionError("--target", f"{target!r}; accepted: testbed or sim:SPEC.toml")
    if target.startswith("sim:"):
        from shrink.machine import Machine

        Machine.read_toml(target[4:])  # a bad spec names its file and line
    if calibration != "published":
        from extrapolate.calibration import load_calibration

        load_calibration(calibration)  # a bad file names itself now, not after the sweep
    if target == "testbed":
        load_recipe(server)


def _cpu_tuple(text: str | None, option: str) -> tuple[int, ...] | None:
    """The CPUs ``text`` lists (``option``'s value), or None where it is not given."""
    return None if text is None else tuple(cpu_list(text, option))


def _skip_seconds(text: str) -> float:
    from shrink.checks import parse_duration

    return 0.0 if text.strip() in ("0", "0s", "none") else parse_duration(text, "skip")


def _claim(out: Path | None, prediction: Path) -> Any:
    """The folder validate writes, held while it runs (:func:`shrink.folder_locks.claimed`):
    ``out``, else the prediction's own, when there is one (a missing prediction is
    said by run_validate, not made a folder here)."""
    if out is None and not prediction.parent.is_dir():
        return contextlib.nullcontext()
    return _held(out or prediction.parent)


# The files predict and validate write in their folder (a killed one leaves their
# ``.NAME.HEX.tmp``), by the names shrink.folder_locks.drop_temporaries matches.
_OUTPUTS = (
    r"(?:prediction|validation|measured-curve|predicted-curve|full-curve)(?:\.partial)?\.json"
    r"|report\.(?:md|html)|(?:latency|cdf|whatif)\.png"
)


@contextmanager
def _held(folder: Path) -> Iterator[Path]:
    """``folder`` held by this command alone (:func:`shrink.folder_locks.claimed`), cleared of
    the temporaries a killed predict or validate left there (sweep --runlogs clears its
    own; predict's were left for good)."""
    from shrink.folder_locks import drop_temporaries

    with claimed(folder) as path:
        drop_temporaries(path, _OUTPUTS)
        yield path


def _print_summary(pred: Prediction, out: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from shrink.mat import mat_text

    def shown(text: object) -> str:
        # A machine name or a folder is text: an ANSI escape is shown escaped, and "[b]"
        # is not rich markup.
        return escape(printable(text))

    thresholds = pred.thresholds or {}
    t = Table(title=f"Predicted MAT ({shown(pred.target_description)})")
    t.add_column("mapping")
    screen = out_console()
    for stat, limit in thresholds.items():
        t.add_column(f"{stat_label(stat)} < {limit * 1e3:,g} ms (req/s)", justify="right")
    for name, m in pred.mappings.items():
        cells = []
        for stat in thresholds:
            r = m.stats.get(stat)
            hint = {"not_reached": " (not reached)", "below_range": " (over at the lowest load)"}
            cells.append(
                "-" if r is None else mat_text(r.mat, r.status, r.ci) + hint.get(r.status or "", "")
            )
        t.add_row(("* " if name == pred.recommended else "  ") + shown(name), *cells)
    print_table(screen, t)
    if pred.recommended:
        screen.print(f"recommended: [bold]{shown(pred.recommended)}[/] - {shown(pred.reason)}")
    else:
        screen.print(shown(pred.reason), highlight=False)
    screen.print(f"report: {shown(out / 'report.md')} and {shown(out / 'report.html')}")


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
