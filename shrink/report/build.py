"""Build DIR/report.md, DIR/report.html and the PNG figures from a prediction.

The report answers, in this order: which mapping to deploy and how sure the tool
is (the MAT table with intervals), what the curves look like (figures), whether
the measurement can be trusted (generator self-checks, utilization reached,
validation when there is one), and what was assumed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from shrink.loadcurve import Level, LoadCurve
from shrink.mat import bound_of
from shrink.prediction import SCHEMA_ID, Prediction, StatPrediction
from shrink.report.blocks import Doc, render_html, render_markdown
from shrink.report.figures import Series, cdf_figure, latency_figure, level_near_utilization
from shrink.scaling import latency_scale
from shrink.validate import Validation

__all__ = ["curve_series", "write_report"]

_STAT_NAME = {"mean": "mean", "p999": "p99.9"}


def _ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    # Seconds from 1 s up: "1.36 s" reads better than "1.36e+03 ms".
    return f"{x:.3g} s" if x >= 1.0 else f"{x * 1e3:.3g} ms"


def _rate(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def curve_series(
    curve: LoadCurve, label: str, *, points: bool, thr_scale: float = 1.0, lat_scale: float = 1.0
) -> Series:
    """A figure series from a load curve, optionally rescaled (normalized load)."""
    vals, lo, hi = {}, {}, {}
    x = None
    for stat in ("mean", "p999"):
        s = curve.series(stat)
        x = s["throughput"] * thr_scale
        rmin, rmax = curve.rep_range(stat)
        vals[stat], lo[stat], hi[stat] = (
            s["value"] * lat_scale,
            np.asarray(rmin) * lat_scale,
            np.asarray(rmax) * lat_scale,
        )
    stalled = {}
    for stat in ("mean", "p999") if points else ():
        rows = [
            (lv.stat("throughput")[0] * thr_scale, lv.stat(stat)[0] * lat_scale, b * lat_scale)
            for lv in curve.levels
            if (b := lv.stall_bound(stat)) is not None
        ]
        if rows:
            xs, ys, bs = zip(*rows, strict=True)
            stalled[stat] = (list(xs), list(ys), list(bs))
    counts = [min((r.overall.n for r in lv.reps), default=0) for lv in curve.usable()]
    return Series(
        label, x if x is not None else [], vals, lo, hi, points=points, stalled=stalled,
        counts=counts,
    )  # fmt: skip


def _mapping_series(pred: Prediction) -> list[Series]:
    out = []
    for name, m in pred.mappings.items():
        c = m.curve or {}
        if not c.get("throughput"):
            continue
        vals = {s: c[s] for s in ("mean", "p999") if s in c}
        # The band shows the repetitions' range (older files: the 95% interval).
        lo = {s: c.get(f"{s}_min", c.get(f"{s}_lo")) for s in ("mean", "p999") if s in c}
        hi = {s: c.get(f"{s}_max", c.get(f"{s}_hi")) for s in ("mean", "p999") if s in c}
        lo = {k: v for k, v in lo.items() if v is not None}
        hi = {k: v for k, v in hi.items() if v is not None}
        mats, status = {}, {}
        for s in ("mean", "p999"):
            sp = m.stats.get(s)
            # A bound is not a crossing: no MAT line for it (the table says ">= X").
            if sp is not None and sp.mat is not None and not bound_of(sp.status):
                lo_ci, hi_ci = (float("nan") if x is None else x for x in sp.ci)
                mats[s] = (float(sp.mat), float(lo_ci), float(hi_ci))
                status[s] = sp.status or "ok"
        out.append(
            Series(
                f"predicted: {name}", c["throughput"], vals, lo, hi, mats=mats, mat_status=status
            )
        )
    return out


def _mat_table(pred: Prediction, thresholds: dict[str, float]) -> tuple[list[str], list]:
    headers = ["mapping"]
    for s, t in thresholds.items():
        headers += [f"MAT, {_STAT_NAME.get(s, s)} < {_ms(t)} (req/s)", "95% interval"]
    rows = []
    for name, m in pred.mappings.items():
        row = [f"**{name}**" if name == pred.recommended else name]
        for s in thresholds:
            r = m.stats.get(s) or StatPrediction(None, (None, None), thresholds[s])
            if r.status == "not_reached":
                # The threshold was never crossed: the MAT is at least the top measured load.
                ceiling = r.stalled_ceiling
                row += [
                    f"{_bound(r.status)}{_rate(r.mat)} (not reached)"
                    + (f", under {_rate(ceiling)} \u2020" if ceiling else ""),
                    "-",
                ]
            elif r.status == "below_range":
                row += [f"{_bound(r.status)}{_rate(r.mat)} (over at the lowest load)", "-"]
            else:
                row += [_rate(r.mat), f"{_rate(r.ci[0])} - {_rate(r.ci[1])}"]
        rows.append(row)
    return headers, rows


STALLED_NOTE = (
    "\u2020 No level that kept to its schedule crossed the threshold: the levels above "
    "the highest of them ran while the load generator stalled (the VM's host took its "
    "CPU; it was not short of CPU itself), so they are left out of every statistic and "
    "the MAT is only a lower bound. They still say where the crossing lies: a stall of "
    "L seconds delays a response by at most about 2L (L before the send, L before the "
    "reply is read), and at the throughput named the latency stays over the threshold "
    "with twice the longest send lag taken off. That is a hint, not a measurement; "
    "rerun on a quieter host for the MAT itself."
)


def _stalled_text(stalled: dict[str, list[float]]) -> str:
    """The excluded levels that still count as over a threshold, per statistic."""
    if not stalled:
        return ""
    parts = [
        f"{', '.join(f'{x:.4g}' for x in levels)} ({_STAT_NAME.get(s, s)})"
        for s, levels in stalled.items()
    ]
    return (
        ". Of the excluded levels, the generator only stalled at "
        f"{'; '.join(parts)}, and there the latency stays over the threshold even with "
        "twice the longest send lag taken off: the crossing lies below it (hollow "
        "markers in the figure, with a bar down to that bound; not used for a MAT)."
    )


def _any_stalled(pred: Prediction, thresholds: dict[str, float]) -> bool:
    return any(
        m.stats[s].stalled_ceiling
        for m in pred.mappings.values()
        for s in thresholds
        if s in m.stats
    )


def _cost_text(cost: dict[str, Any]) -> str:
    """What the paired runs' CPU per request says about the validation error."""
    r = float(cost["median"])
    more = "more" if r >= 1 else "less"
    return (
        f"Near the measured MATs the full-scale runs spent {100 * abs(r - 1):.0f}% {more} "
        "CPU per request than the share did in the paired repetition next to them "
        f"(median of {cost['pairs']} pairs, range {cost['min']:.2f}-{cost['max']:.2f}x). "
        "A server that spends x% more per request reaches a threshold at roughly x% "
        "less throughput (more, near the knee), so about that much of the error comes "
        "from the two sides' cost per request, not from scaling load and latency by "
        "alpha. Either the machine's speed moved between the two runs of a pair (a VM's "
        "host can make one 5 s window cost 40% more than the next), the two runs replayed "
        "different seconds of the trace (with time scaling the share's window spans 1/alpha "
        "times the trace seconds of the full one's), or the share itself changes the cost: "
        "whatever runs in the quota's gaps, other work "
        "or, on a VM, the host's other tenants while the idle vCPU halts (steal on the "
        "share), evicts the share's caches."
    ) + _adjusted_text(cost)


def _adjusted_text(cost: dict[str, Any]) -> str:
    adj = cost.get("adjusted_error") or {}
    parts = [f"{_STAT_NAME.get(s, s)} {100 * e:+.1f}%" for s, e in adj.items() if math.isfinite(e)]
    if not parts:
        return ""
    return (
        " With the measured MATs scaled by that ratio (the full target at the share's cost "
        f"per request), the errors would be {', '.join(parts)}: a rough figure, since near "
        "the knee latency grows with the cost too."
    )


def _bound(status: str | None) -> str:
    """The prefix of a MAT that is only a bound: not reached (>=), below range (<), as
    :func:`shrink.mat.mat_text` writes it."""
    return {"lower": ">= ", "upper": "< "}.get(bound_of(status) or "", "")


def _error_text(m: dict[str, Any]) -> str:
    """A validation error, honest about bounds: a MAT that is a lower bound ("not
    reached") on the predicted side makes the error a lower bound too, and so on."""
    e = m.get("error")
    if e is None or not math.isfinite(e):
        return "-"
    # +1: the error can only be larger; -1: only smaller; 0: exact.
    sides = {
        {"not_reached": 1, "below_range": -1}.get(m.get("predicted_status") or "ok", 0),
        {"not_reached": -1, "below_range": 1}.get(m.get("measured_status") or "ok", 0),
    } - {0}
    text = f"{100 * e:+.1f}%"
    if not sides:
        return text
    if len(sides) == 2:
        return f"{text} (both MATs are only bounds)"
    return ("at least " if sides == {1} else "at most ") + text + _hint_text(m)


def _hint_text(m: dict[str, Any]) -> str:
    """The other end of a one-sided error, from a stalled level's hint, when there is one."""
    pred, meas = m.get("predicted"), m.get("measured")
    if not pred or not meas:
        return ""
    if m.get("measured_status") == "not_reached" and m.get("measured_stalled_ceiling"):
        c = float(m["measured_stalled_ceiling"])
        return f" (at least {100 * (pred - c) / c:+.1f}% by the stalled levels' hint)"
    if m.get("predicted_status") == "not_reached" and m.get("predicted_stalled_ceiling"):
        c = float(m["predicted_stalled_ceiling"])
        return f" (at most {100 * (c - meas) / meas:+.1f}% by the stalled levels' hint)"
    return ""


def _errors_cell(lv: Level) -> str:
    """Failed requests, by class where counted; a level over the limit says it is excluded."""
    n = sum(r.errors for r in lv.reps)
    counts = lv.failure_counts()
    parts = [f"{k.replace('http_', '')} {v}" for k, v in counts.items() if v]
    text = str(n) + (f" ({', '.join(parts)})" if parts else "")
    return f"**{text}: failed, excluded**" if lv.failed else text


def _generator_cell(lv: Level, limits: dict[str, float]) -> str:
    if lv.generator_behind:
        over = [
            _STAT_NAME.get(s, s)
            for s, t in limits.items()
            if (b := lv.stall_bound(s)) is not None and b > t
        ]
        if over:
            lags = [r.send_lag_max for r in lv.reps if r.send_lag_max is not None]
            return (
                f"**stalled** (longest send lag {_ms(max(lags))}): excluded, but over the "
                f"{' and '.join(over)} threshold even without twice that"
            )
        return "**fell behind: excluded**"
    if lv.reps_behind:
        return (
            f"kept up in {len(lv.reps) - lv.reps_behind} of {len(lv.reps)} "
            "repetitions (the others excluded)"
        )
    return "kept up"


def _level_table(curve: LoadCurve, limits: dict[str, float]) -> tuple[list[str], list]:
    """One row per level; ``limits`` are the thresholds in the curve's own seconds."""
    headers = [
        "level",
        "offered (req/s)",
        "throughput (req/s)",
        "utilization",
        "mean",
        "p99.9",
        "errors",
        "send lag p99",
        "generator",
    ]
    rows = []
    for lv in curve.levels:
        lag = [r.send_lag_p99 for r in lv.reps if r.send_lag_p99 is not None]
        util = lv.utilization
        rows.append(
            [
                f"{lv.level:.4g}",
                _rate(float(np.mean([r.offered for r in lv.kept]))),
                _rate(lv.throughput),
                "-" if util is None else f"{100 * util:.0f}%",
                _ms(lv.stat("mean")[0]),
                _ms(lv.stat("p999")[0]),
                _errors_cell(lv),
                _ms(max(lag)) if lag else "-",
                _generator_cell(lv, limits),
            ]
        )
    return headers, rows


def write_report(
    out_dir: str | Path,
    prediction: Prediction | Mapping[str, Any],
    *,
    measured: LoadCurve | None = None,
    measured_label: str = "measured on the share",
    full_run: LoadCurve | None = None,
    predicted_curve: LoadCurve | None = None,
    validation: Validation | None = None,
    whatif: Prediction | Mapping[str, Any] | None = None,
    title: str = "shrink capacity prediction",
) -> dict[str, Path]:
    """Write report.md, report.html and figures into ``out_dir``; return their paths.

    ``prediction`` and ``whatif`` are Predictions, or their JSON form.
    """
    pred = _as_prediction(prediction)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    thresholds = {k: float(v) for k, v in (pred.thresholds or {}).items()}
    doc = Doc(title)
    files: dict[str, Path] = {}
    _answer(doc, pred, thresholds, validation)
    _curves(doc, out, files, pred, thresholds, measured, measured_label, full_run)
    if validation is not None:
        _validation(doc, validation)
    if whatif is not None:
        _whatif(doc, out, files, _as_prediction(whatif), thresholds)
    _self_checks(doc, pred, thresholds, measured, measured_label, full_run)
    _assumptions(doc, pred)
    md = render_markdown(doc)
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(render_html(doc))
    files["md"] = out / "report.md"
    files["html"] = out / "report.html"
    return files


def _as_prediction(p: Prediction | Mapping[str, Any]) -> Prediction:
    if isinstance(p, Prediction):
        return p
    return Prediction.from_dict({**p, "schema": SCHEMA_ID, "mappings": p.get("mappings", {})})


def _answer(
    doc: Doc, pred: Prediction, thresholds: dict[str, float], validation: Validation | None
) -> None:
    """1. The answer: which mapping, its MATs, how sure."""
    rec = pred.recommended
    doc.h(1, "Answer")
    if rec:
        doc.note(f"Deploy **{rec}**. {pred.reason}")
    headers, rows = _mat_table(pred, thresholds)
    doc.p(
        f"Predicted maximum achievable throughput (MAT) of the full target "
        f"({pred.target_description or 'the whole machine'}) for each replica "
        "mapping: the highest throughput at which the statistic stays under its threshold."
    )
    doc.table(headers, rows)
    if _any_stalled(pred, thresholds):
        doc.p(STALLED_NOTE)
    sure = pred.confidence_summary
    if sure:
        doc.p(sure)
    speed = _speed_text(pred)
    if speed:
        doc.p(speed)
    if validation is not None:
        vmats = validation.to_dict()["mats"]
        held = [_STAT_NAME.get(st, st) for st, c in validation.covered.items() if c]
        missed = [_STAT_NAME.get(st, st) for st, c in validation.covered.items() if c is False]
        if held or missed:
            doc.p(
                "The intervals held the measured MAT for: "
                + (", ".join(held) or "none")
                + ("; **missed** for: " + ", ".join(missed) if missed else "")
                + "."
            )
        errs = [
            f"{_STAT_NAME.get(s, s)} {_error_text(vmats[s])}"
            for s, e in validation.mat_error.items()
            if e is not None and math.isfinite(e) and s in vmats
        ]
        if errs:
            doc.p(
                "Checked against a full-scale run of the whole trace: the predicted MATs "
                f"were off by {', '.join(errs)} (details under Validation)."
            )
    other = (pred.self_checks or {}).get("max_other_cpu")
    if other is not None and other > 0.10:
        doc.note(
            f"Caution: other work took up to {100 * other:.0f}% of a CPU on the share's CPUs "
            "while it was measured; see the self-checks."
        )


def _curves(
    doc: Doc,
    out: Path,
    files: dict[str, Path],
    pred: Prediction,
    thresholds: dict[str, float],
    measured: LoadCurve | None,
    measured_label: str,
    full_run: LoadCurve | None,
) -> None:
    """2. The curves: latency against load, and the CDFs near 80% utilization."""
    doc.h(1, "Latency against load")
    series = _mapping_series(pred)
    if measured is not None:
        series.append(
            curve_series(
                measured,
                f"{measured_label} (normalized)",
                points=True,
                thr_scale=1.0 / measured.alpha,
                lat_scale=latency_scale(measured),
            )
        )
    if full_run is not None:
        series.append(curve_series(full_run, "full-scale run (validation)", points=True))
    if series:
        files["latency"] = latency_figure(
            out / "latency.png",
            series,
            thresholds,
            title="Latency against normalized load; dotted: MATs (vertical shading: 95% CI); "
            "bars and bands: range of the repetitions",
        )
        doc.img(
            "latency.png",
            "Mean and 99.9th-percentile response time against normalized "
            "throughput for each mapping, with the thresholds (red) and the MATs (dotted). "
            "Lines are the monotone fit the MATs are read from, through each level's "
            "median repetition; bars and bands span the repetitions at each level.",
        )
    cdf_entries = []
    if measured is not None:
        lv = level_near_utilization(measured)
        if lv is not None:
            u = "" if lv.utilization is None else f", {100 * lv.utilization:.0f}% utilization"
            cdf_entries.append((f"predicted from the share{u}", lv, latency_scale(measured)))
    if full_run is not None:
        lv = level_near_utilization(full_run)
        if lv is not None:
            u = "" if lv.utilization is None else f", {100 * lv.utilization:.0f}% utilization"
            cdf_entries.append((f"full-scale run{u}", lv, 1.0))
    if not cdf_entries:
        return
    files["cdf"] = cdf_figure(
        out / "cdf.png",
        cdf_entries,
        title="Response-time CDFs per class at the level nearest 80% utilization (its "
        "utilization in the legend; cf. the papers' Fig. 7, 11)",
    )
    doc.img(
        "cdf.png",
        "Response-time distribution of static and dynamic requests at the level "
        "nearest 80% utilization of the server (the legend gives its utilization).",
    )
    if pred.share is not None and pred.share.kind == "cpu_time":
        doc.p(
            "On a CPU-time share the server runs at full speed until its quota is spent, "
            "then not at all until the next period. A short (static) request either "
            "finishes at full speed or waits for the next period, so its predicted "
            "distribution splits in two where a slower server's would not; long "
            "(dynamic) requests span many periods and come closer to a slower server. The MATs "
            "rest on the mean and p99.9, which the long requests dominate here."
        )


def _validation(doc: Doc, validation: Validation) -> None:
    """3. Validation against a full-scale run."""
    vd = validation.to_dict()
    doc.h(1, "Validation against a full-scale run")
    vrows = []
    for s, m in vd["mats"].items():
        vrows.append(
            [
                _STAT_NAME.get(s, s),
                _ms(m["threshold"]),
                _bound(m.get("predicted_status")) + _rate(m["predicted"]),
                _bound(m.get("measured_status")) + _rate(m["measured"]),
                _error_text(m),
            ]
        )
    doc.table(["statistic", "threshold", "predicted MAT", "measured MAT", "error"], vrows)
    if (vd.get("meta") or {}).get("paired"):
        doc.p(
            "The full-scale runs were taken alongside the scaled ones: each repetition of "
            "each load level ran on the share and on the full target back to back, in "
            "alternating order, so both saw the machine at nearly the same moment. The "
            "prediction itself uses the scaled runs only."
        )
        cost = vd.get("cost_ratio")
        if cost:
            doc.p(_cost_text(cost))
    else:
        doc.p(
            "The full-scale run was measured after the prediction. On a machine whose "
            "speed drifts (a VM), part of the error is that drift; predict with "
            "--paired-full-run to take the two side by side."
        )
    if vd["wasserstein"]:
        wrows = [
            [
                _rate(w["throughput"]),
                _ms(w["measured_mean"]),
                _ms(w["predicted_mean"]),
                _ms(w["w1"]),
                f"{100 * w['w1_relative_to_mean']:.0f}%",
            ]
            for w in vd["wasserstein"]
        ]
        doc.p(
            "Latency distributions at matched normalized loads (Wasserstein-1 distance "
            "between the predicted and measured response-time distributions):"
        )
        doc.table(
            ["throughput (req/s)", "measured mean", "predicted mean", "W1", "W1 / mean"], wrows
        )


def _whatif(
    doc: Doc, out: Path, files: dict[str, Path], whatif: Prediction, thresholds: dict[str, float]
) -> None:
    """4. What-if on another machine."""
    name = whatif.machine.get("name", "")
    doc.h(1, f"What-if: {name or 'another machine'}")
    doc.p(whatif.extra.get("summary", "Predicted with the published calibration."))
    limits = {k: float(v) for k, v in (whatif.thresholds or thresholds).items()}
    wh, wr = _mat_table(whatif, limits)
    doc.table(wh, wr)
    if whatif.recommended:
        doc.note(f"On that machine: **{whatif.recommended}**. {whatif.reason}")
    ws = _mapping_series(whatif)
    if ws:
        files["whatif"] = latency_figure(
            out / "whatif.png",
            ws,
            limits,
            title=f"What-if on {name}: predicted curves",
        )
        doc.img(
            "whatif.png",
            "Predicted latency against load for each mapping of the what-if machine.",
        )


def _cluster_text(cluster: dict[str, Any]) -> str:
    """One self-check line per Ray generator slot: where it ran, what was lost, its clock."""
    slots = cluster.get("slots") or []
    per = "; ".join(
        f"slot {s['slot']} on {s['node']}: {s['runs']} run(s)"
        + (f", **lost in {s['lost']}** (those levels left out)" if s.get("lost") else "")
        + f", clock offset up to {1e3 * float(s['max_clock_offset']):.2f} ms"
        for s in slots
    )
    return (
        f"Load generators on a Ray cluster ({cluster.get('address')}, "
        f"{cluster.get('generators')} slot(s)): " + (per or "no run reported its slots") + "."
    )


def _self_checks(
    doc: Doc,
    pred: Prediction,
    thresholds: dict[str, float],
    measured: LoadCurve | None,
    measured_label: str,
    full_run: LoadCurve | None,
) -> None:
    """5. Can the measurement be trusted?"""
    doc.h(1, "Self-checks")
    checks = pred.self_checks or {}
    items = []
    if "generator_kept_up" in checks:
        items.append(
            "Load generator kept to its schedule at every level used: "
            + (
                "**yes**"
                if checks["generator_kept_up"]
                else f"**no** - levels excluded: {checks.get('levels_behind')}"
            )
            + (
                f" ({checks['repetitions_excluded']} repetition(s) where it fell behind "
                "were left out)"
                if checks.get("repetitions_excluded")
                else ""
            )
            + _stalled_text(checks.get("levels_stalled_over") or {})
            + (
                f" (replay engine: {checks['generator_engine']})"
                if checks.get("generator_engine")
                else ""
            )
        )
    if checks.get("generator_cluster"):
        items.append(_cluster_text(checks["generator_cluster"]))
    if "levels_failed" in checks:
        totals = checks.get("failures") or {}
        limit = 100 * float(checks.get("failure_limit") or 0.001)
        items.append(
            "Requests answered whole with a 2xx/3xx status at every level used: "
            + (
                "**yes**"
                if not checks["levels_failed"]
                else f"**no** - levels excluded (failures over {limit:g}% of their requests): "
                f"{checks['levels_failed']}"
            )
            + (
                " (failures over all runs: "
                + ", ".join(f"{k.replace('http_', '')} {v}" for k, v in totals.items())
                + ")"
                if any(totals.values())
                else ""
            )
        )
    if checks.get("offered_monotone") is not None:
        items.append(_offered_text(checks, (pred.full_run or {}).get("self_checks") or {}))
    if checks.get("max_utilization") is not None:
        reached = (
            "saturated: the knee was measured"
            if checks.get("utilization_reached")
            else "**the server was not driven to saturation**"
        )
        items.append(
            f"Highest utilization of the share reached: "
            f"{100 * checks['max_utilization']:.0f}% ({reached})."
        )
    if checks.get("max_other_cpu") is not None:
        other = 100 * float(checks["max_other_cpu"])
        items.append(
            f"Other work on the share's CPUs (kernel threads, softirqs, other processes): "
            f"up to {other:.0f}% of a CPU in a window"
            + (
                ". **The share was not quiet**: on a CPU-time share whatever runs in the "
                "quota's gaps evicts the server's caches and slows it more than the full "
                "server; rerun on a quiet machine."
                if other > 10
                else " (quiet)."
            )
        )
    full_checks = (pred.full_run or {}).get("self_checks") or {}
    steals = [
        f"{100 * float(c['max_steal']):.0f}% {what}"
        for c, what in ((checks, "during the scaled runs"), (full_checks, "during the full runs"))
        if c.get("max_steal") is not None
    ]
    if steals:
        items.append(
            "Steal time on the server's CPUs (the VM's host running something else), worst "
            f"window: {', '.join(steals)}. It slows whichever runs it hits, and pairing "
            "cannot cancel what hits one side only."
        )
    gen = [
        float(c["max_generator_steal"])
        for c in (checks, full_checks)
        if c.get("max_generator_steal") is not None
    ]
    if gen:
        items.append(
            f"Steal on the load generator's CPU, worst window: {100 * max(gen):.0f}%. "
            "A vCPU the host takes away stalls the generator: the sends it owes go out "
            "late and bunched, and the level is flagged behind."
        )
    if checks.get("generator_capacity_note"):
        items.append(checks["generator_capacity_note"])
    if items:
        doc.ul(items)
    if measured is not None:
        doc.p(
            f"Levels {measured_label} (throughput, mean and p99.9: the median over the "
            "repetitions that kept up):"
        )
        scale = latency_scale(measured)
        h, r = _level_table(measured, {s: t / scale for s, t in thresholds.items()})
        doc.table(h, r)
    if full_run is not None:
        doc.p("Levels of the full-scale run:")
        h, r = _level_table(full_run, thresholds)
        doc.table(h, r)


def _assumptions(doc: Doc, pred: Prediction) -> None:
    """6. Assumptions and provenance."""
    doc.h(1, "Assumptions and calibration")
    doc.ul([str(a) for a in pred.assumptions] or ["none recorded"])
    cal = pred.calibration
    if cal:
        doc.p(f"Calibration: {cal.get('name', cal) if isinstance(cal, dict) else cal}")
    prov = pred.provenance or {}
    if prov:
        doc.h(1, "Provenance")
        doc.table(["what", "value"], [[k, f"`{v}`"] for k, v in sorted(prov.items())])


def _offered_text(checks: dict[str, Any], full: dict[str, Any]) -> str:
    """Offered load against the level: a controlled load rises with it, ~linearly."""
    parts = []
    for c, what in ((checks, "scaled"), (full, "full-scale")):
        if c.get("offered_monotone") is None:
            continue
        rises = (
            "rises with the level"
            if c["offered_monotone"]
            else "**does not rise with the level**"
        )
        parts.append(
            f"{what} runs: {rises}, {c['offered_per_level']:,.0f} req/s per unit of level, "
            f"within {100 * c['offered_linearity']:.1f}% of linear"
        )
    return (
        "Offered load (every level loops the same window of the trace at level times its "
        "rate): " + "; ".join(parts) + "."
    )


def _speed_text(pred: Prediction) -> str:
    """The CPU-time share's speed: nominal and measured (or assumed), and what it cost."""
    share = pred.share
    if share is None or share.kind != "cpu_time":
        return ""
    sp = share.speed
    if sp is None or sp.method == "nominal":
        return (
            f"Share speed: {share.cpu_fraction:g} of the full target's, **assumed** (its "
            "nominal CPU-time fraction, not measured)."
        )
    return (
        f"Share speed: nominal {sp.nominal:g}, measured {sp.effective:.3g} ({sp.method}, "
        f"{sp.cost_s:.1f} s of runs); the scaling uses the measured speed."
    )
