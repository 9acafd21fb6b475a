"""Recorded-session logs ("specweb" format): each request's send time, session and URL.

SPECweb-style workloads and the SHRiNK and Hashemian et al. papers replay logs
that record, per request, when it was sent, which user session sent it and what
it asked for. shrink reads them in this layout (``shrink-sessions v1``)::

    #shrink-sessions v1
    # fields: time session url method status bytes rt
    0.000<TAB>u17<TAB>/index.php?id=3<TAB>GET<TAB>200<TAB>5120<TAB>0.0042
    0.013<TAB>u17<TAB>/img/logo.gif<TAB>GET<TAB>200<TAB>812<TAB>0.0007

* Line 1 may be ``#shrink-sessions v1`` (optional; another version is an error).
* ``# fields: NAME ...`` (names separated by blanks or commas) gives the column
  order (before the first data line); it must name ``time``, ``session`` and
  ``url`` and may add ``method``, ``status``, ``bytes``, ``rt``. Without it
  the columns are, in this order, ``time session url`` and optionally
  ``method status bytes rt`` (3 to 7 per line). Any other ``#`` line is a
  comment; blank lines are ignored.
* Columns are separated by TABs, or by commas (CSV, with CSV quoting): the
  first data line decides; a line with a TAB makes the file TSV.
* ``time``: seconds (a float; absolute such as epoch, or relative). ``session``:
  any non-empty text (a user or session id); it becomes the ``client`` column.
  ``url``: the request target. ``method``: default GET. ``status``: an integer,
  ``-`` or empty for unknown (0). ``bytes``: reply bytes, ``-`` or empty for
  unknown (-1). ``rt``: response time in seconds, ``-`` or empty for unknown.
* A line that does not fit (wrong number of columns, a time that is not a
  number, an empty session or URL, a negative rt) is skipped and counted with
  its line number (meta ``skipped``, ``skipped_lines``); ``strict=True`` raises
  :class:`TraceFormatError` at the first one instead.
* A damaged gzip log (cut short while copied or written): the lines before the
  damage are read and meta ``damage`` says where it broke off; ``strict=True``
  raises :class:`TraceFormatError` naming the file and line.

Mapping to the Trace (rules in :mod:`shrink.ingest.sessionize`): requests of one
session whose send times lie within ``burst_gap`` (default 0.5 s) of the burst's
first request form one burst (a page and its embedded objects: a browser
fetches those within a few hundred milliseconds, while human think times are
seconds); think time is the gap from the end of the burst (its latest send time
plus rt where known) to the next burst's first send time, never negative; ``t``
of a burst is its first send time minus the earliest time in the file (meta
``origin``). Sessions are not split by idle time: the log says which session a
request belongs to.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from shrink.checks import MAX_SECONDS
from shrink.classify import Classifier
from shrink.errors import TraceFormatError
from shrink.ingest._columns import Columns, Distinct, session_columns, session_keys
from shrink.ingest._io import MAX_LINE, decode_line, line_batches
from shrink.ingest.sessionize import TimeSpan, non_negative_duration, sessionize
from shrink.trace import Trace

__all__ = ["FIELDS", "MAGIC", "read_specweb"]

MAGIC = "#shrink-sessions"
FIELDS: tuple[str, ...] = ("time", "session", "url", "method", "status", "bytes", "rt")
_REQUIRED = ("time", "session", "url")
_FIELDS_LINE = re.compile(r"^#\s*fields\s*:\s*(.*)$", re.IGNORECASE)
_METHOD = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_UNKNOWN = ("", "-")
_MAX_LISTED = 100


class _BadLine(ValueError):
    """One data line that does not fit; the reader skips or raises."""


def _parse_fields(spec: str, path: Path, line: int) -> tuple[str, ...]:
    names = tuple(n.lower() for n in re.split(r"[\s,]+", spec.strip()) if n)
    unknown = [n for n in names if n not in FIELDS]
    if unknown:
        raise TraceFormatError(
            f"unknown field(s) {unknown} in '# fields:' (known: {' '.join(FIELDS)})",
            path=path,
            line=line,
        )
    if len(set(names)) != len(names):
        raise TraceFormatError(
            f"a field is named twice in '# fields: {spec}'", path=path, line=line
        )
    missing = [n for n in _REQUIRED if n not in names]
    if missing:
        raise TraceFormatError(f"'# fields:' lacks {missing}", path=path, line=line)
    return names


def _row(values: list[str], names: tuple[str, ...]) -> tuple[Any, ...]:
    """(time, session, url, method, status, bytes, rt) of one line, or _BadLine."""
    rec = dict(zip(names, (v.strip() for v in values), strict=True))
    try:
        time = float(rec["time"])
    except ValueError:
        raise _BadLine(f"time {rec['time']!r} is not a number of seconds") from None
    if not math.isfinite(time):
        raise _BadLine(f"time {rec['time']!r} is not finite")
    session, url = rec["session"], rec["url"]
    if not session or not url:
        raise _BadLine("empty session or url")
    if "\x00" in url:  # (read as a path, the replay refused the whole trace later)
        raise _BadLine("url holds a NUL byte, which no request line can carry")
    if not url.startswith("/"):  # (an absolute URI names its own host: not sent)
        raise _BadLine(f"url {url[:60]!r} is not a path starting with '/'")
    method = rec.get("method") or "GET"
    if not _METHOD.match(method):
        raise _BadLine(f"method {method!r} is not an HTTP method name")
    try:
        status = 0 if rec.get("status", "") in _UNKNOWN else int(rec["status"])
        nbytes = -1 if rec.get("bytes", "") in _UNKNOWN else int(rec["bytes"])
        rt = math.nan if rec.get("rt", "") in _UNKNOWN else float(rec["rt"])
    except ValueError as exc:
        raise _BadLine(f"bad number ({exc})") from None
    if not (math.isnan(rt) or 0 <= rt <= MAX_SECONDS) or not -1 <= nbytes < 2**62:
        # A finite rt past a century was read, then refused for the whole file by row.
        raise _BadLine(
            f"rt must be seconds in [0, {MAX_SECONDS:.0f}] and bytes >= 0 (or - for unknown)"
        )
    if not 0 <= status <= 999:
        raise _BadLine(f"status {status} is not an HTTP status (0-999, or - for unknown)")
    return time, session, url, method, status, nbytes, rt


_COLUMNS = {
    "time": pa.float64(),
    "key": pa.int64(),
    "path": pa.string(),
    "method": pa.int32(),  # a code of the reader's methods (Distinct)
    "status": pa.int32(),
    "bytes": pa.int64(),
    "rt": pa.float64(),
}


def read_specweb(
    path: str | Path,
    *,
    strict: bool = False,
    burst_gap: float | str = 0.5,
    classifier: Classifier | None = None,
    max_line: int = MAX_LINE,
) -> Trace:
    """Read a recorded-session log (TSV or CSV) into a Trace (see the module docstring).

    ``max_line``: the longest line, in bytes; a longer one is an error naming it.
    The file is read in batches of lines, its rows kept in Arrow columns, so the
    memory grows with the requests, not with the text.
    """
    path = Path(path)
    bgap = non_negative_duration(burst_gap, "burst_gap")
    names: tuple[str, ...] | None = None
    delimiter: str | None = None
    rows = Columns(_COLUMNS)
    cols = rows.lists
    ids: dict[str, int] = {}
    methods = Distinct()
    skipped = 0
    skipped_lines: list[int] = []
    damage = None
    span = TimeSpan()
    for batch in line_batches(path, max_line=max_line, strict=strict):
        damage = batch.damage
        for number, raw in enumerate(batch.lines, start=batch.first):
            text = decode_line(raw).rstrip("\r")
            if not text.strip():
                continue
            if text.startswith("#"):
                if number == 1 and text.startswith(MAGIC):
                    version = text[len(MAGIC) :].strip()
                    if version != "v1":
                        raise TraceFormatError(
                            f"{MAGIC} version {version!r}, this reader knows v1", path=path, line=1
                        )
                    continue
                m = _FIELDS_LINE.match(text)
                if m:
                    if delimiter is not None:
                        raise TraceFormatError(
                            "'# fields:' must come before the first data line",
                            path=path,
                            line=number,
                        )
                    names = _parse_fields(m.group(1), path, number)
                continue
            if delimiter is None:
                delimiter = "\t" if "\t" in text else ","
            try:
                # csv.Error (a bare CR or a NUL inside a field, a field over csv's size
                # limit) is a bad line like any other: inside the try, so lenient mode
                # skips it.
                values = next(csv.reader([text])) if delimiter == "," else text.split("\t")
                want = names or FIELDS[: len(values)]
                if len(values) != len(want) or len(values) < len(_REQUIRED):
                    raise _BadLine(f"{len(values)} columns, expected {len(names or _REQUIRED)}")
                time, session, url, method, status, nbytes, rt = _row(values, want)
            except (_BadLine, csv.Error) as exc:
                if strict:
                    why = f"bad CSV ({exc})" if isinstance(exc, csv.Error) else str(exc)
                    raise TraceFormatError(why, path=path, line=number) from None
                skipped += 1
                if len(skipped_lines) < _MAX_LISTED:
                    skipped_lines.append(number)
                continue
            span.see(time, number, values[want.index("time")].strip())
            cols["time"].append(time)
            cols["key"].append(ids.setdefault(session, len(ids)))
            cols["path"].append(url)
            cols["method"].append(methods.code(method))
            cols["status"].append(status)
            cols["bytes"].append(nbytes)
            cols["rt"].append(rt)
        rows.flush()
    span.check(path)

    meta: dict[str, Any] = {
        "reader": "specweb",
        "source": str(path),
        "delimiter": {"\t": "tab", ",": "comma", None: None}[delimiter],
        "fields": list(names or FIELDS),
        "skipped": skipped,
        "skipped_lines": skipped_lines,
        "mode": "session",
        "burst_gap": bgap,
    }
    if damage:
        meta["damage"] = damage
    if not rows.rows:
        return Trace.empty({**meta, "origin": None})
    return _trace(rows, (ids, methods), bgap, classifier, meta)


def _trace(
    rows: Columns,
    codes: tuple[dict[str, int], Distinct],
    bgap: float,
    classifier: Classifier | None,
    meta: dict,
) -> Trace:
    """The Trace of the rows read: sessions cut into bursts, in session order. ``codes``:
    the numbers of the sessions (the ``key`` column) and the methods' codes."""
    ids, methods = codes
    rt = rows.numpy("rt")
    key = rows.numpy("key")
    s = sessionize(key, rows.numpy("time"), rt, burst_gap=bgap)
    # The client column is the session id: the text of each key.
    clients = pa.array(list(ids), pa.string()).take(session_keys(key, s))
    del key
    out = session_columns(rows, s, classifier, rt, methods=methods, clients=clients)
    del rt, clients
    meta["origin"] = s.origin
    del s  # the row order: out holds what the trace needs
    return Trace.from_columns(out, meta)
