"""Make the small traces the README's tour starts from (the project ships what this writes).

python examples/traces/make_traces.py [OUT_DIR]   (default: this folder)

- ``support-access.log``: a Support-like workload (``shrink synth support``, a few
  users, seed 1) written as a Combined Log Format access log, the file a web server
  would have logged while serving it.
- ``support.pcap``: the first sessions of the same workload as a packet capture,
  one keep-alive TCP connection per session (replies cut short to keep it small).

Both are deterministic: the same script writes the same bytes (a test checks that
the shipped files are this script's output).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from shrink.synth import synth_support
from shrink.trace import Trace

HERE = Path(__file__).resolve().parent
# The capture writer is the one the capture tests use (tests/helpers/pcap_synth.py):
# a proper TCP handshake, MSS-sized segments, ACKs. It is a test helper, not part of
# the installed package, so this script finds it from the project's root.
sys.path.insert(0, str(HERE.parent.parent))
from tests.helpers.pcap_synth import Conn, http_response, write_capture  # noqa: E402

START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC: any fixed epoch keeps the bytes fixed
AGENT = "Mozilla/5.0 (shrink synth)"


def _workload() -> Trace:
    return synth_support(3, 20.0, seed=1)


def _rows(trace: Trace) -> list[dict]:
    rows = trace.table.select(["session", "t", "method", "path", "status", "bytes", "client"])
    return sorted(rows.to_pylist(), key=lambda r: (r["t"], r["session"]))


def access_log(trace: Trace) -> str:
    """Combined Log Format, one line per request, in time order."""
    lines = []
    hosts: dict[str, str] = {}
    for r in _rows(trace):
        host = hosts.setdefault(r["client"], f"10.0.0.{len(hosts) + 1}")
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(START + r["t"]))
        size = "-" if r["bytes"] is None or r["bytes"] < 0 else str(r["bytes"])
        lines.append(
            f'{host} - - [{stamp}] "{r["method"]} {r["path"]} HTTP/1.1" '
            f'{r["status"]} {size} "-" "{AGENT}"'
        )
    return "\n".join(lines) + "\n"


def capture_conns(trace: Trace, sessions: int = 3, per_session: int = 4) -> list[Conn]:
    """The first ``sessions`` sessions' first requests, each session one connection."""
    by_session: dict[int, list[dict]] = {}
    for r in _rows(trace):
        by_session.setdefault(r["session"], []).append(r)
    conns = []
    for i, (_sid, reqs) in enumerate(sorted(by_session.items())[:sessions]):
        exchanges = []
        for r in reqs[:per_session]:
            req = f"{r['method']} {r['path']} HTTP/1.1\r\nHost: support.example\r\n\r\n"
            body = min(max(int(r["bytes"] or 0), 0), 200)  # cut short: a few KB in all
            exchanges.append((req.encode(), http_response(body, status=int(r["status"]))))
        conns.append(
            Conn(exchanges, client=f"10.0.0.{i + 1}", cport=40000 + i, start=reqs[0]["t"])
        )
    return conns


def main(out: Path = HERE) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    trace = _workload()
    log = out / "support-access.log"
    log.write_text(access_log(trace))
    pcap = write_capture(out / "support.pcap", capture_conns(trace), base_time=START)
    for p in (log, pcap):
        print(f"wrote {p} ({p.stat().st_size:,} bytes)")
    return [log, pcap]


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
