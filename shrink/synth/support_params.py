"""Parameters of the Support-like workload, what is published and what is assumed.

Published values are cited where they are set; every value no source
publishes is a named field of :class:`SupportParams` and documented as an
assumption there. :func:`images_per_page` calibrates the number of embedded
images so that the expected share of dynamic requests equals the parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from shrink.checks import check_fraction, check_int, check_positive, check_scalar
from shrink.errors import ParameterError

__all__ = [
    "DOWNLOAD_CLASSES",
    "PAGES",
    "STATES",
    "SupportParams",
    "expected_dynamic_fraction",
    "images_per_page",
    "visits_per_session",
]

# The page script's own caps (SHRINK_MAX_WORK, SHRINK_MAX_MEM_KIB in php/_work.php):
# past them the server does less than the trace says (past 18 digits, none at all).
MAX_WORK_US = 10_000_000
MAX_MEM_KIB = 65_536

#: Dynamic page types, in the order of every per-page table below.
PAGES: tuple[str, ...] = ("index", "search", "catalog", "product", "fileCatalog", "file")
#: Markov-chain states: the pages, then ``download`` (a large static file, no images).
STATES: tuple[str, ...] = (*PAGES, "download")
DOWNLOAD = len(PAGES)  # index of the download state

#: Download classes (fgaud/SLG, citing the Support design document):
#: (file sizes in bytes, share of downloads, cumulative popularity inside the class).
#: Class 0 is published as 104,858 x k for k = 1..5; for classes 1-3 the same
#: k = 1..n is taken (the source gives "base + step x k" without k's range).
DOWNLOAD_CLASSES: tuple[tuple[tuple[int, ...], float, tuple[float, ...]], ...] = (
    (tuple(104_858 * k for k in range(1, 6)), 0.1366, (0.273, 0.364, 0.529, 0.715, 1.0)),
    (tuple(629_146 + 125_829 * k for k in range(1, 4)), 0.1261, (0.579, 0.757, 1.0)),
    (tuple(1_048_576 + 492_831 * k for k in range(1, 5)), 0.2840, (0.275, 0.445, 0.615, 1.0)),
    (tuple(4_194_304 + 1_352_663 * k for k in range(1, 3)), 0.2232, (0.666, 1.0)),
    ((9_992_929,), 0.1250, (1.0,)),
    ((37_748_736,), 0.1051, (1.0,)),
)


def _default_transitions() -> dict[str, dict[str, float]]:
    # Assumption (no source publishes the chain): browsing moves from the
    # index to search/catalog, towards products and their file catalogues,
    # and downloads follow a file page. Rows are renormalised to 1.
    return {
        "index": {"search": 0.35, "catalog": 0.40, "product": 0.15, "fileCatalog": 0.10},
        "search": {"search": 0.10, "catalog": 0.10, "product": 0.45, "fileCatalog": 0.25,
                   "index": 0.10},
        "catalog": {"catalog": 0.15, "product": 0.50, "search": 0.15, "fileCatalog": 0.10,
                    "index": 0.10},
        "product": {"fileCatalog": 0.45, "catalog": 0.20, "search": 0.15, "product": 0.10,
                    "index": 0.10},
        "fileCatalog": {"file": 0.60, "fileCatalog": 0.10, "product": 0.15, "search": 0.05,
                        "index": 0.10},
        "file": {"download": 0.60, "file": 0.10, "fileCatalog": 0.20, "index": 0.10},
        "download": {"file": 0.30, "fileCatalog": 0.30, "search": 0.20, "index": 0.20},
    }  # fmt: skip


@dataclass(frozen=True)
class SupportParams:
    """Every parameter of the Support-like workload; unpublished ones are assumptions.

    Published values (cited):

    * ``dynamic_fraction`` = 0.05: share of REQUESTS that are dynamic
      (Hashemian et al. 2013). The number of images per page is calibrated so
      that the expected share equals it (see :func:`images_per_page`).
    * ``dynamic_bytes`` ranges inside 10-100 KB, ``image_bytes`` below 10 KB,
      download sizes above 100 KB (Hashemian et al.; SLG download classes).
    * ``dirscaling`` = 0.00625 (Hashemian et al. lowered SPEC's 0.25 so the
      file set fits in memory); ``zipf_exponent`` = 1.2 (SLG). There are
      ``max(1, round(dirscaling * users))`` download directories (SLG:
      ``num_dirs = DIRSCALING * SIMULTANEOUS_SESSIONS``).

    Assumptions (nothing we could read publishes them):

    * ``transitions``: the Markov chain between pages (row ``state`` ->
      weights of next states; each row is normalised). ``exit_probability``:
      after each burst the session ends with this probability, so a session
      has ``1 / exit_probability`` bursts on average.
    * ``think_mean_s`` / ``think_max_s``: think time after each burst,
      exponential with mean ``think_mean_s`` truncated at ``think_max_s``
      (commonly described as exponential near 10 s; unverified). With the
      defaults a user sends about 1.95 requests/s (7,000 users: 13,600 req/s
      before response times); Hashemian et al. report about 22,000 req/s from
      7,000 users, which a ``think_mean_s`` near 6.2 s would give.
    * ``image_weight``: relative number of embedded images per page type;
      scaled by the calibration. Equal by default (one site template): then
      the dynamic share does not depend on which pages a cut-off session
      missed, only on the download share, so short traces hit the parameter.
      ``n_images``: size of the image pool; each page type embeds a fixed
      list (its template) drawn from the pool.
      ``image_bytes``: image sizes, log-uniform on this range.
    * ``dynamic_bytes``: reply sizes per page type, log-uniform on the range,
      fixed per (page, id); ``ids_per_page`` distinct ids per page type.
    * ``work_us``: CPU work per page type in microseconds (the PHP page does
      that many ~1 us work units); ``mem_kib``: working set each request
      walks through (memory-bound, as the papers found dynamic requests 3.6x
      more memory-intensive). The defaults average 9.5 ms and 1.5 MiB over
      dynamic requests (weighted by visits): with 5% dynamic that is about
      0.5 ms of CPU per request of the mix, so one core saturates near
      1,500 req/s (less where the walk misses the caches); rescale them with
      :meth:`scaled` (CLI ``--dynamic-work-us``, ``--dynamic-mem-kib``).
    * ``not_modified_fraction``: share of image requests answered 304
      (If-Modified-Since hit, empty body); 0 by default because a replayer
      must then send If-Modified-Since for those rows (``status`` 304).
    * ``rf``: the papers' "Modified Support": a fraction ``rf`` of dynamic
      requests is replaced by a static file of the same reply size
      (``/static/mod/<page>/<id>.html``), so the expected dynamic share is
      ``dynamic_fraction * (1 - rf)`` and the bytes are unchanged.
    * ``max_download_bytes``: cap on download file sizes (None: none). A
      capped file is written and recorded (trace ``bytes``) at the cap; its
      class, path and popularity are unchanged. For keeping a demo's disk small.
    * ``site_seed``: seeds the site (image and page sizes, templates), not the
      sessions, so traces with different seeds share one document root.
    """

    dynamic_fraction: float = 0.05
    rf: float = 0.0
    transitions: Mapping[str, Mapping[str, float]] = field(default_factory=_default_transitions)
    exit_probability: float = 0.15
    think_mean_s: float = 10.0
    think_max_s: float = 60.0
    image_weight: Mapping[str, float] = field(default_factory=lambda: {p: 1.0 for p in PAGES})
    n_images: int = 64
    image_bytes: tuple[int, int] = (200, 9_900)
    dynamic_bytes: Mapping[str, tuple[int, int]] = field(
        default_factory=lambda: {
            "index": (20_000, 60_000),
            "search": (10_240, 60_000),
            "catalog": (15_000, 80_000),
            "product": (20_000, 100_000),
            "fileCatalog": (15_000, 70_000),
            "file": (10_240, 40_000),
        }
    )
    ids_per_page: int = 50
    work_us: Mapping[str, float] = field(
        default_factory=lambda: {
            "index": 6_000,
            "search": 14_000,
            "catalog": 10_000,
            "product": 12_000,
            "fileCatalog": 10_000,
            "file": 6_000,
        }
    )
    mem_kib: Mapping[str, float] = field(
        default_factory=lambda: {
            "index": 1_024,
            "search": 2_048,
            "catalog": 2_048,
            "product": 2_048,
            "fileCatalog": 1_024,
            "file": 1_024,
        }
    )
    not_modified_fraction: float = 0.0
    dirscaling: float = 0.00625
    zipf_exponent: float = 1.2
    max_download_bytes: int | None = None
    site_seed: int = 0

    def __post_init__(self) -> None:
        check_scalar(self.dynamic_fraction, "dynamic_fraction", low=0.0, high=1.0, closed="right")
        check_fraction(self.rf, "rf")
        check_scalar(self.exit_probability, "exit_probability", low=0.0, high=1.0, closed="right")
        check_positive(self.think_mean_s, "think_mean_s")
        check_positive(self.think_max_s, "think_max_s")
        check_int(self.n_images, "n_images", low=1)
        check_int(self.ids_per_page, "ids_per_page", low=1)
        check_fraction(self.not_modified_fraction, "not_modified_fraction")
        check_positive(self.dirscaling, "dirscaling")
        check_positive(self.zipf_exponent, "zipf_exponent")
        if self.max_download_bytes is not None:
            # Sizes are int64 (numpy, Parquet): a cap past 1 EB is no cap, and 1e20 overflowed.
            check_int(self.max_download_bytes, "max_download_bytes", low=1, high=10**18)
        lo, hi = self.image_bytes
        if not 0 < lo <= hi < 10_000:
            raise ParameterError(
                f"image_bytes == {self.image_bytes}, must be 0 < lo <= hi < 10000."
            )
        for table, name in (
            (self.image_weight, "image_weight"),
            (self.dynamic_bytes, "dynamic_bytes"),
            (self.work_us, "work_us"),
            (self.mem_kib, "mem_kib"),
        ):
            if set(table) != set(PAGES):
                raise ParameterError(f"{name} keys == {sorted(table)}, must be {sorted(PAGES)}.")
        for page, (lo, hi) in self.dynamic_bytes.items():
            if not 10_000 <= lo <= hi <= 102_400:
                raise ParameterError(
                    f"dynamic_bytes[{page}] == ({lo}, {hi}), must lie inside 10-100 KB."
                )
        for page in PAGES:
            check_scalar(self.image_weight[page], f"image_weight[{page}]", low=0.0)
            check_scalar(self.work_us[page], f"work_us[{page}]", low=0.0, high=MAX_WORK_US)
            check_scalar(self.mem_kib[page], f"mem_kib[{page}]", low=1.0, high=MAX_MEM_KIB)
        if set(self.transitions) != set(STATES):
            raise ParameterError(
                f"transitions keys == {sorted(self.transitions)}, must be {sorted(STATES)}."
            )
        for src, row in self.transitions.items():
            bad = set(row) - set(STATES)
            if bad or sum(row.values()) <= 0 or min(row.values(), default=0) < 0:
                raise ParameterError(
                    f"transitions[{src}] == {dict(row)}, must give non-negative weights to "
                    f"states in {list(STATES)} with a positive sum."
                )

    # derived quantities ------------------------------------------------------
    def transition_matrix(self) -> np.ndarray:
        """Row-stochastic matrix over :data:`STATES` of the next state, given no exit."""
        m = np.zeros((len(STATES), len(STATES)))
        for i, src in enumerate(STATES):
            for dst, w in self.transitions[src].items():
                m[i, STATES.index(dst)] = w
            m[i] /= m[i].sum()
        return m

    def think_time_mean(self) -> float:
        """Mean of the truncated exponential think time (seconds)."""
        mu, cap = self.think_mean_s, self.think_max_s
        z = math.exp(-cap / mu)
        return mu - cap * z / (1.0 - z)

    def page_weights(self, name: str) -> np.ndarray:
        """A per-page table (``work_us``, ``mem_kib``, ``image_weight``) in PAGES order."""
        table = getattr(self, name)
        return np.array([float(table[p]) for p in PAGES])

    def scaled(
        self, *, work_us: float | None = None, mem_kib: float | None = None
    ) -> SupportParams:
        """A copy whose per-page work (memory) is rescaled so that the mean over dynamic
        requests (weighted by how often each page is visited) equals ``work_us`` (``mem_kib``)."""
        share = visits_per_session(self)[: len(PAGES)]
        share = share / share.sum()
        changes: dict[str, Any] = {}
        for name, target in (("work_us", work_us), ("mem_kib", mem_kib)):
            if target is None:
                continue
            low, high = (0.0, MAX_WORK_US) if name == "work_us" else (1.0, MAX_MEM_KIB)
            target = check_scalar(target, f"dynamic {name}", low=low, high=high)
            values = self.page_weights(name)
            mean = float(share @ values)
            factor = target / mean if mean > 0 else 0.0
            changes[name] = {p: float(v) * factor for p, v in zip(PAGES, values, strict=True)}
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (recorded in the trace meta and the docroot manifest)."""
        return _plain(asdict(self))


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def visits_per_session(params: SupportParams) -> np.ndarray:
    """Expected visits to each state of :data:`STATES` in one (uncut) session.

    The session is an absorbing chain: start at index, move by
    ``(1 - exit) * P``; the expected visits are the first row of the
    fundamental matrix ``(I - (1 - exit) P)^-1``.
    """
    q = (1.0 - params.exit_probability) * params.transition_matrix()
    fundamental = np.linalg.inv(np.eye(len(STATES)) - q)
    return fundamental[0]


def images_per_page(params: SupportParams) -> np.ndarray:
    """Mean embedded images per page type (PAGES order) giving the wanted dynamic share.

    With V_p expected visits of page p and V_d of downloads per session, and
    m_p images per page p, the expected share of dynamic requests is
    ``sum V_p / (sum V_p (1 + m_p) + V_d)``. The m_p are ``c * image_weight``;
    solving for c makes the share equal ``dynamic_fraction``.
    """
    visits = visits_per_session(params)
    v_page, v_dl = visits[: len(PAGES)], visits[DOWNLOAD]
    weight = params.page_weights("image_weight")
    # Python floats: a tiny fraction overflows to inf without numpy's warning line.
    needed = float(v_page.sum()) / params.dynamic_fraction - float(v_page.sum() + v_dl)
    if needed < 0:
        most = v_page.sum() / (v_page.sum() + v_dl)
        raise ParameterError(
            f"dynamic_fraction == {params.dynamic_fraction:g}, must be at most {most:.4f} "
            "with these transitions (downloads are static requests too)."
        )
    base = float(v_page @ weight)
    if needed > 0 and base == 0:
        raise ParameterError("image_weight == 0 for every visited page, cannot add images.")
    with np.errstate(over="ignore", invalid="ignore"):
        m = weight * (needed / base if base > 0 else 0.0)
    if not float(np.ceil(m).max()) <= params.n_images:
        # Named as the value the user gave (the image pool is no option), with the
        # smallest fraction the pool allows: most images on the heaviest page. A fraction
        # near 0 (1e-320) asks for an overflowing count of images (m is inf or NaN).
        c_most = params.n_images / float(weight.max())
        least = float(v_page.sum()) / float(v_page.sum() + c_most * base + v_dl)
        shown = math.ceil(least * 10_000) / 10_000  # rounded up: it is allowed
        raise ParameterError(
            f"dynamic_fraction == {params.dynamic_fraction:g}, must be at least {shown:g} "
            f"with these transitions: a page embeds at most {params.n_images} images."
        )
    # Check the calibration: the closed form must give back the parameter.
    share = v_page.sum() / (v_page @ (1.0 + m) + v_dl)
    assert abs(share - params.dynamic_fraction) < 1e-9, (share, params.dynamic_fraction)
    return m


def expected_dynamic_fraction(params: SupportParams) -> float:
    """The expected share of dynamic requests, Modified-Support replacement included."""
    visits = visits_per_session(params)
    v_page = visits[: len(PAGES)]
    m = images_per_page(params)
    share = v_page.sum() / (v_page @ (1.0 + m) + visits[DOWNLOAD])
    return float(share * (1.0 - params.rf))
