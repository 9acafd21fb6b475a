"""The Support-like workload: calibration, published tables, sessions, Modified Support.

Random properties are checked over several seeds against intervals (binomial,
chi-square, KS, normal) at stated levels, never against one lucky seed.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow.compute as pc
import pytest
from helpers.surface import exported, public_names
from scipy import stats

from shrink import ParameterError
from shrink.synth import (
    DOWNLOAD_CLASSES,
    PAGES,
    SupportParams,
    build_site,
    expected_dynamic_fraction,
    images_per_page,
    synth_support,
    visits_per_session,
)
from shrink.synth.support import _draw_downloads

pytestmark = pytest.mark.compute

SEEDS = range(6)


ALL = ("session", "burst", "t", "think", "path", "cls", "bytes", "status", "client")


def _columns(trace, names=ALL):
    return {name: trace.column(name) for name in names}


def _burst_heads(c):
    return np.r_[
        True, (c["session"][1:] != c["session"][:-1]) | (c["burst"][1:] != c["burst"][:-1])
    ]


@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.10])
def test_calibrated_images_give_the_dynamic_fraction(fraction):
    params = SupportParams(dynamic_fraction=fraction)
    assert expected_dynamic_fraction(params) == pytest.approx(fraction, abs=1e-12)
    m = images_per_page(params)
    assert m.shape == (len(PAGES),) and (m >= 0).all()
    observed = [
        synth_support(300, 200, seed=s, params=params).info().dynamic_fraction for s in SEEDS
    ]
    # The image count per page is floor(m)+Bernoulli, so the share barely varies;
    # cut-off sessions at the end shift it by well under 0.1 point.
    assert max(abs(f - fraction) for f in observed) < 0.005
    assert abs(np.mean(observed) - fraction) < 0.001


def test_dynamic_fraction_too_high_is_refused():
    v = visits_per_session(SupportParams())
    most = v[:-1].sum() / v.sum()
    with pytest.raises(ParameterError, match=r"dynamic_fraction == 0\.99"):
        images_per_page(SupportParams(dynamic_fraction=0.99))
    assert most < 0.99


def test_reply_sizes_are_in_the_published_ranges():
    trace = synth_support(500, 300, seed=1)
    c = _columns(trace)
    dyn = c["cls"] == "dynamic"
    img = np.array([p.startswith("/static/img/") for p in c["path"]])
    dl = np.array([p.startswith("/static/dl/") for p in c["path"]])
    assert dyn.sum() > 0 and img.sum() > 0 and dl.sum() > 0
    assert (dyn | img | dl).all()
    assert c["bytes"][dyn].min() >= 10 * 1024 and c["bytes"][dyn].max() <= 100_000
    assert c["bytes"][img].max() < 10_000
    assert c["bytes"][dl].min() > 100 * 1024
    assert all(p.startswith("/app/") and ".php?bytes=" in p for p in c["path"][dyn])


def test_download_sampler_matches_the_published_tables():
    params = SupportParams()
    site = build_site(params, 3200)  # 20 directories
    assert site.n_dirs == 20
    files_per_dir = sum(len(sizes) for sizes, _, _ in DOWNLOAD_CLASSES)
    assert files_per_dir == 16
    shares = np.array([share for _, share, _ in DOWNLOAD_CLASSES])
    shares = shares / shares.sum()
    zipf = np.arange(1, 21, dtype=float) ** -1.2
    zipf /= zipf.sum()
    for seed in range(3):
        idx = _draw_downloads(params, site, np.random.default_rng(seed), 60_000)
        local = idx - site.download_start
        dirs, slot = np.divmod(local, files_per_dir)
        offset = np.cumsum([0] + [len(s) for s, _, _ in DOWNLOAD_CLASSES])
        cls = np.searchsorted(offset, slot, side="right") - 1
        # chi-square at the 0.1% level: class shares, directory Zipf(1.2), popularity in class
        counts = np.bincount(cls, minlength=6)
        assert stats.chisquare(counts, shares * counts.sum()).pvalue > 1e-3
        dcounts = np.bincount(dirs, minlength=20)
        assert stats.chisquare(dcounts, zipf * dcounts.sum()).pvalue > 1e-3
        for c, (_, _, cum) in enumerate(DOWNLOAD_CLASSES):
            if len(cum) == 1:
                continue
            within = slot[cls == c] - offset[c]
            obs = np.bincount(within, minlength=len(cum))
            pmf = np.diff(np.r_[0.0, cum])
            assert stats.chisquare(obs, pmf * obs.sum()).pvalue > 1e-3


def test_download_class_shares_in_a_trace():
    params = SupportParams()
    shares = np.array([share for _, share, _ in DOWNLOAD_CLASSES])
    counts = np.zeros(6)
    for seed in range(2):
        table = synth_support(1500, 600, seed=seed, params=params).table
        paths = table.filter(pc.starts_with(table.column("path"), "/static/dl/")).column("path")
        for p in paths.to_pylist():
            counts[int(p.rsplit("/class", 1)[1].split("_")[0])] += 1
    assert counts.sum() > 5_000
    # chi-square at the 0.1% level against the published shares
    assert stats.chisquare(counts, shares / shares.sum() * counts.sum()).pvalue > 1e-3


def test_think_times_follow_the_truncated_exponential():
    params = SupportParams()
    mean = params.think_time_mean()
    z = -np.expm1(-params.think_max_s / params.think_mean_s)

    def cdf(x):
        return -np.expm1(-np.clip(x, 0, params.think_max_s) / params.think_mean_s) / z

    for seed in SEEDS:
        c = _columns(
            synth_support(400, 300, seed=seed, params=params), ("session", "burst", "think")
        )
        think = c["think"][_burst_heads(c)]
        assert think.max() <= params.think_max_s and think.min() >= 0
        half = 4.0 * think.std(ddof=1) / np.sqrt(think.size)  # 4-sigma interval
        assert abs(think.mean() - mean) < half
        assert stats.kstest(think, cdf).pvalue > 1e-3


def test_sessions_start_at_index_and_chain_their_bursts():
    c = _columns(synth_support(200, 400, seed=3))
    heads = _burst_heads(c)
    s, b, t, think = c["session"][heads], c["burst"][heads], c["t"][heads], c["think"][heads]
    first = b == 0
    assert all(p.startswith("/app/index.php?") for p in c["path"][heads][first])
    nxt = ~first[1:]
    np.testing.assert_allclose(t[1:][nxt], (t[:-1] + think[:-1])[nxt])
    assert np.all(np.diff(s) >= 0)
    assert (t < 400).all() and (t >= 0).all()
    # Back to back: a slot's next session starts when its previous one's last think ends.
    client = c["client"][heads]
    ends = {}
    for i in np.flatnonzero(first):
        user = client[i]
        if user in ends:
            assert t[i] == pytest.approx(ends[user])
        j = i
        while j + 1 < s.size and s[j + 1] == s[i]:
            j += 1
        ends[user] = t[j] + think[j]


def test_users_meta_and_load_scale_with_users():
    small = synth_support(100, 120, seed=1)
    big = synth_support(400, 120, seed=1)
    assert small.meta["users"] == 100 and big.meta["workload"] == "support"
    assert big.meta["mode"] == "session"
    ratio = big.info().requests / small.info().requests
    assert 3.2 < ratio < 4.8
    assert len(set(big.column("client"))) == 400


def test_modified_support_keeps_bytes_and_lowers_dynamic_share():
    rf = 0.4
    for seed in range(4):
        base = synth_support(300, 300, seed=seed)
        mod = synth_support(300, 300, seed=seed, params=SupportParams(rf=rf))
        names = ("t", "path", "cls", "bytes")
        cb, cm = _columns(base, names), _columns(mod, names)
        np.testing.assert_array_equal(cb["bytes"], cm["bytes"])
        np.testing.assert_array_equal(cb["t"], cm["t"])
        changed = cb["path"] != cm["path"]
        assert (cb["cls"][changed] == "dynamic").all() and (cm["cls"][changed] == "static").all()
        assert all(p.startswith("/static/mod/") for p in cm["path"][changed])
        n_dyn = int((cb["cls"] == "dynamic").sum())
        kept = int((cm["cls"] == "dynamic").sum())
        # kept ~ Binomial(n_dyn, 1 - rf): 4-sigma interval
        sd = np.sqrt(n_dyn * rf * (1 - rf))
        assert abs(kept - n_dyn * (1 - rf)) < 4 * sd
    assert mod.meta["expected_dynamic_fraction"] == pytest.approx(0.05 * (1 - rf))


def test_not_modified_replies_are_empty_304s():
    params = SupportParams(not_modified_fraction=0.3)
    c = _columns(synth_support(200, 200, seed=2, params=params))
    hit = c["status"] == 304
    img = np.char.startswith(c["path"].astype(str), "/static/img/")
    assert (c["bytes"][hit] == 0).all() and img[hit].all()
    n, k = int(img.sum()), int(hit.sum())
    assert abs(k - 0.3 * n) < 4 * np.sqrt(n * 0.3 * 0.7)


def test_scaled_work_and_memory_hit_the_weighted_mean():
    params = SupportParams().scaled(work_us=800, mem_kib=512)
    v = visits_per_session(params)[: len(PAGES)]
    share = v / v.sum()
    assert share @ params.page_weights("work_us") == pytest.approx(800)
    assert share @ params.page_weights("mem_kib") == pytest.approx(512)
    site = build_site(params, 10)
    work = site.work[site.dynamic]
    assert work.min() > 0 and work.max() < 2000


def test_cap_limits_download_files_and_records_the_nominal_size():
    params = SupportParams(max_download_bytes=300_000)
    site = build_site(params, 1000)
    dl = slice(site.download_start, None)
    assert site.nbytes[dl].max() == 300_000
    assert site.nominal[dl].max() == 37_748_736
    c = _columns(synth_support(1000, 120, seed=0, params=params, site=site))
    assert c["bytes"].max() <= 300_000


def test_bad_parameters_name_themselves():
    with pytest.raises(ParameterError, match=r"rf == 1.5, must be in \[0, 1\]"):
        SupportParams(rf=1.5)
    with pytest.raises(ParameterError, match="work_us keys"):
        SupportParams(work_us={"index": 1.0})
    with pytest.raises(ParameterError, match="dynamic_bytes"):
        SupportParams(dynamic_bytes={**SupportParams().dynamic_bytes, "file": (1_000, 5_000)})
    with pytest.raises(ParameterError, match="users == 0"):
        synth_support(0, 10)
    with pytest.raises(ParameterError, match="other params"):
        synth_support(10, 10, site=build_site(SupportParams(), 20))
    p = replace(SupportParams(), n_images=4)
    least = r"dynamic_fraction == 0.05, must be at least 0.1977 .* at most 4 images"
    with pytest.raises(ParameterError, match=least):
        images_per_page(p)


def test_too_short_a_trace_is_empty_not_an_error():
    assert len(synth_support(1, 0.001, seed=0)) == 0
    short = synth_support(3, 0.5, seed=0, stagger_s=0.1)
    assert short.n_sessions == 3 and set(short.column("burst")) == {0}


def test_public_surface_is_listed():
    import shrink.synth as synth

    assert public_names(synth) == exported(synth)
