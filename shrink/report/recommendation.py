"""The recommendation in words: the verdict of :func:`shrink.recommend.recommend` and
what backs it (prediction.json carries the sentence as ``reason``).

The rule decides; these functions only say what it decided, by its ``rule``. A
``higher`` verdict of the re-mapped curve and of the what-if names the figures behind it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shrink.checks import stat_label
from shrink.report.text import rate_text

if TYPE_CHECKING:
    from shrink.prediction import MappingPrediction
    from shrink.recommend import Recommendation

__all__ = [
    "NO_RECOMMENDATION",
    "reason_text",
    "remap_reason",
    "sweep_best_text",
    "usl_note",
    "whatif_reason",
]

NO_RECOMMENDATION = "no recommendation: MATs are bounds"


def reason_text(rec: Recommendation) -> str:
    """The verdict in words, for the summary and the report."""
    label = stat_label(rec.stat)
    if rec.rule == "bounds":
        return (
            f"{NO_RECOMMENDATION} ({', '.join(rec.bounds)} did not cross the "
            f"{label} threshold within the measured range, so the order is "
            "open; measure higher load levels for the MATs themselves)."
        )
    if rec.rule == "none":
        return f"no recommendation: no mapping has a {label} MAT."
    if rec.rule == "zero":
        return f"no recommendation: no mapping meets the {label} threshold at any load (MAT 0)."
    if rec.rule == "over":
        return (
            f"no recommendation: no mapping meets the {label} threshold even at the lowest "
            "load measured (its MAT is only a bound, < X); measure lower loads for the MAT itself."
        )
    # "the only mapping this machine can run" was said of any one mapping predicted: of
    # --mappings 1-replica on 8 CPUs, and of 'all' on 3 CPUs, which run 3-replica too.
    if rec.rule == "only":
        return "It is the only mapping predicted."
    if rec.rule == "only_at_least":
        return (
            f"It is the only mapping predicted; its {label} MAT is at least "
            f"{rate_text(rec.at_least)} req/s, not reached: the threshold was not crossed "
            "within the measured range (measure higher loads for the MAT itself)."
        )
    if rec.rule == "equal":
        return (
            "The mappings are predicted equal here (on one socket they coincide); "
            "1-replica is the simplest to run."
        )
    if rec.gain is None:
        return f"Its {label} MAT is the only one predicted."
    why = f"Its {label} MAT is {100 * rec.gain:.1f}% above {rec.runner_up}'s"
    return why + (
        " but the intervals overlap: treat the two as close."
        if rec.overlap
        else "; the intervals do not overlap."
    )


def remap_reason(
    rec: Recommendation,
    mat: float,
    share: tuple[int, str],
    dynamic_fraction: float,
    demand_ratio: tuple[float, str],
    fixed_latency: float,
) -> str:
    """A measured share's curve re-mapped: the verdict, with the fitted figures behind a
    ``higher`` one (``share``: the share's core count and kind; ``demand_ratio``:
    D_dynamic/D_static and what it was read from, :data:`extrapolate.remap.RatioFrom`)."""
    if rec.rule != "higher":
        return reason_text(rec)
    ratio, ratio_from = demand_ratio
    source = _RATIO_FROM.get(ratio_from, ratio_from)
    return (
        f"{rec.mapping} has the highest {rec.stat}-threshold MAT ({rate_text(mat)} req/s) when "
        f"the measured share ({_share_text(*share)}) is re-mapped with the calibrated "
        f"per-class demand ratios; dynamic fraction {dynamic_fraction:.1%}, "
        f"D_dynamic/D_static {ratio:.3g} ({source}) and fixed latency "
        f"{fixed_latency * 1e6:.0f} us fitted to the measured means."
    )


_SHARE_KIND = {"cores": "a core subset", "cpu_time": "a CPU-time share", "all": "the whole target"}


def _share_text(cores: int, kind: str) -> str:
    """'1 core, a core subset': what '1 cores, cores' said."""
    return f"{cores} core{'' if cores == 1 else 's'}, {_SHARE_KIND.get(kind, kind)}"


_RATIO_FROM = {
    "light-load means": "from the per-class means at light load",
    "fitted demands": "from the per-class demands fitted over every level: the light levels "
    "could not tell a class's demand from the fixed latency",
    "calibration": "the calibration's: the share measured one class only",
}


def _gain(best: float, other: float) -> str:
    """`` (+12.3%)``: how much higher ``best`` is; nothing where ``other`` is no rate
    (a model that predicts no capacity, e.g. far outside what it was fitted on)."""
    if not (math.isfinite(best) and math.isfinite(other)) or other <= 0:
        return ""
    return f" ({best / other - 1:+.1%})"


def whatif_reason(
    rec: Recommendation,
    names: Sequence[str],
    out: Mapping[str, MappingPrediction],
    dynamic_fraction: float,
) -> str:
    """The what-if's verdict, with a ``higher`` one each mapping's MAT and the
    cross-socket effects the model gives one replica over the whole machine
    (``MappingPrediction.detail``)."""
    best, key = rec.mapping, rec.stat
    if rec.rule != "higher" or best is None:
        return reason_text(rec)
    m = out[best]
    others = [n for n in names if n != best]
    best_mat = m.stats[key].mat
    cmp = ", ".join(
        f"{n} {rate_text(out[n].stats[key].mat)}{_gain(best_mat, out[n].stats[key].mat)}"
        for n in others
    )
    ref = out.get("1-replica", m).detail
    text = (
        f"{best} has the highest {key}-threshold MAT, {rate_text(best_mat)} req/s "
        f"(vs {cmp or 'no other mapping'}). Mix: {dynamic_fraction:.1%} dynamic requests, "
        f"{ref.get('dynamic_demand_share', 0.0):.0%} of the CPU demand. Against a one-socket "
        f"share, one replica over the whole machine changes static demand by "
        f"{ref.get('static_demand_change', 0.0):+.1%} (remote NIC processing, cross-socket "
        "sharing)"
    )
    if dynamic_fraction > 0:
        text += (
            f" and dynamic demand by {ref.get('dynamic_demand_change', 0.0):+.1%} "
            f"(its replica sees {ref.get('llc_seen_mib', 0.0):g} MiB of LLC)"
        )
    return text + "."


def usl_note(usl: Mapping[str, Any] | None) -> str | None:
    """A what-if past its Universal Scalability Law's peak, in words (None if not past)."""
    if not usl or not usl.get("past_peak"):
        return None
    peaks = [x for x in (usl.get("peak_cpus_per_socket") or {}).values() if x is not None]
    cores, threads = usl["cores_per_socket"], usl.get("threads_per_core", 1)
    # The law counts hardware threads: 32 cores x 2 threads are 64 of its "cores".
    where, unit = (
        (f"{cores} cores a socket", "cores")
        if threads == 1
        else (
            f"{usl['cpus_per_socket']} hardware threads a socket ({cores} cores x {threads} "
            "threads; the model counts each thread as a core)",
            "threads",
        )
    )
    return (
        f"note: {where} is past the calibration's scalability peak (about "
        f"{min(peaks):.0f} {unit} a socket): the model gives less throughput with more "
        f"{unit} there, and inflates each request as if every one were busy, so its MATs "
        "(0 far past the peak) are an extrapolation, not a forecast"
    )


def sweep_best_text(sweep: Mapping[str, Any]) -> str:
    """whatif's best mapping at each dynamic fraction of its sweep, and why a fraction has
    none: "1:none" said nothing of why (no mapping's mean meets the threshold there at
    any load, so each MAT is 0 and none is best)."""
    from shrink.report.text import seconds_text

    rows = sweep.get("rows") or []
    pairs = ", ".join(f"{r['dynamic_fraction']:g}:{r['best'] or 'none'}" for r in rows)
    stat = stat_label(str(sweep.get("stat", "mean")))
    limit = sweep.get("threshold")
    limit_text = "its threshold" if limit is None else seconds_text(float(limit))
    text = f"best mapping by dynamic fraction (the highest MAT, {stat} < {limit_text}): {pairs}"
    if any(r["best"] is None for r in rows):
        text += (
            f"; none: at that fraction no mapping's {stat} latency is under {limit_text} "
            "even at the lightest load (every MAT is 0)"
        )
    return text
