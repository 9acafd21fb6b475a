"""Statistical tests of the samplers over many seeds, with controlled false-alarm rates.

Each check runs a test at a stated level on many seeds and counts rejections;
the count is compared with the binomial bound the level implies, so a correct
sampler fails with probability < 1e-3 and a biased one (see the power test)
fails nearly always. Seeds are fixed: the outcome is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.sampler_traces import make_trace, row_ids
from scipy import stats

import samplers
from shrink.trace import Trace

pytestmark = pytest.mark.compute

SEEDS = 200
LEVEL = 0.01  # per-test significance level
# Most rejections a correct sampler may give in SEEDS tests at LEVEL (P(more) < 1e-3).
MAX_REJECT = int(stats.binom.ppf(0.999, SEEDS, LEVEL))


def _kept_and_dropped(parent: Trace, sample: Trace) -> tuple[np.ndarray, np.ndarray]:
    kept = np.zeros(len(parent), dtype=bool)
    kept[row_ids(sample)] = True
    return kept, ~kept


def _burst_first(trace: Trace) -> np.ndarray:
    s, b = trace.column("session"), trace.column("burst")
    return np.r_[True, (s[1:] != s[:-1]) | (b[1:] != b[:-1])]


def test_kept_fraction_of_sessions_within_binomial_interval():
    parent = make_trace(np.random.default_rng(0), 1000)
    n = parent.n_sessions
    outside = 0
    trials = 0
    for alpha in (0.05, 0.25, 0.5, 0.9):
        lo, hi = stats.binom.interval(0.999, n, alpha)
        for seed in range(100):
            k = samplers.sample(parent, alpha, seed=seed).meta["kept_sessions"]
            outside += not lo <= k <= hi
            trials += 1
    # Each check is a 99.9% interval: allow what 0.1% false alarms give at P > 0.999.
    assert outside <= stats.binom.ppf(0.999, trials, 0.001)


def test_kept_sessions_are_binomial_in_distribution():
    """The counts over seeds follow Binomial(n, alpha) (chi-square on binned counts)."""
    parent = make_trace(np.random.default_rng(1), 400, mean_bursts=1.5, mean_embedded=0.5)
    n, alpha = parent.n_sessions, 0.3
    counts = np.array(
        [samplers.sample(parent, alpha, seed=s).meta["kept_sessions"] for s in range(1000)]
    )
    edges = stats.binom.ppf(np.linspace(0, 1, 11), n, alpha)
    edges[0], edges[-1] = -1, n
    observed = np.histogram(counts, edges)[0]
    expected = np.diff(stats.binom.cdf(edges, n, alpha)) * counts.size
    assert stats.chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize(
    ("level", "open_loop"),
    [("session", False), ("object", False), ("object", True), ("stratified", False)],
)
def test_request_rate_per_unit_time_scales_by_alpha(level, open_loop):
    """Per 10 s window, mean sampled requests over seeds = alpha x parent's (z-test)."""
    rng = np.random.default_rng(2)
    parent = make_trace(rng, 3000 if open_loop else 600, open_loop=open_loop)
    alpha, n_seeds = 0.25, 120
    edges = np.linspace(0.0, 100.0, 11)
    base = np.histogram(parent.column("t"), edges)[0]
    counts = np.array(
        [
            np.histogram(samplers.sample(parent, alpha, seed=s, level=level).column("t"), edges)[0]
            for s in range(n_seeds)
        ]
    )
    ratio = counts.mean(axis=0) / (alpha * base)
    se = counts.std(axis=0, ddof=1) / np.sqrt(n_seeds) / (alpha * base)
    # Bonferroni over 10 windows at an overall 1e-3 false-alarm rate.
    z = stats.norm.ppf(1 - 1e-3 / 20)
    assert np.all(np.abs(ratio - 1.0) <= z * se), (ratio, se)
    # ... and the total rate too, which a sampler keeping whole-trace order would break.
    assert abs(counts.sum(axis=1).mean() / (alpha * base.sum()) - 1) < 0.02


def _rejections(level: str, alpha: float, *, open_loop: bool = False) -> dict[str, int]:
    """KS (bytes, think) and chi-square (cls) of kept vs dropped, over SEEDS fresh parents.

    Kept vs dropped is the exact two-independent-samples null here (see
    helpers/sampler_traces.py); kept vs the whole parent would be a conservative test.
    """
    out = {"bytes": 0, "think": 0, "cls": 0}
    for seed in range(SEEDS):
        parent = make_trace(np.random.default_rng(10_000 + seed), 120, open_loop=open_loop)
        sample = samplers.sample(parent, alpha, seed=seed, level=level)
        kept, dropped = _kept_and_dropped(parent, sample)
        if kept.sum() < 5 or dropped.sum() < 5:
            continue
        nbytes = parent.column("bytes")
        out["bytes"] += stats.ks_2samp(nbytes[kept], nbytes[dropped]).pvalue < LEVEL
        if not open_loop:
            first = _burst_first(parent)
            think = parent.column("think")
            out["think"] += (
                stats.ks_2samp(think[kept & first], think[dropped & first]).pvalue < LEVEL
            )
        dyn = parent.column("cls") == "dynamic"
        table = [
            [(dyn & kept).sum(), (~dyn & kept).sum()],
            [(dyn & ~kept).sum(), (~dyn & ~kept).sum()],
        ]
        out["cls"] += stats.chi2_contingency(table, correction=False).pvalue < LEVEL
    return out


@pytest.mark.parametrize(
    ("level", "open_loop"),
    [("session", False), ("object", True), ("request", True), ("stratified", False)],
)
def test_sample_distributions_match_parent(level, open_loop):
    rejected = _rejections(level, 0.3, open_loop=open_loop)
    assert max(rejected.values()) <= MAX_REJECT, (rejected, MAX_REJECT)


def test_object_sampler_keeps_reply_size_and_class_distributions():
    # Think times change by design in closed-loop object sampling; sizes and classes must not.
    rejected = _rejections("object", 0.3)
    assert rejected["bytes"] <= MAX_REJECT and rejected["cls"] <= MAX_REJECT, rejected


class _KeepsBigSessions:
    """A biased sampler, to show the distribution tests above can fail."""

    name = "biased"

    def sample(self, trace: Trace, alpha: float, *, seed: int = 0) -> Trace:
        s, b = trace.column("session"), trace.column("bytes")
        _, inv = np.unique(s, return_inverse=True)
        mean = np.bincount(inv, weights=b) / np.bincount(inv)
        keep = mean >= np.quantile(mean, 1 - alpha)
        return trace.filter(keep[inv])


def test_distribution_check_detects_a_biased_sampler(monkeypatch):
    from samplers import _protocol

    monkeypatch.setitem(_protocol._REGISTRY, "biased", _KeepsBigSessions)
    rejected = _rejections("biased", 0.3)
    assert rejected["bytes"] >= SEEDS // 2, rejected
