"""Seeded mutation fuzzing of every reader: shared by tests/test_fuzz_readers.py (a few
hundred inputs per reader, in CI) and bench/bench_fuzz.py (the long campaign).

Each :class:`Reader` has valid seed files, a ``read`` that reads a file and uses
what it got the way the next stage would (a trace's schedule, a curve's MAT, a
machine's mappings), and optionally a format-aware mutator (a JSON tree, a TOML
value, a Parquet table). :func:`mutate` applies byte-level mutations: bit flips,
truncation, insertion and repetition of chunks, huge numbers, bad UTF-8, CR and
NUL bytes. An input passes when ``read`` returns or raises a
:class:`shrink.errors.ShrinkError` within the time limit; any other exception is
a crash, and a watchdog thread interrupts an input that runs past the limit (a
hang).
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import resource
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from helpers import fuzz_more
from helpers.captures import req
from helpers.pcap_synth import Conn, http_response, pcap_variant, write_capture
from shrink.errors import ShrinkError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SHARED = Path(os.environ.get("SHRINK_SHARED", ROOT.parent / "shared"))


# --------------------------------------------------------------------------- mutations
_HUGE = [b"9" * 25, b"9" * 400, b"9" * 5000, b"1e400", b"-1", b"-9" * 20, b"NaN", b"1e308"]
_BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]
_SPECIAL = [b"\r", b"\n", b"\x00", b"\r\n", b'"', b"\\", b"\t", b"[", b"]", b"{", b"}", b" "]


def mutate(data: bytes, rnd: random.Random) -> bytes:
    """One to three byte-level mutations of ``data``."""
    out = bytearray(data)
    for _ in range(rnd.choice((1, 1, 2, 3))):
        kind = rnd.randrange(8)
        pos = rnd.randrange(len(out) + 1)
        if kind == 0 and out:  # bit flips
            for _ in range(rnd.randint(1, 8)):
                i = rnd.randrange(len(out))
                out[i] ^= 1 << rnd.randrange(8)
        elif kind == 1:  # truncation
            del out[pos:]
        elif kind == 2 and out:  # repeat a chunk: long lines, long lists (catches quadratic work)
            a = rnd.randrange(len(out))
            chunk = bytes(out[a : a + rnd.randint(1, 16)])
            out[pos:pos] = chunk * rnd.choice((2, 10, 100, 3000))
        elif kind == 3:  # a huge or odd number where a digit run was
            digits = [m.span() for m in re.finditer(rb"\d+", bytes(out))]
            if digits:
                a, b = rnd.choice(digits)
                out[a:b] = rnd.choice(_HUGE)
        elif kind == 4:
            out[pos:pos] = rnd.choice(_BAD_UTF8)
        elif kind == 5:
            out[pos:pos] = rnd.choice(_SPECIAL)
        elif kind == 6 and out:  # delete a span
            del out[pos : pos + rnd.randint(1, 64)]
        else:  # random bytes
            out[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    return bytes(out)


_ODD_VALUES: list[Any] = [
    -1, 0, 1, 2**63, -(2**63) - 1, 10**30, 1.5, 1e308, -1e308, None, True, "", "x" * 5000,
    "\ud800", "a\r\nb", "/a b", [], {}, [1] * 5000, {"k": [None]},
]  # fmt: skip
_TOKENS = {"__HUGE__": "9" * 5000, "__INF__": "Infinity", "__NAN__": "NaN", "__DEEP__": "[" * 5000}


def mutate_json(data: bytes, rnd: random.Random) -> bytes:
    """Replace, delete or inflate one node of a JSON document (schema-level mutations)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return mutate(data, rnd)
    slots: list[tuple[Any, Any]] = []

    def walk(node: Any, depth: int) -> None:
        if len(slots) > 5000 or depth > 30:
            return
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in list(items):
            slots.append((node, k))
            if isinstance(v, (dict, list)):
                walk(v, depth + 1)

    if isinstance(doc, (dict, list)):
        walk(doc, 0)
    if not slots:
        return mutate(data, rnd)
    for _ in range(rnd.choice((1, 1, 2))):
        node, key = rnd.choice(slots)
        try:
            action = rnd.randrange(4)
            if action == 0 and isinstance(node, dict):
                del node[key]
            elif action == 1:
                node[key] = rnd.choice(list(_TOKENS))
            elif action == 2 and isinstance(node[key], list) and node[key]:
                # Past the schemas' list bounds (100,000), but not so far that building
                # the input is what takes the memory (the same list twice: 24M items).
                times = min(rnd.choice((2, 50, 2000)), 150_000 // len(node[key]) + 1)
                # Nor past twice the readers' size bound (16 MiB), which refuses it having
                # read to the bound: a LoadCurve's levels x 2000 made a 103 MiB input, 206
                # MiB to build, and that was the run's peak RSS (441 MiB), not the reader.
                each = len(json.dumps(node[key], allow_nan=True)) // len(node[key]) + 1
                times = max(2, min(times, (32 << 20) // (each * len(node[key]))))
                node[key] = node[key] * times
            else:
                node[key] = rnd.choice(_ODD_VALUES)
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(doc, allow_nan=True)
    for token, value in _TOKENS.items():
        text = text.replace(f'"{token}"', value)
    return text.encode("utf-8", errors="surrogatepass")


_TOML_VALUES = [
    "100000000", "-5", "0", "inf", "nan", "1e400", '"x"', "true", "{}", "[]", "[[1]]",
    "[" + "1, " * 5000 + "1]", "9" * 30, '"\\ud800"', "[0, 99999]",
]  # fmt: skip


def mutate_toml(data: bytes, rnd: random.Random) -> bytes:
    """Replace one value of a TOML document, or mutate its bytes."""
    text = data.decode("utf-8", errors="replace")
    values = [m.span(1) for m in re.finditer(r"=\s*(.+)$", text, re.MULTILINE)]
    if not values or rnd.random() < 0.3:
        return mutate(data, rnd)
    a, b = rnd.choice(values)
    return (text[:a] + rnd.choice(_TOML_VALUES) + text[b:]).encode()


def mutate_parquet(data: bytes, rnd: random.Random) -> bytes:
    """A table with one column of the wrong type, nulls, odd values, or bad metadata."""
    if rnd.random() < 0.3:
        return mutate(data, rnd)
    table = pq.read_table(io.BytesIO(data))
    names = table.column_names
    name = rnd.choice(names)
    i = names.index(name)
    n = table.num_rows
    action = rnd.randrange(6)
    if action == 0:
        table = table.drop_columns([name])
    elif action == 1:  # wrong type
        value = rnd.choice(["x", "1.5", "", "\x00", "/a\r\nb"])
        table = table.set_column(i, name, pa.array([value] * n, pa.string()))
    elif action == 2:  # nulls
        col = table.column(name).to_pylist()
        col[rnd.randrange(n)] = None
        table = table.set_column(i, name, pa.array(col, table.schema.field(name).type))
    elif action == 3:  # odd numbers
        value = rnd.choice([float("nan"), float("inf"), -1.0, 1e300, 2.0**62, -(2.0**62)])
        col = table.column(name)
        if pa.types.is_floating(col.type):
            table = table.set_column(i, name, pa.array([value] * n, col.type))
        elif pa.types.is_integer(col.type):
            big = int(min(max(value if np.isfinite(value) else -1, -(2**31)), 2**31 - 1))
            table = table.set_column(i, name, pa.array([big] * n, col.type))
    elif action == 4:  # odd paths
        if "path" in names:
            bad = rnd.choice(["/a b", "/é", "/a\r\nX: y", "/a\x00", "", "x" * 10000, "/%zz"])
            table = table.set_column(names.index("path"), "path", pa.array([bad] * n))
    else:  # metadata
        meta = (table.schema.metadata or {}).get(b"shrink", b"{}")
        table = table.replace_schema_metadata({b"shrink": mutate_json(meta, rnd)})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# --------------------------------------------------------------------------- readers
@dataclass
class Reader:
    name: str
    suffix: str
    seeds: Callable[[Path], list[bytes]]
    read: Callable[[Path], Any]
    structural: Callable[[bytes, random.Random], bytes] | None = None


def _use_trace(trace: Any) -> None:
    """What the next stages do with a trace: summarize it and plan its replay."""
    from shrink.schedule import build_schedule

    trace.info()
    if len(trace):
        build_schedule(trace, 1.0, 5.0, loop=False)


def _seed_specweb(tmp: Path) -> list[bytes]:
    tsv = (
        "#shrink-sessions v1\n# fields: time session url method status bytes rt\n"
        "100.000\tu1\t/index.php?id=3\tGET\t200\t5120\t0.040\n"
        "100.050\tu1\t/img/a.gif\tGET\t200\t812\t0.010\n"
        "103.000\tu2\t/cart.php\tPOST\t302\t-\t-\n"
    )
    csv = 'time,session,url\n1.5,"a,b",/x.html\n2.0,a,"/y ""q"".php"\n9,c,/z\n'
    return [tsv.encode(), csv.encode()]


def _read_specweb(p: Path) -> None:
    from shrink.ingest import read_specweb

    _use_trace(read_specweb(p))


def _seed_clf(tmp: Path) -> list[bytes]:
    return [
        b'199.72.81.55 - - [01/Jul/1995:00:00:01 -0400] "GET /history/apollo/ HTTP/1.0" 200 6245\n'
        b'unicomp6.unicomp.net - - [01/Jul/1995:00:00:06 -0400] "GET /shuttle/ HTTP/1.0" 200 3985\n'
        b'1.2.3.4 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326 '
        b'"http://x/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"\n'
        b'1.2.3.4 - - [10/Oct/2000:13:55:37 -0700] "POST /f.php?q=\\"x\\" HTTP/1.1" 500 - '
        b'"-" "ua"\n'
    ]


def _read_clf(p: Path) -> None:
    from shrink.ingest import read_clf

    _use_trace(read_clf(p))


def _seed_wsesslog(tmp: Path) -> list[bytes]:
    return [(DATA / "wsesslog_all_features.txt").read_bytes()]


def _read_wsesslog(p: Path) -> None:
    from shrink.ingest import read_wsesslog

    _use_trace(read_wsesslog(p))


def _seed_capture(tmp: Path) -> list[bytes]:
    names = ("zeek_www-odd-url.pcap", "scapy_http_head.pcapng", "ppa1e_barryscomputer.pcap")
    real = SHARED / "data" / "real"
    seeds = [(real / n).read_bytes() for n in names if (real / n).is_file()]
    if seeds and seeds[0][:4] == b"\xd4\xc3\xb2\xa1":  # and as a patched tcpdump wrote it
        seeds.append(pcap_variant(seeds[0], b"\x34\xcd\xb2\xa1", 8))
    return [*seeds, _tunnels(tmp)]


def _tunnels(tmp: Path) -> bytes:
    """A capture of what the real ones lack: a CONNECT tunnel with requests inside it,
    a 407 then a 200 to CONNECT, a 101 switch, keep-alive and a chunked body."""
    tunnel = b"CONNECT example.com:80 HTTP/1.1\r\nHost: example.com:80\r\n\r\n"
    ws = b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    conns = [
        Conn([(tunnel, b"HTTP/1.1 200 Connection established\r\n\r\n"),
              (req("/in"), http_response(500))], sport=3128, gap=0.5),
        Conn([(ws, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"),
              (req("/frame"), b"\x81\x02hi")], cport=40031, start=1.0),
        Conn([(tunnel, http_response(10, status=407)), (tunnel, b"HTTP/1.1 200 OK\r\n\r\n")],
             cport=40032, start=2.0),
        Conn([(req("/a"), chunked), (req("/b.php?x=1"), http_response(300))], cport=40033,
             start=3.0),
    ]  # fmt: skip
    return write_capture(tmp / "tunnels.pcap", conns).read_bytes()


def _read_capture(p: Path) -> None:
    from shrink.ingest.capture import read_capture

    _use_trace(read_capture(p))


def _seed_trace(tmp: Path) -> list[bytes]:
    from shrink.trace import Trace

    tr = Trace.from_columns(
        {
            "session": [1, 1, 2, 3],
            "burst": [0, 0, 0, 1],
            "t": [0.0, 0.0, 0.5, 1.0],
            "think": [1.0, 1.0, 0.0, 0.0],
            "path": ["/a", "/b.gif", "/c.php?x=1", "/d"],
            "cls": ["static", "static", "dynamic", "static"],
            "bytes": [10, 20, -1, 5],
        },
        meta={"reader": "test", "source": "x.log"},
    )
    return [tr.write_parquet(tmp / "seed.parquet").read_bytes()]


def _read_trace(p: Path) -> None:
    from shrink.trace import Trace

    _use_trace(Trace.read_parquet(p))


def _seed_machine(tmp: Path) -> list[bytes]:
    return [(ROOT / "examples" / "machines" / n).read_bytes() for n in ("nehalem-2s.toml",)] + [
        b'name = "small"\nsockets = 1\ncores_per_socket = 2\n'
    ]


def _read_machine(p: Path) -> None:
    from shrink.machine import Machine
    from shrink.mapping import BUILTIN_MAPPINGS, build_mapping

    m = Machine.read_toml(p)
    m.to_toml()
    for name in BUILTIN_MAPPINGS:
        build_mapping(name, m)


def _seed_recipe(tmp: Path) -> list[bytes]:
    return [(ROOT / "examples" / "recipes" / "python-http.toml").read_bytes()]


def _read_recipe(p: Path) -> None:
    from shrink.testbed.command import CommandRecipe

    CommandRecipe.read(p)


def _seed_calibration(tmp: Path) -> list[bytes]:
    from extrapolate.calibration import fit_published

    return [json.dumps(fit_published().to_dict()).encode()]


def _read_calibration(p: Path) -> None:
    from extrapolate.calibration import load_calibration

    load_calibration(p).to_dict()


def _curve() -> Any:
    from shrink.loadcurve import LevelStats, LoadCurve, latency_stats

    rng = np.random.default_rng(1)
    levels = []
    for k, level in enumerate((0.5, 1.0, 2.0)):
        reps = []
        for _ in range(2):
            st = latency_stats(rng.exponential(0.001 * (k + 1) ** 2, 200), 2.0)
            reps.append(LevelStats(st.throughput, st, {"static": st}, offered=st.throughput))
        levels.append((level, reps))
    return LoadCurve.from_levels(levels, alpha=0.5, share={"kind": "all", "fraction": 1.0})


def _seed_curve(tmp: Path) -> list[bytes]:
    seeds = [_curve().write_json(tmp / "c.json").read_bytes(), fuzz_more.curve_variant(_curve())]
    fuzz_more.warm_curve_commands(tmp, seeds[1])
    return seeds


def _read_curve(p: Path) -> None:
    from shrink.loadcurve import LoadCurve
    from shrink.mat import mat

    lc = LoadCurve.read_json(p)
    for stat in ("mean", "p999"):
        mat(lc, stat, 0.002).text()
        mat(lc, stat, 0.002, cls="static").to_dict()
    lc.normalized()
    fuzz_more.use_curve_commands(p)


def _seed_prediction(tmp: Path) -> list[bytes]:
    stat = {"mat": 900.0, "ci": [800.0, 1000.0], "threshold": 0.005, "status": "ok"}
    pred = {
        "schema": "shrink.prediction/1",
        "thresholds": {"mean": 0.005, "p999": 0.5},
        "mappings": {
            "1-replica": {
                "mean": stat,
                "p999": {**stat, "status": "not_reached", "stalled_ceiling": None},
                "curve": {"throughput": [1.0, 2.0], "mean": [0.001, 0.002]},
            }
        },
        "recommended": "1-replica",
        "reason": "only one",
        "seed": 7,
        "validated_mapping": "1-replica",
        "inputs": {"trace": "t.parquet", "target": "testbed", "skip": 1.0},
        "full_run": {"paired": True, "curve": "full-curve.json"},
    }
    return [json.dumps(pred).encode()]


def _read_prediction(p: Path) -> None:
    from shrink.mat import mat_text
    from shrink.prediction import Prediction

    pred = Prediction.read_json(p)
    for m in pred.mappings.values():
        for s in pred.thresholds or {}:
            r = m.stats.get(s)
            if r is not None:
                mat_text(r.mat, r.status, r.ci)
    pred.to_dict()
    json.dumps(pred.to_dict())


def _seed_state(tmp: Path) -> list[bytes]:
    from helpers.testbed import lighttpd_replica
    from shrink.testbed.state import TestbedState

    st = TestbedState(
        [lighttpd_replica(8080)], {"kind": "cpu_time", "cpus": [1], "fraction": 0.25},
        {"name": "1-replica"},
        {"name": "m", "sockets": 1, "cores_per_socket": 2}, "doc", {"php": "8"}, "t",
    )  # fmt: skip
    return fuzz_more.state_variants(st.write(tmp / "state.json").read_bytes())


def _read_state(p: Path) -> None:
    from shrink.replay.live import LiveTarget
    from shrink.target import GeneratorPlacement
    from shrink.testbed.state import TestbedState, salvage_pids

    salvage_pids(p)  # testbed down's fallback: must never raise
    TestbedState.read(p).to_dict()
    LiveTarget.from_state(p, generator=GeneratorPlacement(allow_overlap=True)).describe()
    fuzz_more.use_state_scale(p)


def _seed_manifest(tmp: Path) -> list[bytes]:
    from shrink.synth.docroot import tcp_docroot

    return [(tcp_docroot(tmp / "docroot").root / "manifest.json").read_bytes()]


def _read_manifest(p: Path) -> None:
    from shrink.synth.docroot import read_manifest

    # read_manifest takes the document root; the fuzzed file is its manifest.json
    read_manifest(p.parent)


READERS: dict[str, Reader] = {
    r.name: r
    for r in (
        Reader("specweb", ".tsv", _seed_specweb, _read_specweb),
        Reader("clf", ".log", _seed_clf, _read_clf),
        Reader("wsesslog", ".txt", _seed_wsesslog, _read_wsesslog),
        Reader("capture", ".pcap", _seed_capture, _read_capture),
        Reader("trace", ".parquet", _seed_trace, _read_trace, mutate_parquet),
        Reader("machine", ".toml", _seed_machine, _read_machine, mutate_toml),
        Reader("recipe", ".toml", _seed_recipe, _read_recipe, mutate_toml),
        Reader("calibration", ".json", _seed_calibration, _read_calibration, mutate_json),
        Reader("loadcurve", ".json", _seed_curve, _read_curve, mutate_json),
        Reader("prediction", ".json", _seed_prediction, _read_prediction, mutate_json),
        Reader("state", ".json", _seed_state, _read_state, mutate_json),
        Reader("manifest", ".json", _seed_manifest, _read_manifest, mutate_json),
        Reader("demo", "", fuzz_more.demo_seeds, fuzz_more.use_demo_files),
        Reader(
            "runlog",
            ".parquet",
            fuzz_more.runlog_seeds,
            fuzz_more.use_runlog,
            fuzz_more.mutate_runlog,
        ),
    )
}


# --------------------------------------------------------------------------- the campaign
class Hang(BaseException):
    """Raised in the main thread by the watchdog when an input runs past its limit."""


class Watchdog:
    """A thread that interrupts the main thread (SIGUSR1) once a deadline passes.

    SIGALRM is left to pytest-timeout; one thread serves every input.
    """

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.armed = False
        self.main = threading.main_thread().ident
        self._stop = threading.Event()
        self._old = signal.signal(signal.SIGUSR1, self._raise)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _raise(self, signum: int, frame: Any) -> None:
        if self.armed:  # a signal that arrives just after an input finished is ignored
            self.armed = False
            raise Hang

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            d = self.deadline
            if d is not None and time.monotonic() > d and self.main is not None:
                self.deadline = None
                signal.pthread_kill(self.main, signal.SIGUSR1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        signal.signal(signal.SIGUSR1, self._old)


@dataclass
class Outcome:
    reader: str
    inputs: int = 0
    errors: int = 0  # ShrinkError: the documented outcome of a bad input
    crashes: list[str] = field(default_factory=list)  # "type: message @ file:line"
    hangs: list[int] = field(default_factory=list)  # input numbers past the limit
    # per input read: (input number, wall s, CPU s), when the campaign is asked to keep them
    timings: list[tuple[int, float, float]] = field(default_factory=list)
    slowest_s: float = 0.0  # wall time: what the hang limit is about
    slowest_cpu_s: float = 0.0  # CPU time: the input's own cost, steady on a busy machine
    peak_rss_mib: float = 0.0
    # each refusal's message, its numbers as N and the fuzzed file as FILE: how many of each
    messages: dict[str, int] = field(default_factory=dict)

    @property
    def crash_sites(self) -> set[str]:
        return {c.rsplit(" @ ", 1)[-1] for c in self.crashes}


def _status_mib(field: str) -> float | None:
    """A memory figure of this process from /proc/self/status (``VmHWM``, ``VmRSS``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def reset_peak_rss() -> float | None:
    """Start the peak RSS afresh at the current RSS, and return that (MiB); None where
    Linux's clear_refs is not available. The process's own peak so far (pytest's,
    which other tests raised) would otherwise hide any growth that stays under it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return None
    return _status_mib("VmRSS")


def peak_rss_mib() -> float:
    """The peak RSS (MiB) since the process began, or since :func:`reset_peak_rss`."""
    hwm = _status_mib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _site(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    own = [f for f in tb if "/shrink/" in f.filename or "/extrapolate/" in f.filename]
    f = (own or tb or [None])[-1]
    return "?" if f is None else f"{Path(f.filename).name}:{f.lineno}"


def put(path: Path, data: bytes) -> None:
    """Write ``data`` as a new file at ``path``. A rewrite in place (truncate, then write)
    makes ext4 flush the file on close (its auto_da_alloc): 2-3 ms per input, which was
    most of a fast reader's time; unlinking first makes the same file without it."""
    path.unlink(missing_ok=True)
    path.write_bytes(data)


def _shape(message: str, path: Path) -> str:
    """A refusal's message with the fuzzed file as FILE and its numbers as N."""
    text = message.replace(str(path), "FILE").replace(str(path.parent), "DIR")
    return re.sub(r"\d+", "N", text)[:160]


def campaign(
    reader: Reader,
    inputs: int,
    *,
    seed: int,
    tmp: Path,
    limit_s: float = 5.0,
    budget_s: float | None = None,
    only: frozenset[int] | None = None,
) -> Outcome:
    """``inputs`` mutated inputs for ``reader``, seeded; see the module docstring.

    With ``budget_s``, no input starts after that many seconds: ``inputs`` on the
    outcome is then the count that was run, the first inputs of the same sequence.
    With ``only``, just the inputs of those numbers in the same sequence are read (the
    others are made, not read), each one's wall and CPU time kept in ``timings``: a
    hang of a long campaign is read again alone.
    """
    rnd = random.Random(seed)
    seeds = reader.seeds(tmp)
    if not seeds:
        raise FileNotFoundError(f"no seed inputs for {reader.name}")
    manifest = reader.name == "manifest"
    path = tmp / "docroot" / "manifest.json" if manifest else tmp / f"fuzz{reader.suffix}"
    if reader.name == "demo":  # the file is --out's work-location
        path = fuzz_more.demo_path(tmp)
    out = Outcome(reader.name)
    dog = Watchdog()
    stop = None if budget_s is None else time.monotonic() + budget_s
    try:
        for k in range(inputs):
            if stop is not None and time.monotonic() > stop:
                break
            base = rnd.choice(seeds)
            use_structural = reader.structural is not None and rnd.random() < 0.6
            mutator = reader.structural if use_structural else mutate
            data = mutator(base, rnd)  # type: ignore[misc]
            if only is not None and k not in only:
                continue
            put(path, data)
            t0 = time.monotonic()
            c0 = time.process_time()
            dog.deadline = t0 + limit_s
            dog.armed = True
            try:
                reader.read(path)
            except ShrinkError as exc:
                out.errors += 1
                shape = _shape(str(exc), path)
                if shape in out.messages or len(out.messages) < 3000:
                    out.messages[shape] = out.messages.get(shape, 0) + 1
            except Hang:
                out.hangs.append(k)
            except Exception as exc:  # that is what a crash is
                out.crashes.append(f"{type(exc).__name__}: {str(exc)[:120]} @ {_site(exc)}")
            finally:
                dog.armed = False
                dog.deadline = None
            wall, cpu = time.monotonic() - t0, time.process_time() - c0
            out.slowest_s = max(out.slowest_s, wall)
            out.slowest_cpu_s = max(out.slowest_cpu_s, cpu)
            out.inputs += 1
            if only is not None:
                out.timings.append((k, wall, cpu))
    finally:
        dog.close()
    out.peak_rss_mib = peak_rss_mib()
    return out
