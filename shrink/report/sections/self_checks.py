"""Section 2: can the measurement be trusted? One row per check, levels in the appendix."""

from __future__ import annotations

from typing import Any

from shrink.loadcurve import LoadCurve
from shrink.mat import mat_text
from shrink.report.blocks import Doc
from shrink.report.sections import Measured
from shrink.report.tables import level_table
from shrink.report.text import STAT_NAME, level_text, seconds_text
from shrink.scaling import CALIBRATION_BUSY, latency_scale
from shrink.selfchecks import QUIET_OTHER_CPU
from shrink.share import Share

__all__ = ["add_self_checks", "cluster_text"]

# Steal in a window above this is worth a sentence on what it does; below it the
# figure alone says enough.
STEAL_NOTABLE = 0.02


def add_self_checks(
    doc: Doc,
    m: Measured,
    *,
    appendix: Doc | None = None,
) -> None:
    """2. Can the measurement be trusted? One row per check: the load generator, failed
    requests, offered load, saturation, the share's speed, other work and steal on the
    CPUs, the host's drift. The levels of each curve go to ``appendix`` (else here)."""
    doc.h(1, "Checks")
    checks = m.pred.self_checks or {}
    full_checks = full_run_checks(m.full_run, m.thresholds)
    rows = [
        *_generator_items(checks),
        *_failure_items(checks),
        *_server_items(checks, full_checks),
        *_speed_items(getattr(m.pred, "share", None), _extra(m.pred, "model_error")),
        *_steal_items(checks, full_checks),
        *_host_items(full_checks),
        *_moved_items(m.full_run, m.curve),
        *_load_items(full_checks),
        *_docroot_items(getattr(m.pred, "inputs", None) or {}),
    ]
    if checks.get("generator_capacity_note"):
        rows.append(["Load generator's capacity", checks["generator_capacity_note"]])
    if rows:
        doc.table(["check", "result"], rows)
    where = appendix if appendix is not None else doc
    if m.curve is not None or m.full_run is not None:
        where.h(2, "Levels measured")
    if m.curve is not None:
        where.p(
            f"Levels {m.label} (throughput, mean and p99.9: the median over the "
            "repetitions that kept up):"
        )
        scale = latency_scale(m.curve)
        h, r = level_table(m.curve, {s: t / scale for s, t in m.thresholds.items()})
        where.table(h, r)
        if text := share_mats_text(m.pred, m.curve_file):
            where.p(text)
    if m.full_run is not None:
        where.p("Levels of the full-scale run:")
        h, r = level_table(m.full_run, m.thresholds)
        where.table(h, r)


def share_mats_text(pred: Any, curve_file: str = "measured-curve.json") -> str:
    """The share's own MATs read off these levels, at the thresholds it was read at
    (longer on a CPU-time share, slow motion), with the command that reads them again:
    the one number of a prediction a user can check by hand."""
    mats = getattr(pred, "measured_mats", None) or {}
    parts, cmds = [], []
    for s, sp in mats.items():
        thr = threshold_option(sp.threshold)
        mat = mat_text(sp.mat, sp.status, sp.ci)
        parts.append(f"{STAT_NAME.get(s, s)} < {seconds_text(sp.threshold)}: {mat} req/s")
        cmds.append(f"`shrink mat {curve_file} --stat {STAT_NAME.get(s, s)} --threshold {thr}`")
    if not parts:
        return ""
    return (
        f"The share's own MAT, read off these levels: {'; '.join(parts)} "
        f"({' and '.join(cmds)} read the same)."
    )


def threshold_option(seconds: float) -> str:
    """``seconds`` as ``--threshold`` reads it back exactly: a threshold divided by a
    CPU-time share's scale (0.5 s / 0.3) was written '1.66667s', another threshold,
    another MAT than the one beside it."""
    from shrink.checks import parse_threshold

    short = f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1e3:g}ms"
    exact = (f"{seconds!r}s",) if seconds >= 1 else (f"{seconds * 1e3!r}ms", f"{seconds!r}s")
    for text in (short, *exact):
        if parse_threshold(text) == seconds:
            return text
    return f"{seconds!r}s"


def _extra(pred: Any, key: str) -> dict[str, Any]:
    return (getattr(pred, "extra", None) or {}).get(key) or {}


def _content_text(merr: dict[str, Any]) -> str:
    """How the model error's content term corrects a share's throughputs."""
    prov = merr.get("provenance") or {}
    slope, dynamic = prov.get("slope"), prov.get("dynamic_share")
    if prov.get("why"):
        return f"nothing corrects them here: {prov['why']}"
    if not slope or dynamic is None:
        return "no fitted term corrects them"
    return (
        f"the share model corrects them by x{merr.get('correction', 1.0):.2f} (its dynamic "
        f"pages took {100 * dynamic:.0f}% of its light-load work; slope {slope:g}, fitted "
        f"on {prov.get('runs', '?')} runs, {prov.get('machine', 'machine kind not recorded')})"
    )


def _speed_items(share: Share | None, merr: dict[str, Any] | None = None) -> list[list[str]]:
    """What the prediction read of the full target: nothing on a core subset; on a
    CPU-time share its speed, assumed (and how the model error corrects it) or
    calibrated (with what the calibration ran)."""
    if share is None or share.kind == "all":
        return []
    if share.kind != "cpu_time":
        return [["Full target read", "nothing: a core subset needs no calibration"]]
    sp = share.speed
    if sp is None or sp.method == "nominal":
        text = (
            f"{share.cpu_fraction:g} of the full target's, **assumed** (its nominal "
            "CPU-time fraction, not measured; nothing ran on the full target): a "
            "time-sliced core costs more per request, the more so for dynamic pages and "
            f"small shares, so the scaled runs read low; {_content_text(merr or {})}"
        )
    else:
        busy = sp.full_target_busy
        beside = sum(r["seconds"] for r in sp.full_target_runs if r.get("phase") == "beside")
        text = (
            f"nominal {sp.nominal:g}, calibrated {sp.effective:.3g}: the full target ran "
            f"{sp.full_target_seconds:.1f} s at light load (at most "
            f"{'an unknown load' if busy is None else f'{100 * busy:.1f}% busy'}"
            + (f", {beside:.1f} s of it beside the share's levels, read as its side" if beside
               else "")
            + ")"
            + (f"; **over the calibration's bound of {100 * CALIBRATION_BUSY:g}% busy**: the "
               "host slowed within a run" if busy is not None and busy > CALIBRATION_BUSY
               else "")
            + "; nothing else of it reached the prediction"
            + (f"; the share's sweep started from {sp.swept_at:.3g}" if sp.swept_at else "")
        )  # fmt: skip
    return [["Share's speed", text]]


def _stopped_levels_text(stopped: list[list[float]]) -> str:
    """Where shrink itself was stopped in a repetition left out ([level, seconds] each)."""
    if not stopped:
        return ""
    where = ", ".join(f"level {level_text(lv)} for {seconds_text(s)}" for lv, s in stopped)
    return (
        f" (shrink itself was stopped, by a signal or job control, at {where}: those sends "
        "went out late, not by the host's doing nor the server's)"
    )


def _generator_items(checks: dict[str, Any]) -> list[list[str]]:
    """Whether the load generator kept to its schedule, and where it ran."""
    items = []
    if "generator_kept_up" in checks:
        items.append([
            "Load generator kept to its schedule at every level used",
            (
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
            + _stopped_levels_text(checks.get("levels_stopped") or [])
            + _stalled_text(checks.get("levels_stalled_over") or {})
            + (
                f" (replay engine: {checks['generator_engine']})"
                if checks.get("generator_engine")
                else ""
            ),
        ])  # fmt: skip
    if checks.get("max_generator_cpu") is not None:
        items.append([
            "Load generator's CPU",
            f"up to {100 * checks['max_generator_cpu']:.0f}% of a CPU in a repetition: where "
            "it shares a CPU with the server (a core subset on a small machine), that much "
            "was taken from the server",
        ])  # fmt: skip
    if checks.get("generator_cluster"):
        items.append(["Load generators", cluster_text(checks["generator_cluster"])])
    return items


def _failure_items(checks: dict[str, Any]) -> list[list[str]]:
    """Whether every level used was answered whole, and the failures counted."""
    if "levels_failed" not in checks:
        return []
    totals = checks.get("failures") or {}
    limit = 100 * float(checks.get("failure_limit") or 0.001)
    return [[
        "Requests answered whole with a 2xx/3xx status at every level used",
        (
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
        ),
    ]]  # fmt: skip


def _server_items(checks: dict[str, Any], full_checks: dict[str, Any]) -> list[list[str]]:
    """Offered load, the utilization reached, and other work on the share's CPUs."""
    items = []
    if checks.get("offered_monotone") is not None:
        items.append(["Offered load rises with the level", _offered_text(checks, full_checks)])
    if checks.get("max_utilization") is not None:
        top = f"{100 * checks['max_utilization']:.0f}%"
        items.append([
            "Share driven to saturation (its knee measured)",
            f"**yes**: {top} busy at the top level"
            if checks.get("utilization_reached")
            else f"**no**: {top} busy at most, so the knee was not measured; give the "
            "sweep more levels or time (--max-levels, --budget)",
        ])  # fmt: skip
    if checks.get("max_other_cpu") is not None:
        other = 100 * float(checks["max_other_cpu"])
        items.append([
            "Other work on the share's CPUs (kernel threads, softirqs, other processes)",
            f"up to {other:.0f}% of a CPU in a window"
            + (
                ". **The share was not quiet**: on a CPU-time share whatever runs in the "
                "quota's gaps evicts the server's caches and slows it more than the full "
                "server; rerun on a quiet machine."
                if other > 100 * QUIET_OTHER_CPU
                else " (quiet)"
            ),
        ])  # fmt: skip
    return items


def _steal_items(checks: dict[str, Any], full_checks: dict[str, Any]) -> list[list[str]]:
    """Steal time (a VM's host taking the CPU) on the server's and the generator's CPUs."""
    parts = [
        f"{100 * float(c['max_steal']):.0f}% on the server's CPUs {what}"
        for c, what in ((checks, "during the scaled runs"), (full_checks, "during the full runs"))
        if c.get("max_steal") is not None
    ]
    gen = [
        float(c["max_generator_steal"])
        for c in (checks, full_checks)
        if c.get("max_generator_steal") is not None
    ]
    if gen:
        parts.append(f"{100 * max(gen):.0f}% on the load generator's CPU")
    if not parts:
        return []
    worst = max([float(c.get("max_steal") or 0) for c in (checks, full_checks)] + gen, default=0.0)
    hint = (
        ". It slows whichever runs it hits (pairing cannot cancel what hits one side "
        "only) and stalls the generator; rerun when the host is quieter"
        if worst > STEAL_NOTABLE
        else ""
    )
    return [["Steal (the VM's host running something else), worst window", ", ".join(parts) + hint]]


def full_run_checks(full_run: LoadCurve | None, thresholds: dict[str, float]) -> dict[str, Any]:
    """A full-scale curve's own checks: those it carries, else computed from it."""
    if full_run is None:
        return {}
    from shrink.selfchecks import full_checks

    return full_run.meta.get("self_checks") or full_checks(full_run, thresholds)


def _host_items(checks: dict[str, Any]) -> list[list[str]]:
    """How far the host's speed moved over the validation's runs (shrink.selfchecks)."""
    if checks.get("host_spread") is None:
        return []
    lo, hi = checks["host_capacity_range"]
    return [[
        "Host's drift over the validation's runs",
        f"the full target's capacity over its {checks['host_checks']} busy repetitions read "
        f"{lo:,.0f}-{hi:,.0f} req/s (max / min {checks['host_spread']:.2f}); a validation "
        "error is only as sure as that spread: the host moves the prediction's runs and the "
        "validation's alike",
    ]]  # fmt: skip


def _moved_items(full_run: LoadCurve | None, curve: LoadCurve | None) -> list[list[str]]:
    """How far the host moved between the validation's runs beside the share's and its
    own search, where its MAT is read (shrink.selfchecks.host_moved)."""
    from shrink.selfchecks import host_moved

    got = host_moved(full_run, curve) if full_run is not None and curve is not None else {}
    if not got:
        return []
    return [[
        "Host between the share's runs and the validation's own levels",
        f"the full target's busy capacity read {got['host_beside_share']:,.0f} req/s beside "
        f"the share's runs and {got['host_after_share']:,.0f} on its own levels afterwards: "
        f"**{got['host_after_over_beside']:.2f}**; the measured MAT is read on its own levels, "
        "the prediction's on the share's, so a host that moved (or a core cheaper when "
        "busier) moves the validation's error by about as much",
    ]]  # fmt: skip


def _docroot_items(inputs: dict[str, Any]) -> list[list[str]]:
    """A document root that changed between predict's start and its end (its runs), or
    was gone at the end (removed or moved: nothing recorded that validate can check)."""
    changed = inputs.get("docroot_changed")
    if not isinstance(changed, dict):
        return []
    names = ", ".join(str(n) for n in changed.get("differ") or [])
    end = changed.get("at_end")
    then = (
        f"{end} at the end" + (f"; {names} differ" if names else "")
        if end
        else "and no folder there at the end: removed or moved"
    )
    kept = (
        "the prediction records the content at its end, which validate checks against"
        if end
        else "the prediction records no fingerprint of it, so validate cannot check one"
    )
    return [[
        "Document root during the runs",
        f"**changed while predict ran** (its fingerprint {changed.get('at_start')} before "
        f"the first run, {then}): some levels were measured on other pages than the later "
        f"ones, and {kept}",
    ]]  # fmt: skip


def _load_items(checks: dict[str, Any]) -> list[list[str]]:
    """Whether the full target's cost per request moved with its load (the CPU-time
    share's calibration reads it light and takes it not to)."""
    if checks.get("light_over_busy") is None:
        return []
    return [[
        "Full target's capacity, light over busy (the calibration takes it as 1)",
        f"{checks['light_capacity']:,.0f} req/s at most 20% busy, "
        f"{checks['busy_capacity']:,.0f} at least 50% busy: "
        f"**{checks['light_over_busy']:.2f}**",
    ]]  # fmt: skip


def cluster_text(cluster: dict[str, Any]) -> str:
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


def _stalled_text(stalled: dict[str, list[float]]) -> str:
    """The excluded levels that still count as over a threshold, per statistic."""
    if not stalled:
        return ""
    parts = [
        f"{', '.join(f'{x:.4g}' for x in levels)} ({STAT_NAME.get(s, s)})"
        for s, levels in stalled.items()
    ]
    return (
        ". Of the excluded levels, the generator only stalled at "
        f"{'; '.join(parts)}, and there the latency stays over the threshold even with "
        "twice the longest send lag taken off: the crossing lies below it (hollow "
        "markers in the figure, with a bar down to that bound; not used for a MAT)."
    )


def _linear_verdict(c: dict[str, Any]) -> str:
    """Whether the offered load followed the level, and what to check when it did not."""
    ok = c.get("offered_linear")
    if ok is None:
        return ""
    tol = 100 * c.get("offered_linear_tolerance", 0.1)
    if ok:
        return f" (linear: within {tol:g}%)"
    worst = c.get("offered_worst_level")
    at = "" if worst is None else f", furthest at level {level_text(worst)}"
    return (
        f" (**not linear**: more than {tol:g}%{at}; the load did not follow the level "
        "there: check that the generator kept up, and that the trace window the "
        "levels loop holds enough sessions (a longer trace or --skip))"
    )


def _offered_text(checks: dict[str, Any], full: dict[str, Any]) -> str:
    """Offered load against the level: a controlled load rises with it, ~linearly."""
    parts = []
    for c, what in ((checks, "scaled"), (full, "full-scale")):
        if c.get("offered_monotone") is None:
            continue
        rises = (
            "rises with the level" if c["offered_monotone"] else "**does not rise with the level**"
        )
        parts.append(
            f"{what} runs: {rises}, {c['offered_per_level']:,.0f} req/s per unit of level, "
            f"within {100 * c['offered_linearity']:.1f}% of linear{_linear_verdict(c)}"
        )
    # Every level loops the same window of the trace at level times its rate.
    return "; ".join(parts)
