"""A sweep's progress as OpenMetrics (Prometheus text), served on loopback while it runs.

``shrink sweep --metrics-port 9464`` serves ``http://127.0.0.1:9464/metrics``;
a Prometheus scrape job (and a Grafana panel on it) then follows the sweep. Each
finished repetition adds its level's throughput and exact latency quantiles
(a summary: ``quantile="0.999"`` is p99.9, from the per-request array).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from shrink.errors import ParameterError
from shrink.export.samples import RunSamples

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def _labels(**kv: str) -> str:
    # OpenMetrics escapes a label value's backslash, quote and line feed: a raw one
    # ends the value, or the sample, early.
    def esc(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kv.items()) + "}"


def _level_labels(r: RunSamples, **more: str) -> str:
    """A run's labels: its level as the sweep was given it (``knob="rate",level="100"``),
    when known, and the rate factor it ran at."""
    named = {"knob": r.knob, "level": f"{r.level:g}"} if r.knob and np.isfinite(r.level) else {}
    return _labels(**named, rate_factor=f"{r.rate_factor:g}", **more)


def exposition(
    runs: Sequence[RunSamples],
    current: str = "",
    state: str = "",
    totals: tuple[int, int] | None = None,
) -> str:
    """The OpenMetrics text for the runs so far (ends with ``# EOF``). Its
    ``shrink_sweep_running_info`` names the sweep's ``state`` (``running`` the run
    ``current``, ``idle`` before the first, ``finished`` after the last; by default
    ``running`` when a run is named, else ``idle``), for as long as it is served: it was
    served only while a run was under way, so a scrape could not tell a sweep between
    two runs, not yet started or done from one that was gone. ``totals`` (runs finished,
    their requests) where ``runs`` holds only the last run of each level."""
    count, requests = totals or (len(runs), sum(int(r.ok.size) for r in runs))
    lines = [
        "# TYPE shrink_sweep_runs counter",
        "# HELP shrink_sweep_runs Repetitions finished.",
        f"shrink_sweep_runs_total {count}",
        "# TYPE shrink_sweep_requests counter",
        "# HELP shrink_sweep_requests Requests intended in the measurement windows.",
        f"shrink_sweep_requests_total {requests}",
        # No UNIT line: OpenMetrics requires a unit to end the family's name, and this
        # one's name is kept for the dashboards that read it (HELP gives the unit).
        "# TYPE shrink_level_throughput gauge",
        "# HELP shrink_level_throughput Completed requests a second, last repetition.",
    ]
    last = {}
    for r in runs:
        last[r.rate_factor] = r
    for r in last.values():
        # The LoadCurve's throughput: requests completed in the window (an overloaded
        # server's real rate, not the rate its requests were sent at).
        lines.append(f"shrink_level_throughput{_level_labels(r)} {r.throughput:.6g}")
    lines += [
        "# TYPE shrink_level_latency_seconds summary",
        "# UNIT shrink_level_latency_seconds seconds",
        "# HELP shrink_level_latency_seconds Exact latency quantiles, last repetition.",
    ]
    for r in last.values():
        lat = r.latency
        if lat.size:
            for q, v in zip(QUANTILES, np.quantile(lat, QUANTILES), strict=True):
                lab = _level_labels(r, quantile=f"{q:g}")
                lines.append(f"shrink_level_latency_seconds{lab} {v:.9g}")
        lines.append(f"shrink_level_latency_seconds_sum{_level_labels(r)} {lat.sum():.9g}")
        lines.append(f"shrink_level_latency_seconds_count{_level_labels(r)} {lat.size}")
    state = state or ("running" if current else "idle")
    lines += [
        "# TYPE shrink_sweep_running info",
        "# HELP shrink_sweep_running The sweep's state (running, idle, finished) and its run.",
        f"shrink_sweep_running_info{_labels(state=state, run=current)} 1",
    ]
    return "\n".join(lines) + "\n# EOF\n"


class MetricsServer:
    """Serves :func:`exposition` of a live list of runs on 127.0.0.1 (port 0: any free)."""

    def __init__(
        self, runs: list[RunSamples], port: int, totals: Callable[[], tuple[int, int]] | None = None
    ) -> None:
        self.runs = runs
        self.totals = totals  # (runs, requests), where ``runs`` keeps the last of each level
        self.current = ""  # the run under way
        self.state = "idle"  # running, then finished once the last run is done
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                totals = owner.totals() if owner.totals else None
                body = exposition(list(owner.runs), owner.current, owner.state, totals).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # a scrape every 15 s is not news
                pass

        # Loopback only: these numbers are for a local Prometheus, not the network.
        try:
            self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        except OSError as exc:  # the port in use: say which
            raise ParameterError(
                f"{port}: cannot listen on 127.0.0.1:{port} "
                f"({exc.strerror or exc}); choose another port, or 0 for any free one"
            ) from None
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
