"""A SPECweb2009-Support-like workload: user sessions of dynamic pages, images and downloads.

What rests on a source (see ``shared/data/published/specweb2009_support.md``):

* the page types index, search, catalog, product, fileCatalog, file and
  download; every session starts at index; a Markov chain picks the next page;
  each page is a dynamic (PHP) script plus its embedded images; downloads are
  large static files; If-Modified-Since replies (304) exist
  (SPEC Support design document v1.20, SPECweb2005 user's guide);
* about 5% of requests dynamic, dynamic replies 10-100 KB, images below 10 KB,
  downloads above 100 KB, DIRSCALING 0.00625, load set by concurrent users,
  dynamic requests 3.6x as memory-hungry as static ones (Hashemian et al.);
* the download file set: 16 files per directory in 6 size classes with their
  shares and popularity, directories Zipf(1.2), ``DIRSCALING x users``
  directories (the open re-implementation fgaud/SLG: ``master_slave.h`` for
  the tables, ``num_dirs = DIRSCALING * SIMULTANEOUS_SESSIONS`` in its client
  set-up; it cites the design document).

Everything else is an assumption and a named field of :class:`SupportParams`.

Load model (``mode="session"``): ``users`` slots each run sessions back to
back for ``duration`` seconds; a slot's next session starts when its last
burst's think time ends. The slots' first sessions start uniformly over one
mean think time (``stagger_s``), so the slots do not move in lock-step and the
burst rate is steady from then on. ``t`` is the intended
send time of a burst assuming instant replies (a replayer adds the response
times it sees); bursts that would start at or after ``duration`` are cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shrink.checks import check_int, check_positive
from shrink.errors import ParameterError
from shrink.synth._table import VocabColumn, check_size, trace_from_vocab
from shrink.synth.support_params import (
    DOWNLOAD,
    DOWNLOAD_CLASSES,
    PAGES,
    STATES,
    SupportParams,
    expected_dynamic_fraction,
    images_per_page,
    visits_per_session,
)
from shrink.trace import Trace

__all__ = [
    "DOWNLOAD_CLASSES",
    "MAX_USERS",
    "PAGES",
    "STATES",
    "SupportParams",
    "SupportSite",
    "build_site",
    "expected_dynamic_fraction",
    "images_per_page",
    "synth_support",
    "visits_per_session",
]

# Download directories grow with the users (dirscaling): 1e11 users was 6e8 of them,
# built before a single session was drawn.
MAX_USERS = 1_000_000
# SPEC's own dirscaling (0.25) at MAX_USERS; each directory holds 16 files.
MAX_DIRS = 250_000


@dataclass(frozen=True, eq=False)
class SupportSite:
    """The site the sessions browse: one vocabulary of request paths and their replies.

    ``paths[i]``, ``nbytes[i]``, ``dynamic[i]`` describe request i; dynamic
    entries also have ``work[i]`` (work units) and ``mem[i]`` (KiB), static
    ones 0. Blocks: dynamic pages (page-major, ``ids_per_page`` each), their
    static stand-ins for ``rf``, images, downloads. ``nominal[i]`` is the
    size before ``max_download_bytes``.
    """

    params: SupportParams
    users: int
    n_dirs: int
    paths: tuple[str, ...]
    nbytes: np.ndarray
    nominal: np.ndarray
    dynamic: np.ndarray
    work: np.ndarray
    mem: np.ndarray
    templates: np.ndarray  # (len(PAGES), n_images): image order per page type
    page_start: int
    mod_start: int
    image_start: int
    download_start: int

    def static_files(self) -> list[tuple[str, int, int]]:
        """(path, bytes, nominal bytes) of every static file the docroot must hold."""
        idx = np.flatnonzero(~self.dynamic)
        return [(self.paths[i], int(self.nbytes[i]), int(self.nominal[i])) for i in idx]

    def dynamic_pages(self) -> list[tuple[str, int, int, int]]:
        """(URL, bytes, work units, mem KiB) of every dynamic page."""
        idx = np.flatnonzero(self.dynamic)
        return [
            (self.paths[i], int(self.nbytes[i]), int(self.work[i]), int(self.mem[i])) for i in idx
        ]


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return np.exp(rng.uniform(math.log(lo), math.log(hi), n))


def build_site(params: SupportParams, users: int) -> SupportSite:
    """The site for ``users`` concurrent users (the download directories scale with them)."""
    users = check_int(users, "users", low=1, high=MAX_USERS)
    rng = np.random.default_rng(np.random.SeedSequence([params.site_seed, 0x5E7]))
    n_ids = params.ids_per_page
    dirs = params.dirscaling * users
    if not dirs <= MAX_DIRS:
        # Each directory is 16 paths held in memory: bounded as the users are.
        raise ParameterError(
            f"dirscaling == {params.dirscaling:g} for {users:,} users makes {dirs:.3g} "
            f"download directories, more than the {MAX_DIRS:,} a site may hold."
        )
    n_dirs = max(1, round(dirs))
    paths: list[str] = []
    nbytes: list[np.ndarray] = []
    work: list[np.ndarray] = []
    mem: list[np.ndarray] = []
    for page in PAGES:
        lo, hi = params.dynamic_bytes[page]
        b = np.rint(_log_uniform(rng, lo, hi, n_ids)).astype(np.int64)
        w, m = round(params.work_us[page]), round(params.mem_kib[page])
        paths += [f"/app/{page}.php?bytes={b[i]}&work={w}&mem={m}&id={i}" for i in range(n_ids)]
        nbytes.append(b)
        work.append(np.full(n_ids, w))
        mem.append(np.full(n_ids, m))
    page_bytes = np.concatenate(nbytes)
    mod_start = len(paths)
    paths += [f"/static/mod/{page}/{i}.html" for page in PAGES for i in range(n_ids)]
    image_start = len(paths)
    lo, hi = params.image_bytes
    image_bytes = np.rint(_log_uniform(rng, lo, hi, params.n_images)).astype(np.int64)
    paths += [f"/static/img/i{k:03d}.gif" for k in range(params.n_images)]
    download_start = len(paths)
    dl_sizes = []
    for d in range(n_dirs):
        for c, (sizes, _, _) in enumerate(DOWNLOAD_CLASSES):
            for j, size in enumerate(sizes):
                paths.append(f"/static/dl/dir{d:05d}/class{c}_{j}")
                dl_sizes.append(size)
    nominal_dl = np.array(dl_sizes, dtype=np.int64)
    cap = params.max_download_bytes
    capped_dl = nominal_dl if cap is None else np.minimum(nominal_dl, cap)
    templates = np.stack([rng.permutation(params.n_images) for _ in PAGES])
    n_pages = page_bytes.size
    zeros = np.zeros(n_pages + params.n_images + nominal_dl.size, dtype=np.int64)
    nominal = np.concatenate([page_bytes, page_bytes, image_bytes, nominal_dl])
    return SupportSite(
        params=params,
        users=users,
        n_dirs=n_dirs,
        paths=tuple(paths),
        nbytes=np.concatenate([page_bytes, page_bytes, image_bytes, capped_dl]),
        nominal=nominal,
        dynamic=np.r_[np.ones(n_pages, bool), np.zeros(zeros.size, bool)],
        work=np.concatenate([*work, zeros]),
        mem=np.concatenate([*mem, zeros]),
        templates=templates,
        page_start=0,
        mod_start=mod_start,
        image_start=image_start,
        download_start=download_start,
    )


# ---------------------------------------------------------------------------
# sessions


def _truncated_exponential(rng: np.random.Generator, mean: float, cap: float, n: int) -> np.ndarray:
    """Inverse-CDF draws of an exponential(mean) conditioned on being below ``cap``."""
    z = -math.expm1(-cap / mean)
    return -mean * np.log1p(-rng.random(n) * z)


def _walk_sessions(
    params: SupportParams, users: int, duration: float, stagger: float, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Run every user slot's sessions through the chain, one round of sessions at a time.

    Each round starts one session on every slot still inside ``duration`` and
    advances all their chains together, so the Python loop runs (rounds x
    longest session) times, not once per burst.
    """
    cum = np.cumsum(params.transition_matrix(), axis=1)
    cum[:, -1] = np.inf  # rounding must never let a draw fall off the end of a row
    clock = rng.uniform(0.0, stagger, users)
    slots = np.flatnonzero(clock < duration)
    out: dict[str, list[np.ndarray]] = {
        k: [] for k in ("slot", "sid", "step", "state", "t", "think")
    }
    next_sid = 0
    while slots.size:
        n = slots.size
        sid = np.arange(next_sid, next_sid + n)
        next_sid += n
        state = np.zeros(n, dtype=np.int64)
        t = clock[slots].copy()
        alive = np.arange(n)
        step = 0
        while alive.size:
            think = _truncated_exponential(rng, params.think_mean_s, params.think_max_s, alive.size)
            out["slot"].append(slots[alive])
            out["sid"].append(sid[alive])
            out["step"].append(np.full(alive.size, step))
            out["state"].append(state[alive])
            out["t"].append(t[alive])
            out["think"].append(think)
            t[alive] += think
            goes_on = rng.random(alive.size) >= params.exit_probability
            u = rng.random(alive.size)
            state[alive] = (cum[state[alive]] <= u[:, None]).sum(axis=1)
            alive = alive[goes_on & (t[alive] < duration)]
            step += 1
        clock[slots] = t  # the slot's next session starts when this one's last think ends
        slots = slots[t < duration]
    ints = ("slot", "sid", "step", "state")
    return {
        k: np.concatenate(v) if v else np.zeros(0, dtype=np.int64 if k in ints else np.float64)
        for k, v in out.items()
    }


def synth_support(
    users: int,
    duration: float,
    *,
    seed: int = 0,
    params: SupportParams | None = None,
    site: SupportSite | None = None,
    stagger_s: float | None = None,
) -> Trace:
    """A Support-like session trace for ``users`` concurrent users over ``duration`` seconds.

    ``stagger_s`` spreads the slots' first sessions uniformly over that many
    seconds; by default one mean think time, so the burst rate is steady from
    the first think time on (staggering over a whole mean session length, about
    a minute, would make a one-minute trace a ramp). ``site`` may be passed to
    reuse one built by :func:`build_site` for the same params and users.
    """
    params = params or SupportParams()
    users = check_int(users, "users", low=1, high=MAX_USERS)
    m = images_per_page(params)
    # Each user opens a burst about every mean think time, of a page and its images.
    bursts = users * (check_positive(duration, "duration") / params.think_time_mean() + 1)
    asked = f"{users:,} users for {duration:g} s"
    duration = check_size(duration, seed, bursts * (1 + float(m.max())), asked)
    site = site or build_site(params, users)
    if site.params != params or site.users != users:
        raise ParameterError("site was built for other params or users; pass the same ones.")
    stagger = params.think_time_mean() if stagger_s is None else float(stagger_s)
    check_positive(stagger, "stagger_s")
    walk_rng, page_rng, rf_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)
    )
    b = _walk_sessions(params, users, duration, stagger, walk_rng)

    # Order sessions by start time (then creation), bursts by step inside a session.
    n_sessions = int(b["sid"].max()) + 1 if b["sid"].size else 0
    start = np.full(n_sessions, np.inf)
    np.minimum.at(start, b["sid"], b["t"])
    rank = np.empty(n_sessions, dtype=np.int64)
    rank[np.lexsort((np.arange(n_sessions), start))] = np.arange(n_sessions)
    session = rank[b["sid"]]
    order = np.lexsort((b["step"], session))
    session, step, state = session[order], b["step"][order], b["state"][order]
    t, think, slot = b["t"][order], b["think"][order], b["slot"][order]
    n_bursts = state.size

    # What each burst fetches; page_rng draws in burst order, rf_rng alone decides
    # the Modified-Support replacement so rf changes nothing else.
    is_page = state < DOWNLOAD
    page = np.where(is_page, state, 0)
    ids = page_rng.integers(0, params.ids_per_page, n_bursts)
    frac = m - np.floor(m)
    n_img = np.floor(m)[page].astype(np.int64) + (page_rng.random(n_bursts) < frac[page])
    n_img = np.where(is_page, n_img, 0)
    dl_index = _draw_downloads(params, site, page_rng, n_bursts)
    replaced = (rf_rng.random(n_bursts) < params.rf) & is_page
    head = np.where(
        is_page,
        np.where(replaced, site.mod_start, site.page_start) + page * params.ids_per_page + ids,
        dl_index,
    )

    counts = 1 + n_img
    row_burst = np.repeat(np.arange(n_bursts), counts)
    first = np.cumsum(counts) - counts
    pos = np.arange(row_burst.size) - first[row_burst]
    path_index = site.image_start + site.templates[page[row_burst], np.maximum(pos - 1, 0)]
    path_index[first] = head
    nbytes = site.nbytes[path_index].copy()
    status = np.full(row_burst.size, 200, dtype=np.int32)
    is_image = pos > 0
    hit = is_image & (page_rng.random(row_burst.size) < params.not_modified_fraction)
    status[hit], nbytes[hit] = 304, 0

    meta = {
        "reader": "synth",
        "source": "shrink synth support",
        "workload": "support",
        "mode": "session",
        "users": users,
        "duration": duration,
        "seed": int(seed),
        "rf": params.rf,
        "dynamic_fraction": params.dynamic_fraction,
        "expected_dynamic_fraction": expected_dynamic_fraction(params),
        "images_per_page": {p: float(v) for p, v in zip(PAGES, m, strict=True)},
        "download_dirs": site.n_dirs,
        "stagger_s": stagger,
        "params": params.to_dict(),
    }
    return trace_from_vocab(
        session=session[row_burst],
        burst=step[row_burst],
        t=t[row_burst],
        think=think[row_burst],
        path=VocabColumn(site.paths, path_index),
        cls=VocabColumn(["static", "dynamic"], site.dynamic[path_index].astype(np.int32)),
        nbytes=nbytes,
        status=status,
        client=VocabColumn([f"user{i}" for i in range(users)], slot[row_burst]),
        meta=meta,
    )


def _draw_downloads(
    params: SupportParams, site: SupportSite, rng: np.random.Generator, n: int
) -> np.ndarray:
    """Download file index per burst: directory Zipf, class by share, file by popularity."""
    rank = np.arange(1, site.n_dirs + 1, dtype=np.float64)
    dir_cdf = np.cumsum(rank**-params.zipf_exponent)
    dir_cdf /= dir_cdf[-1]
    class_cdf = np.cumsum([share for _, share, _ in DOWNLOAD_CLASSES])
    class_cdf /= class_cdf[-1]
    dirs = np.minimum(np.searchsorted(dir_cdf, rng.random(n), side="right"), site.n_dirs - 1)
    cls = np.minimum(np.searchsorted(class_cdf, rng.random(n), side="right"), 5)
    u = rng.random(n)
    offset = np.cumsum([0] + [len(sizes) for sizes, _, _ in DOWNLOAD_CLASSES])
    within = np.zeros(n, dtype=np.int64)
    for c, (_, _, popularity) in enumerate(DOWNLOAD_CLASSES):
        sel = cls == c
        pick = np.searchsorted(np.asarray(popularity), u[sel], side="right")
        within[sel] = np.minimum(pick, len(popularity) - 1)
    files_per_dir = int(offset[-1])
    return site.download_start + dirs * files_per_dir + offset[cls] + within
