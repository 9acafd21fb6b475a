"""Built-in workloads for the simulator, generated directly with numpy.

``tcp``: the papers' TCP/IP workload - every request is for one static 1 KB file
(``/static/file1k.bin``), open loop, Poisson arrivals at ``rate`` (httperf at a
fixed rate).

``support``: a SPECweb2009-Support-like session workload built on the published
facts (``shared/data/published/specweb2009_support.md``): a session is a run
of page visits; each page is one dynamic PHP request (reply 10-100 KB,
log-uniform) followed by its embedded images (static, below 10 KB) and, now
and then, a download (static, above 100 KB, from the six published size
classes and their shares). About 5% of requests are dynamic. Assumptions (named
parameters): images per page Poisson(``images_per_page``), downloads per page
``downloads_per_page``, pages per session geometric(``pages_per_session``),
think times exponential with mean ``think_s`` truncated at 5x the mean.

Time compression (documented assumption): the published Support load has
7,000 users making about 22,000 requests/s, about 3 requests/s per user, i.e.
a page of ~20 requests every ~6 s. A fresh simulated run needs about one session
length (several pages) to fill, so the simulator's default ``think_s`` is 0.3 s,
twenty times shorter, and ``users`` counts concurrent users of that compressed
workload (about 20x fewer for the same request rate). Request mix, sizes and
demands are unchanged, and think times stay two orders of magnitude above
response times, so the closed loop couples as weakly as in the real benchmark.
A warm-up of a few seconds then fills the system. Meta ``time_compression``
records the factor.
"""

from __future__ import annotations

import numpy as np

from shrink.checks import check_positive
from shrink.trace import Trace

__all__ = ["DOWNLOAD_CLASSES", "support_trace", "tcp_trace"]

# (sizes in bytes, share of downloads) from fgaud/SLG master_slave.h, citing the SPEC design doc.
DOWNLOAD_CLASSES: tuple[tuple[tuple[int, ...], float], ...] = (
    (tuple(104_858 * k for k in range(1, 6)), 0.1366),
    (tuple(629_146 + 125_829 * k for k in range(1, 4)), 0.1261),
    (tuple(1_048_576 + 492_831 * k for k in range(1, 5)), 0.2840),
    (tuple(4_194_304 + 1_352_663 * k for k in range(1, 3)), 0.2232),
    ((9_992_929,), 0.1250),
    ((37_748_736,), 0.1051),
)


def tcp_trace(rate: float = 10_000.0, duration: float = 10.0, *, seed: int = 0) -> Trace:
    """The TCP/IP workload: Poisson arrivals of 1 KB static requests, open loop."""
    check_positive(rate, "rate")
    check_positive(duration, "duration")
    rng = np.random.default_rng([seed, 7])
    n = int(rate * duration + 10 * np.sqrt(rate * duration) + 10)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    t = t[t < duration]
    m = t.size
    return Trace.from_columns(
        {
            "session": np.arange(m),
            "t": t,
            "path": ["/static/file1k.bin"] * m,
            "cls": ["static"] * m,
            "bytes": np.full(m, 1024),
            "status": np.full(m, 200),
        },
        meta={"mode": "open", "workload": "tcp", "rate": rate, "seed": seed, "reader": "sim"},
    )


def support_trace(
    users: int = 1000,
    duration: float = 30.0,
    *,
    seed: int = 0,
    pages_per_session: float = 6.0,
    images_per_page: float = 18.0,
    downloads_per_page: float = 0.2,
    think_s: float = 0.3,
) -> Trace:
    """A Support-like session trace modelling ``users`` concurrent users for ``duration`` s."""
    check_positive(users, "users")
    check_positive(duration, "duration")
    rng = np.random.default_rng([seed, 11])
    pages_mean = pages_per_session
    # a page visit lasts about one think time; a session about pages_mean of them
    session_len = pages_mean * think_s
    rate = users / session_len
    n_sess = int(rate * duration + 10 * np.sqrt(rate * duration) + 10)
    starts = np.cumsum(rng.exponential(1.0 / rate, n_sess))
    starts = starts[starts < duration]
    n_sess = starts.size
    pages = rng.geometric(1.0 / pages_mean, n_sess)
    n_pages = int(pages.sum())
    page_sess = np.repeat(np.arange(n_sess), pages)
    first_page = np.r_[0, np.cumsum(pages)[:-1]]
    page_idx = np.arange(n_pages) - np.repeat(first_page, pages)
    think = np.minimum(rng.exponential(think_s, n_pages), 5 * think_s)
    # burst times assuming instant replies (the simulator runs them closed loop)
    cum = np.cumsum(think) - think
    page_t = starts[page_sess] + cum - np.repeat(cum[first_page], pages)
    imgs = rng.poisson(images_per_page, n_pages)
    dls = rng.poisson(downloads_per_page, n_pages)
    per_page = 1 + imgs + dls
    n = int(per_page.sum())
    req_page = np.repeat(np.arange(n_pages), per_page)
    pos = np.arange(n) - np.repeat(np.r_[0, np.cumsum(per_page)[:-1]], per_page)
    is_dyn = pos == 0
    is_dl = pos > np.repeat(imgs, per_page)
    nbytes = np.empty(n, np.int64)
    nbytes[is_dyn] = np.exp(rng.uniform(np.log(10_240), np.log(102_400), int(is_dyn.sum())))
    n_img = int((~is_dyn & ~is_dl).sum())
    nbytes[~is_dyn & ~is_dl] = np.clip(rng.lognormal(np.log(3_000), 0.7, n_img), 100, 10_000)
    n_dl = int(is_dl.sum())
    cls_share = np.array([s for _, s in DOWNLOAD_CLASSES])
    cls_pick = rng.choice(len(DOWNLOAD_CLASSES), n_dl, p=cls_share / cls_share.sum())
    u = rng.random(n_dl)
    sizes = np.array(
        [
            DOWNLOAD_CLASSES[c][0][int(x * len(DOWNLOAD_CLASSES[c][0]))]
            for c, x in zip(cls_pick, u, strict=True)
        ],
        dtype=np.int64,
    )
    nbytes[is_dl] = sizes
    pages_names = np.array(["index", "search", "catalog", "product", "fileCatalog", "file"])
    page_name = np.where(page_idx == 0, "index", pages_names[rng.integers(1, 6, n_pages)])
    paths = np.empty(n, dtype=object)
    dyn_rows = np.flatnonzero(is_dyn)
    paths[dyn_rows] = [
        f"/app/{page_name[p]}.php?bytes={nbytes[i]}&id={p}"
        for i, p in zip(dyn_rows, req_page[dyn_rows], strict=True)
    ]
    img_rows = np.flatnonzero(~is_dyn & ~is_dl)
    img_id = rng.integers(0, 2_000, img_rows.size)
    paths[img_rows] = [f"/static/img/f{k}.gif" for k in img_id]
    dl_rows = np.flatnonzero(is_dl)
    paths[dl_rows] = [f"/static/dl/f{s}.bin" for s in nbytes[dl_rows]]
    return Trace.from_columns(
        {
            "session": page_sess[req_page],
            "burst": page_idx[req_page].astype(np.int32),
            "t": page_t[req_page],
            "think": think[req_page],
            "path": paths,
            "cls": np.where(is_dyn, "dynamic", "static"),
            "bytes": nbytes,
            "status": np.full(n, 200),
        },
        meta={
            "mode": "session",
            "workload": "support",
            "users": int(users),
            "seed": seed,
            "reader": "sim",
            "think_s": think_s,
            "time_compression": 6.0 / think_s,
        },
    )
