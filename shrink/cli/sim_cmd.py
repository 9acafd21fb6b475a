"""``shrink sim``: the simulated multi-socket server (run, sweep, scaling, mappings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.checks import MIN_WINDOW_S, check_positive
from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    bounded_mats,
    cli_errors,
    console,
    echo_json,
    exit_if_bound,
    output_path,
    parse_duration_option,
    plural,
    stat_label,
    threshold_text,
)
from shrink.cli._derived import refuse_long_derived, sweep_twins
from shrink.cli._replay_opts import _Export
from shrink.cli._sweep_keep import (
    _keep_partial_exports,
    _keep_partial_sweep,
    _write_curve,
    keep_levels,
)
from shrink.cli._typed_paths import file_out
from shrink.cli.sweep_cmd import _levels
from shrink.defaults import DURATION, MAX_BODY, MAX_REPS, REPS, WARMUP
from shrink.errors import OptionError, ShrinkError, TopologyError, printable

sim_app = typer.Typer(
    help="Simulate a multi-socket web server (sockets, RSS queues, workers, PHP, L3).",
    no_args_is_help=True,
)

MachineOpt = Annotated[Path, typer.Option("--machine", help="Machine spec (TOML).")]
MappingOpt = Annotated[
    str,
    typer.Option("--mapping", help="1-replica, 2-replica-direct, 2-replica-indirect, K-replica."),
]
ShareOpt = Annotated[
    str,
    typer.Option(
        "--share", help="CPUs (0-3, 0,4), an alpha of the cores (0.5), optionally @SPEED (all@0.5)."
    ),
]
SeedOpt = Annotated[
    int, typer.Option("--seed", min=0, help="Seed: the same seed gives the same output.")
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option("--param", help="Override a simulator parameter: NAME=VALUE (repeatable)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
# The engine holds about 1 KB of Python objects per request of a run (500,000 took
# 550 MB): 1e8 was a MemoryError (exit 70) in the first, pilot, run.
MAX_WINDOW_REQUESTS = 2_000_000


def _params(items: list[str] | None) -> Any:
    from dataclasses import fields

    from shrink.checks import parse_number
    from shrink.sim.params import SimParams

    p = SimParams()
    known = sorted(f.name for f in fields(p))
    changes: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise OptionError("--param", f"{item!r}, must be NAME=VALUE.")
        k, v = (x.strip() for x in item.split("=", 1))
        if k not in known:
            raise OptionError(
                "--param", f"unknown simulator parameter {k!r}; known: {', '.join(known)}"
            )
        cur = getattr(p, k)
        if isinstance(cur, bool):
            # Any other word was read as false: cross_socket=ture turned the effects off.
            if v.lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise OptionError("--param", f"{k} == {v!r}, must be true or false.")
            changes[k] = v.lower() in ("1", "true", "yes", "on")
        elif isinstance(cur, float):
            with as_option("--param"):
                changes[k] = parse_number(v, k)
        else:
            changes[k] = v
    # A value out of range is as much the option's as an unknown name (exit 2).
    with as_option("--param"):
        return p.with_(**changes)


def _sim_target(machine: Path, mapping: str, share: str, param: list[str] | None) -> Any:
    """The simulated server of ``sim run`` and ``sim sweep``. A mapping the share's CPUs
    cannot give is the refused value of --mapping (exit 2), naming those they can, as
    ``sim scaling`` and ``predict`` refuse it."""
    from shrink.machine import Machine
    from shrink.mapping import check_mappings
    from shrink.share import Share
    from shrink.sim.target import SimTarget

    params = _params(param)
    m = Machine.read_toml(machine)
    parsed = Share.parse(share, m) if share else None
    check_mappings([mapping], m, (parsed or Share.all_of(m)).cpus, "--mapping")
    return SimTarget(m, mapping, parsed, params)


def _workload(spec: str, seed: int, max_body: int = MAX_BODY) -> Any:
    from shrink.sim.workloads import support_trace, tcp_trace
    from shrink.trace import Trace

    if spec == "tcp":
        return tcp_trace(10_000.0, 20.0, seed=seed)
    if spec == "support":
        return support_trace(300, 40.0, seed=seed, think_s=0.3)
    return Trace.read_parquet(spec, max_body=max_body)


def _cores(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OptionError("--cores", f"{text!r}: must be a list such as 1,2,4,8") from None
    # 0 or -1 was blamed on --mapping ("needs at least 1 cores"); a count named twice is
    # refused as --levels refuses a level named twice.
    for n in counts:
        if n < 1:
            raise OptionError("--cores", f"{text!r}: a core count must be at least 1")
        if counts.count(n) > 1:
            raise OptionError("--cores", f"{text!r} names {n} twice")
    return counts


def _check_cores(machine: Any, counts: list[int], mapping: str) -> list[int]:
    """Every core count and its mapping, checked before the first (minutes-long) search."""
    from shrink.mapping import check_mapping_names, check_mappings
    from shrink.sim.scaling import compact_cpus, replicas_of

    if not counts:
        raise OptionError("--cores", "name at least one core count, e.g. 1,2,4,8")
    check_mapping_names([mapping], "--mapping")
    if max(counts) < replicas_of(mapping):
        # Each count would run 1-replica, and the output was labelled with this mapping.
        raise OptionError(
            "--mapping",
            f"mapping {mapping!r} needs at least {replicas_of(mapping):,} cores and the most "
            f"--cores names is {max(counts)}: it would run at none of them",
        )
    for n in counts:
        try:
            cpus = compact_cpus(machine, n)
        except TopologyError as exc:
            raise OptionError("--cores", str(exc)) from None
        # fewer cores than replicas: the scaling runs one replica there (shrink.sim.scaling)
        name = mapping if n >= replicas_of(mapping) else "1-replica"
        check_mappings([name], machine, cpus, "--mapping")
    return counts


def _counts(res: dict[str, Any]) -> list[Any]:
    """The core counts of a scaling result, in order."""
    return list(next(iter(res["mat"].values()), {}))


def _progress(msg: str) -> None:
    """A line on stderr per step: ``sim mappings`` and ``sim scaling`` take minutes."""
    from rich.markup import escape

    console().print(f"[dim]{escape(msg)}[/]", highlight=False)


def _workload_line(res: dict[str, Any]) -> str:
    """Which workload and thresholds a MAT is for: whatif, sim and predict differ in both."""
    mix = res.get("workload_mix") or {}
    thr = ", ".join(threshold_text(s, t) for s, t in res["thresholds"].items())
    return f"{mix_text(res.get('workload') or 'trace', mix)}; thresholds {thr}"


def mix_text(name: str, mix: dict[str, Any]) -> str:
    """``workload support: 5.2% dynamic (PHP work 3.25 ms a page, ...), static mean 82 KiB``."""
    parts = [f"workload {printable(name)}"]
    dyn = mix.get("dynamic_fraction")
    if dyn is not None:
        work = mix.get("dynamic_work_us")
        how = (
            ""
            if work is None
            else f" (PHP work {work / 1e3:,.3g} ms a page, from {mix['dynamic_work_source']})"
        )
        parts.append(f"{100 * dyn:.1f}% dynamic{how}")
    size = mix.get("static_mean_bytes")
    if size is not None:
        parts.append(f"static mean {size / 1024:,.1f} KiB")
    return ", ".join(parts)


def scaling_cmd(
    machine: MachineOpt,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            help="tcp, support (time-compressed Support-like sessions), or a trace (Parquet).",
        ),
    ] = "tcp",
    cores: Annotated[str, typer.Option("--cores", help="Core counts, e.g. 1,2,4,8.")] = "1,2,4,8",
    mapping: MappingOpt = "1-replica",
    seed: SeedOpt = 0,
    requests: Annotated[
        int,
        typer.Option(
            "--requests", min=1, max=MAX_WINDOW_REQUESTS, help="Requests per load level's window."
        ),
    ] = 100_000,
    thresholds: Annotated[
        str | None,
        typer.Option(
            "--thresholds", help="mean=0.5ms,p999=4ms (default: the papers' for tcp/support)."
        ),
    ] = None,
    param: ParamOpt = None,
    json_out: JsonOpt = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """MAT at each core count (2 and 4 from one socket) and scaling factors against the first."""
    with cli_errors():
        from shrink.checks import parse_thresholds
        from shrink.machine import Machine
        from shrink.mat import mat_text
        from shrink.sim.scaling import MatSearch, scaling

        m = Machine.read_toml(machine)
        with as_option("--thresholds"):
            thr = parse_thresholds(thresholds) if thresholds else None
        counts = _check_cores(m, _cores(cores), mapping)
        trace = _workload(workload, seed, max_body)
        res = scaling(
            m,
            trace,
            counts,
            thresholds=thr,
            params=_params(param),
            mapping=mapping,
            seed=seed,
            search=MatSearch(requests_per_level=requests),
            progress=_progress,  # on stderr: --json's stdout stays JSON
        )
        if json_out:
            echo_json(res)
        else:
            typer.echo(_workload_line(res))
            for stat, per in res["mat"].items():
                typer.echo(f"{threshold_text(stat, res['thresholds'][stat])}:")
                for n, r in per.items():
                    f = res["scaling"][stat][n]
                    typer.echo(
                        f"  {n:>2} cores  MAT {mat_text(r['mat'], r['status']):>10} req/s  "
                        f"scaling {'n/a' if f is None else f'{f:.2f}'}  ({r['status']})"
                    )
    # per core count: "N cores stat"
    exit_if_bound(
        bounded_mats(
            {f"{n} cores": {s: res["mat"][s][n] for s in res["mat"]} for n in _counts(res)}
        )
    )


def mappings_cmd(
    machine: MachineOpt,
    workload: Annotated[str, typer.Option("--workload", help="tcp, support, or a trace.")] = "tcp",
    mappings: Annotated[
        str, typer.Option("--mappings", help="Comma-separated mappings to compare.")
    ] = "1-replica,2-replica-direct,2-replica-indirect",
    seed: SeedOpt = 0,
    requests: Annotated[
        int, typer.Option("--requests", min=1, max=MAX_WINDOW_REQUESTS, help="Requests per level.")
    ] = 60_000,
    thresholds: Annotated[
        str | None,
        typer.Option(
            "--thresholds", help="mean=5ms,p99.9=500ms (default: the papers' for tcp/support)."
        ),
    ] = None,
    param: ParamOpt = None,
    json_out: JsonOpt = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Mean and p99.9 MAT of each replica mapping on the whole machine.

    Progress goes to stderr (a run takes minutes)."""
    with cli_errors():
        from shrink.checks import parse_thresholds
        from shrink.machine import Machine
        from shrink.mapping import check_mappings
        from shrink.mat import mat_text
        from shrink.sim.scaling import MatSearch, compare_mappings

        # Each mapping once, in order; none at all was an IndexError after the search.
        names = list(dict.fromkeys(x.strip() for x in mappings.split(",") if x.strip()))
        if not names:
            raise OptionError("--mappings", "name at least one mapping, e.g. 1-replica")
        m = Machine.read_toml(machine)
        check_mappings(names, m, m.all_cpus)
        with as_option("--thresholds"):
            thr = parse_thresholds(thresholds) if thresholds else None
        params = _params(param)
        res = compare_mappings(
            m,
            _workload(workload, seed, max_body),
            names,
            thresholds=thr,
            params=params,
            seed=seed,
            search=MatSearch(requests_per_level=requests),
            progress=_progress,
        )
        if json_out:
            echo_json(res)
        else:
            typer.echo(_workload_line(res))
            # The statistics are the thresholds' (--thresholds p99=5ms has no mean).
            for name, r in res["mappings"].items():
                cols = [
                    f"{stat_label(s)} MAT {mat_text(r[s]['mat'], r[s]['status']):>10}"
                    + (f"  ({r[f'{s}_change']:+.1%})" if i == 0 else "")
                    for i, s in enumerate(res["thresholds"])
                ]
                typer.echo(f"{name:<20} " + "   ".join(cols))
    exit_if_bound(bounded_mats(res["mappings"]))


def run_cmd(
    trace: Annotated[Path, typer.Argument(help="Trace (Parquet).")],
    machine: MachineOpt,
    output: Annotated[
        Path,
        file_out("RunLog to write (Parquet)."),
    ],
    mapping: MappingOpt = "1-replica",
    share: ShareOpt = "all",
    rate_factor: Annotated[
        float, typer.Option("--rate-factor", help="Speed-up of session starts.")
    ] = 1.0,
    warmup: Annotated[
        str, typer.Option("--warmup", help="Time before the window, e.g. 2s.")
    ] = "2s",
    duration: Annotated[str, typer.Option("--duration", help="Window, e.g. 10s.")] = "10s",
    seed: SeedOpt = 0,
    param: ParamOpt = None,
    json_out: JsonOpt = False,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Simulate one run of TRACE and write its RunLog (same columns as the live engine)."""
    with cli_errors():
        output_path(output, inputs=(trace, machine))
        from shrink.measure import level_stats
        from shrink.trace import Trace

        with as_option("--rate-factor"):
            check_positive(rate_factor, "rate factor")
        target = _sim_target(machine, mapping, share, param)
        res = target.run(
            Trace.read_parquet(trace, max_body=max_body),
            rate_factor=rate_factor,
            warmup=parse_duration_option(warmup, "warmup", zero_ok=True),
            duration=parse_duration_option(duration, "duration", least=MIN_WINDOW_S),
            seed=seed,
        )
        res.runlog.write_parquet(output)
        st = level_stats(res)
        summary = {
            "runlog": str(output),
            "requests": len(res.runlog),
            "throughput": st.throughput,
            "mean": st.overall.mean,
            "p999": st.overall.p999,
            "utilization": res.utilization,
            "per_cpu_utilization": {str(k): v for k, v in res.per_cpu_utilization.items()},
        }
        if json_out:
            echo_json(summary)
        else:
            typer.echo(
                f"{summary['requests']:,} requests -> {printable(output)}; "
                f"{st.throughput:,.0f} req/s, "
                f"mean {st.overall.mean * 1e3:.3f} ms, p99.9 {st.overall.p999 * 1e3:.3f} ms, "
                f"utilization {res.utilization:.2f}"
            )


def sweep_cmd(
    trace: Annotated[Path, typer.Argument(help="Trace (Parquet).")],
    machine: MachineOpt,
    output: Annotated[
        Path,
        file_out("LoadCurve to write (JSON)."),
    ],
    levels: Annotated[
        str,
        typer.Option("--levels", help="Load levels: 0.5,1,1.5 (a point, in any locale)."),
    ],
    knob: Annotated[
        str, typer.Option("--knob", help="rate_factor, users or rate.")
    ] = "rate_factor",
    mapping: MappingOpt = "1-replica",
    share: ShareOpt = "all",
    reps: Annotated[
        int, typer.Option("--reps", min=1, max=MAX_REPS, help="Repetitions per level.")
    ] = REPS,
    warmup: Annotated[
        str, typer.Option("--warmup", help="Time before each window, e.g. 2s (0s: none).")
    ] = WARMUP,
    duration: Annotated[str, typer.Option("--duration", help="Window, e.g. 8s.")] = DURATION,
    seed: SeedOpt = 0,
    param: ParamOpt = None,
    export: _Export = None,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Sweep TRACE over load levels on the simulator and write the LoadCurve
    (and, with --export, the requests for other tools, as ``shrink sweep`` does)."""
    with cli_errors():
        output_path(output, inputs=(trace, machine))
        from shrink.export import RecordingTarget, level_samples, parse_exports, write_sweep_exports

        formats = parse_exports(export)
        refuse_long_derived(output, sweep_twins(output, formats))
        w = parse_duration_option(warmup, "warmup", zero_ok=True)
        d = parse_duration_option(duration, "duration", least=MIN_WINDOW_S)
        from shrink.measure import SweepHooks, SweepInterrupted, sweep
        from shrink.trace import Trace

        lv = _levels(levels, knob)
        target = RecordingTarget(_sim_target(machine, mapping, share, param), keep=bool(formats))
        tr = Trace.read_parquet(trace, max_body=max_body)
        keeper = keep_levels(output)
        try:
            curve = sweep(target, tr, lv, knob=knob, reps=reps, warmup=w, duration=d, seed=seed,
                          hooks=SweepHooks(keep=keeper))  # fmt: skip
        except (SweepInterrupted, ShrinkError) as stop:
            # A signal or an error part-way: the levels finished before it are kept,
            # in CURVE.partial.json, as shrink sweep keeps them.
            _keep_partial_sweep(stop, output, None, keeper=keeper)
            _keep_partial_exports(stop, output, tr, target.runs, formats)
            raise
        _write_curve(curve, output, keeper)
        exports = (
            write_sweep_exports(output, level_samples(curve, tr, target.runs), formats)
            if formats
            else []
        )
        also = f" (and {plural(len(exports), 'export file')}: {', '.join(formats)})"
        shown = f"{plural(len(curve.levels), 'level')} -> {printable(output)}"
        typer.echo(shown + (also if exports else ""))


def register(app: typer.Typer) -> None:
    """Add the ``sim`` command group to ``app``."""
    sim_app.command("scaling")(scaling_cmd)
    sim_app.command("mappings")(mappings_cmd)
    sim_app.command("run")(run_cmd)
    sim_app.command("sweep")(sweep_cmd)
    app.add_typer(sim_app, name="sim")
