"""The defaults every command, the demo and the README share, defined once.

Thresholds: the demo's (and the README tour's): a mean under 10 ms and a p99.9
under 500 ms. The papers' Support thresholds are 5 ms / 500 ms; on the testbed a
light-load request already takes a few ms (PHP pages of 15-20 ms CPU), so 10 ms
leaves room for queueing before the knee (shrink.demo says more).

A run: warm-up, measurement window and repetitions per load level, the same for
``predict`` and ``sweep`` (two repetitions: a MAT's interval needs two).

``max_levels`` is the number of load levels of a curve in all (``predict``'s
search, ``mat --adaptive``'s curve, the levels it had included).

``MAX_BODY``, the longest request body a trace may record (``--max-body``), is
100 MiB: PHP's default ``post_max_size`` is 8M and nginx's ``client_max_body_size``
1m; sites that take uploads raise them to tens of MB, and a CDN in front caps one
request's body (Cloudflare: 100 MB on its Free and Pro plans), so a larger upload
goes in parts, each its own request. A replay's peak grows by about four times a
distinct body (Parquet's decoding of it, the trace's column, the request key's bytes,
the built request: 313 MB for 80 MB): at the bound some 400 MB. One 300 MB body (14 MB
of Parquet) took 2.4 GB to replay before the copies were cut.

``FOOTER_READ_FACTOR``: the bytes of memory a Parquet file's read takes per byte of its
footer (the metadata: a row group's every column chunk is described there). pyarrow parses
the footer before any bound on the columns can apply, and then holds a chunk per row
group and column: a trace of 20,000 one-row row groups (a 20 MB footer) took 1.4 GB to
read. Measured with ``python bench/bench_footer_memory.py`` (peak RSS of
``shrink.parquet_read.read_bounded`` over the footer's length) on a 2-vCPU KVM VM,
pyarrow 26.0.1, n = 5 files (footers of 1.1-20 MB, 2-20 columns, 2,000-20,000 row
groups), two runs: 68.7-91.5 bytes a byte (one parse of the footer alone: 10.4-15.9);
the largest, rounded up. bench/RESULTS.md ("A Parquet footer is bounded by its length")
has the runs.

``LEAST_ADDRESS_SPACE``: the least address space (``ulimit -v``) a command starts under.
Below it numpy's and Arrow's native code crash (SIGSEGV; SIGABRT from std::bad_alloc),
hang, or raise SIGINT (OpenBLAS, when it cannot make a thread) rather than fail. Measured
with ``ingest`` of the bundled access log and ``predict`` on the simulator under each
limit from 200 to 800 MiB in 10-16 MiB steps, two or three sweeps, on a 2-vCPU Debian 12
VM (Python 3.11, pyarrow 26, numpy 2): crashes at 240-380 MiB, a hang at 460 MiB (since
fixed: Parquet is read on the calling thread); from 512 MiB up every run ended in its
work or in one line. bench/RESULTS.md ("A small ulimit -v") has the sweeps. The same
floor holds for ``ulimit -d`` (the data segment, private mappings included since Linux
4.7): ``ingest`` under it crashed at 40 MiB (SIGSEGV), 60 (OpenBLAS gave up) and 70
(jemalloc's ABORT), and ran from 100 MiB up.
"""

from __future__ import annotations

__all__ = [
    "ALPHA",
    "DURATION",
    "FOOTER_READ_FACTOR",
    "LEAST_ADDRESS_SPACE",
    "MAX_BODY",
    "MAX_BODY_TEXT",
    "MAX_LEVELS",
    "MAX_REPS",
    "MOST_LEVELS",
    "REPS",
    "THRESHOLDS",
    "THRESHOLDS_TEXT",
    "WARMUP",
]

THRESHOLDS: dict[str, float] = {"mean": 0.010, "p999": 0.5}
THRESHOLDS_TEXT = "mean=10ms,p99.9=500ms"
WARMUP = "2s"
DURATION = "8s"
REPS = 2
# A repetition's seed is seed + 1000 x level + rep: past 1000 repetitions two levels
# would replay the same sample.
MAX_REPS = 1000
MAX_LEVELS = 10
# The most levels a curve may ask for: each runs seconds, so more is no budget.
MOST_LEVELS = 1000
ALPHA = 0.25
# Bytes; MAX_BODY_TEXT says it in help texts.
MAX_BODY = 100 << 20
MAX_BODY_TEXT = "100 MiB"
# Bytes of memory a Parquet read takes per byte of its footer (see above).
FOOTER_READ_FACTOR = 96
# Bytes of address space a command needs to start (see above).
LEAST_ADDRESS_SPACE = 512 << 20
